"""Tokenisation with character offsets, and the input checks shared by both segmenting modes.

:func:`encode` is the one call into the tokenizer: ids plus the ``[start, end)`` character
range of every token, with special-token strings kept literal on request (see
:mod:`rcstat.segments`). The ``check_*`` helpers raise the ``TypeError``/``ValueError`` that name
the argument at fault.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from rcstat.segments.pieces import piece_bounds

__all__ = [
    "check_fast",
    "check_flag",
    "check_max_length",
    "check_text",
    "common_prefix_len",
    "encode",
    "special_ids",
    "special_positions",
]


def check_fast(tokenizer: Any) -> None:
    """Raise ``TypeError`` unless `tokenizer` is a fast tokenizer (needed for offsets)."""
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError(
            "tokenizer: a fast tokenizer (transformers PreTrainedTokenizerFast) is required for "
            f"character offsets; got {type(tokenizer).__name__}"
        )


def check_text(name: str, value: Any, *, optional: bool = False) -> None:
    """Raise ``TypeError`` unless `value` is one ``str``, ``ValueError`` if it is blank."""
    if not isinstance(value, str):
        if isinstance(value, (list, tuple)) or hasattr(value, "__iter__"):
            raise TypeError(
                f"{name}: expected a single str, got {type(value).__name__}; rcstat analyses one "
                "example at a time (call it once per example)"
            )
        raise TypeError(f"{name}: expected a str, got {type(value).__name__}")
    if not value.strip():
        hint = " (pass None to leave it out)" if optional else ""
        raise ValueError(f"{name}: is empty or whitespace only{hint}")


def check_flag(name: str, value: Any) -> None:
    """Raise ``TypeError`` unless `value` is a ``bool``."""
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")


def check_max_length(max_length: int | None) -> None:
    """Raise unless `max_length` is None or a positive ``int``."""
    if max_length is None:
        return
    if isinstance(max_length, bool) or not isinstance(max_length, int):
        raise TypeError(f"max_length: expected an int or None, got {type(max_length).__name__}")
    if max_length < 1:
        raise ValueError(f"max_length: must be positive, got {max_length}")


def encode(
    tokenizer: Any, text: str, *, add_special_tokens: bool, literal: bool = False
) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids and character offsets of `text`.

    A long text is encoded in pieces on every core where its tokenizer gives the same ids and
    offsets that way (cut at :func:`~rcstat.segments.pieces.piece_bounds`, one batch).

    ``literal=True`` encodes special-token strings inside `text` as plain text
    (``split_special_tokens=True``) and checks that no special token stands for characters of
    `text` (those the tokenizer adds itself, e.g. a BOS, have an empty range and may stay).
    """
    # Without `literal` the tokenizer keeps its own default (no split_special_tokens argument).
    extra = {"split_special_tokens": True} if literal else {}
    bounds = None if add_special_tokens else piece_bounds(tokenizer, text)
    enc = tokenizer(
        text if bounds is None else [text[a:b] for a, b in itertools.pairwise(bounds)],
        add_special_tokens=add_special_tokens,
        return_offsets_mapping=True,
        return_attention_mask=False,
        verbose=False,
        **extra,
    )
    if bounds is None:  # one text: one row of ids and offsets, from character 0
        id_rows, offset_rows, firsts = [enc["input_ids"]], [enc["offset_mapping"]], [0]
    else:  # a row per piece, its offsets from the piece's first character
        id_rows, offset_rows, firsts = enc["input_ids"], enc["offset_mapping"], bounds[:-1]
    ids = list(itertools.chain.from_iterable(id_rows))
    offsets: list[tuple[int, int]] = []
    for first, row in zip(firsts, offset_rows, strict=True):
        offsets.extend([(first + s, first + e) for s, e in row] if first else row)
    if literal:
        at = special_positions(ids, special_ids(tokenizer))
        leaked = [k for k in at if offsets[k][0] < offsets[k][1]]
        if leaked:
            s, e = offsets[leaked[0]]
            raise ValueError(
                f"tokenizer: {type(tokenizer).__name__} encoded {text[s:e]!r} as a special token "
                "although split_special_tokens=True was asked, so special-token strings in the "
                "text cannot be kept literal; remove them from the text (or, for trusted text "
                "only, pass allow_special_tokens=True)"
            )
    return ids, offsets


def special_positions(ids: Sequence[int], special: frozenset[int]) -> list[int]:
    """Positions ``k`` (increasing) with ``ids[k]`` in ``special``, found in one vectorised
    pass (a long prompt has thousands of tokens and a handful of special ones)."""
    if not ids or not special:
        return []
    found = np.isin(np.fromiter(ids, np.int64, len(ids)), np.fromiter(special, np.int64))
    return np.flatnonzero(found).tolist()


def special_ids(tokenizer: Any) -> frozenset[int]:
    """Ids of the tokenizer's special tokens (named ones and special added tokens)."""
    ids = {int(i) for i in getattr(tokenizer, "all_special_ids", ())}
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids.update(int(i) for i, token in decoder.items() if getattr(token, "special", False))
    return frozenset(ids)


def common_prefix_len(a: str, b: str) -> int:
    """Length of the longest common prefix (binary search over C-level slice comparisons)."""
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]
        mid = (lo + hi + 1) // 2
        if mid == hi:
            break
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo
