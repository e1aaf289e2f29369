"""Attribution of generated text to context spans (paper §4.2, eq. 10)."""

from rcstat.attribution.attributor import Attributor
from rcstat.attribution.result import Attribution, Granularity, HeadRanking, SpanStatistic
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
