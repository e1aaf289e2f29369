"""Figures of a dataset-scale head analysis (paper Fig. 4c/d, supplement Figs 1–6).

Every function builds a :class:`matplotlib.figure.Figure` on an Agg canvas directly (no
pyplot state, nothing shown, safe in scripts and threads) and returns it;
:func:`rcstat.report.plots.save_figure` writes a PNG. They read the results through the
protocols below (plain attributes where the summaries hold exactly that type, read-only
properties for frozen results and wider types), so this module imports no application.
matplotlib is imported inside the functions, so importing this module is free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd

from rcstat.report.plots import heatmap

if TYPE_CHECKING:
    from matplotlib.figure import Figure


class HeadSummary(Protocol):
    """What the figures read of a head summary (``rcstat.heads.HeadSummary``)."""

    percentiles: pd.DataFrame  # one row per head, heads ordered by median
    median: np.ndarray  # [layers, heads]
    statistic: str
    tau: float
    n_layers: int
    n_heads: int
    n_examples: int


class _MannWhitney(Protocol):
    @property
    def u(self) -> float: ...
    @property
    def p_value(self) -> float: ...
    @property
    def effect(self) -> float: ...


class _Ranked(Protocol):
    top_n: int
    mean_depth: float


class Comparison(Protocol):
    """What :func:`plot_comparison` reads of ``rcstat.heads.Comparison``."""

    labels: tuple[str, str]
    counts: pd.DataFrame
    tau: float
    common_threshold: float
    statistic: str

    @property
    def tests(self) -> Mapping[str, _MannWhitney]: ...
    @property
    def a(self) -> _Ranked: ...
    @property
    def b(self) -> _Ranked: ...

    def layer_profiles(self) -> pd.DataFrame: ...


__all__ = [
    "plot_comparison",
    "plot_head_distributions",
    "plot_median_heatmap",
    "plot_percentile_bands",
]

_LABELS = {"upper": "upper bound A", "expected": "expected RC E"}


def _figure(figsize: tuple[float, float]) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


def plot_head_distributions(
    frame: pd.DataFrame,
    statistic: str = "upper",
    *,
    bins: int = 30,
    tau: float | None = None,
    title: str | None = None,
) -> Figure:
    """One histogram per head of ``statistic`` over the examples (supplement Figs 1–3).

    Rows are layers (first at the top), columns heads. All panels share the bins and the x
    range (the x scale is written under the bottom row: under every column up to 12 heads,
    under the first one beyond); heights are per panel (the shapes matter, not the counts).
    A black tick marks each head's median, a dashed red line ``tau``. The panel size shrinks
    with the grid, so 30×9 (SmolLM2) is readable and 32×32 still fits one figure.

    Parameters
    ----------
    frame : pandas.DataFrame
        Long table of :func:`rcstat.heads.collect` (``layer``, ``head``, `statistic`).
    statistic : {"upper", "expected"}, default "upper"
    bins : int, default 30
    tau : float, optional
        Threshold drawn in every panel (and included in the x range).
    title : str, optional
        Figure title (default: the statistic and the number of examples).

    Notes
    -----
    The panels are drawn as collections on one axes rather than as ``layers × heads``
    matplotlib axes: a 32×32 grid of real axes takes minutes to render, this takes seconds.
    """
    from matplotlib.collections import LineCollection, PolyCollection
    from matplotlib.ticker import MaxNLocator

    for column in ("layer", "head", statistic):
        if column not in frame.columns:
            raise ValueError(f"frame: missing column {column!r}")
    if frame.empty:
        raise ValueError("frame: no rows to plot")
    if bins < 1:
        raise ValueError(f"bins must be at least 1, got {bins}")
    layers = int(frame["layer"].max()) + 1
    heads = int(frame["head"].max()) + 1
    values = frame[statistic].to_numpy(dtype=np.float64)
    lo, hi = float(values.min()), float(values.max())
    if tau is not None:
        lo, hi = min(lo, tau), max(hi, tau)
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    edges = np.linspace(lo, hi, bins + 1)
    inner, gap, fill = 0.9, 0.05, 0.85  # panel width and margin (cell = 1), bar height

    def x_of(v: Any, col: int) -> Any:
        return col + gap + inner * (np.asarray(v) - lo) / (hi - lo)

    panel_w = 1.1 if heads <= 12 else 0.7
    panel_h = 0.6 if layers <= 16 else 0.5
    fig = _figure((max(5.0, panel_w * heads + 0.9), max(3.0, panel_h * layers + 1.2)))
    ax = fig.add_subplot()
    backgrounds, shapes, medians = [], [], []
    for (layer, head), part in frame.groupby(["layer", "head"], sort=False)[statistic]:
        row, col = layers - 1 - int(layer), int(head)
        data = part.to_numpy(dtype=np.float64)
        left, right, bottom, top = col + gap, col + gap + inner, row + 0.04, row + 0.96
        backgrounds.append([(left, bottom), (right, bottom), (right, top), (left, top)])
        counts, _ = np.histogram(data, bins=edges)
        height = row + 0.06 + fill * counts / max(int(counts.max()), 1)
        xs = x_of(edges, col)
        step_x = np.repeat(xs, 2)[1:-1]
        step_y = np.repeat(height, 2)
        shapes.append(
            np.column_stack(
                [
                    np.concatenate([[xs[0]], step_x, [xs[-1]]]),
                    np.concatenate([[row + 0.06], step_y, [row + 0.06]]),
                ]
            )
        )
        m = float(x_of(np.median(data), col))
        medians.append([(m, bottom), (m, top)])
    ax.add_collection(PolyCollection(backgrounds, facecolors="0.95", edgecolors="0.8", lw=0.4))
    ax.add_collection(PolyCollection(shapes, facecolors="tab:blue", alpha=0.8, linewidths=0))
    ax.add_collection(LineCollection(medians, colors="black", linewidths=0.7))
    if tau is not None:
        taus = [
            [(float(x_of(tau, c)), 0.0), (float(x_of(tau, c)), float(layers))] for c in range(heads)
        ]
        ax.add_collection(
            LineCollection(taus, colors="tab:red", linewidths=0.6, linestyles="dashed")
        )
    ax.set_xlim(0, heads)
    ax.set_ylim(0, layers)
    small = 8 if heads <= 12 else 6
    scale = [t for t in MaxNLocator(nbins=3).tick_values(lo, hi) if lo <= t <= hi]
    positions, labels = [], []
    for col in range(heads):
        for t in scale:
            positions.append(float(x_of(t, col)))
            labels.append(f"{t:g}" if heads <= 12 or col == 0 else "")
    ax.set_xticks(positions, labels, fontsize=small)
    ax.tick_params(axis="x", length=2, pad=1)
    ax.set_yticks(np.arange(layers) + 0.5, [f"L{layers - 1 - r}" for r in range(layers)])
    ax.tick_params(axis="y", length=0, labelsize=small)
    columns = ax.secondary_xaxis("top")
    columns.set_xticks(np.arange(heads) + 0.5, [f"H{h}" for h in range(heads)], fontsize=small)
    columns.tick_params(length=0)
    for spine in [*ax.spines.values(), *columns.spines.values()]:
        spine.set_visible(False)
    n = frame["example"].nunique() if "example" in frame.columns else len(frame)
    label = _LABELS.get(statistic, statistic)
    extra = "" if tau is None else f"; red: τ = {tau:g}"
    ax.set_title(title or f"{label} per head over {n} examples (black: median{extra})", pad=14)
    fig.tight_layout()
    return fig


def _tick_labels(summary: HeadSummary, limit: int = 60) -> tuple[np.ndarray, list[str]]:
    """Positions and ``L.H`` labels of at most ``limit`` evenly spaced heads."""
    n = len(summary.percentiles)
    step = max(1, int(np.ceil(n / limit)))
    pos = np.arange(0, n, step)
    table = summary.percentiles
    labels = [f"{table['layer'].iat[i]}.{table['head'].iat[i]}" for i in pos]
    return pos, labels


def plot_percentile_bands(
    summary: HeadSummary, *, show_tau: bool = True, title: str | None = None
) -> Figure:
    """Heads ordered by median with their percentile bands (paper Fig. 4c/d, supp. Figs 4–6).

    Shaded bands: min–max (lightest), 5th–95th, 25th–75th; the line is the median. The x
    labels read ``layer.head`` (every k-th head when there are many).
    """
    table = summary.percentiles
    n = len(table)
    x = np.arange(n)
    fig = _figure((min(18.0, max(7.0, 0.05 * n + 5)), 4.2))
    ax = fig.add_subplot()
    color = "tab:blue"
    ax.fill_between(x, table["min"], table["max"], color=color, alpha=0.15, label="min–max", lw=0)
    ax.fill_between(x, table["p5"], table["p95"], color=color, alpha=0.3, label="5–95th", lw=0)
    ax.fill_between(x, table["p25"], table["p75"], color=color, alpha=0.5, label="25–75th", lw=0)
    ax.plot(x, table["p50"], color="black", linewidth=1.0, label="median")
    if show_tau:
        ax.axhline(summary.tau, color="tab:red", linestyle="--", linewidth=0.8)
        ax.annotate(
            f"τ = {summary.tau:g}",
            (n - 1, summary.tau),
            color="tab:red",
            fontsize=8,
            ha="right",
            va="bottom",
        )
    pos, labels = _tick_labels(summary)
    ax.set_xticks(pos)
    ax.set_xticklabels(labels, rotation=90, fontsize=6 if len(pos) > 30 else 8)
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_xlabel("head (layer.head), ordered by median")
    ax.set_ylabel(_LABELS.get(summary.statistic, summary.statistic))
    ax.legend(loc="upper right", fontsize=8, frameon=False)
    ax.set_title(
        title or f"{summary.n_layers}×{summary.n_heads} heads over {summary.n_examples} examples",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def plot_median_heatmap(summary: HeadSummary, *, title: str | None = None) -> Figure:
    """Layers × heads heatmap of each head's median over the examples."""

    layers, heads = summary.median.shape
    fig = _figure((max(4.0, 0.35 * heads + 2), max(3.0, 0.22 * layers + 1)))
    ax = fig.add_subplot()
    heatmap(
        summary.median,
        ax=ax,
        label=f"median {_LABELS.get(summary.statistic, summary.statistic)}",
        title=title or f"median over {summary.n_examples} examples",
    )
    fig.tight_layout()
    return fig


