"""The :class:`Segmented` example ``s = p ⊕ g``: token ids, character offsets, named parts.

A :class:`Segmented` maps character spans of its parts to token ranges
(:meth:`Segmented.token_span`) and appends ids a model generated, recovering their text and
offsets by incremental decoding (:meth:`Segmented.with_generation`). :func:`build` and
:func:`append_continuation` are the steps both segmenting modes (:mod:`rcstat.segments.chat`,
:mod:`rcstat.segments.text`) end with.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rcstat.segments.encode import common_prefix_len, encode

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["CHAT_PARTS", "RAW_PARTS", "Offsets", "Segmented", "append_continuation", "build"]

#: Part names of the chat mode (:func:`~rcstat.segments.segment_chat`).
CHAT_PARTS = ("context", "question", "answer")
#: Part names of the raw mode (:func:`~rcstat.segments.segment_text`).
RAW_PARTS = ("prompt", "generation")

Offsets = tuple[tuple[int, int], ...]


@dataclass(frozen=True, eq=False)
class Segmented:
    """One tokenised example ``s = p ⊕ g`` with character offsets.

    Parameters
    ----------
    input_ids : torch.Tensor
        ``[1, T]`` int64: prompt tokens, then generation tokens.
    prompt_len : int
        ``m``: positions ``0..m-1`` are the prompt ``p``, ``m..T-1`` the generation ``g``.
    text : str
        The full text the tokens stand for (prompt text + generation text).
    offsets : sequence of (int, int), or a ``[T, 2]`` array or tensor
        Per token, the ``[start, end)`` character range in `text`; an empty range (e.g.
        ``(0, 0)``) for a token that stands for no text. Stored as a tuple of pairs of
        Python ints; anything but one pair per token is refused.
    parts : Mapping[str, tuple[int, int]]
        ``[start, end)`` character range in `text` of each named part present: ``"context"``,
        ``"question"``, ``"answer"`` (chat mode) or ``"prompt"``, ``"generation"`` (raw mode).

    Notes
    -----
    Instances are immutable; ``parts`` is stored as a read-only mapping. Two instances compare
    equal when all fields are equal (``input_ids`` by value).
    """

    input_ids: torch.Tensor  # [1, T] int64
    prompt_len: int
    text: str
    offsets: Offsets
    parts: Mapping[str, tuple[int, int]]
    _bounds: np.ndarray = field(init=False, repr=False)  # offsets as [T, 2] int64

    def __post_init__(self) -> None:
        ids = self.input_ids
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.shape[0] != 1:
            raise ValueError(f"input_ids: expected a [1, T] tensor, got {_describe(ids)}")
        if ids.dtype != torch.int64:
            raise ValueError(f"input_ids: expected dtype int64, got {ids.dtype}")
        seq_len = int(ids.shape[1])
        if not 0 <= self.prompt_len <= seq_len:
            raise ValueError(f"prompt_len: {self.prompt_len} is outside [0, {seq_len}]")
        bounds = _offset_array(self.offsets)  # [T, 2]
        if len(bounds) != seq_len:
            raise ValueError(f"offsets: {len(bounds)} ranges for {seq_len} tokens")
        n_chars = len(self.text)
        outside = (bounds[:, 0] < 0) | (bounds[:, 0] > bounds[:, 1]) | (bounds[:, 1] > n_chars)
        if outside.any():
            i = int(outside.argmax())
            s, e = bounds[i].tolist()
            raise ValueError(f"offsets: token {i} has range ({s}, {e}) outside the text")
        bounds.flags.writeable = False
        offsets = tuple(zip(bounds[:, 0].tolist(), bounds[:, 1].tolist(), strict=True))
        parts = {str(k): (int(v[0]), int(v[1])) for k, v in self.parts.items()}
        for name, (s, e) in parts.items():
            if name not in CHAT_PARTS + RAW_PARTS:
                raise ValueError(f"parts: unknown part name {name!r}")
            if not 0 <= s <= e <= n_chars:
                raise ValueError(f"parts: {name!r} has range ({s}, {e}) outside the text")
        object.__setattr__(self, "offsets", offsets)
        object.__setattr__(self, "parts", MappingProxyType(parts))
        object.__setattr__(self, "_bounds", bounds)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Segmented):
            return NotImplemented
        return (
            self.prompt_len == other.prompt_len
            and self.text == other.text
            and self.offsets == other.offsets
            and dict(self.parts) == dict(other.parts)
            and torch.equal(self.input_ids, other.input_ids)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable tensor inside: not hashable

    @property
    def seq_len(self) -> int:
        """``T``, the number of tokens (prompt + generation)."""
        return int(self.input_ids.shape[1])

    @property
    def gen_len(self) -> int:
        """``|g| = T - m``, the number of generation tokens."""
        return self.seq_len - self.prompt_len

    @property
    def generation_part(self) -> str:
        """Name of the part that holds the generated text: ``"answer"`` or ``"generation"``."""
        return "answer" if "context" in self.parts else "generation"

    def part_text(self, part: str) -> str:
        """The text of a named part (``text[start:end]`` of ``parts[part]``)."""
        start, end = self._part_range(part)
        return self.text[start:end]

    @property
    def offset_array(self) -> np.ndarray:
        """``offsets`` as a read-only ``[T, 2]`` int64 array (start, end of each token)."""
        return self._bounds

    def token_texts(self, part: str) -> list[str]:
        """The part's text cut at the start offsets of its tokens (:meth:`token_span` of the
        whole part): one string per token, and their concatenation is :meth:`part_text`. A
        token straddling the part's edge keeps only its characters inside the part."""
        first, last = self.token_span(part)
        start, end = self._part_range(part)
        length = end - start
        inner = np.clip(self._bounds[first + 1 : last, 0] - start, 0, length)  # [n - 1]
        cuts = [0, *inner.tolist()]
        text = self.text[start:end]
        return [text[a:b] for a, b in zip(cuts, [*cuts[1:], length], strict=True)]

    def token_span(self, part: str, start: int = 0, end: int | None = None) -> tuple[int, int]:
        """Token range covering a character span of a named part.

        Parameters
        ----------
        part : str
            A key of :attr:`parts` (``"context"``, ``"question"``, ``"answer"``, ``"prompt"``
            or ``"generation"``).
        start, end : int
            Character offsets ``[start, end)`` *relative to the part's own text* (i.e. offsets
            into the string the caller passed). ``end=None`` means the end of the part.

        Returns
        -------
        tuple of int
            ``(tok_start, tok_end)``: the token positions ``tok_start..tok_end-1`` are the
            tokens whose character range overlaps ``[start, end)`` (a token that straddles the
            span's edge is included).

        Raises
        ------
        ValueError
            Unknown or absent part; ``start``/``end`` negative, beyond the part's length or
            ``start >= end``; no token overlaps the span.

        Examples
        --------
        With the default model's tokenizer (SmolLM2; needs the model cache):

        >>> from rcstat.models import load_model  # doctest: +SKIP
        >>> from rcstat.segments import segment_chat  # doctest: +SKIP
        >>> _, tok = load_model()  # doctest: +SKIP
        >>> seg = segment_chat(tok, "Paris is in France.", "Where is Paris?")  # doctest: +SKIP
        >>> seg.token_span("context", 0, 5)  # the token of "Paris"  # doctest: +SKIP
        (24, 25)
        """
        lo, hi = self._span_chars(part, start, end)
        bounds = self._bounds  # [T, 2]: one vectorised scan, not a Python loop per call
        hits = ((bounds[:, 0] < hi) & (bounds[:, 1] > lo)).nonzero()[0].tolist()
        if not hits:
            raise ValueError(
                f"the span [{start}, {end}) of part {part!r} covers no token "
                "(the tokenizer's offsets leave those characters out)"
            )
        return hits[0], hits[-1] + 1

    def token_spans(self, part: str, spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """:meth:`token_span` of many character spans ``(start, end)`` of one part, with the
        same checks and errors. Inside a part whose token offsets run in text order (every
        tokenizer's), each span costs two binary searches instead of a scan of every token."""
        if not spans:
            return []
        first, last = self.token_span(part)
        bounds = self._bounds[first:last]  # [n, 2] the part's tokens
        if not (np.diff(bounds, axis=0) >= 0).all():  # out of order: scan each span
            return [self.token_span(part, start, end) for start, end in spans]
        chars = np.array([self._span_chars(part, start, end) for start, end in spans])  # [S, 2]
        lo = first + np.searchsorted(bounds[:, 1], chars[:, 0], side="right")  # ends > lo
        hi = first + np.searchsorted(bounds[:, 0], chars[:, 1], side="left")  # starts < hi
        for (start, end), a, z in zip(spans, lo, hi, strict=True):
            if a >= z:
                return [self.token_span(part, start, end)]  # raises: no token in the span
        return list(zip(lo.tolist(), hi.tolist(), strict=True))

    def _span_chars(self, part: str, start: int, end: int | None) -> tuple[int, int]:
        """Absolute character range of ``[start, end)`` of ``part`` (checked)."""
        p_start, p_end = self._part_range(part)
        length = p_end - p_start
        if end is None:
            end = length
        for name, value in (("start", start), ("end", end)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
            if value < 0:
                raise ValueError(f"{name}: {value} is negative")
            if value > length:
                raise ValueError(f"{name}: {value} is beyond the length {length} of part {part!r}")
        if start >= end:
            raise ValueError(f"start >= end ({start} >= {end}): the span of {part!r} is empty")
        return p_start + start, p_start + end

    def with_generation(
        self, tokenizer: PreTrainedTokenizerBase, generated_ids: Sequence[int] | torch.Tensor
    ) -> Segmented:
        """Append model-generated token ids as the generation.

        Parameters
        ----------
        tokenizer : PreTrainedTokenizerBase
            The tokenizer that produced this example (used to decode).
        generated_ids : sequence of int or torch.Tensor
            The new token ids, 1-D or ``[1, n]``, *without* the prompt. They are kept verbatim
            (never re-tokenised). Special tokens among them (e.g. an EOS) are decoded to their
            text; strip them first if they should not be analysed.

        Returns
        -------
        Segmented
            A new example with the ids appended, their decoded text appended to :attr:`text`
            and the ``"answer"`` (chat mode) or ``"generation"`` (raw mode) part set to it.

        Raises
        ------
        ValueError
            If `generated_ids` is empty or the example already has that part.

        Notes
        -----
        Offsets are found by incremental decoding: after decoding ids ``0..k`` the longest
        prefix that agrees with the decoding of all ids is final. Token ``k`` covers the
        characters completed since token ``k-1``, plus the character it leaves incomplete
        (a multi-byte character split over byte-level tokens is covered by each of its
        tokens, as in a fast tokenizer's offsets). This costs ``n`` decodes of up to ``n``
        ids each.
        """
        name = self.generation_part
        if name in self.parts:
            raise ValueError(
                f"generated_ids: this example already has a {name!r} part; segment it without "
                "one before appending generated ids"
            )
        new_ids = _as_id_list(generated_ids)
        gen_text, gen_offsets = _incremental_decode(tokenizer, new_ids)
        base = len(self.text)
        parts = dict(self.parts)
        parts[name] = (base, base + len(gen_text))
        ids = torch.cat([self.input_ids, torch.tensor([new_ids], dtype=torch.int64)], dim=1)
        return Segmented(
            input_ids=ids,  # [1, T + n]
            prompt_len=self.prompt_len,
            text=self.text + gen_text,
            offsets=self.offsets + tuple((base + s, base + e) for s, e in gen_offsets),
            parts=parts,
        )

    def _part_range(self, part: str) -> tuple[int, int]:
        if not isinstance(part, str):
            raise TypeError(f"part: expected a str, got {type(part).__name__}")
        if part not in self.parts:
            known = CHAT_PARTS + RAW_PARTS
            why = "unknown part name" if part not in known else "part not present in this example"
            raise ValueError(f"part: {why} {part!r}; available: {sorted(self.parts)}")
        return self.parts[part]


def append_continuation(
    tokenizer: Any,
    text: str,
    ids: list[int],
    offsets: list[tuple[int, int]],
    parts: dict[str, tuple[int, int]],
    name: str,
    continuation: str,
    *,
    literal: bool,
) -> str:
    """Teacher-force ``continuation``: tokenise it alone (``add_special_tokens=False``),
    extend ``ids``/``offsets``/``parts`` in place and return the extended text."""
    more_ids, more_offsets = encode(
        tokenizer, continuation, add_special_tokens=False, literal=literal
    )
    base = len(text)
    ids.extend(more_ids)
    offsets.extend((base + s, base + e) for s, e in more_offsets)
    parts[name] = (base, base + len(continuation))
    return text + continuation


def _offset_array(offsets: Any) -> np.ndarray:
    """``offsets`` as a ``[T, 2]`` int64 array; ``ValueError`` unless it holds one
    ``(start, end)`` pair per token. A list or tuple of pairs is read in one pass over the
    flattened pairs (``np.fromiter``: several times faster than ``np.array`` on thousands of
    tuples), an array or tensor of shape ``[T, 2]`` as it is."""
    if isinstance(offsets, (list, tuple)):
        try:
            pairs = set(map(len, offsets)) <= {2}
        except TypeError:  # an element without a length
            pairs = False
        if not pairs:
            k, item = next((k, p) for k, p in enumerate(offsets) if not _is_pair(p))
            raise ValueError(f"offsets: token {k} has {item!r}, not a (start, end) pair")
        flat = np.fromiter(itertools.chain.from_iterable(offsets), np.int64, 2 * len(offsets))
        return flat.reshape(-1, 2)
    # asarray, then a copy of our own: np.array on a tensor warns (torch's __array__ takes no copy)
    bounds = np.asarray(offsets, dtype=np.int64).copy()
    if bounds.ndim != 2 or bounds.shape[1] != 2:
        raise ValueError(
            f"offsets: expected one (start, end) pair per token, got {_describe(offsets)}"
        )
    return bounds


def _is_pair(item: Any) -> bool:
    return hasattr(item, "__len__") and len(item) == 2


def _describe(value: Any) -> str:
    if isinstance(value, (torch.Tensor, np.ndarray)):
        kind = "a tensor" if isinstance(value, torch.Tensor) else "an array"
        return f"{kind} of shape {list(value.shape)}"
    return type(value).__name__


def build(
    ids: list[int],
    prompt_len: int,
    text: str,
    offsets: Sequence[tuple[int, int]],
    parts: dict[str, tuple[int, int]],
    max_length: int | None,
) -> Segmented:
    """The :class:`Segmented` of the ids and offsets built so far; ``ValueError`` beyond
    `max_length` tokens."""
    if max_length is not None and len(ids) > max_length:
        raise ValueError(f"max_length: the example has {len(ids)} tokens > max_length={max_length}")
    return Segmented(
        input_ids=torch.from_numpy(np.fromiter(ids, np.int64, len(ids)))[None],  # [1, T]
        prompt_len=prompt_len,
        text=text,
        offsets=tuple(offsets),
        parts=parts,
    )


def _as_id_list(generated_ids: Sequence[int] | torch.Tensor) -> list[int]:
    if isinstance(generated_ids, torch.Tensor):
        t = generated_ids
        if t.dim() == 2 and t.shape[0] == 1:
            t = t[0]
        if t.dim() != 1:
            raise TypeError(
                f"generated_ids: expected a 1-D or [1, n] tensor, got shape {list(t.shape)}; "
                "rcstat analyses one example at a time"
            )
        if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
            raise TypeError(f"generated_ids: expected integer ids, got dtype {t.dtype}")
        ids = [int(i) for i in t.tolist()]
    elif isinstance(generated_ids, (str, bytes)) or not isinstance(generated_ids, Sequence):
        raise TypeError(
            f"generated_ids: expected a sequence of int or a tensor, got "
            f"{type(generated_ids).__name__}"
        )
    else:
        ids = []
        for i in generated_ids:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(
                    f"generated_ids: expected int ids, got {type(i).__name__}; rcstat analyses "
                    "one example at a time"
                )
            ids.append(int(i))
    if not ids:
        raise ValueError("generated_ids: is empty")
    if min(ids) < 0:
        raise ValueError(f"generated_ids: negative id {min(ids)}")
    return ids


def _incremental_decode(tokenizer: Any, ids: list[int]) -> tuple[str, list[tuple[int, int]]]:
    """Decode `ids` and give each token the character range it contributes to the text."""

    def decode(chunk: list[int]) -> str:
        out = tokenizer.decode(chunk, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return str(out)

    full = decode(ids)
    offsets: list[tuple[int, int]] = []
    done = 0  # characters of `full` completed by the tokens so far
    for k in range(1, len(ids) + 1):
        prefix = full if k == len(ids) else decode(ids[:k])
        agreed = common_prefix_len(prefix, full)
        completed = max(done, agreed)
        pending = len(prefix) > agreed and completed < len(full)  # an unfinished character
        offsets.append((done, completed + 1 if pending else completed))
        done = completed
    return full, offsets
