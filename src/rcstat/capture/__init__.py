"""Capture of pre-softmax attention scores from Hugging Face causal LMs (the only module that
touches transformers internals)."""

from rcstat.capture.architecture import AttentionLayout, UnsupportedModelError, attention_layout
from rcstat.capture.scores import CaptureResult, capture_scores, grouped_scores

__all__ = [
    "AttentionLayout",
    "CaptureResult",
    "UnsupportedModelError",
    "attention_layout",
    "capture_scores",
    "grouped_scores",
]
