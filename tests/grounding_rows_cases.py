"""Cases for the fused grounding kernels (``rcstat.grounding.rows_gpu``), run by Triton's
interpreter on the CPU: the reducer of ``grounding_reducer`` with the kernels against the
same reducer by tensor operations, and the kernels' RC against naive pairwise sums.

Run in a fresh process with ``TRITON_INTERPRET=1`` by ``tests/test_grounding_rows_gpu.py``
(the interpreter is chosen when ``triton`` is first imported; this file's name does not
start with ``test_``). The compiled kernels meet the same reference on a GPU in
``tests/test_gpu.py``."""

from __future__ import annotations

import os
from itertools import pairwise

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rcstat.capture import SoftmaxParams
from rcstat.grounding import features as features_module
from rcstat.grounding import rows_gpu
from rcstat.grounding.features import PassExample, ResponseRows, grounding_reducer
from tests._reference import naive_expected_rc


@pytest.fixture(autouse=True)
def interpreted() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.fail("run through tests/test_grounding_rows_gpu.py (needs TRITON_INTERPRET=1)")


def _examples(seed: int, lengths: list[tuple[int, int, int]], matched: bool) -> list[PassExample]:
    """Sequences of (prompt before the context, context, response) tokens."""
    rng = np.random.default_rng(seed)
    out = []
    for before, context, response in lengths:
        c0, c1 = before, before + context
        a = c1 + 2  # two template tokens between the context and the response
        rows = ResponseRows((c0, c1), (a, a + response))
        cuts = sorted(rng.choice(np.arange(1, response), size=min(2, response - 1), replace=False))
        edges = [0, *(int(c) for c in cuts), response]
        units = tuple((x, y) for x, y in pairwise(edges) if x < y)
        matches = torch.from_numpy(rng.random((response, context)) < 0.15) if matched else None
        out.append(PassExample(rows, units, matches))
    return out


def _scores(examples: list[PassExample], heads: int, seed: int, ties: bool) -> torch.Tensor:
    width = max(e.rows.num_rows for e in examples)
    length = max(e.length for e in examples)
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(len(examples), heads, width, length, generator=gen) * 4
    return scores.round() if ties else scores  # [B, H, Gmax + 1, T]


def _both(examples, scores, params, rc_heads, support_heads, monkeypatch):
    """The reducer's output with the kernels and by tensor operations."""
    softmax = {0: params}
    fused = grounding_reducer(examples, softmax, rc_heads=rc_heads, support_heads=support_heads)
    out = fused(0, scores)
    monkeypatch.setattr(features_module, "fused_rows_serve", lambda _: False)
    eager = grounding_reducer(examples, softmax, rc_heads=rc_heads, support_heads=support_heads)
    return out, eager(0, scores)


def _same(fused: dict, eager: dict) -> None:
    assert fused.keys() == eager.keys()
    for key in fused:
        a, b = fused[key], eager[key]
        if key == "copied":  # float32 from the kernels, summed in float64 over the layers
            a = a.double()
        assert a.shape == b.shape and a.dtype == b.dtype, key
        assert torch.equal(a.isnan(), b.isnan()), key
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-6, equal_nan=True, msg=key)


PARAMS = [
    SoftmaxParams(0.125),
    SoftmaxParams(0.3, softcap=5.0),
    SoftmaxParams(0.125, sliding_window=7),
]


