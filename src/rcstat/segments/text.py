"""Raw mode: ``prompt ⊕ generation`` tokenised without a chat template."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rcstat.segments.encode import check_fast, check_flag, check_max_length, check_text, encode
from rcstat.segments.segmented import Segmented, append_continuation, build

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["segment_text"]


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
    check_fast(tokenizer)
    check_text("prompt", prompt)
    if generation is not None:
        check_text("generation", generation, optional=True)
    check_max_length(max_length)
    check_flag("allow_special_tokens", allow_special_tokens)
    literal = not allow_special_tokens
    ids, offsets = encode(tokenizer, prompt, add_special_tokens=True, literal=literal)
    prompt_len = len(ids)
    parts = {"prompt": (0, len(prompt))}
    text = prompt
    if generation is not None:
        text = append_continuation(
            tokenizer, text, ids, offsets, parts, "generation", generation, literal=literal
        )
    return build(ids, prompt_len, text, offsets, parts, max_length)
