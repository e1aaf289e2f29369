"""Batched grounding passes: several pairs, right-padded, in one forward pass.

The oracle is the pass over each pair alone (:meth:`Measurer.measure`, itself checked
against pairwise formulas in ``test_grounding.py``): a batch must give every pair the same
measurement and verdict, whatever its length, place in the batch or neighbours.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from rcstat.capture import capture_scores
from rcstat.grounding import Grounder, HeadProfile, Measurer
from rcstat.grounding.features import (
    PassExample,
    ResponseRows,
    query_positions,
    support_unit_rows,
    unit_pairs,
)
from rcstat.grounding.passes import token_batches
from rcstat.grounding.score import lower_quantiles
from rcstat.stats import stacked_unit_rows, unit_rows, units_key_expected
from tests._tiny_models import tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

LAYERS, HEADS = 3, 4

#: Pairs of different context, question and response lengths (the batch pads them).
PAIRS: list[tuple[str, str, str | None]] = [
    (
        "The bridge was built in 1889 by Gustave Eiffel. It crosses the Seine in Paris. "
        "Trains use it every day.",
        "The bridge was built in 1889. It crosses the river in Paris.",
        "Who built the bridge?",
    ),
    ("Cats sleep a lot. They like warm places.", "Cats like warm places.", None),
    (
        "The museum opened in 1920. Its garden holds two hundred roses. Visitors come from "
        "Spain, Italy and Japan. The café closes at five. Tickets cost ten euros on Sunday.",
        "Tickets cost ten euros. The museum opened in 1921, and its garden has roses from "
        "Japan. Visitors come from everywhere.",
        "Tell me about the museum.",
    ),
]


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    return tiny_model("llama"), make_tiny_tokenizer()


def _profile() -> HeadProfile:
    rng = np.random.default_rng(3)
    return HeadProfile(
        model="tiny-llama",
        values=rng.uniform(0.2, 0.9, size=(LAYERS, HEADS)),
        threshold=0.0,
        quantile=0.1,
        fraction=0.5,
        source={"made": "by hand"},
        copy_values=rng.uniform(0.0, 0.5, size=(LAYERS, HEADS)),
    )


def _assert_same(got: Any, want: Any) -> None:
    for name in ("features", "nll", "entropy", "rank", "copy", "copied", "support", "prior_nll"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.shape == b.shape, name
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)
    # the head features summarised where the pass ran: over this sequence's rows only
    assert got.head_summary is not None
    np.testing.assert_array_equal(got.head_features(), lower_quantiles(got.features))
    np.testing.assert_array_equal(got.head_features(0.5), lower_quantiles(got.features, 0.5))
    assert got.units == want.units and got.spans == want.spans
    assert got.example.input_ids.tolist() == want.example.input_ids.tolist()


def test_query_positions_follow_each_sequence() -> None:
    short = PassExample(ResponseRows((2, 5), (7, 9)))  # rows 6, 7, 8
    long = PassExample(ResponseRows((2, 9), (10, 14)))  # rows 9 .. 13
    assert query_positions([short, long]).tolist() == [[6, 7, 8, 8, 8], [9, 10, 11, 12, 13]]


@pytest.mark.parametrize("arch", ["llama", "gemma2"])
def test_a_batch_measures_each_pair_as_alone(arch: str) -> None:
    model, tok = tiny_model(arch), make_tiny_tokenizer()
    measurer = Measurer(
        model, tok, support_heads=np.array([0, 3, 5, 9, 11]), prior=True
    )  # RC of every head, eq. (10) support, the prior pass
    alone = [measurer.measure(*pair) for pair in PAIRS]
    lengths = [m.example.seq_len for m in alone]
    assert len(set(lengths)) == len(lengths)  # the batch pads
    for order in ([0, 1, 2], [2, 0, 1], [1, 2]):
        batch = measurer.measure_batch([measurer.prepare(*PAIRS[k]) for k in order])
        for k, got in zip(order, batch, strict=True):
            _assert_same(got, alone[k])


#: One context and question, several responses (RAGTruth holds six per context).
SHARED = [
    (PAIRS[2][0], response, PAIRS[2][2])
    for response in (
        PAIRS[2][1],
        "Tickets cost ten euros on Sunday.",
        "The café closes at five, and visitors come from Spain, Italy and Japan.",
        "The museum opened in 1920.",
    )
]


@pytest.mark.parametrize("arch", ["llama", "gemma2", "qwen2"])
def test_responses_sharing_a_prompt_measure_as_alone(arch: str) -> None:
    """The prompt's pass once, each response over its cache: every measurement equals the
    pass over its whole sequence (RC of every head, eq. 10 support, the prior pass), in any
    order, whatever the responses' lengths."""
    model, tok = tiny_model(arch), make_tiny_tokenizer()
    measurer = Measurer(model, tok, support_heads=np.array([0, 3, 5, 9, 11]), prior=True)
    alone = [measurer.measure(*pair) for pair in SHARED]
    assert len({m.example.seq_len for m in alone}) == len(SHARED)
    prepared = [measurer.prepare(*pair) for pair in SHARED]
    if arch == "gemma2":  # sliding-window layers: their cache drops the early keys
        assert not measurer.keeps_every_key
        with pytest.raises(ValueError, match="sliding-window layers"):
            measurer.measure_shared(prepared)
        batches = [batch for batch, _ in measurer.passes(prepared, batch_tokens=1)]
        assert sorted(map(len, batches)) == [1, 1, 1, 1]  # each alone
        return
    assert measurer.keeps_every_key
    for order in ([0, 1, 2, 3], [3, 1, 0, 2]):
        shared = measurer.measure_shared([measurer.prepare(*SHARED[k]) for k in order])
        for k, got in zip(order, shared, strict=True):
            _assert_same(got, alone[k])


