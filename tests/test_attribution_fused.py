"""The fused attribution kernel under Triton's interpreter (numpy on the CPU); the cases are
in ``tests/attribution_fused_cases.py``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rcstat.attribution.fused import row_segments
from rcstat.attribution.reduce import attribution_reducer
from rcstat.capture import SoftmaxParams
from rcstat.stats import block_expected
from tests._interpreter import run_cases


@pytest.mark.long(seconds=150)  # under the interpreter, one core
def test_fused_attribution_under_the_interpreter_matches_the_reference() -> None:
    out = run_cases("tests/attribution_fused_cases.py")
    assert "skipped" not in out, out[-2000:]


def test_row_segments_count_every_row_once_for_the_ranking() -> None:
    segments = row_segments([(6, 9), (0, 2)], 12)
    assert segments.tolist() == [[0, 2, 1, 1], [2, 6, -1, 1], [6, 9, 0, 1], [9, 12, -1, 1]]
    overlapping = row_segments([(0, 5), (3, 7)], 8)
    assert overlapping.tolist() == [[0, 5, 0, 0], [3, 7, 1, 0], [0, 8, -1, 1]]
    for segments in (row_segments([(2, 4)], 4), row_segments([(0, 4)], 4)):
        counted = np.zeros(4, dtype=int)
        for a, b, _, ranked in segments:
            counted[a:b] += ranked
        assert (counted == 1).all()


@pytest.mark.parametrize("units", [[(0, 9)], [(0, 8)], [(1, 9)], [(0, 4), (4, 9)]])
def test_the_ranking_equals_block_expected_whatever_the_units(units: list) -> None:
    """One unit of the whole answer takes its ranking from the unit's key values; any other
    units rank the heads on their own: both equal ``block_expected`` (tensor path, CPU)."""
    prompt, gen = 30, 9
    block = torch.randn(1, 3, gen, prompt + gen, generator=torch.Generator().manual_seed(4))
    reduce = attribution_reducer(
        prompt, units, [(0, 15), (15, 30)], (0, prompt), {0: SoftmaxParams(0.1)},
        upper=False, post_softmax=False,
    )  # fmt: skip
    rank = reduce(0, block)["rank"]
    torch.testing.assert_close(rank[0], block_expected(block[0], prompt), rtol=1e-12, atol=0)
    assert rank[1:].isnan().all()


def test_units_past_the_generated_rows_are_refused_before_any_work() -> None:
    block = torch.randn(1, 2, 5, 12)
    reduce = attribution_reducer(
        7, [(0, 3), (3, 6)], [(0, 7)], (0, 7), {0: SoftmaxParams(0.1)},
        upper=False, post_softmax=False,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"past the block's 5 generated rows: \[\(3, 6\)\]"):
        reduce(0, block)


def test_every_kernel_leaves_only_its_own_sizes_unspecialised() -> None:
    """The sizes named in ``do_not_specialize_on_alignment`` are parameters of the kernel
    (Triton ignores a misspelt name). The attribution kernel takes 16 sizes that change with
    every example: specialised on their multiples of 16, nearly every new example would
    compile it again."""
    pytest.importorskip("triton")
    from rcstat.attribution._fused_triton import (
        attribution_kernel,
        unit_counts_kernel,
        unit_scatter_kernel,
    )
    from rcstat.capture._softmax_triton import row_lse_kernel
    from rcstat.stats import _triton as stats

    kernels = (attribution_kernel, unit_counts_kernel, unit_scatter_kernel, row_lse_kernel)
    prefix = (stats.center_kernel, stats.block_sums_kernel, stats.prefix_kernel)
    for kernel in (*kernels, *prefix, stats.rank_sums_kernel, stats.prepare_kernel):
        names = set(kernel.do_not_specialize_on_alignment)
        assert names and names <= set(kernel.arg_names), kernel.fn.__name__
