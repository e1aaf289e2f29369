"""Console helpers shared by the commands: byte sizes, the mark of a cut answer and the
compression report's table and memory line (progress lines live in :mod:`rcstat.progress`,
low enough for every long loop)."""

from __future__ import annotations

from typing import Protocol

from rich.table import Table


class CompressionReport(Protocol):
    """What the renderers read of ``rcstat.press.CompressionReport`` (a frozen dataclass)."""

    @property
    def ratio(self) -> float: ...
    @property
    def layer_ratios(self) -> dict[int, float]: ...
    @property
    def head_ratios(self) -> list[list[float]]: ...
    @property
    def context_tokens(self) -> int: ...
    @property
    def dense_bytes(self) -> int: ...
    @property
    def live_bytes(self) -> int: ...
    @property
    def allocated_bytes(self) -> int: ...


__all__ = ["CUT_MARK", "compression_table", "format_bytes", "kv_memory_line"]

#: Appended to an answer that was cut at the token limit.
CUT_MARK = " [cut at the token limit]"


def format_bytes(count: int) -> str:
    """A byte count for people.

    >>> format_bytes(512), format_bytes(1536), format_bytes(3 * 1024**3)
    ('512 B', '1.5 KiB', '3.0 GiB')
    """
    value = float(count)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def compression_table(report: CompressionReport) -> Table:
    """The realized ratio of every layer and KV head of one compressed prompt."""
    table = Table(title=f"realized compression ratio per layer (global {report.ratio:.3f})")
    table.add_column("layer", justify="right")
    table.add_column("ratio", justify="right")
    table.add_column("per KV head", justify="left")
    for layer, ratio in report.layer_ratios.items():
        heads = " ".join(f"{r:.2f}" for r in report.head_ratios[layer])
        table.add_row(str(layer), f"{ratio:.3f}", heads)
    return table


def kv_memory_line(report: CompressionReport) -> str:
    """The KV bytes of one compressed prompt: full, live, allocated."""
    return (
        f"KV cache of the {report.context_tokens}-token context: full "
        f"{format_bytes(report.dense_bytes)} → live {format_bytes(report.live_bytes)} "
        f"({report.live_bytes / report.dense_bytes:.1%}; allocated with spare room "
        f"{format_bytes(report.allocated_bytes)})"
    )
