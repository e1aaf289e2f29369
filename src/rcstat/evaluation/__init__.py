"""Evaluation: metrics (VER, ROUGE) and, later, the benchmark runners."""
