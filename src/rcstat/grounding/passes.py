"""Which context tokens hold the words of each response token (the ``copy`` feature's keys),
and how examples are grouped into forward passes.

:func:`word_matches` compares words, not token ids: the same word is often split differently
at the start of a text. :func:`token_batches` cuts examples into passes of a token budget;
:func:`prompt_groups` finds examples that share their prompt (:meth:`Measurer.measure_shared
<rcstat.grounding.measure.Measurer.measure_shared>`).
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from rcstat.grounding.score import joined_ranges, overlapping_tokens

if TYPE_CHECKING:
    from rcstat.grounding.features import ResponseRows
    from rcstat.segments import Segmented

__all__ = ["prompt_groups", "span_sums", "token_batches", "word_matches"]

_WORD = re.compile(r"\w+")
# ``\w`` among ASCII codes: letters, digits and the underscore
_WORD_BYTE = np.isin(np.arange(256), [ord(c) for c in string.ascii_letters + string.digits + "_"])
_BASE = 0x9E3779B97F4A7C15  # odd: invertible modulo 2^64
_INVERSE = pow(_BASE, -1, 1 << 64)


def word_matches(example: Segmented, rows: ResponseRows) -> torch.Tensor:
    """``[G, C]`` bool: context token ``k`` overlaps an occurrence, in the context, of a
    word (``\\w+``, without case) that response token ``j`` overlaps. Words, not token ids,
    are compared: the same word is often split differently at the start of a text."""
    text = example.text
    answer, context = example.parts["answer"], example.parts["context"]
    bounds = example.offset_array  # [T, 2]
    said, source = bounds[slice(*rows.response)], bounds[slice(*rows.context)]  # [G|C, 2]
    words = _ascii_words(text, answer, context)
    said_words, source_words = _python_words(text, answer, context) if words is None else words
    said_tokens, said_ids = _token_words(said, said_words)
    source_tokens, source_ids = _token_words(source, source_words)
    # join on the word id: each (response token, word) with every context token of the word
    order = np.argsort(source_ids, kind="stable")
    by_word, source_tokens = source_ids[order], source_tokens[order]
    lo = np.searchsorted(by_word, said_ids, side="left")
    count = np.searchsorted(by_word, said_ids, side="right") - lo  # context tokens of each
    found = np.zeros((len(said), len(source)), dtype=bool)
    found[np.repeat(said_tokens, count), source_tokens[joined_ranges(lo, count)]] = True
    return torch.from_numpy(found)


def _python_words(
    text: str, answer: tuple[int, int], context: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """The response's words and the context's occurrences of them, ``[W, 3]`` int64 rows
    (start, end, word id; one id per word without case), by the ``re`` module: any text."""
    ids: dict[str, int] = {}
    said = [
        (w.start(), w.end(), ids.setdefault(w.group().lower(), len(ids)))
        for w in _WORD.finditer(text, *answer)
    ]
    source = [
        (w.start(), w.end(), ids[key])
        for w in _WORD.finditer(text, *context)
        if (key := w.group().lower()) in ids
    ]
    return _rows(said), _rows(source)


def _ascii_words(
    text: str, answer: tuple[int, int], context: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`_python_words` of ASCII parts without a Python step per context word: each
    word's polynomial hash ``Σ_t c_t·P^(t − start) mod 2^64`` from running sums, the context's
    words looked up among the response's hashes, and every hit checked character by
    character (a collision is never taken for a match). ``None`` when a part is not ASCII or
    two of the response's words share a hash (then :func:`_python_words` decides)."""
    parts = [text[a:b] for a, b in (answer, context)]
    if not all(part.isascii() for part in parts):
        return None
    said_chars, context_chars = (
        np.frombuffer(part.lower().encode("ascii"), dtype=np.uint8) for part in parts
    )
    said, said_hash = _hashed_words(said_chars)  # [Ws, 2], [Ws]
    if not len(said):
        return _rows([]), _rows([])
    # the response's words, one id each (a handful: exact, by their strings)
    folded = said_chars.tobytes()
    ids: dict[bytes, int] = {}
    said_ids = np.array([ids.setdefault(folded[a:b], len(ids)) for a, b in said], dtype=np.int64)
    first = np.unique(said_ids, return_index=True)[1]  # [V] each id's first occurrence
    by_hash = np.argsort(said_hash[first])  # ids in hash order
    hashes = said_hash[first[by_hash]]  # [V]
    if len(np.unique(hashes)) < len(hashes):
        return None
    source, source_hash = _hashed_words(context_chars)  # [Wc, 2], [Wc]
    at = np.minimum(np.searchsorted(hashes, source_hash), len(hashes) - 1)
    hit = np.flatnonzero(hashes[at] == source_hash)
    word_id = by_hash[at[hit]]  # [H] the response word each hit claims to be
    model = said[first[word_id]]  # [H, 2] that word's first occurrence in the response
    length = source[hit, 1] - source[hit, 0]
    same = length == model[:, 1] - model[:, 0]
    hit, word_id, model, length = hit[same], word_id[same], model[same], length[same]
    differ = (
        context_chars[joined_ranges(source[hit, 0], length)]
        != said_chars[joined_ranges(model[:, 0], length)]
    )
    owner = np.repeat(np.arange(len(hit)), length)
    exact = np.bincount(owner, weights=differ, minlength=len(hit)) == 0
    hit, word_id = hit[exact], word_id[exact]
    return (
        np.column_stack([said + answer[0], said_ids]),
        np.column_stack([source[hit] + context[0], word_id]),
    )


def _hashed_words(chars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``\\w+`` runs of ASCII codes ``chars`` ``[n]``: ``[W, 2]`` int64 (start, end)
    and ``[W]`` uint64 hashes ``Σ_t c_t·P^(t − start) mod 2^64`` (numpy's unsigned
    arithmetic wraps)."""
    word = _WORD_BYTE[chars]  # [n]
    edges = np.diff(word.astype(np.int8), prepend=np.int8(0), append=np.int8(0))  # [n + 1]
    spans = np.column_stack([np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)])
    rise = np.cumprod(np.full(len(chars), _BASE, dtype=np.uint64))  # P^(t + 1)
    fall = np.cumprod(np.full(len(chars), _INVERSE, dtype=np.uint64))  # P^-(t + 1)
    running = np.concatenate([np.zeros(1, np.uint64), np.cumsum(chars * rise, dtype=np.uint64)])
    return spans, (running[spans[:, 1]] - running[spans[:, 0]]) * fall[spans[:, 0]]


def _rows(words: list[tuple[int, int, int]]) -> np.ndarray:
    return np.array(words, dtype=np.int64).reshape(-1, 3)


def _token_words(tokens: np.ndarray, words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(token, word id)`` int64 pairs: every token (``[n, 2]`` character offsets, in text
    order) that overlaps an occurrence of a word (``words`` ``[W, 3]``: start, end, id)."""
    first, last = overlapping_tokens(tokens, words[:, :2])
    count = np.maximum(last - first, 0)
    return joined_ranges(first, count), np.repeat(words[:, 2], count)


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
