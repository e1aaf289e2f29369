"""``lower_quantiles`` against numpy's own quantile (the head features of a grounding)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rcstat.grounding.score import lower_quantiles

_FLOATS = {
    np.float32: st.one_of(st.floats(-1e4, 1e4, width=32), st.just(float("nan"))),
    np.float64: st.one_of(st.floats(-1e6, 1e6), st.just(float("nan"))),
}


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    dtype=st.sampled_from([np.float32, np.float64]),
    rows=st.integers(1, 4),
    count=st.integers(1, 40),
    quantile=st.one_of(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9, 1.0]), st.floats(0, 1)),
)
def test_lower_quantiles_equal_numpy_bit_for_bit(data, dtype, rows, count, quantile) -> None:
    values = data.draw(arrays(dtype, (rows, 3, count), elements=_FLOATS[dtype]))
    want = np.quantile(values, quantile, axis=-1)
    got = lower_quantiles(values, quantile)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_a_row_with_a_nan_gives_nan_and_the_others_keep_their_values() -> None:
    values = np.array([[3.0, 1.0, 2.0], [1.0, np.nan, 5.0]], dtype=np.float32)
    got = lower_quantiles(values, 0.25)
    assert got[0] == np.float32(1.5) and np.isnan(got[1])


def test_the_position_is_computed_in_the_values_float_type_as_numpy_does() -> None:
    """At 3 values and 0.7 the weight is 0.39999998 in float32 (0.4 in float64)."""
    values = np.array([[0.0, 1.0, 1000.0]], dtype=np.float32)
    np.testing.assert_array_equal(lower_quantiles(values, 0.7), np.quantile(values, 0.7, axis=-1))