@pytest.mark.parametrize("params", PARAMS, ids=["plain", "softcap", "window"])
@pytest.mark.parametrize("matched", [True, False])
@pytest.mark.parametrize("sms", [0, 4, 10], ids=["one-group", "uneven-groups", "head-a-group"])
def test_fused_rows_equal_the_tensor_operations(
    params: SoftmaxParams, matched: bool, sms: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copied kernel's heads in one group, in groups of 2 and 1 heads, one head a group."""
    monkeypatch.setattr(rows_gpu, "sm_count", lambda _: sms)
    examples = _examples(0, [(3, 11, 6), (1, 1300, 4)], matched)  # a context over one tile
    scores = _scores(examples, heads=3, seed=1, ties=False)
    rc_heads = {0: torch.tensor([0, 2])}
    support = {0: torch.tensor([1])}
    _same(*_both(examples, scores, params, rc_heads, support, monkeypatch))


def test_long_responses_take_the_searched_rc_and_still_match(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past PAIRWISE_ROWS response rows the kernels leave RC to the sorted search."""
    examples = _examples(2, [(2, 40, features_module.PAIRWISE_ROWS + 6), (0, 9, 5)], True)
    scores = _scores(examples, heads=2, seed=3, ties=True)
    _same(*_both(examples, scores, PARAMS[0], {0: torch.tensor([1])}, None, monkeypatch))


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lengths=st.lists(
        st.tuples(st.integers(0, 3), st.integers(1, 9), st.integers(2, 7)), min_size=1, max_size=3
    ),
    heads=st.integers(1, 3),
    ties=st.booleans(),
    every_head=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_fused_rows_equal_the_tensor_operations_on_any_layout(
    lengths, heads, ties, every_head, seed, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        examples = _examples(seed, lengths, matched=True)
        scores = _scores(examples, heads, seed, ties)
        rc_heads = None if every_head else {0: torch.tensor([heads - 1])}
        _same(*_both(examples, scores, PARAMS[seed % 3], rc_heads, None, patch))


def test_fused_rc_equals_naive_pairwise_sums() -> None:
    examples = _examples(5, [(2, 9, 5)], matched=False)
    scores = _scores(examples, heads=2, seed=6, ties=True)  # ties: pairs at zero distance
    out = grounding_reducer(examples, {0: PARAMS[0]})(0, scores)
    rows = examples[0].rows
    c0, c1 = rows.context
    for head in range(2):
        for j in range(rows.num_rows - 1):
            line = scores[0, head, j].double().numpy()
            x, y = line[c0:c1], line[rows.first_row : rows.first_row + j + 1]
            forward, backward = naive_expected_rc(x, y), naive_expected_rc(y, x)
            want = 0.5 if forward + backward == 0 else forward / (forward + backward)
            assert float(out["features"][0, 0, head, j]) == pytest.approx(want, abs=2e-6)
        assert out["features"][0, 0, head, rows.num_rows - 1 :].isnan().all()  # past G


def test_a_layer_without_rc_heads_takes_the_kernel_without_rc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RC heads only in layer 1: layer 0's rows come from the kernel compiled without RC."""
    examples = _examples(7, [(2, 30, 6), (0, 12, 4)], True)
    scores = _scores(examples, heads=3, seed=8, ties=False)
    softmax = {0: PARAMS[0], 1: PARAMS[0]}
    rc_heads = {1: torch.tensor([2])}
    fused = grounding_reducer(examples, softmax, rc_heads=rc_heads)
    out = {layer: fused(layer, scores) for layer in (0, 1)}
    monkeypatch.setattr(features_module, "fused_rows_serve", lambda _: False)
    eager = grounding_reducer(examples, softmax, rc_heads=rc_heads)
    for layer in (0, 1):
        _same(out[layer], eager(layer, scores))
    assert out[0]["features"][0].isnan().all() and not out[1]["features"][0, :, 2, :3].isnan().any()


@pytest.mark.parametrize("heads", [[2], [3, 0, 1]])
def test_support_sums_equal_the_units_key_expected_rc(heads: list[int]) -> None:
    """The support heads' key-level RC read in place (``rows_gpu.support_sums``, the kernels
    of ``rcstat.stats`` under the interpreter) against ``units_key_expected`` of their rows
    copied out (the CPU's sorted search), summed over the heads; twice, the second time from
    what the first left in ``shared``."""
    from rcstat.grounding.features import support_unit_rows, unit_pairs
    from rcstat.stats import units_key_expected

    examples = _examples(9, [(2, 40, 12), (0, 25, 7)], False)
    scores = _scores(examples, heads=4, seed=10, ties=True)
    length = scores.shape[-1]
    pairs = unit_pairs(examples)
    rows = support_unit_rows(
        {f"pairs_{k}": torch.from_numpy(v) for k, v in pairs.items()}, length, pairs
    )
    k0 = min(e.rows.context[0] for e in examples)
    k1 = max(e.rows.context[1] for e in examples)
    chosen = torch.tensor(heads)
    want = units_key_expected(scores[:, chosen], rows, (k0, k1)).sum(1)  # [U, K]
    shared: dict = {}
    for _ in range(2):
        got = rows_gpu.support_sums(scores, chosen, rows, (k0, k1), shared)
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
    # the same scores inside a larger block (other strides, an offset): the same sums, bit for
    # bit; and another heads tensor in the same pass gets its own gather
    wider = torch.full((*scores.shape[:3], length + 5), float("nan"))
    wider[..., 2 : length + 2] = scores
    inside = wider[..., 2 : length + 2]
    for _ in range(2):
        assert torch.equal(rows_gpu.support_sums(inside, chosen, rows, (k0, k1), shared), got)
    other = torch.tensor([1])
    again = rows_gpu.support_sums(scores, other, rows, (k0, k1), shared)
    fresh = rows_gpu.support_sums(scores, other, rows, (k0, k1), {})
    assert torch.equal(again, fresh)
    torch.testing.assert_close(
        again, units_key_expected(scores[:, other], rows, (k0, k1)).sum(1), rtol=1e-9, atol=1e-9
    )


@pytest.mark.parametrize(
    ("capacity", "ranked_at"), [(None, [3]), (1, [1, 3]), (2, [1, 3])], ids=["all", "1", "2"]
)
def test_support_heads_of_several_layers_ranked_together_sum_as_each_layer_alone(
    capacity: int | None, ranked_at: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The support heads of layers 0, 1 and 3 (1, 2 and 1 heads) gathered and ranked
    together (``rows_gpu.SupportBatch``): in one call at the last support layer when the
    block holds them all; with a block of one head, layer 0's head is ranked when layer 1's
    two do not fit, those two in place, layer 3's at the end; with two heads, at layers 1 and
    3. Summed over the layers, the sums of every layer's heads ranked alone (the CPU's sorted
    search). The reducer takes this path on CUDA; here the interpreter stands in."""
    from rcstat.grounding.features import support_unit_rows, unit_pairs
    from rcstat.stats import units_key_expected

    examples = _examples(11, [(2, 40, 12), (0, 25, 7)], False)
    gen = torch.Generator().manual_seed(12)
    width = max(e.rows.num_rows for e in examples)
    length = max(e.length for e in examples)
    blocks = [torch.randn(2, 3, width, length, generator=gen) * 4 for _ in range(4)]
    if capacity is not None:
        per_head = blocks[0][:, 0].numel() * blocks[0].element_size()
        monkeypatch.setattr(rows_gpu, "SUPPORT_BATCH_BYTES", capacity * per_head)
    monkeypatch.setattr(features_module, "available", lambda *_: True)
    support = {0: torch.tensor([1]), 1: torch.tensor([0, 2]), 3: torch.tensor([2])}
    reduce = grounding_reducer(examples, dict.fromkeys(range(4), PARAMS[0]), support_heads=support)
    out = [reduce(layer, block) for layer, block in enumerate(blocks)]
    assert [layer for layer, o in enumerate(out) if "support" in o] == ranked_at
    pairs = unit_pairs(examples)
    rows = support_unit_rows(
        {f"pairs_{k}": torch.from_numpy(v) for k, v in pairs.items()}, length, pairs
    )
    keys = (min(e.rows.context[0] for e in examples), max(e.rows.context[1] for e in examples))
    want = sum(
        units_key_expected(blocks[layer][:, heads], rows, keys).sum(1)
        for layer, heads in support.items()
    )
    got = sum(out[layer]["support"] for layer in ranked_at)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
