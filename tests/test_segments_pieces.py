"""Long texts tokenised in pieces (rcstat.segments.pieces) equal one call's ids and offsets.

The oracle is the tokenizer itself on the whole text (``PIECE_CHARS`` raised past any text);
the pieces path runs with pieces of a few characters so that every text is cut many times.
"""

from __future__ import annotations

import functools
import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from rcstat.segments import pieces, segment_chat
from rcstat.segments.encode import encode
from tests._tiny_tokenizer import make_tiny_tokenizer

# Llama-3's pre-tokenisation regex (a Split before a byte-level map without its own regex)
LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# whitespace runs, punctuation after spaces and contractions are in the corpus, so that the
# trained merges join what one pre-token holds: a cut inside one would change the tokens
_CORPUS = (
    "The river flows through the city. It's 1889; the bridge was built by engineers!\n"
    "Paris is the capital of France, Berlin of Germany. Numbers: 42, 3.14 and 2024.\n"
    "Ünïcödé wörds, naïve café, Москва и Київ, 東京と大阪.\n"
    "a  b   c    d \t e \n f  .  ,  !?  -  _ it's we'll   x\t\ty\n\n  z\n \n   .\n"
) * 3
# words, spaces (single, double, tabs, newlines), punctuation, digits, contractions, letters
# of several scripts, combining marks, numerals that are not letters, special-token strings
PARTS = [
    " the",
    " river",
    "word",
    " A",
    "x",
    " ",
    "  ",
    "   ",
    " \n",
    "\n ",
    "\t ",
    "\t",
    "\n",
    "\n\n",
    ".",
    ",",
    "!?",
    "-",
    "_",
    "42",
    " 7",
    "'s",
    " it's",
    "'ll",
    "é",
    " Київ",
    "東京",
    "e\u0301",
    "²",
    "Ⅳ",
    "\u200b",
    "<|im_end|>",
    "<|im_start|>",
]
TEXTS = st.lists(st.sampled_from(PARTS), min_size=1, max_size=400).map("".join)


def _fast(
    pre: pre_tokenizers.PreTokenizer,
    *,
    normalizer: normalizers.Normalizer | None = None,
    added: list[AddedToken] | None = None,
) -> PreTrainedTokenizerFast:
    """A small byte-level BPE trained in process with ``pre`` as its pre-tokenisation."""
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=["<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS.splitlines(), trainer=trainer)
    if added:
        tok.add_tokens(added)
    return PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False)


@functools.cache
def _gpt2_style() -> PreTrainedTokenizerFast:
    return _fast(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))


@functools.cache
def _llama3_style() -> PreTrainedTokenizerFast:
    return _fast(
        pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    )


def _both_ways(
    monkeypatch: pytest.MonkeyPatch, tokenizer: PreTrainedTokenizerFast, text: str, literal: bool
) -> tuple[object, object]:
    """(pieces of a few characters, one call) of ``encode``, each its result or its error."""
    found = []
    monkeypatch.setattr(pieces, "max_pieces", lambda: 10**6)  # as many pieces as fit
    for size in (4, 10**9):
        monkeypatch.setattr(pieces, "PIECE_CHARS", size)
        try:
            found.append(encode(tokenizer, text, add_special_tokens=False, literal=literal))
        except ValueError as err:
            found.append(str(err))
    return found[0], found[1]


@pytest.mark.parametrize(
    "make", [make_tiny_tokenizer, _gpt2_style, _llama3_style], ids=["tiny", "gpt2", "llama3"]
)
def test_the_safe_tokenizers_are_recognised(make) -> None:
    assert pieces.cuts_safely(make())


@pytest.mark.parametrize("make", [_gpt2_style, _llama3_style], ids=["gpt2", "llama3"])
@pytest.mark.parametrize("literal", [False, True])
@settings(max_examples=150, deadline=None)
@given(text=TEXTS)
def test_pieces_give_the_ids_and_offsets_of_one_call(make, literal: bool, text: str) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        cut, whole = _both_ways(monkeypatch, make(), text, literal)
    assert cut == whole


def test_a_long_text_is_encoded_as_a_batch_of_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """The property above is not vacuous: its texts reach the tokenizer as several pieces."""
    tokenizer = make_tiny_tokenizer()
    calls: list[object] = []
    real = type(tokenizer).__call__

    def spy(self, text, *args, **kwargs):
        calls.append(text)
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(type(tokenizer), "__call__", spy)
    monkeypatch.setattr(pieces, "PIECE_CHARS", 8)
    monkeypatch.setattr(pieces, "max_pieces", lambda: 10**6)
    text = "The river flows through the city and the bridge was built by engineers."
    ids, offsets = encode(tokenizer, text, add_special_tokens=False)
    assert isinstance(calls[-1], list) and len(calls[-1]) > 3
    assert "".join(calls[-1]) == text
    assert [text[s:e] for s, e in offsets] == [tokenizer.decode([i]) for i in ids]


