"""Token positions of one example: the prompt/generation split and character-span lookups.

rcstat reads a sequence ``s = p ⊕ g`` (paper §3.1): prompt tokens ``p`` at positions
``0..m-1`` and generated tokens ``g`` at ``m..T-1``. This module turns text into those
positions and keeps, for every token, the character range it stands for, so that spans given
as character offsets in the user's own strings (a sentence of the context, a phrase of the
answer) map to token ranges.

Design
------
* **One example at a time.** Every function takes single strings; lists/batches are refused
  with a ``TypeError``. Sequences therefore never need padding and ``input_ids`` is ``[1, T]``
  with no attention mask.
* **Two modes.** :func:`segment_chat` renders the tokenizer's chat template around the user
  message ``context + "\\n\\n" + question`` (parts ``"context"``, ``"question"``,
  ``"answer"``); :func:`segment_text` is the raw mode without a template (parts ``"prompt"``,
  ``"generation"``).
* **Teacher forcing without re-tokenisation.** The prompt and the answer are tokenised
  *separately* and concatenated: the answer's ids are exactly those a model would have
  generated after the prompt, not a joint tokenisation of prompt + answer (which could merge
  tokens across the boundary). :meth:`Segmented.with_generation` appends ids a model really
  generated and recovers their text by incremental decoding.
* **Offsets.** Character ranges come from a fast tokenizer (``return_offsets_mapping=True``)
  and are expressed in :attr:`Segmented.text`, the concatenation of the prompt text (the
  rendered template in chat mode) and the generation text. Tokens that stand for no text
  (e.g. a BOS added by the tokenizer) have an empty range.
* **Locating the parts in the template.** The template is rendered a second time with a
  sentinel string as the user message. What precedes the sentinel (system prompt, headers) and
  what follows it (end of turn, assistant header) are matched against the real rendering from
  the left and from the right, so the user message is located exactly even when the context
  also occurs in the system prompt. The context and the question are then found inside that
  message only.
* **User text is literal.** Special-token strings typed in user text (``<|im_start|>``,
  ``<|eot_id|>``, …) are encoded as the plain characters they are, so a context, question,
  answer, system prompt or raw prompt cannot open or close chat turns; only the markers the
  chat template writes itself become special tokens. The rendered prompt is tokenised in one
  piece, as the model's own pipeline does. If a special token of that encoding overlaps the
  user message or the system prompt, the text between the template's own special tokens
  around it is re-encoded with ``split_special_tokens=True`` and spliced in (ids and offsets),
  which is what the tokenizer would have produced had those strings not been special. Every
  result is checked: its special tokens must be exactly those of the template rendered with
  placeholders for the user's strings, and literal pieces must contain none.
  ``allow_special_tokens=True`` restores the plain encoding for trusted text.

The module imports torch and numpy only; transformers is reached solely through the tokenizer object
that is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["CHAT_SEPARATOR", "Segmented", "segment_chat", "segment_text"]

#: Separator between the context and the question in the user message of :func:`segment_chat`.
CHAT_SEPARATOR = "\n\n"

_CHAT_PARTS = ("context", "question", "answer")
_RAW_PARTS = ("prompt", "generation")
_SENTINEL = "RCSTAT_USER_MESSAGE_SENTINEL"
_SYSTEM_SENTINEL = "RCSTAT_SYSTEM_PROMPT_SENTINEL"

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
    offsets : tuple of (int, int)
        Per token, the ``[start, end)`` character range in `text`; an empty range (e.g.
        ``(0, 0)``) for a token that stands for no text.
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
        offsets = tuple((int(s), int(e)) for s, e in self.offsets)
        if len(offsets) != seq_len:
            raise ValueError(f"offsets: {len(offsets)} ranges for {seq_len} tokens")
        n_chars = len(self.text)
        for i, (s, e) in enumerate(offsets):
            if not 0 <= s <= e <= n_chars:
                raise ValueError(f"offsets: token {i} has range ({s}, {e}) outside the text")
        parts = {str(k): (int(v[0]), int(v[1])) for k, v in self.parts.items()}
        for name, (s, e) in parts.items():
            if name not in _CHAT_PARTS + _RAW_PARTS:
                raise ValueError(f"parts: unknown part name {name!r}")
            if not 0 <= s <= e <= n_chars:
                raise ValueError(f"parts: {name!r} has range ({s}, {e}) outside the text")
        object.__setattr__(self, "offsets", offsets)
        object.__setattr__(self, "parts", MappingProxyType(parts))
        bounds = np.array(offsets, dtype=np.int64).reshape(seq_len, 2)  # [T, 2]
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

    def token_texts(self, part: str) -> list[str]:
        """The part's text cut at the start offsets of its tokens (:meth:`token_span` of the
        whole part): one string per token, and their concatenation is :meth:`part_text`. A
        token straddling the part's edge keeps only its characters inside the part."""
        first, last = self.token_span(part)
        start, end = self._part_range(part)
        length = end - start
        cuts = [0] + [
            min(max(self.offsets[i][0] - start, 0), length) for i in range(first + 1, last)
        ]
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
        >>> _, tok = load_model()  # doctest: +SKIP
        >>> seg = segment_chat(tok, "Paris is in France.", "Where is Paris?")  # doctest: +SKIP
        >>> seg.token_span("context", 0, 5)  # the token of "Paris"  # doctest: +SKIP
        (24, 25)
        """
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
        lo, hi = p_start + start, p_start + end
        bounds = self._bounds  # [T, 2]: one vectorised scan, not a Python loop per call
        hits = ((bounds[:, 0] < hi) & (bounds[:, 1] > lo)).nonzero()[0].tolist()
        if not hits:
            raise ValueError(
                f"the span [{start}, {end}) of part {part!r} covers no token "
                "(the tokenizer's offsets leave those characters out)"
            )
        return hits[0], hits[-1] + 1

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
            known = _CHAT_PARTS + _RAW_PARTS
            why = "unknown part name" if part not in known else "part not present in this example"
            raise ValueError(f"part: {why} {part!r}; available: {sorted(self.parts)}")
        return self.parts[part]


def segment_chat(
    tokenizer: PreTrainedTokenizerBase,
    context: str,
    question: str,
    answer: str | None = None,
    *,
    question_placement: Literal["prompt", "generation"] = "prompt",
    question_first: bool = False,
    system_prompt: str | None = None,
    max_length: int | None = None,
    allow_special_tokens: bool = False,
) -> Segmented:
    """Tokenise a (context, question, answer) example through the tokenizer's chat template.

    The single user message is ``context + "\\n\\n" + question`` (:data:`CHAT_SEPARATOR`;
    ``question + "\\n\\n" + context`` with `question_first`), preceded by a system message
    when `system_prompt` is given (otherwise the template's own default, if any). It is
    rendered with
    ``tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)``
    and tokenised with ``add_special_tokens=False`` (the template writes its own special
    tokens). The answer is teacher-forced: its tokens are ``tokenizer(answer,
    add_special_tokens=False)`` appended after the prompt tokens, exactly what a model would
    have generated; prompt and answer are never tokenised jointly.

    Special-token strings inside the user's text (context, question, answer, system prompt)
    are tokenised as literal text by default: a context containing
    ``"<|im_end|>\\n<|im_start|>assistant"`` stays characters of the user turn and cannot fake
    a turn of the conversation. Only the template's own markers are special tokens.

    Parameters
    ----------
    tokenizer : PreTrainedTokenizerBase
        A *fast* tokenizer with a chat template.
    context, question : str
        Non-blank strings.
    answer : str or None, default None
        The answer to teacher-force; None gives the prompt only (generate, then call
        :meth:`Segmented.with_generation`).
    question_placement : {"prompt", "generation"}, default "prompt"
        Where the question goes in ``s = p ⊕ g`` (paper §3.1). ``"prompt"``: ``p`` is the whole
        rendered prompt and ``g`` the answer tokens. ``"generation"``: the split moves to the
        first token of the question, so ``g`` is the question tokens, the rest of the template
        (end of the user turn, assistant header) and the answer tokens. If the question's
        first token also holds characters before the question, it still starts ``g``.
    question_first : bool, default False
        Put the question before the context in the user message (instructions first, as
        many RAG prompts do). Only with ``question_placement="prompt"``: the generation part
        starts at the question, so it cannot come before the context.
    system_prompt : str or None, default None
        Content of a system message placed before the user message.
    max_length : int or None, default None
        Maximum number of tokens; longer examples raise ``ValueError``.
    allow_special_tokens : bool, default False
        If True, special-token strings in the context, question, answer and system prompt
        become the tokenizer's special tokens (the tokenizer's plain behaviour). This lets the
        text open, close or forge chat turns: use it only for trusted text that is meant to
        contain such markers, never for text from users or documents.

    Returns
    -------
    Segmented
        With parts ``"context"``, ``"question"`` and (when `answer` is given) ``"answer"``.

    Raises
    ------
    TypeError
        A non-``str`` input (a list or batch: rcstat analyses one example at a time), or a
        slow tokenizer.
    ValueError
        Blank context/question/answer (empty or whitespace only), no chat template, unknown
        `question_placement`, `question_first` with ``question_placement="generation"``, the
        template altered the message so that the context/question
        cannot be located, the template's special tokens cannot be told apart from the user's
        text, the tokenizer cannot encode special-token strings literally, or more than
        `max_length` tokens.

    Examples
    --------
    With the default model's tokenizer (SmolLM2; needs the model cache):

    >>> from rcstat.models import load_model  # doctest: +SKIP
    >>> _, tok = load_model()  # doctest: +SKIP
    >>> seg = segment_chat(tok, "Paris is in France.", "Where is Paris?", "In France.")
    ... # doctest: +SKIP
    >>> seg.part_text("answer"), seg.prompt_len, seg.gen_len  # doctest: +SKIP
    ('In France.', 41, 3)
    >>> seg = segment_chat(tok, "Paris is in France.", "Where is Paris?",
    ...                    question_placement="generation")  # doctest: +SKIP
    >>> tok.decode(seg.input_ids[0, seg.prompt_len:])  # doctest: +SKIP
    'Where is Paris?<|im_end|>\\n<|im_start|>assistant\\n'
    """
    _check_fast(tokenizer)
    _check_text("context", context)
    _check_text("question", question)
    if answer is not None:
        _check_text("answer", answer, optional=True)
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise TypeError(
            f"system_prompt: expected a str or None, got {type(system_prompt).__name__}"
        )
    _check_flag("allow_special_tokens", allow_special_tokens)
    if question_placement not in ("prompt", "generation"):
        raise ValueError(
            f"question_placement: expected 'prompt' or 'generation', got {question_placement!r}"
        )
    _check_flag("question_first", question_first)
    if question_first and question_placement == "generation":
        raise ValueError(
            "question_first: the question cannot come first when it starts the generation "
            "(question_placement='generation')"
        )
    _check_max_length(max_length)
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            "tokenizer: it has no chat template; use rcstat.segments.segment_text for raw "
            "(template-free) text, or set tokenizer.chat_template"
        )

    order = (question, context) if question_first else (context, question)
    user_message = CHAT_SEPARATOR.join(order)
    prompt_text = _render(tokenizer, user_message, system_prompt)
    starts, message_window = _locate_message(tokenizer, prompt_text, order, system_prompt)
    q_start, ctx_start = starts if question_first else starts[::-1]
    parts = {
        "context": (ctx_start, ctx_start + len(context)),
        "question": (q_start, q_start + len(question)),
    }
    if allow_special_tokens:
        ids, offsets = _encode(tokenizer, prompt_text, add_special_tokens=False)
    else:
        ids, offsets = _encode_template_literal(
            tokenizer, prompt_text, message_window, user_message, system_prompt
        )
    prompt_len = len(ids)
    if question_placement == "generation":
        q_end = parts["question"][1]
        q_tokens = [i for i, (s, e) in enumerate(offsets) if s < q_end and e > q_start]
        if not q_tokens:  # pragma: no cover - the question is non-blank text of the prompt
            raise ValueError("question: no token of the rendered prompt covers the question")
        prompt_len = q_tokens[0]
    text = prompt_text
    if answer is not None:
        text = _append_continuation(
            tokenizer, text, ids, offsets, parts, "answer", answer, literal=not allow_special_tokens
        )
    return _build(ids, prompt_len, text, offsets, parts, max_length)


def segment_text(
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    generation: str | None = None,
    *,
    max_length: int | None = None,
    allow_special_tokens: bool = False,
) -> Segmented:
    """Tokenise raw text (no chat template) as ``prompt ⊕ generation``.

    The prompt is tokenised with the tokenizer's default special tokens
    (``add_special_tokens=True``: e.g. a BOS, which gets an empty character range), the
    generation with ``add_special_tokens=False``; the two id lists are concatenated (never
    tokenised jointly). :attr:`Segmented.text` is ``prompt + generation``. Special-token
    strings written inside the prompt or the generation are tokenised as literal text unless
    `allow_special_tokens` is True; the special tokens the tokenizer adds itself (a BOS) stay.

    Parameters
    ----------
    tokenizer : PreTrainedTokenizerBase
        A *fast* tokenizer.
    prompt : str
        Non-blank prompt text (``p``).
    generation : str or None, default None
        Non-blank continuation to teacher-force (``g``); None gives the prompt only.
    max_length : int or None, default None
        Maximum number of tokens; longer examples raise ``ValueError``.
    allow_special_tokens : bool, default False
        If True, special-token strings in the prompt and the generation become the
        tokenizer's special tokens (its plain behaviour), so the text can forge turns or end
        the sequence: use it only for trusted text meant to contain such markers.

    Returns
    -------
    Segmented
        With parts ``"prompt"`` and (when `generation` is given) ``"generation"``.

    Raises
    ------
    TypeError
        A non-``str`` input (rcstat analyses one example at a time) or a slow tokenizer.
    ValueError
        Blank prompt or generation (empty or whitespace only), a tokenizer that cannot encode
        special-token strings literally, or more than `max_length` tokens.

    Examples
    --------
    With the default model's tokenizer (SmolLM2; needs the model cache):

    >>> from rcstat.models import load_model  # doctest: +SKIP
    >>> _, tok = load_model()  # doctest: +SKIP
    >>> seg = segment_text(tok, "The capital of France is", " Paris.")  # doctest: +SKIP
    >>> seg.part_text("generation"), seg.prompt_len, seg.gen_len  # doctest: +SKIP
    (' Paris.', 5, 2)
    """
    _check_fast(tokenizer)
    _check_text("prompt", prompt)
    if generation is not None:
        _check_text("generation", generation, optional=True)
    _check_max_length(max_length)
    _check_flag("allow_special_tokens", allow_special_tokens)
    literal = not allow_special_tokens
    ids, offsets = _encode(tokenizer, prompt, add_special_tokens=True, literal=literal)
    prompt_len = len(ids)
    parts = {"prompt": (0, len(prompt))}
    text = prompt
    if generation is not None:
        text = _append_continuation(
            tokenizer, text, ids, offsets, parts, "generation", generation, literal=literal
        )
    return _build(ids, prompt_len, text, offsets, parts, max_length)


# --------------------------------------------------------------------------- helpers


def _append_continuation(
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
    more_ids, more_offsets = _encode(
        tokenizer, continuation, add_special_tokens=False, literal=literal
    )
    base = len(text)
    ids.extend(more_ids)
    offsets.extend((base + s, base + e) for s, e in more_offsets)
    parts[name] = (base, base + len(continuation))
    return text + continuation


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    return type(value).__name__


def _check_fast(tokenizer: Any) -> None:
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError(
            "tokenizer: a fast tokenizer (transformers PreTrainedTokenizerFast) is required for "
            f"character offsets; got {type(tokenizer).__name__}"
        )


def _check_text(name: str, value: Any, *, optional: bool = False) -> None:
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


def _check_flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")


def _check_max_length(max_length: int | None) -> None:
    if max_length is None:
        return
    if isinstance(max_length, bool) or not isinstance(max_length, int):
        raise TypeError(f"max_length: expected an int or None, got {type(max_length).__name__}")
    if max_length < 1:
        raise ValueError(f"max_length: must be positive, got {max_length}")


def _encode(
    tokenizer: Any, text: str, *, add_special_tokens: bool, literal: bool = False
) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids and character offsets of `text`.

    ``literal=True`` encodes special-token strings inside `text` as plain text
    (``split_special_tokens=True``) and checks that no special token stands for characters of
    `text` (those the tokenizer adds itself, e.g. a BOS, have an empty range and may stay).
    """
    # Without `literal` the tokenizer keeps its own default (no split_special_tokens argument).
    extra = {"split_special_tokens": True} if literal else {}
    enc = tokenizer(
        text,
        add_special_tokens=add_special_tokens,
        return_offsets_mapping=True,
        return_attention_mask=False,
        verbose=False,
        **extra,
    )
    ids = [int(i) for i in enc["input_ids"]]
    offsets = [(int(s), int(e)) for s, e in enc["offset_mapping"]]
    if literal:
        special = _special_ids(tokenizer)
        leaked = [k for k, i in enumerate(ids) if i in special and offsets[k][0] < offsets[k][1]]
        if leaked:
            s, e = offsets[leaked[0]]
            raise ValueError(
                f"tokenizer: {type(tokenizer).__name__} encoded {text[s:e]!r} as a special token "
                "although split_special_tokens=True was asked, so special-token strings in the "
                "text cannot be kept literal; remove them from the text (or, for trusted text "
                "only, pass allow_special_tokens=True)"
            )
    return ids, offsets


