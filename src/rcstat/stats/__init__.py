"""Pure tensor statistics of Relative Contextualization (imports torch only).

See docs/definitions.md. Public functions take batched sample sets ``[..., n]`` with optional masks.
"""

from rcstat.stats._gpu import kernels_serve, triton_available
from rcstat.stats.blocks import (
    UnitRows,
    block_expected,
    block_statistics,
    block_units_expected,
    cross_self_samples,
    iot_expected_rc,
    self_samples,
    stacked_unit_rows,
    unit_rows,
    unit_self_samples,
    units_key_expected,
)
from rcstat.stats.rc import (
    RCStatistics,
    expected_rc,
    expected_rc_shared,
    markov_bound,
    normalized_rc,
    normalized_rc_shared,
    rc_lower_bound,
    rc_statistics,
    rc_upper_bound,
)

__all__ = [
    "RCStatistics",
    "UnitRows",
    "block_expected",
    "block_statistics",
    "block_units_expected",
    "cross_self_samples",
    "expected_rc",
    "expected_rc_shared",
    "iot_expected_rc",
    "kernels_serve",
    "markov_bound",
    "normalized_rc",
    "normalized_rc_shared",
    "rc_lower_bound",
    "rc_statistics",
    "rc_upper_bound",
    "self_samples",
    "stacked_unit_rows",
    "triton_available",
    "unit_rows",
    "unit_self_samples",
    "units_key_expected",
]