def test_measure_many_shares_prompts_one_pair_a_pass(tiny) -> None:  # type: ignore[no-untyped-def]
    """One example a pass: the examples of one prompt share its pass (fewer tokens passed),
    the others are measured alone; every measurement in its place; share_prompts=False runs
    each pair alone."""
    model, tok = tiny
    measurer = Measurer(model, tok, support_heads=np.arange(6), prior=True)
    pairs = [SHARED[0], PAIRS[0], SHARED[1], PAIRS[1], SHARED[2]]
    prepared = [measurer.prepare(*pair) for pair in pairs]
    passes = list(measurer.passes(prepared, batch_tokens=1))
    assert [batch for batch, _ in passes] == [[0, 2, 4], [1], [3]]
    got = measurer.measure_many(prepared, batch_tokens=1)
    for pair, measured in zip(pairs, got, strict=True):
        _assert_same(measured, measurer.measure(*pair))
    apart = list(measurer.passes(prepared, batch_tokens=1, share_prompts=False))
    assert [batch for batch, _ in apart] == [
        [k] for k in sorted(range(5), key=lambda k: prepared[k].example.seq_len)
    ]
    seen: list[int] = []
    original = model.forward

    def counting(input_ids=None, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(int(input_ids.shape[1]))
        return original(input_ids=input_ids, **kwargs)

    model.forward = counting
    try:  # without the prior pass: the main passes only
        Measurer(model, tok, prior=False).measure_many(prepared[::2], batch_tokens=1)
    finally:
        del model.forward
    total = sum(p.example.seq_len for p in prepared[::2])
    prompt = prepared[0].passed.rows.first_row
    assert sum(seen) == total - 2 * prompt  # the prompt passed once, not three times


def test_measure_shared_refuses_different_prompts(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    measurer = Measurer(model, tok)
    with pytest.raises(ValueError, match="one prompt, several responses"):
        measurer.measure_shared([measurer.prepare(*PAIRS[0]), measurer.prepare(*PAIRS[1])])


def test_ground_many_shares_prompts_and_keeps_the_verdicts(tiny) -> None:  # type: ignore[no-untyped-def]
    """On a CPU (one pair a pass) the pairs of one prompt share its pass: verdicts, scores
    and spans as one pair at a time; share_prompts=False gives each pair's own pass."""
    model, tok = tiny
    grounder = Grounder(model, tok, profile=_profile(), detector=False)
    for share in (True, False):
        got = grounder.ground_many(SHARED, share_prompts=share)
        for pair, result in zip(SHARED, got, strict=True):
            assert not isinstance(result, ValueError)
            want = grounder.ground(*pair)
            assert result.verdict == want.verdict
            assert result.score == pytest.approx(want.score, rel=1e-5, abs=1e-7)
            np.testing.assert_allclose(result.token_scores, want.token_scores, rtol=1e-5, atol=1e-7)
            assert [(s.start, s.end) for s in result.spans] == [
                (s.start, s.end) for s in want.spans
            ]
            if not share:
                np.testing.assert_array_equal(result.token_scores, want.token_scores)


def test_a_batch_leaves_the_padding_out(tiny) -> None:  # type: ignore[no-untyped-def]
    """A pair padded by a much longer neighbour keeps its values, and nothing is NaN where
    its RC was asked for."""
    model, tok = tiny
    measurer = Measurer(model, tok, support_heads=np.arange(6))
    short = measurer.prepare("Cats sleep.", "Cats sleep.")
    long = measurer.prepare(*PAIRS[2])
    assert long.example.seq_len > 2 * short.example.seq_len
    got = measurer.measure_batch([short, long])[0]
    _assert_same(got, measurer.measure("Cats sleep.", "Cats sleep."))
    assert np.isfinite(got.features).all() and np.isfinite(got.support).all()


def test_stacked_units_equal_each_block() -> None:
    """``units_key_expected`` over a batch of blocks equals it over each block alone."""
    torch.manual_seed(0)
    blocks = torch.randn(2, 3, 9, 20, dtype=torch.float64)  # [B, H, rows, columns]
    first = unit_rows([(0, 2), (2, 5)], 20, 12)
    second = unit_rows([(1, 4)], 20, 14)
    stacked = stacked_unit_rows([first, None, second], 20, row_offset=1)
    three = torch.cat([blocks[:1], torch.randn(1, 3, 9, 20, dtype=torch.float64), blocks[1:]])
    got = units_key_expected(three, stacked, (2, 11))  # [3 units, H, K]
    want = torch.cat(
        [
            units_key_expected(three[0, :, 1:], first, (2, 11)),
            units_key_expected(three[2, :, 1:], second, (2, 11)),
        ]
    )
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert stacked.batch.tolist() == [0, 0, 2]  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="no block has units"):
        stacked_unit_rows([None], 20)


@pytest.mark.parametrize("seed", range(5))
def test_units_built_on_the_device_equal_the_stacked_units(seed: int) -> None:
    """``support_unit_rows`` (built from ``[U]`` values where the pass runs) equals
    ``stacked_unit_rows`` of each sequence's ``unit_rows`` on every sample it marks valid."""
    rng = np.random.default_rng(seed)
    examples = []
    for b in range(3):
        start = int(rng.integers(3, 30))
        response = int(rng.integers(1, 50))
        cuts = sorted({int(c) for c in rng.integers(1, response + 1, size=3)} | {response})
        units = tuple((a, z) for a, z in zip([0, *cuts], cuts, strict=False) if a < z)
        examples.append(PassExample(ResponseRows((1, start - 2), (start, start + response)),
                                    units if b != 1 else ()))  # fmt: skip
    length = max(e.length for e in examples)
    want = stacked_unit_rows(
        [unit_rows(list(e.units), length, e.rows.response[0]) if e.units else None
         for e in examples],
        length,
        row_offset=1,
    )  # fmt: skip
    pairs = unit_pairs(examples)
    got = support_unit_rows({f"pairs_{k}": torch.from_numpy(v) for k, v in pairs.items()},
                            length, pairs)  # fmt: skip
    for name in ("starts", "lengths", "valid", "batch"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
        assert getattr(got, name).dtype == getattr(want, name).dtype, name
    assert got.longest == want.longest
    assert torch.equal(got.index[got.valid], want.index[want.valid])
    assert not got.index[~got.valid].any()  # the padding, never read


def test_query_positions_take_each_sequences_rows(tiny) -> None:  # type: ignore[no-untyped-def]
    """Row ``r`` of sequence ``b`` is its query at ``query_positions[b, r]``: the same scores
    as a capture of that sequence alone from that position; bad positions are refused."""
    model, _ = tiny
    torch.manual_seed(1)
    ids = torch.randint(0, 50, (2, 12))
    keep = lambda layer, scores: scores.clone()  # noqa: E731
    rows = torch.tensor([[3, 4, 5], [9, 10, 11]])
    with torch.no_grad(), capture_scores(model, keep, query_positions=rows) as batch:
        model(ids)
    for b, start in enumerate([3, 9]):
        with (
            torch.no_grad(),
            capture_scores(model, keep, query_start=start, query_end=start + 3) as alone,
        ):
            model(ids[b : b + 1])
        for got, want in zip(batch.ordered(), alone.ordered(), strict=True):
            torch.testing.assert_close(got[b : b + 1], want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="int64 tensor"):
        with capture_scores(model, keep, query_positions=torch.zeros(2, 3)):
            pass
    with pytest.raises(ValueError, match="one row of positions inside each sequence"):
        past = torch.tensor([[3, 4], [5, 12]])  # 12 is past the 12 tokens
        with torch.no_grad(), capture_scores(model, keep, query_positions=past):
            model(ids)


def test_ground_many_equals_ground(tiny) -> None:  # type: ignore[no-untyped-def]
    """Batched verdicts, scores and spans equal one pair at a time; a bad pair keeps its
    error in its place; a context that needs windows is read in windows."""
    model, tok = tiny
    grounder = Grounder(model, tok, profile=_profile(), detector=False)
    long_context = " ".join([PAIRS[2][0]] * 6)
    pairs = [*PAIRS, ("A context.", "   ", None), (long_context, PAIRS[2][1], None), PAIRS[1]]
    got = grounder.ground_many(pairs, batch_tokens=400)
    with pytest.raises(ValueError) as refused:
        grounder.ground(*pairs[3])
    assert isinstance(got[3], ValueError) and str(got[3]) == str(refused.value)
    for pair, result in zip(pairs, got, strict=True):
        if isinstance(result, ValueError):
            continue
        want = grounder.ground(*pair)
        assert result.verdict == want.verdict
        assert result.score == pytest.approx(want.score, rel=1e-5, abs=1e-7)
        np.testing.assert_allclose(result.token_scores, want.token_scores, rtol=1e-5, atol=1e-7)
        assert [s.support for s in result.sentences] == [s.support for s in want.sentences]
        assert [(s.start, s.end) for s in result.spans] == [(s.start, s.end) for s in want.spans]
    assert got[4].windows > 1 and all(g.windows == 1 for k, g in enumerate(got) if k not in (3, 4))  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="batch_tokens"):
        grounder.ground_many(PAIRS, batch_tokens=0)


def test_batches_respect_the_token_budget() -> None:
    lengths = [40, 10, 500, 30, 100, 20]
    # sorted by length; count x longest <= 100, at least one a batch
    assert token_batches(lengths, 100) == [[1, 5, 3], [0], [4], [2]]
    assert token_batches(lengths, 10**6) == [[1, 5, 3, 0, 4, 2]]
    assert token_batches(lengths, 1) == [[1], [5], [3], [0], [4], [2]]
    assert token_batches([], 100) == []


def test_ground_equals_scoring_its_measurement(tiny) -> None:  # type: ignore[no-untyped-def]
    """ground() makes the scoring's text work while the pass runs (texts made before the
    measurement): its result equals scoring the measurement afterwards, value for value."""
    model, tok = tiny
    grounder = Grounder(model, tok, profile=_profile(), detector=False)
    for context, response, question in PAIRS:
        got = grounder.ground(context, response, question)
        want = grounder.score(grounder.measurer.measure(context, response, question))
        assert got.score == want.score and got.baselines == want.baselines
        np.testing.assert_array_equal(got.token_scores, want.token_scores)
        assert got.sentences == want.sentences and got.spans == want.spans


def test_a_prepared_pair_makes_its_context_sentences_when_first_asked(tiny) -> None:  # type: ignore[no-untyped-def]
    """The context's sentences and their token ranges are read after the pass: not made by
    ``prepare`` (``Grounder.ground`` makes them while the device runs), and when asked for,
    the sentences of the context's text and the tokens that cover each of them."""
    from rcstat.attribution import split_sentences

    model, tok = tiny
    prepared = Measurer(model, tok).prepare(*PAIRS[2])
    assert "spans" not in vars(prepared) and "span_keys" not in vars(prepared)
    context = prepared.example.part_text("context")
    assert prepared.spans == split_sentences(context) and len(prepared.spans) == 5
    keys = prepared.span_keys
    assert keys.shape == (5, 2) and keys.dtype == np.int64
    offsets, base = prepared.example.offsets, prepared.example.parts["context"][0]
    for span, (first, last) in zip(prepared.spans, keys.tolist(), strict=True):
        covered = (offsets[first][0] - base, offsets[last - 1][1] - base)
        assert covered[0] <= span.start < covered[1] and covered[0] < span.end <= covered[1]
        assert span.text.strip() in context[covered[0] : covered[1]]
