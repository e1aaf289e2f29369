"""Token positions of one example: the prompt/generation split and character-span lookups.

rcstat reads a sequence ``s = p ⊕ g`` (paper §3.1): prompt tokens ``p`` at positions
``0..m-1`` and generated tokens ``g`` at ``m..T-1``. This package turns text into those
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
  chat template writes itself become special tokens. The rendered prompt is tokenised as one
  text, as the model's own pipeline does (a long one in pieces on every core where the
  tokenizer gives the same ids and offsets that way, :mod:`.pieces`). If a special token of
  that encoding overlaps the user message or the system prompt, the text between the
  template's own special tokens around it is re-encoded with ``split_special_tokens=True`` and
  spliced in (ids and offsets), which is what the tokenizer would have produced had those
  strings not been special. Every
  result is checked: its special tokens must be exactly those of the template rendered with
  placeholders for the user's strings, and literal pieces must contain none.
  ``allow_special_tokens=True`` restores the plain encoding for trusted text.

Modules: :mod:`~rcstat.segments.segmented` (the :class:`Segmented` type and span lookups),
:mod:`~rcstat.segments.chat` (chat templating), :mod:`~rcstat.segments.text` (raw text) and
:mod:`~rcstat.segments.encode` (tokenisation with offsets, input checks). The package imports
torch and numpy only; transformers is reached solely through the tokenizer object that is passed
in.
"""

from rcstat.segments.chat import CHAT_SEPARATOR, chat_prompt_ids, segment_chat
from rcstat.segments.segmented import Segmented
from rcstat.segments.text import segment_text

__all__ = ["CHAT_SEPARATOR", "Segmented", "chat_prompt_ids", "segment_chat", "segment_text"]
