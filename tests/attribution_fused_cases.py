"""Cases for the fused attribution kernel (``rcstat.attribution.fused``), run by Triton's
interpreter on the CPU: ``attribution_reducer`` with the kernel against the same reducer by
tensor operations, and the kernel's quantities against naive pairwise sums and a softmax.

Run in a fresh process with ``TRITON_INTERPRET=1`` by ``tests/test_attribution_fused.py``
(the interpreter is chosen when ``triton`` is first imported; this file's name does not start
with ``test_``). The compiled kernel meets the same reference on a GPU in ``tests/test_gpu.py``.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rcstat.attribution import fused as fused_module
from rcstat.attribution.reduce import attribution_reducer
from rcstat.capture import SoftmaxParams
from tests._reference import naive_expected_rc


@pytest.fixture(autouse=True)
def interpreted() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.fail("run through tests/test_attribution_fused.py (needs TRITON_INTERPRET=1)")


PARAMS = [
    SoftmaxParams(0.125),
    SoftmaxParams(0.3, softcap=5.0),
    SoftmaxParams(0.125, sliding_window=9),
]


def _block(heads: int, gen: int, prompt: int, seed: int, ties: bool) -> torch.Tensor:
    gen_ = torch.Generator().manual_seed(seed)
    block = torch.randn(1, heads, gen, prompt + gen, generator=gen_) * 4
    return block.round() if ties else block  # [1, H, g, m + g]


def _both(block, prompt, units, spans, params, monkeypatch):
    """The reducer's output with the kernel and by tensor operations."""
    context = (spans[0][0], spans[-1][1])
    args = (prompt, units, spans, context, {0: params})
    out = attribution_reducer(*args, upper=False, post_softmax=False)(0, block)
    monkeypatch.setattr(fused_module, "kernels_serve", lambda _: False)
    return out, attribution_reducer(*args, upper=False, post_softmax=False)(0, block)


def _same(fused: dict, eager: dict) -> None:
    assert fused.keys() == eager.keys()
    for key in fused:
        a, b = fused[key], eager[key]
        assert a.shape == b.shape and a.dtype == b.dtype, key
        assert torch.equal(a.isnan(), b.isnan()), key
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-6, equal_nan=True, msg=key)


def _spans(prompt: int, first: int) -> list[tuple[int, int]]:
    edges = [*range(first, prompt, 5), prompt]
    return [(a, b) for a, b in itertools.pairwise(edges) if a < b]


