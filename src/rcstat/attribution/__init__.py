"""Attribution of generated text to context spans (paper §4.2, eq. 10)."""

from rcstat.attribution.attributor import Attributor
from rcstat.attribution.consensus import consensus_heads, mean_head_ranks
from rcstat.attribution.result import Attribution, Granularity, HeadRanking, SpanStatistic
from rcstat.attribution.spans import TextSpan, join_chunks, locate_spans, split_sentences
from rcstat.defaults import SPAN_SCORES, SpanScore

__all__ = [
    "SPAN_SCORES",
    "Attribution",
    "Attributor",
    "Granularity",
    "HeadRanking",
    "SpanScore",
    "SpanStatistic",
    "TextSpan",
    "consensus_heads",
    "join_chunks",
    "locate_spans",
    "mean_head_ranks",
    "split_sentences",
]
