"""Capture of pre-softmax attention scores from Hugging Face causal LMs (the only module that
touches transformers internals)."""

from rcstat.capture.architecture import AttentionLayout, UnsupportedModelError, attention_layout
from rcstat.capture.probs import SoftmaxParams, attention_probs, softmax_params
from rcstat.capture.scores import CaptureResult, capture_scores, grouped_scores

__all__ = [
    "AttentionLayout",
    "CaptureResult",
    "SoftmaxParams",
    "UnsupportedModelError",
    "attention_layout",
    "attention_probs",
    "capture_scores",
    "grouped_scores",
    "softmax_params",
]