@pytest.mark.parametrize("params", PARAMS, ids=["plain", "softcap", "window"])
def test_fused_layer_equals_the_tensor_operations(
    params: SoftmaxParams, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = _block(heads=3, gen=12, prompt=70, seed=1, ties=False)  # keys over two tiles
    units = [(0, 4), (6, 11)]  # rows 4, 5 and 11 in no unit
    _same(*_both(block, 70, units, _spans(70, 3), params, monkeypatch))


def test_large_self_sets_search_through_their_bucket_tables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """48 rows give 1,176 self samples a head: the heads' search, and the search of the unit
    of every row, go through a table."""
    block = _block(heads=2, gen=48, prompt=20, seed=2, ties=True)
    units = [(0, 48), (10, 30)]
    _same(*_both(block, 20, units, _spans(20, 0), PARAMS[0], monkeypatch))


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    gen=st.integers(1, 14),
    prompt=st.integers(1, 80),
    cuts=st.lists(st.tuples(st.integers(0, 13), st.integers(1, 6)), min_size=1, max_size=4),
    heads=st.integers(1, 3),
    ties=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_fused_layer_equals_the_tensor_operations_on_any_layout(
    gen, prompt, cuts, heads, ties, seed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Units in any order, with gaps and overlaps, over one or more key tiles."""
    units = [(a % gen, min(a % gen + n, gen)) for a, n in cuts]
    block = _block(heads, gen, prompt, seed, ties)
    with monkeypatch.context() as patch:
        _same(*_both(block, prompt, units, _spans(prompt, 0), PARAMS[seed % 3], patch))


def test_fused_quantities_equal_naive_sums_and_a_softmax() -> None:
    """The ranking, ``t_h(g', i)`` and the weights against their definitions, one by one."""
    prompt, gen, params = 9, 6, PARAMS[2]
    block = _block(heads=2, gen=gen, prompt=prompt, seed=5, ties=True)
    units = [(1, 3), (3, 6)]
    out = attribution_reducer(prompt, units, [(0, prompt)], (0, prompt), {0: params},
                              upper=False, post_softmax=False)(0, block)  # fmt: skip
    scores = block[0].double().numpy()  # [H, g, m + g]
    for h in range(2):
        cross = scores[h, :, :prompt].ravel()
        own = np.concatenate([scores[h, j, prompt : prompt + j + 1] for j in range(gen)])
        assert float(out["rank"][0, h]) == pytest.approx(naive_expected_rc(cross, own), rel=1e-9)
        for u, (a, b) in enumerate(units):
            own = np.concatenate([scores[h, j, prompt : prompt + j + 1] for j in range(a, b)])
            for i in range(prompt):
                want = naive_expected_rc(scores[h, a:b, i], own)
                assert float(out["token_scores"][u, h, i]) == pytest.approx(want, rel=1e-5)
    logits = block[0].double() * params.scaling
    keys, rows = torch.arange(prompt + gen), torch.arange(prompt, prompt + gen)[:, None]
    seen = (keys <= rows) & (rows - keys < params.sliding_window)
    probs = logits.masked_fill(~seen, float("-inf")).softmax(-1)[..., :prompt].sum(0)  # [g, m]
    for u, (a, b) in enumerate(units):
        torch.testing.assert_close(out["attention"][u].double(), probs[a:b].mean(0), rtol=1e-5,
                                   atol=1e-7)  # fmt: skip
    assert out["rank"][1:].isnan().all()


@pytest.mark.parametrize("ties", [False, True])
def test_a_whole_answer_unit_ranks_heads_by_its_key_values(
    ties: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One unit of every row: the kernel leaves the heads' search out, and the ranking (the
    mean of the unit's key values) still equals the pairwise definition and the tensor path."""
    prompt, gen = 40, 7
    block = _block(heads=2, gen=gen, prompt=prompt, seed=8, ties=ties)
    fused, eager = _both(block, prompt, [(0, gen)], _spans(prompt, 2), PARAMS[1], monkeypatch)
    _same(fused, eager)
    scores = block[0].double().numpy()
    for h in range(2):
        own = np.concatenate([scores[h, j, prompt : prompt + j + 1] for j in range(gen)])
        want = naive_expected_rc(scores[h, :, :prompt].ravel(), own)
        assert float(fused["rank"][0, h]) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("ties", [False, True])
def test_units_sorted_from_the_heads_sort_equal_their_own_sort(ties: bool) -> None:
    """Units that do not overlap, in any order and with rows of none between them, take
    their sorted samples from the heads' sort grouped by unit: every field the search reads
    equals that of the units' own sort, bit for bit (the larger unit through a table)."""
    from rcstat.stats import self_samples, unit_rows, unit_self_samples
    from rcstat.stats._gpu import prepared_self, sorted_self

    prompt, gen, heads = 6, 50, 3
    block = _block(heads, gen, prompt, seed=11, ties=ties)[0]  # [H, g, m + g]
    units = [(20, 50), (0, 12), (13, 19)]
    rows = unit_rows(units, prompt + gen, prompt)
    ys, _, order = sorted_self(self_samples(block, prompt), None)
    placed = fused_module.unit_order(units, gen)
    assert placed is not None and fused_module.unit_order([(0, 5), (4, 9)], gen) is None
    got = fused_module._units_from_heads(ys, order, placed, rows)
    y, valid = unit_self_samples(block, rows)  # [U, H, Y]
    want = prepared_self(
        y.reshape(len(units) * heads, -1), valid.reshape(len(units) * heads, -1), spread=-2
    )
    assert got.buckets == want.buckets > 0
    for name in ("ys", "count", "prefix", "center", "low", "scale"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    # the buckets' records: their ends bit for bit, their first and last samples by value
    # (equal values, as in ys: a tie of -0.0 and 0.0 may sort either way)
    assert torch.equal(got.table[..., 0], want.table[..., 0])
    for shift in (0, 32):
        first_or_last = (got.table[..., 1] >> shift).int(), (want.table[..., 1] >> shift).int()
        assert torch.equal(*(t.view(torch.float32) for t in first_or_last))


def _grouped_by_stable_sort(ys, order, placed, rows):
    """The units' padded rows ``[U·H, Ymax]`` by a stable sort by unit of the heads' sorted
    samples (the tensor operations the counting sort replaced): the oracle."""
    heads = ys.shape[0]
    units, width = rows.index.shape
    unit = placed.unit[order]  # [H, M] the unit of each sorted sample
    grouped = ys.gather(-1, torch.sort(unit, dim=-1, stable=True).indices)  # [H, M]
    sizes = placed.sizes.long()
    starts = torch.cumsum(sizes, 0) - sizes
    steps = torch.arange(width)
    take = starts[:, None] + torch.minimum(steps[None, :], sizes[:, None] - 1)  # [U, Ymax]
    taken = grouped[:, take].transpose(0, 1)  # [U, H, Ymax]
    padded = torch.where(rows.valid[:, None, :], taken, torch.inf)
    return padded.reshape(units * heads, width)


@pytest.mark.parametrize(
    ("gen", "units", "ties"),
    [
        (40, [(0, 40)], False),  # one unit of every row
        (42, [(2 * u, 2 * u + 2) for u in range(21)], True),  # 21 units: 32 groups
        (46, [(45, 46), (0, 1)], False),  # one-row units at both ends, a long run of none
    ],
)
def test_the_units_counting_sort_equals_a_stable_sort_by_unit(
    gen: int, units: list, ties: bool
) -> None:
    """Every unit's samples, grouped from the heads' sort by the two counting-sort kernels,
    are bit for bit those of a stable sort by unit (the heads' order kept within a unit:
    a tie of -0.0 and 0.0 stays in the heads' order), and the row counts are the units'."""
    from rcstat.stats import self_samples, unit_rows
    from rcstat.stats._gpu import sorted_self

    prompt, heads = 5, 3
    block = _block(heads, gen, prompt, seed=gen, ties=ties)[0]  # [H, g, m + g]
    if ties:  # signed zeros among the ties
        block = torch.where(torch.rand(block.shape) < 0.3, -block * 0.0, block)
    rows = unit_rows(units, prompt + gen, prompt)
    ys, _, order = sorted_self(self_samples(block, prompt), None)
    placed = fused_module.unit_order(units, gen)
    got = fused_module._units_from_heads(ys, order, placed, rows)
    want = _grouped_by_stable_sort(ys, order, placed, rows)
    assert torch.equal(got.ys.view(torch.int32), want.view(torch.int32))
    assert torch.equal(got.count, rows.valid.sum(-1, dtype=torch.int32).repeat_interleave(heads))


def test_the_heads_split_running_sums_equal_one_programs() -> None:
    """The heads' samples prepared as the layer prepares them (``prepared_sorted``'s
    default: few long rows, the running sums split over blocks) equal ``prepared_sorted``'s
    one program a row, bit for bit: the same float64 operations in the same order (a row of
    5,050 samples: five blocks, the last one part full; a row's count short of its width
    pads with +inf)."""
    from rcstat.stats import self_samples
    from rcstat.stats._gpu import _SPLIT_FROM, _SPLIT_ROWS, prepared_sorted, sm_count, sorted_self

    prompt, gen, heads = 4, 100, 2
    block = _block(heads, gen, prompt, seed=21, ties=True)[0]  # [H, g, m + g]
    ys, count, _ = sorted_self(self_samples(block, prompt), None)  # [H, 5050]
    assert ys.shape[1] >= _SPLIT_FROM and heads <= _SPLIT_ROWS * sm_count(ys.device)
    count = count - torch.tensor([0, 1000], dtype=torch.int32)  # fewer valid in row 1
    ys = torch.where(torch.arange(ys.shape[1]) < count[:, None].long(), ys, torch.inf)
    got, want = prepared_sorted(ys, count), prepared_sorted(ys, count, split=False)
    assert got.buckets == want.buckets
    for name in ("ys", "count", "prefix", "center", "table", "low", "scale"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8)), name
