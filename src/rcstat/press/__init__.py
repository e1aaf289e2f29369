"""KV-cache compression: RCStatPress, the per-KV-head ragged cache and its attention.

Names are resolved lazily (PEP 562): importing ``rcstat.press`` does no work. The ragged cache
and its attention need only transformers; :class:`RCStatPress` and the baselines of
:func:`make_press` need the ``rcstat[press]`` extra (kvpress) and say so when it is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rcstat.lazy import lazy_names

if TYPE_CHECKING:
    from rcstat.press.answer import (
        CompressionReport,
        PromptSplit,
        answer_full,
        answer_full_batch,
        compress_and_answer,
        compress_and_answer_batch,
        split_prompt,
    )
    from rcstat.press.attention import packed_attention, ragged_attention
    from rcstat.press.cache import RaggedCache, RaggedLayer
    from rcstat.press.decoding import GraphedGeneration, graphed_generate
    from rcstat.press.layout import PackedKV
    from rcstat.press.rcstat_press import RCStatPress
    from rcstat.press.registry import PRESS_NAMES, make_press

__all__ = [
    "PRESS_NAMES",
    "CompressionReport",
    "GraphedGeneration",
    "PackedKV",
    "PromptSplit",
    "RCStatPress",
    "RaggedCache",
    "RaggedLayer",
    "answer_full",
    "answer_full_batch",
    "compress_and_answer",
    "compress_and_answer_batch",
    "graphed_generate",
    "make_press",
    "packed_attention",
    "ragged_attention",
    "split_prompt",
]

_HOMES = {
    "CompressionReport": "rcstat.press.answer",
    "answer_full": "rcstat.press.answer",
    "answer_full_batch": "rcstat.press.answer",
    "compress_and_answer": "rcstat.press.answer",
    "compress_and_answer_batch": "rcstat.press.answer",
    "PromptSplit": "rcstat.press.answer",
    "split_prompt": "rcstat.press.answer",
    "PackedKV": "rcstat.press.layout",
    "packed_attention": "rcstat.press.attention",
    "ragged_attention": "rcstat.press.attention",
    "RaggedCache": "rcstat.press.cache",
    "RaggedLayer": "rcstat.press.cache",
    "GraphedGeneration": "rcstat.press.decoding",
    "graphed_generate": "rcstat.press.decoding",
    "RCStatPress": "rcstat.press.rcstat_press",
    "PRESS_NAMES": "rcstat.press.registry",
    "make_press": "rcstat.press.registry",
}

__getattr__ = lazy_names(__name__, _HOMES)
