"""Chat mode: a (context, question, answer) example rendered through the chat template.

The template is rendered around the user message ``context + "\\n\\n" + question``; the
message, and inside it the context and the question, are located by rendering the template a
second time with a sentinel (see :mod:`rcstat.segments`). Special tokens that came from the
user's strings rather than from the template are re-encoded literally.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from rcstat.segments.encode import (
    check_fast,
    check_flag,
    check_max_length,
    check_text,
    common_prefix_len,
    encode,
    special_ids,
    special_positions,
)
from rcstat.segments.segmented import Segmented, append_continuation, build

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["CHAT_SEPARATOR", "chat_prompt_ids", "segment_chat"]

#: Separator between the context and the question in the user message of :func:`segment_chat`.
CHAT_SEPARATOR = "\n\n"

_SENTINEL = "RCSTAT_USER_MESSAGE_SENTINEL"
_SYSTEM_SENTINEL = "RCSTAT_SYSTEM_PROMPT_SENTINEL"


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
    check_fast(tokenizer)
    check_text("context", context)
    check_text("question", question)
    if answer is not None:
        check_text("answer", answer, optional=True)
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise TypeError(
            f"system_prompt: expected a str or None, got {type(system_prompt).__name__}"
        )
    check_flag("allow_special_tokens", allow_special_tokens)
    if question_placement not in ("prompt", "generation"):
        raise ValueError(
            f"question_placement: expected 'prompt' or 'generation', got {question_placement!r}"
        )
    check_flag("question_first", question_first)
    if question_first and question_placement == "generation":
        raise ValueError(
            "question_first: the question cannot come first when it starts the generation "
            "(question_placement='generation')"
        )
    check_max_length(max_length)
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
        ids, offsets = encode(tokenizer, prompt_text, add_special_tokens=False)
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
        text = append_continuation(
            tokenizer, text, ids, offsets, parts, "answer", answer, literal=not allow_special_tokens
        )
    return build(ids, prompt_len, text, offsets, parts, max_length)


def _encode_template_literal(
    tokenizer: Any,
    rendered: str,
    message_window: tuple[int, int],
    user_message: str,
    system_prompt: str | None,
) -> tuple[list[int], list[tuple[int, int]]]:
    """Encode a rendered chat prompt so that only the template's markers are special tokens.

    `rendered` is encoded as one text (as ``apply_chat_template(tokenize=True)`` would; see
    :func:`~rcstat.segments.encode.encode` for long texts).
    Special tokens overlapping the user's text (`message_window`, and the system prompt's
    window when one is given) came from that text: each run of tokens between two of the
    template's own special tokens that holds one is re-encoded literally and spliced in.
    The special tokens of the result must be those of the template rendered with
    placeholders for the user's strings, in the same order.
    """
    special = special_ids(tokenizer)
    ids, offsets = encode(tokenizer, rendered, add_special_tokens=False)
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

    at = special_positions(ids, special)
    users = [k for k in at if from_user(k)]  # special tokens made of the user's characters
    if users:
        markers = set(at).difference(users)  # the template's own special tokens
        new_ids: list[int] = []
        new_offsets: list[tuple[int, int]] = []
        k, n = 0, len(ids)
        while k < n:
            j = k + 1 if k in markers else next((m for m in range(k, n) if m in markers), n)
            if k not in markers and any(i in special for i in ids[k:j]):
                a = offsets[k - 1][1] if k > 0 else 0
                b = offsets[j][0] if j < n else len(rendered)
                piece_ids, piece_offsets = encode(
                    tokenizer, rendered[a:b], add_special_tokens=False, literal=True
                )
                new_ids.extend(piece_ids)
                new_offsets.extend((a + s, a + e) for s, e in piece_offsets)
            else:
                new_ids.extend(ids[k:j])
                new_offsets.extend(offsets[k:j])
            k = j
        ids, offsets = new_ids, new_offsets
        at = special_positions(ids, special)

    # The template's own markers: render it with placeholders for every user string.
    probe = rendered + (system_prompt or "")
    placeholders = _render(
        tokenizer,
        _unused_sentinel(_SENTINEL, probe),
        None if system_prompt is None else _unused_sentinel(_SYSTEM_SENTINEL, probe),
    )
    template_ids, _ = encode(tokenizer, placeholders, add_special_tokens=False)
    want = [template_ids[k] for k in special_positions(template_ids, special)]
    got = [ids[k] for k in at]
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
    lo = common_prefix_len(rendered, head)
    hi = len(rendered) - common_prefix_len(rendered[::-1], tail[::-1])
    return min(lo, hi), max(lo, hi)


def _render(tokenizer: Any, user_message: str, system_prompt: str | None) -> str:
    messages = [{"role": "user", "content": user_message}]
    if system_prompt is not None:
        messages.insert(0, {"role": "system", "content": system_prompt})
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    if not isinstance(rendered, str):  # pragma: no cover - tokenize=False returns str
        raise TypeError(f"apply_chat_template returned {type(rendered).__name__}, expected str")
    return rendered


def _message_bounds(tokenizer: Any, rendered: str, system_prompt: str | None) -> tuple[int, int]:
    """Where the user message lies in ``rendered``: the template rendered again with a sentinel
    message, its text before (``head``) and after (``tail``) the sentinel matched from the left
    and from the right (``lo`` may exceed ``hi`` when the template dropped characters)."""
    # The sentinel must not occur in the real text.
    sentinel = _unused_sentinel(_SENTINEL, rendered + (system_prompt or ""))
    with_sentinel = _render(tokenizer, sentinel, system_prompt)
    if with_sentinel.count(sentinel) != 1:
        raise ValueError(
            "tokenizer: the chat template does not reproduce the user message exactly once; "
            "cannot locate the context and question (use segment_text instead)"
        )
    head, tail = with_sentinel.split(sentinel)
    lo = common_prefix_len(rendered, head)
    return lo, len(rendered) - common_prefix_len(rendered[::-1], tail[::-1])


def chat_prompt_ids(
    tokenizer: PreTrainedTokenizerBase, message: str, *, allow_special_tokens: bool = False
) -> list[int]:
    """Token ids of the chat prompt of one user ``message`` with the generation prompt, the
    message's special-token strings encoded literally (as in :func:`segment_chat`).

    Teacher-forcing the ids of an answer after them scores the answer without any context
    (the prior pass of grounding).
    """
    check_fast(tokenizer)
    check_text("message", message)
    check_flag("allow_special_tokens", allow_special_tokens)
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("tokenizer: it has no chat template")
    rendered = _render(tokenizer, message, None)
    if allow_special_tokens:
        return encode(tokenizer, rendered, add_special_tokens=False)[0]
    lo, hi = _message_bounds(tokenizer, rendered, None)
    window = (min(lo, hi), max(lo, hi))
    return _encode_template_literal(tokenizer, rendered, window, message, None)[0]


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
    lo, hi = _message_bounds(tokenizer, rendered, system_prompt)
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
