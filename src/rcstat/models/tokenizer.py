"""The tokenizer of a GGUF file as a plain fast tokenizer, checked against the GGUF's own.

transformers wraps a GGUF vocabulary in a tokenizer whose special-token settings differ from the
file's (see :mod:`rcstat.models`). :func:`build_tokenizer` rebuilds it from the same BPE backend
with the settings the file states (:class:`GGUFTokenizerFacts`), and :func:`check_tokenizer`
refuses a result that does not reproduce the GGUF tokenizer's vocabulary, ids, round trips and
chat template.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import transformers
from tokenizers import Tokenizer, decoders, processors
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

__all__ = [
    "GGUFTokenizerFacts",
    "TokenizerConversionError",
    "build_tokenizer",
    "check_tokenizer",
]

# Texts on which the cached tokenizer must reproduce the GGUF tokenizer exactly.
_CHECK_TEXTS = (
    "Hello world",
    " leading space,  double  spaces and a trailing space ",
    "Unicode: héllo, naïve café, Ελληνικά, 日本語, emoji 🙂👍🏽",
    "line one\nline two\n\n\tindented\r\nwindows line\n",
    "Digits 12345, 3.14159 and 2024; punctuation: don't , stop . (yes) [no]",
    "<|im_start|>user\nspecial tokens inside text<|im_end|>\n<|endoftext|>",
)
_CHECK_CHATS: tuple[list[dict[str, str]], ...] = (
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": " Two  spaces\nand a newline, ünïcode 🙂"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "Thanks!"},
    ],
)


class TokenizerConversionError(RuntimeError):
    """The tokenizer converted from the GGUF file does not reproduce the GGUF tokenizer."""


@dataclass(frozen=True)
class GGUFTokenizerFacts:
    """What the GGUF file itself says about its tokenizer (read with the ``gguf`` package).

    Absent special tokens are ``None``; ``tokenizer_model`` is ``tokenizer.ggml.model``
    (``"gpt2"`` for byte-level BPE, ``"llama"`` for SentencePiece, ...).
    """

    tokens: list[str]
    bos_id: int | None
    eos_id: int | None
    unk_id: int | None
    pad_id: int | None
    add_bos: bool
    add_eos: bool
    context_length: int | None
    chat_template: str | None
    tokenizer_model: str = "gpt2"


def build_tokenizer(
    gguf_tokenizer: PreTrainedTokenizerBase, facts: GGUFTokenizerFacts
) -> PreTrainedTokenizerFast:
    """A plain fast tokenizer over the GGUF BPE backend, with the GGUF's special-token settings.

    Keeps the model and pre-tokenizer transformers built from the GGUF vocabulary and merges;
    drops the added tokens beyond the vocabulary (CodeLlama's FIM tokens). For byte-level BPE
    (``tokenizer.ggml.model = "gpt2"``) it also drops the normalizer and the SentencePiece-style
    decoder steps. BOS/EOS are added exactly as the GGUF file's flags say.
    """
    spec = json.loads(gguf_tokenizer.backend_tokenizer.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["id"] < len(facts.tokens)]
    backend = Tokenizer.from_str(json.dumps(spec))
    if facts.tokenizer_model == "gpt2":
        backend.normalizer = None
        backend.decoder = decoders.ByteLevel()
    backend.post_processor = _special_tokens_template(facts)

    def token(token_id: int | None) -> str | None:
        return None if token_id is None else facts.tokens[token_id]

    optional = {} if facts.context_length is None else {"model_max_length": facts.context_length}
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=token(facts.bos_id),
        eos_token=token(facts.eos_id),
        unk_token=token(facts.unk_id),
        pad_token=token(facts.pad_id),
        add_bos_token=facts.add_bos,
        add_eos_token=facts.add_eos,
        clean_up_tokenization_spaces=False,
        chat_template=facts.chat_template,
        **optional,
    )


def _special_tokens_template(facts: GGUFTokenizerFacts) -> processors.TemplateProcessing:
    """``[BOS] $A [EOS]`` with BOS/EOS only where the GGUF file's flags add them."""
    bos_id = facts.bos_id if facts.add_bos else None
    eos_id = facts.eos_id if facts.add_eos else None
    bos = [] if bos_id is None else [facts.tokens[bos_id]]
    eos = [] if eos_id is None else [facts.tokens[eos_id]]
    special = {facts.tokens[i]: i for i in (bos_id, eos_id) if i is not None}
    second = [*(f"{t}:1" for t in bos), "$B:1", *(f"{t}:1" for t in eos)]
    return processors.TemplateProcessing(
        single=[*bos, "$A", *eos],
        pair=[*bos, "$A", *eos, *second],
        special_tokens=list(special.items()),
    )


def check_tokenizer(
    tokenizer: PreTrainedTokenizerBase,
    gguf_tokenizer: PreTrainedTokenizerBase,
    facts: GGUFTokenizerFacts,
) -> None:
    """Raise ``TokenizerConversionError`` unless ``tokenizer`` reproduces the GGUF tokenizer.

    The reference ids are the GGUF backend's BPE pieces (no special tokens), with BOS/EOS
    added as the GGUF file's ``add_bos_token``/``add_eos_token`` say.
    """
    problems = []
    vocabulary = tokenizer.convert_ids_to_tokens(list(range(len(facts.tokens))))
    if len(tokenizer) != len(facts.tokens) or vocabulary != facts.tokens:
        problems.append(f"vocabulary differs from the GGUF's {len(facts.tokens)} tokens")
    special = (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id)
    if special != (facts.bos_id, facts.eos_id, facts.pad_id):
        problems.append(f"bos/eos/pad ids {special} != GGUF's")
    reference = gguf_tokenizer.backend_tokenizer
    bos = [facts.bos_id] if facts.add_bos and facts.bos_id is not None else []
    eos = [facts.eos_id] if facts.add_eos and facts.eos_id is not None else []
    for text in _CHECK_TEXTS:
        pieces = reference.encode(text, add_special_tokens=False).ids
        expected = bos + pieces + eos
        plain = tokenizer(text, add_special_tokens=False)["input_ids"]
        if plain != pieces or tokenizer(text)["input_ids"] != expected:
            problems.append(f"ids differ on {text!r}")
        if tokenizer.decode(plain) != text:
            problems.append(f"decode(encode(text)) != text for {text!r}")
    for chat in _CHECK_CHATS if facts.chat_template is not None else ():
        rendered = gguf_tokenizer.apply_chat_template(
            chat, tokenize=False, add_generation_prompt=True
        )
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=False)
        if ids != reference.encode(rendered, add_special_tokens=False).ids:
            problems.append(f"chat template ids differ on {chat!r}")
    if problems:
        raise TokenizerConversionError(
            f"The tokenizer converted from the GGUF file by transformers "
            f"{transformers.__version__} does not match the GGUF tokenizer: " + "; ".join(problems)
        )
