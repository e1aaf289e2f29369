"""``lower_quantiles`` (the head features of a grounding) against a row-by-row oracle and
numpy's own quantile; ``head_summaries``, the same quantiles where a pass ran (torch, each
sequence's own rows), against the same oracle."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rcstat.grounding.pass_results import head_summaries
from rcstat.grounding.score import lower_quantiles

_FLOATS = {
    np.float32: st.one_of(st.floats(-1e4, 1e4, width=32), st.just(float("nan"))),
    np.float64: st.one_of(st.floats(-1e6, 1e6), st.just(float("nan"))),
}
# numpy computes a float32 array's position in float64 from 2.4 on (in float32 before)
_NUMPY_POSITION_IN_FLOAT64 = np.lib.NumpyVersion(np.__version__) >= "2.4.0"


def _row_quantile(row: list[float], quantile: float, kind: type) -> float:
    """Method 7 on one row, written out: sorted values, position ``(n − 1)·q`` in float64,
    interpolation in the row's float type from the nearer end."""
    if any(math.isnan(v) for v in row):
        return math.nan
    ordered = [kind(v) for v in sorted(row)]
    at = (len(row) - 1) * quantile
    low = int(at // 1)
    below, above = ordered[low], ordered[min(low + 1, len(row) - 1)]
    weight = at - low
    if weight < 0.5:
        return float(below + (above - below) * kind(weight))
    return float(above - (above - below) * kind(1 - weight))


def _oracle(values: np.ndarray, quantile: float) -> np.ndarray:
    """:func:`_row_quantile` of every row (last axis) of ``values``, in its float type."""
    kind = values.dtype.type
    rows = values.reshape(-1, values.shape[-1])
    found = [_row_quantile(list(r), quantile, kind) for r in rows]
    return np.array(found, kind).reshape(values.shape[:-1])


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    dtype=st.sampled_from([np.float32, np.float64]),
    rows=st.integers(1, 4),
    count=st.integers(1, 40),
    quantile=st.one_of(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9, 1.0]), st.floats(0, 1)),
)
def test_lower_quantiles_equal_the_row_oracle_and_numpy(data, dtype, rows, count, quantile) -> None:
    values = data.draw(arrays(dtype, (rows, 3, count), elements=_FLOATS[dtype]))
    got = lower_quantiles(values, quantile)
    oracle = _oracle(values, quantile)
    assert got.dtype == oracle.dtype and got.shape == oracle.shape
    np.testing.assert_array_equal(got, oracle)
    want = np.quantile(values, quantile, axis=-1)
    if _NUMPY_POSITION_IN_FLOAT64 or dtype is np.float64:
        np.testing.assert_array_equal(got, want)
    else:  # a float32 position (n − 1)·q is off by up to n/2 ulps of 1: so is the weight
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        scale = np.nanmax(np.abs(values), axis=-1, initial=0.0)
        off = np.abs(got - want)[~np.isnan(want)]
        assert (off <= 2 * count * np.finfo(dtype).eps * scale[~np.isnan(want)]).all()


def test_a_row_with_a_nan_gives_nan_and_the_others_keep_their_values() -> None:
    values = np.array([[3.0, 1.0, 2.0], [1.0, np.nan, 5.0]], dtype=np.float32)
    got = lower_quantiles(values, 0.25)
    assert got[0] == np.float32(1.5) and np.isnan(got[1])


def test_the_position_is_float64_whatever_the_values_type() -> None:
    """At 3 values and 0.7 the position is 1.4 − 1 = 0.39999999999999991 in float64, whose
    float32 weight 0.4 gives 1 + 999 · 0.4 = 400.6; a float32 position (0.39999998) gives
    400.59998."""
    values = np.array([[0.0, 1.0, 1000.0]], dtype=np.float32)
    assert lower_quantiles(values, 0.7)[0] == np.float32(400.6)
    assert lower_quantiles(values.astype(np.float64), 0.7)[0] == 1 + 999 * (1.4 - 1)


_DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
        ],
    ),
]


@pytest.mark.parametrize("device", _DEVICES)
@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    dtype=st.sampled_from([np.float32, np.float64]),
    layers=st.integers(1, 3),
    heads=st.integers(1, 3),
    quantile=st.one_of(st.sampled_from([0.0, 0.1, 0.5, 1.0]), st.floats(0, 1)),
)
def test_head_summaries_equal_the_row_oracle_on_each_sequence_rows(
    device, data, dtype, layers, heads, quantile
) -> None:
    """``[3, L, B, H, W]`` features of a padded batch: sequence ``b`` is summarised over its
    first ``rows[b]`` tokens only (what lies past them, NaN included, is padding)."""
    rows = data.draw(st.lists(st.integers(1, 12), min_size=1, max_size=3))
    width = max(rows) + data.draw(st.integers(0, 2))
    shape = (3, layers, len(rows), heads, width)
    values = data.draw(arrays(dtype, shape, elements=_FLOATS[dtype]))
    got = head_summaries(torch.from_numpy(values).to(device), rows, quantile).cpu().numpy()
    assert got.shape == (len(rows), 3, layers, heads) and got.dtype == dtype
    for b, g in enumerate(rows):
        mine = values[:, :, b, :, :g]  # [3, L, H, g]: this sequence's rows
        np.testing.assert_array_equal(got[b], _oracle(mine, quantile))
        np.testing.assert_array_equal(got[b], lower_quantiles(mine, quantile))


@pytest.mark.parametrize("rows", [[0, 3], [4, 7], [6], [2, 2, 2]])
def test_head_summaries_refuse_rows_that_do_not_fit_the_features(rows: list[int]) -> None:
    features = torch.zeros(3, 2, 2, 4, 6)  # two sequences of at most 6 rows
    with pytest.raises(ValueError, match=r"rows: expected 2 counts in \[1, 6\]"):
        head_summaries(features, rows, 0.1)