def _special_ids(tokenizer: Any) -> frozenset[int]:
    """Ids of the tokenizer's special tokens (named ones and special added tokens)."""
    ids = {int(i) for i in getattr(tokenizer, "all_special_ids", ())}
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids.update(int(i) for i, token in decoder.items() if getattr(token, "special", False))
    return frozenset(ids)


def _encode_template_literal(
    tokenizer: Any,
    rendered: str,
    message_window: tuple[int, int],
    user_message: str,
    system_prompt: str | None,
) -> tuple[list[int], list[tuple[int, int]]]:
    """Encode a rendered chat prompt so that only the template's markers are special tokens.

    `rendered` is encoded in one piece (as ``apply_chat_template(tokenize=True)`` would).
    Special tokens overlapping the user's text (`message_window`, and the system prompt's
    window when one is given) came from that text: each run of tokens between two of the
    template's own special tokens that holds one is re-encoded literally and spliced in.
    The special tokens of the result must be those of the template rendered with
    placeholders for the user's strings, in the same order.
    """
    special = _special_ids(tokenizer)
    ids, offsets = _encode(tokenizer, rendered, add_special_tokens=False)
    windows = [message_window]
    if system_prompt is not None:
        sentinel = _unused_sentinel(_SYSTEM_SENTINEL, rendered + system_prompt)
        alt = _render(tokenizer, user_message, sentinel)
        window = _field_window(rendered, alt, sentinel)
        if window is not None:
            windows.append(window)

    def from_user(k: int) -> bool:
        s, e = offsets[k]
        return any(s < hi and e > lo for lo, hi in windows)

    is_marker = [i in special and not from_user(k) for k, i in enumerate(ids)]
    if any(i in special and not is_marker[k] for k, i in enumerate(ids)):
        new_ids: list[int] = []
        new_offsets: list[tuple[int, int]] = []
        k, n = 0, len(ids)
        while k < n:
            j = k + 1 if is_marker[k] else next((m for m in range(k, n) if is_marker[m]), n)
            if not is_marker[k] and any(i in special for i in ids[k:j]):
                a = offsets[k - 1][1] if k > 0 else 0
                b = offsets[j][0] if j < n else len(rendered)
                piece_ids, piece_offsets = _encode(
                    tokenizer, rendered[a:b], add_special_tokens=False, literal=True
                )
                new_ids.extend(piece_ids)
                new_offsets.extend((a + s, a + e) for s, e in piece_offsets)
            else:
                new_ids.extend(ids[k:j])
                new_offsets.extend(offsets[k:j])
            k = j
        ids, offsets = new_ids, new_offsets

    # The template's own markers: render it with placeholders for every user string.
    probe = rendered + (system_prompt or "")
    placeholders = _render(
        tokenizer,
        _unused_sentinel(_SENTINEL, probe),
        None if system_prompt is None else _unused_sentinel(_SYSTEM_SENTINEL, probe),
    )
    template_ids, _ = _encode(tokenizer, placeholders, add_special_tokens=False)
    want = [i for i in template_ids if i in special]
    got = [i for i in ids if i in special]
    if got != want:
        raise ValueError(
            "context/question/system_prompt: the chat template's special tokens cannot be told "
            "apart from special-token strings in the text (the template's markers would be "
            f"{len(want)} special tokens, the prompt has {len(got)}); remove special-token "
            "strings from the text (or, for trusted text only, pass allow_special_tokens=True)"
        )
    return ids, offsets