@pytest.mark.parametrize("cores", [1, 3, 64])
def test_a_text_is_cut_into_pieces_of_the_least_size_one_a_core_at_most(
    monkeypatch: pytest.MonkeyPatch, cores: int
) -> None:
    tokenizer = make_tiny_tokenizer()
    monkeypatch.setattr(pieces, "max_pieces", lambda: cores)
    text = " ".join(["river"] * 1_000)  # 5,999 characters: 11 pieces of 512, or fewer
    bounds = pieces.piece_bounds(tokenizer, text)
    want = min(len(text) // pieces.PIECE_CHARS, cores)
    if want < 2:
        assert bounds is None
        return
    assert bounds is not None and len(bounds) == want + 1
    assert bounds[0] == 0 and bounds[-1] == len(text)
    # each cut is the first space at or after its share of the text: at most a word later
    assert min(b - a for a, b in itertools.pairwise(bounds)) >= len(text) // want - len("river ")
    short = text[: 2 * pieces.PIECE_CHARS - 1]
    assert pieces.piece_bounds(tokenizer, short) is None  # shorter than two pieces


def test_a_text_of_1024_characters_is_cut_in_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """The size docs/performance.md states: two pieces from 1,024 characters, none below."""
    tokenizer = make_tiny_tokenizer()
    monkeypatch.setattr(pieces, "max_pieces", lambda: 8)
    text = " ".join(["river"] * 200)[:1024]  # 1,024 characters, ending inside a word
    bounds = pieces.piece_bounds(tokenizer, text)
    assert bounds is not None and len(bounds) == 3
    assert pieces.piece_bounds(tokenizer, text[:1023]) is None


def test_the_most_pieces_are_the_cores_this_process_may_run_on() -> None:
    import os

    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform (macOS, Windows): the cores are counted")
    assert pieces.max_pieces() == len(os.sched_getaffinity(0)) >= 1


def test_segment_chat_of_a_long_context_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizer = make_tiny_tokenizer()
    context = " ".join(["The river flows through the city, and the bridge was built in 1889."] * 60)
    monkeypatch.setattr(pieces, "PIECE_CHARS", 10**9)
    whole = segment_chat(tokenizer, context, "Who built it?", "Engineers built it in 1889.")
    monkeypatch.setattr(pieces, "PIECE_CHARS", 64)
    monkeypatch.setattr(pieces, "max_pieces", lambda: 10**6)
    cut = segment_chat(tokenizer, context, "Who built it?", "Engineers built it in 1889.")
    assert cut.input_ids.tolist() == whole.input_ids.tolist()
    assert cut.offsets == whole.offsets and cut.parts == whole.parts


@pytest.mark.parametrize(
    "tokenizer",
    [
        pytest.param(lambda: _fast(pre_tokenizers.Metaspace()), id="metaspace"),
        pytest.param(lambda: _fast(pre_tokenizers.Whitespace()), id="whitespace"),
        pytest.param(lambda: _fast(pre_tokenizers.ByteLevel(use_regex=False)), id="no-regex"),
        pytest.param(
            lambda: _fast(
                pre_tokenizers.Sequence(
                    [
                        pre_tokenizers.Split(Regex(r"\w+ \w+|\s+"), behavior="isolated"),
                        pre_tokenizers.ByteLevel(use_regex=False),
                    ]
                )
            ),
            id="other-split",
        ),
        pytest.param(
            lambda: _fast(pre_tokenizers.ByteLevel(), normalizer=normalizers.Prepend("▁")),
            id="prepend-normalizer",
        ),
        pytest.param(
            lambda: _fast(pre_tokenizers.ByteLevel(), added=[AddedToken("new york")]),
            id="added-with-space",
        ),
        pytest.param(
            lambda: _fast(pre_tokenizers.ByteLevel(), added=[AddedToken("<x>", rstrip=True)]),
            id="added-rstrip",
        ),
    ],
)
def test_other_tokenizers_are_encoded_in_one_call(tokenizer) -> None:
    """Pre-tokenisations whose cuts are not known to fall at a space between letters (or that
    change a piece's start) are never cut."""
    made = tokenizer()
    assert not pieces.cuts_safely(made)
    assert pieces.piece_bounds(made, "word " * 10_000) is None


@settings(max_examples=100, deadline=None)
@given(text=TEXTS, count=st.integers(1, 40))
def test_cut_points_are_single_spaces_between_letters(text: str, count: int) -> None:
    cuts = pieces.cut_points(text, count)
    assert len(cuts) <= count - 1 and cuts == sorted(set(cuts))
    for at in cuts:
        assert text[at] == " " and text[at - 1].isalpha() and text[at + 1].isalpha()


@pytest.mark.slow
def test_the_default_models_tokenizer_cuts_long_texts_to_the_same_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SmolLM2's tokenizer (GPT-2 byte-level) takes the pieces path, with one call's result
    on a long text of every kind of part (including a special-token string, kept literal)."""
    from rcstat.models import DefaultModelMissingError, load_model

    try:
        _, tokenizer = load_model()
    except DefaultModelMissingError as err:
        pytest.skip(f"the default model is not available: {err}")
    assert pieces.cuts_safely(tokenizer)
    rng = random.Random(0)
    context = "".join(rng.choice(PARTS) for _ in range(20_000))
    monkeypatch.setattr(pieces, "PIECE_CHARS", 10**9)
    whole = segment_chat(tokenizer, context, "What is said?", "It says 42 things.")
    monkeypatch.setattr(pieces, "PIECE_CHARS", 256)
    monkeypatch.setattr(pieces, "max_pieces", lambda: 10**6)
    cut = segment_chat(tokenizer, context, "What is said?", "It says 42 things.")
    assert cut.input_ids.tolist() == whole.input_ids.tolist() and cut.offsets == whole.offsets