def _strip(ax: Any, groups: list[np.ndarray], labels: list[str], ylabel: str) -> None:
    """Box plot with the individual counts jittered on top."""
    ax.boxplot(groups, showfliers=False, widths=0.5)
    rng = np.random.default_rng(0)
    for i, group in enumerate(groups, start=1):
        jitter = rng.uniform(-0.12, 0.12, len(group))
        ax.scatter(np.full(len(group), i) + jitter, group, s=10, alpha=0.6, zorder=3)
    ax.set_xticks(range(1, len(labels) + 1))
    ax.set_xticklabels(labels)
    ax.set_ylabel(ylabel)


def plot_comparison(comparison: Comparison, *, title: str | None = None) -> Figure:
    """Per-example head counts of both datasets (box + points) and their layer profiles.

    Left: heads above ``τ``; middle: heads above the common (pooled 95th percentile)
    threshold, each titled with its Mann–Whitney test; right: how many of each dataset's top
    heads (by median) sit in each layer.
    """
    from matplotlib.ticker import MaxNLocator

    la, lb = comparison.labels
    counts = comparison.counts
    fig = _figure((13.0, 4.2))
    axes: Any = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1, 1.6]})
    for ax, column, name, what in (
        (axes[0], "above_tau", "tau", f"> τ = {comparison.tau:g}"),
        (axes[1], "above_common", "common", f"> {comparison.common_threshold:.2f} (pooled p95)"),
    ):
        groups = [counts.loc[counts["dataset"] == label, column].to_numpy() for label in (la, lb)]
        _strip(ax, groups, [la, lb], f"heads {what} per example")
        test = comparison.tests[name]
        ax.set_title(f"U = {test.u:g}, p = {test.p_value:.2g}, r = {test.effect:+.2f}", fontsize=9)
    profile = comparison.layer_profiles()
    x = profile["layer"].to_numpy()
    for shift, label, part in ((-0.2, la, comparison.a), (0.2, lb, comparison.b)):
        axes[2].bar(
            x + shift, profile[label], width=0.4, label=f"{label} (depth {part.mean_depth:.2f})"
        )
    axes[2].set_xlabel("layer")
    axes[2].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[2].set_ylabel(f"top {comparison.a.top_n} heads by median")
    axes[2].legend(fontsize=8, frameon=False)
    fig.suptitle(
        title
        or f"{la} vs {lb} ({_LABELS.get(comparison.statistic, comparison.statistic)}; "
        f"Mann–Whitney two-sided, r > 0: {lb} has more)",
        fontsize=10,
    )
    fig.tight_layout()
    return fig
