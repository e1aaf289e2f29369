"""Long texts tokenised in pieces on every core, with the ids and offsets of one call.

A fast tokenizer encodes one text on one core, and most of that time is its pre-tokenisation
(the regex that cuts the text into words before the BPE model merges inside each); a batch of
texts is encoded on every core. :func:`piece_bounds` cuts a long text where the tokenizer's
pre-tokenisation always cuts (``segments.encode`` encodes the pieces as one batch and joins
them): the BPE model never merges across a pre-token, so the ids and offsets equal those of one
call.

Where a cut is safe (:func:`cuts_safely`): a tokenizer whose pre-tokenisation is the GPT-2
byte-level regex (``ByteLevel`` with ``use_regex``: SmolLM2, GPT-2) or a ``Split`` by the
Llama-3 or Qwen2 regex followed by a byte-level map, with no normaliser (or NFC), and whose
added tokens hold no whitespace and strip none. In each of these regexes a letter is matched
only by a run of letters (with at most one non-letter before it) or by a contraction
(``'s``, ``'ll``, ...), which ends with a letter; so a single space between two letters
(:func:`cut_points`) always ends one pre-token and starts the next (`` word``), and the
regex read from that space finds what it finds in the whole text (it looks only ahead, and
every piece ends on a letter). Added tokens are matched before pre-tokenisation; one across a
cut would hold a space. Other tokenizers are encoded in one call.
"""

from __future__ import annotations

import json
import os
import re
import weakref
from typing import Any

__all__ = ["PIECE_CHARS", "cut_points", "cuts_safely", "max_pieces", "piece_bounds"]

#: The fewest characters of a piece: texts shorter than two pieces are encoded in one call (a
#: piece costs the tokenizer's per-call overhead; below this the cores save less than it). On
#: an H200's 16-core host a 2,048-token prompt (12k characters) encodes in 1.8 ms this way
#: against 3.7 ms with 4,096-character pieces and 7.4 ms in one call (docs/benchmarks.md §6.30).
PIECE_CHARS = 512

#: The pre-tokenisation regexes of ``Split`` pre-tokenizers whose letter runs end at a space
#: (Llama-3 and Qwen2's; they differ in how many digits a number token holds).
_TAIL = r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_LETTER_RUN_SPLITS = frozenset(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|" + digits + "|" + _TAIL
    for digits in (r"\p{N}{1,3}", r"\p{N}")
)
#: A space with a letter on each side (checked again with ``str.isalpha``, which is Unicode's
#: letter category ``L``, the regexes' ``\p{L}``; ``[^\W\d_]`` also admits a few numerals).
_BETWEEN_LETTERS = re.compile(r"(?<=[^\W\d_]) (?=[^\W\d_])")
_SAFE: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def cuts_safely(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` (a fast tokenizer) encodes a text cut at :func:`cut_points` as it
    encodes the whole text (see the module notes); read from its configuration once per
    tokenizer object."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    known = _SAFE.get(tokenizer)
    if known is not None:
        return known
    normalizer, pre = backend.normalizer, backend.pre_tokenizer
    added = (getattr(tokenizer, "added_tokens_decoder", None) or {}).values()
    safe = (
        (normalizer is None or _normalizer_safe(json.loads(normalizer.__getstate__())))
        and pre is not None
        and _pre_tokenizer_safe(json.loads(pre.__getstate__()))
        and not any(
            getattr(token, "lstrip", False)
            or getattr(token, "rstrip", False)
            or any(c.isspace() for c in getattr(token, "content", str(token)))
            for token in added
        )
    )
    _SAFE[tokenizer] = safe
    return safe


def _normalizer_safe(normalizer: dict[str, Any]) -> bool:
    """NFC: it composes a character with the marks after it, never across a space."""
    return normalizer.get("type") == "NFC"


def _pre_tokenizer_safe(pre: dict[str, Any]) -> bool:
    """The GPT-2 byte-level regex, or a letter-run ``Split`` then a byte-level map."""
    if pre.get("type") == "ByteLevel":
        return bool(pre.get("use_regex", True))
    if pre.get("type") != "Sequence":
        return False
    steps = pre.get("pretokenizers") or []
    if len(steps) != 2:
        return False
    split, level = steps
    return (
        split.get("type") == "Split"
        and split.get("pattern", {}).get("Regex") in _LETTER_RUN_SPLITS
        and split.get("behavior") == "Isolated"
        and not split.get("invert", False)
        and level.get("type") == "ByteLevel"
        and not level.get("use_regex", True)
    )


def cut_points(text: str, pieces: int) -> list[int]:
    """Up to ``pieces − 1`` increasing positions of ``text``, each a single space between two
    letters, the first at or after each ``k·len(text)/pieces`` (fewer where none is left).

    >>> cut_points("one two three four", 2)
    [13]
    >>> cut_points("no-space-here", 3)
    []
    """
    cuts: list[int] = []
    for k in range(1, pieces):
        start = max(k * len(text) // pieces, cuts[-1] + 1 if cuts else 1)
        for found in _BETWEEN_LETTERS.finditer(text, start):
            at = found.start()
            if text[at - 1].isalpha() and text[at + 1].isalpha():
                cuts.append(at)
                break
        else:
            break
    return cuts


def max_pieces() -> int:
    """The most pieces a text is cut into: one a core this process may run on (the
    tokenizer's thread pool encodes a batch with a thread a core; more pieces add their
    per-call cost and wait for a thread). A cgroup's CPU quota is not read: where it allows
    fewer threads than the cores, up to eight pieces a thread were measured still well ahead
    of one call (docs/benchmarks.md §6.30)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1  # pragma: no cover - macOS and Windows (no sched_getaffinity)


def piece_bounds(tokenizer: Any, text: str) -> list[int] | None:
    """``[0, *cuts, len(text)]``: where to cut ``text`` into pieces that ``tokenizer`` encodes
    (without added special tokens) to the ids and offsets of the whole text: ``len(text) //``
    :data:`PIECE_CHARS` pieces of about equal length, at most :func:`max_pieces`; None where
    that is fewer than two, the tokenizer is not :func:`cuts_safely` or no cut was found."""
    count = min(len(text) // PIECE_CHARS, max_pieces())
    if count < 2 or not cuts_safely(tokenizer):
        return None
    cuts = cut_points(text, count)
    return [0, *cuts, len(text)] if cuts else None
