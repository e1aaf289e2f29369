"""Attribution of generated text to context spans (paper §4.2, DESIGN.md §2.3)."""

from rcstat.attribution.attributor import (
    Attribution,
    Attributor,
    Granularity,
    HeadRanking,
    SpanStatistic,
)
from rcstat.attribution.spans import TextSpan, join_chunks, locate_spans, split_sentences

__all__ = [
    "Attribution",
    "Attributor",
    "Granularity",
    "HeadRanking",
    "SpanStatistic",
    "TextSpan",
    "join_chunks",
    "locate_spans",
    "split_sentences",
]
