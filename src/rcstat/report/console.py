"""Console tables (rich)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

if TYPE_CHECKING:
    from rcstat.analysis import HeadAnalysis


def top_heads_table(result: HeadAnalysis, k: int = 10, tau: float = 1.5) -> Table:
    """The top-``k`` heads by expected RC, with the counts of heads above ``tau``."""
    layers, heads = result.shape
    table = Table(
        title=(
            f"top {k} of {layers * heads} heads by expected RC — "
            f"A > {tau}: {result.count_above(tau, 'upper')} heads, "
            f"E > {tau}: {result.count_above(tau, 'expected')} heads"
        )
    )
    for name in ("layer", "head", "expected", "upper", "lower", "normalized"):
        table.add_column(name, justify="right")
    for row in result.top(k).itertuples(index=False):
        table.add_row(
            str(row.layer),
            str(row.head),
            f"{row.expected:.3f}",
            f"{row.upper:.3f}",
            f"{row.lower:.3f}",
            f"{row.normalized:.3f}",
        )
    return table