def _unused_sentinel(sentinel: str, text: str) -> str:
    """`sentinel`, lengthened until it does not occur in `text`."""
    while sentinel in text:
        sentinel += "_"
    return sentinel


def _field_window(rendered: str, alt: str, sentinel: str) -> tuple[int, int] | None:
    """``[lo, hi)`` of `rendered` that holds what `alt` has as `sentinel`, or None if equal.

    `alt` is the template rendered with `sentinel` in place of one of the user's strings.
    The text before the sentinel's first occurrence and after its last one is matched against
    `rendered` from the left and from the right, so the window holds every character that
    came from that string (and, if the template transformed it, possibly a few more).
    """
    if alt == rendered:
        return None
    first = alt.find(sentinel)
    if first < 0:  # the template changed or dropped the string: all that differs counts
        head, tail = alt, alt
    else:
        head, tail = alt[:first], alt[alt.rfind(sentinel) + len(sentinel) :]
    lo = _common_prefix_len(rendered, head)
    hi = len(rendered) - _common_prefix_len(rendered[::-1], tail[::-1])
    return min(lo, hi), max(lo, hi)


def _render(tokenizer: Any, user_message: str, system_prompt: str | None) -> str:
    messages = [{"role": "user", "content": user_message}]
    if system_prompt is not None:
        messages.insert(0, {"role": "system", "content": system_prompt})
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    if not isinstance(rendered, str):  # pragma: no cover - tokenize=False returns str
        raise TypeError(f"apply_chat_template returned {type(rendered).__name__}, expected str")
    return rendered


