"""A tiny byte-level BPE tokenizer with a ChatML chat template, built in process.

Tests use it wherever a real tokenizer would need a download. It is trained with the
``tokenizers`` library on a short English text embedded below, so it is deterministic, takes
a fraction of a second to build, and encodes *any* string (byte-level BPE: every byte is in the
initial alphabet). Its special tokens and chat template follow SmolLM2-Instruct (ChatML):

.. code-block:: text

    <|im_start|>system
    You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
    <|im_start|>user
    {content}<|im_end|>
    <|im_start|>assistant

The default system message is used when the conversation does not start with one. Offsets are
*not* trimmed (``trim_offsets=False``, as in SmolLM2), so a token's character range includes its
leading space and the ranges of a text's tokens tile the text.

The returned object is cached and shared between tests: do not mutate it (``copy.deepcopy`` it
first if a test needs to change e.g. ``chat_template``).
"""

from __future__ import annotations

import functools

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

__all__ = ["CHATML_TEMPLATE", "DEFAULT_SYSTEM_PROMPT", "SPECIAL_TOKENS", "make_tiny_tokenizer"]

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

DEFAULT_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

# SmolLM2-135M-Instruct's template (same text, default system message included).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\n" + DEFAULT_SYSTEM_PROMPT + "<|im_end|>\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CORPUS = """\
The quick brown fox jumps over the lazy dog. A language model reads a prompt and writes an
answer, one token at a time. Each attention head compares the query of the current token with
the keys of the tokens before it. The context is a document; the question asks about the
document; the answer should be grounded in the context and not invented.
Paris is the capital of France. Berlin is the capital of Germany. Rome is the capital of Italy.
The river flows through the city, and the bridge was built in 1889 by a team of engineers.
What is the capital of France? Who built the bridge? When was it built? Why does it matter?
Relative contextualization measures how much the generated tokens attend to the prompt compared
with how much they attend to each other. You are a helpful AI assistant named SmolLM, trained by
Hugging Face. The user asks a question and the assistant answers it with a short sentence.
Numbers like 42, 3.14 and 2024 appear in text, as do names, places, dates and punctuation!
"""


@functools.cache
def make_tiny_tokenizer(*, add_bos: bool = False) -> PreTrainedTokenizerFast:
    """Build (once) a tiny byte-level BPE tokenizer with a ChatML chat template.

    Parameters
    ----------
    add_bos : bool, default False
        If True, ``add_special_tokens=True`` prepends ``<|im_start|>`` as a BOS token (with an
        empty ``(0, 0)`` offset), like the transformers-converted SmolLM2 tokenizer does. By
        default nothing is added (like the original SmolLM2 / GPT-2 tokenizers).

    Returns
    -------
    PreTrainedTokenizerFast
        A fast tokenizer with ``eos_token="<|im_end|>"``, ``pad_token="<|endoftext|>"`` and
        ``chat_template`` set. Shared between callers: do not mutate it.
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS.splitlines(), trainer=trainer)
    byte_level = processors.ByteLevel(trim_offsets=False)
    if add_bos:
        bos_id = tok.token_to_id("<|im_start|>")
        tok.post_processor = processors.Sequence(
            [
                byte_level,
                processors.TemplateProcessing(
                    single="<|im_start|> $A",
                    pair="<|im_start|> $A <|im_start|> $B",
                    special_tokens=[("<|im_start|>", bos_id)],
                ),
            ]
        )
    else:
        tok.post_processor = byte_level
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
        model_max_length=8192,
        clean_up_tokenization_spaces=False,
    )
