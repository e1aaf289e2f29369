"""Which context tokens hold the words of each response token (the ``copy`` feature's keys),
and how examples are grouped into forward passes.

:func:`word_matches` compares words, not token ids: the same word is often split differently
at the start of a text. :func:`token_batches` cuts examples into passes of a token budget;
:func:`prompt_groups` finds examples that share their prompt (:meth:`Measurer.measure_shared
<rcstat.grounding.measure.Measurer.measure_shared>`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from rcstat.grounding.features import ResponseRows
    from rcstat.segments import Segmented

__all__ = ["prompt_groups", "span_sums", "token_batches", "word_matches"]

_WORD = re.compile(r"\w+")


def word_matches(example: Segmented, rows: ResponseRows) -> torch.Tensor:
    """``[G, C]`` bool: context token ``k`` overlaps an occurrence, in the context, of a
    word (``\\w+``, without case) that response token ``j`` overlaps. Words, not token ids,
    are compared: the same word is often split differently at the start of a text."""
    text = example.text
    (c_lo, c_hi), (a_lo, a_hi) = example.parts["context"], example.parts["answer"]
    bounds = example.offset_array  # [T, 2]
    said, source = bounds[slice(*rows.response)], bounds[slice(*rows.context)]  # [G|C, 2]
    # every word of the response, then the context's words among them: one id per word
    ids: dict[str, int] = {}
    said_words = [
        (w.start(), w.end(), ids.setdefault(w.group().lower(), len(ids)))
        for w in _WORD.finditer(text, a_lo, a_hi)
    ]
    # lower-cased once when that keeps every offset (ASCII); else word by word
    folded = text.lower() if text.isascii() else None
    source_words = [
        (w.start(), w.end(), ids[key])
        for w in _WORD.finditer(text if folded is None else folded, c_lo, c_hi)
        if (key := w.group() if folded is not None else w.group().lower()) in ids
    ]
    said_tokens, said_ids = _token_words(said, said_words)
    source_tokens, source_ids = _token_words(source, source_words)
    # join on the word id: each (response token, word) with every context token of the word
    order = np.argsort(source_ids, kind="stable")
    by_word, source_tokens = source_ids[order], source_tokens[order]
    lo = np.searchsorted(by_word, said_ids, side="left")
    count = np.searchsorted(by_word, said_ids, side="right") - lo  # context tokens of each
    found = np.zeros((len(said), len(source)), dtype=bool)
    found[np.repeat(said_tokens, count), source_tokens[_ranges(lo, count)]] = True
    return torch.from_numpy(found)


def _token_words(
    tokens: np.ndarray, words: list[tuple[int, int, int]]
) -> tuple[np.ndarray, np.ndarray]:
    """``(token, word id)`` int64 pairs: every token (``[n, 2]`` character offsets, in text
    order) that overlaps an occurrence of a word (``words``: start, end, id)."""
    if not words:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    spans = np.array(words, dtype=np.int64)  # [W, 3]
    first = np.searchsorted(tokens[:, 1], spans[:, 0], side="right")  # ends > word start
    last = np.searchsorted(tokens[:, 0], spans[:, 1], side="left")  # starts < word end
    count = np.maximum(last - first, 0)
    return _ranges(first, count), np.repeat(spans[:, 2], count)


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``[Σ counts]`` int64: ``starts[i], …, starts[i] + counts[i] − 1`` for each ``i``, in
    order (the ranges joined without a Python loop)."""
    return np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())


def span_sums(values: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """``[U, S]``: each row of ``values`` ``[U, K]`` summed over each key range ``[a, z)`` of
    ``spans`` ``[S, 2]``, by running sums (one pass, not one sum per span).

    Examples
    --------
    >>> span_sums(np.array([[1.0, 2.0, 3.0]]), np.array([[0, 2], [1, 3]]))
    array([[3., 5.]])
    """
    running = np.pad(np.cumsum(values, axis=1), ((0, 0), (1, 0)))  # [U, K + 1]
    return running[:, spans[:, 1]] - running[:, spans[:, 0]]


def prompt_groups(prompts: Sequence[torch.Tensor]) -> list[list[int]]:
    """Indices of ``prompts`` (each example's ``[T]`` token ids before its first captured
    row: template, context and question) grouped by equal tokens, in the order of each
    group's first example.

    Examples
    --------
    >>> prompt_groups([torch.tensor([1, 2, 3]), torch.tensor([5, 2, 3]), torch.tensor([1, 2, 3])])
    [[0, 2], [1]]
    >>> prompt_groups([torch.tensor([1, 2]), torch.tensor([1, 2, 3])])  # a prefix is not equal
    [[0], [1]]
    """
    groups: dict[tuple[int, ...], list[int]] = {}
    for at, prompt in enumerate(prompts):
        groups.setdefault(tuple(prompt.tolist()), []).append(at)
    return list(groups.values())


def token_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Indices of ``lengths`` sorted by length, cut into runs of at most ``budget`` tokens
    (count × the run's longest; at least one a run)."""
    batches: list[list[int]] = []
    batch: list[int] = []
    for at in sorted(range(len(lengths)), key=lengths.__getitem__):
        if batch and (len(batch) + 1) * lengths[at] > budget:  # sorted: the longest is last
            batches.append(batch)
            batch = []
        batch.append(at)
    if batch:
        batches.append(batch)
    return batches