def _locate_message(
    tokenizer: Any, rendered: str, order: tuple[str, str], system_prompt: str | None
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Character starts of the user message's two texts (``order``: context and question,
    in the order written) inside the rendered prompt, and the ``[lo, hi)`` window of the
    rendered prompt that holds the user message.

    The template is rendered again with a sentinel user message. Its text before the sentinel
    (``head``) and after it (``tail``) is matched against `rendered` from the left and from the
    right; the user message lies between. When the template reproduced the message verbatim
    (the usual case) the positions follow directly; otherwise the first text and then the
    second are searched for inside that window only.
    """
    # The sentinel must not occur in the real text.
    sentinel = _unused_sentinel(_SENTINEL, rendered + (system_prompt or ""))
    with_sentinel = _render(tokenizer, sentinel, system_prompt)
    if with_sentinel.count(sentinel) != 1:
        raise ValueError(
            "tokenizer: the chat template does not reproduce the user message exactly once; "
            "cannot locate the context and question (use segment_text instead)"
        )
    head, tail = with_sentinel.split(sentinel)
    lo = _common_prefix_len(rendered, head)
    hi = len(rendered) - _common_prefix_len(rendered[::-1], tail[::-1])
    first, second = order
    message = first + CHAT_SEPARATOR + second
    if hi - lo == len(message) and rendered[lo:hi] == message:
        return (lo, lo + len(first) + len(CHAT_SEPARATOR)), (lo, hi)
    # The template changed the message (e.g. stripped it): search inside the message window.
    window_lo, window_hi = min(lo, hi), max(lo, hi)
    at_first = rendered.find(first, window_lo, window_hi)
    at_second = rendered.find(second, at_first + len(first), window_hi) if at_first >= 0 else -1
    if at_first < 0 or at_second < 0:
        raise ValueError(
            "context/question: the chat template altered the user message (e.g. stripped "
            "leading/trailing whitespace) so they cannot be located in the rendered prompt; "
            "strip them first or use segment_text"
        )
    return (at_first, at_second), (window_lo, window_hi)


def _common_prefix_len(a: str, b: str) -> int:
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


def _build(
    ids: list[int],
    prompt_len: int,
    text: str,
    offsets: Sequence[tuple[int, int]],
    parts: dict[str, tuple[int, int]],
    max_length: int | None,
) -> Segmented:
    if max_length is not None and len(ids) > max_length:
        raise ValueError(f"max_length: the example has {len(ids)} tokens > max_length={max_length}")
    return Segmented(
        input_ids=torch.tensor([ids], dtype=torch.int64),  # [1, T]
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
        agreed = _common_prefix_len(prefix, full)
        completed = max(done, agreed)
        pending = len(prefix) > agreed and completed < len(full)  # an unfinished character
        offsets.append((done, completed + 1 if pending else completed))
        done = completed
    return full, offsets
