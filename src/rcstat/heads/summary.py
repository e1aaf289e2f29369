"""Dataset-level summaries of per-head RC (paper §5.1, Fig. 4c/d, supplement Figs 1–6).

:func:`summarize` turns the long table of :func:`rcstat.heads.collect` into a
:class:`HeadSummary`: each head's distribution over examples (min, 5th, 25th, 50th, 75th,
95th percentile, max; heads ordered by median; docs/definitions.md), the layers × heads median
matrix, how many heads of each example contextualize (statistic above ``τ``, and above the
dataset's own 95th percentile), where the top heads sit in depth, and how stable the head
ranking is from one example to the next; :mod:`rcstat.heads.comparison` contrasts two datasets
on the same matrices.

Everything works on an ``[examples, layers·heads]`` matrix built once per frame
(:func:`head_matrix`); the frame is validated in one place (every example must hold the same
complete grid of heads).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from rcstat.checks import check_tau
from rcstat.defaults import DEFAULT_TAU

__all__ = [
    "MAX_STABILITY_EXAMPLES",
    "PERCENTILES",
    "HeadMatrix",
    "HeadStatistic",
    "HeadSummary",
    "check_options",
    "fmt",
    "head_matrix",
    "json_float",
    "summarize",
    "summarize_matrix",
]

HeadStatistic = Literal["upper", "expected"]
#: Columns of :attr:`HeadSummary.percentiles` and the percentile each one is.
PERCENTILES: dict[str, float] = {
    "min": 0.0,
    "p5": 5.0,
    "p25": 25.0,
    "p50": 50.0,
    "p75": 75.0,
    "p95": 95.0,
    "max": 100.0,
}
#: At most this many examples enter the pairwise Spearman stability (a random subset, fixed
#: seed, beyond it): the pairwise matrix grows with the square of the number of examples.
MAX_STABILITY_EXAMPLES = 2000


def json_float(value: float | None) -> float | None:
    """A JSON-safe float: ``None`` for NaN / missing."""
    if value is None or not math.isfinite(float(value)):
        return None
    return float(value)


def fmt(value: float | None, digits: int = 3) -> str:
    """``value`` with ``digits`` decimals for the text reports; ``"n/a"`` for None or NaN."""
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


@dataclass(frozen=True)
class HeadMatrix:
    """A validated long table as ``values[example, layer · heads + head]`` (:func:`head_matrix`)."""

    examples: list[str]
    values: np.ndarray  # [example, layer·head] float64
    layers: int
    heads: int


def head_matrix(frame: pd.DataFrame, statistic: str, name: str = "frame") -> HeadMatrix:
    """Validate a long table and pivot it to ``[examples, layers·heads]`` (row-major heads)."""
    if statistic not in ("upper", "expected"):
        raise ValueError(f"statistic must be 'upper' or 'expected', got {statistic!r}")
    missing = [c for c in ("example", "layer", "head", statistic) if c not in frame.columns]
    if missing:
        raise ValueError(f"{name}: missing column(s) {missing} (expected rcstat.heads.collect's)")
    if frame.empty:
        raise ValueError(f"{name}: no rows (did every example fail? see examples.csv)")
    layer = frame["layer"].to_numpy(dtype=np.int64)
    head = frame["head"].to_numpy(dtype=np.int64)
    if layer.min() < 0 or head.min() < 0:
        raise ValueError(f"{name}: negative layer or head index")
    layers, heads = int(layer.max()) + 1, int(head.max()) + 1
    codes, examples = pd.factorize(frame["example"].astype(str), sort=False)
    values = np.full((len(examples), layers * heads), np.nan)
    flat = layer * heads + head
    if pd.Series(codes * layers * heads + flat).duplicated().any():
        raise ValueError(f"{name}: an (example, layer, head) appears more than once")
    values[codes, flat] = frame[statistic].to_numpy(dtype=np.float64)
    if np.isnan(values).any():
        bad = [str(examples[i]) for i in np.flatnonzero(np.isnan(values).any(axis=1))[:3]]
        raise ValueError(
            f"{name}: examples {bad} lack some of the {layers}×{heads} heads (or hold NaN); "
            "every example needs the full grid"
        )
    if not np.isfinite(values).all():
        raise ValueError(f"{name}: column {statistic!r} holds infinite values")
    return HeadMatrix([str(e) for e in examples], values, layers, heads)


def _percentiles(m: HeadMatrix) -> pd.DataFrame:
    table = pd.DataFrame(
        {
            "layer": np.repeat(np.arange(m.layers), m.heads),
            "head": np.tile(np.arange(m.heads), m.layers),
        }
    )
    qs = np.percentile(m.values, list(PERCENTILES.values()), axis=0)  # [7, layer·head]
    for name, row in zip(PERCENTILES, qs, strict=True):
        table[name] = row
    table["mean"] = m.values.mean(axis=0)
    # Highest median first; ties keep (layer, head) order.
    order = np.lexsort((table.index.to_numpy(), -table["p50"].to_numpy()))
    table = table.iloc[order].reset_index(drop=True)
    table.insert(0, "rank", np.arange(1, len(table) + 1))
    return table


def _layer_profile(percentiles: pd.DataFrame, layers: int, top_n: int) -> tuple[np.ndarray, float]:
    """Per-layer count of the ``top_n`` heads by median, and their mean relative depth."""
    top = percentiles.head(min(top_n, len(percentiles)))
    counts = np.bincount(top["layer"].to_numpy(dtype=np.int64), minlength=layers)
    depth = top["layer"].to_numpy(dtype=np.float64) / max(layers - 1, 1)
    return counts, float(depth.mean())


def _stability(values: np.ndarray, seed: int = 0) -> tuple[float | None, float | None, int]:
    """Mean and median pairwise Spearman rho between examples' head vectors, and the number
    of pairs with a defined rho (an example whose heads are all equal has none)."""
    n = values.shape[0]
    if n < 2:
        return None, None, 0
    if n > MAX_STABILITY_EXAMPLES:
        keep = np.random.default_rng(seed).choice(n, MAX_STABILITY_EXAMPLES, replace=False)
        values = values[np.sort(keep)]
        n = MAX_STABILITY_EXAMPLES
    constant = np.ptp(values, axis=1) == 0
    rho = np.full((n, n), np.nan)
    ok = np.flatnonzero(~constant)
    if len(ok) >= 2:
        stat = np.asarray(spearmanr(values[ok], axis=1).statistic)  # rows are variables
        if stat.ndim == 0:  # two examples: scipy returns the single coefficient
            stat = np.array([[1.0, float(stat)], [float(stat), 1.0]])
        rho[np.ix_(ok, ok)] = stat
    pairs = rho[np.triu_indices(n, k=1)]
    pairs = pairs[np.isfinite(pairs)]
    if not len(pairs):
        return None, None, 0
    return float(pairs.mean()), float(np.median(pairs)), len(pairs)


@dataclass
class HeadSummary:
    """Distribution of one head statistic over the examples of a dataset.

    Attributes
    ----------
    statistic : {"upper", "expected"}
        ``A_h`` (overlap-area upper bound) or ``E_h`` (expected RC).
    tau : float
        Threshold for the per-example head counts (paper: ``τ = 1.5`` on ``A_h``).
    n_examples, n_layers, n_heads : int
        Size of the data.
    percentiles : pandas.DataFrame
        One row per head: ``rank, layer, head, min, p5, p25, p50, p75, p95, max, mean``, ordered
        by median (highest first; ``rank`` 1 is the top head).
    median : numpy.ndarray
        ``[layers, heads]`` median over examples.
    counts : pandas.DataFrame
        Per example: ``example, above_tau`` (heads with statistic ``> tau``) and
        ``above_p95`` (heads above :attr:`p95`).
    p95 : float
        The 95th percentile of all (example, head) values of this dataset.
    top_n : int
        Number of top heads (by median) in the layer profile.
    layer_counts : numpy.ndarray
        ``[layers]``: how many of the ``top_n`` heads sit in each layer.
    mean_depth : float
        Mean relative depth ``layer / (layers − 1)`` of the ``top_n`` heads (0 = first layer,
        1 = last).
    stability_mean, stability_median : float or None
        Mean and median Spearman correlation between the per-head vectors of every pair of
        examples (1 = every example ranks the heads alike); ``None`` with fewer than two
        examples.
    stability_pairs : int
        Number of example pairs behind the stability (pairs involving an example whose heads
        all share one value have no rank correlation and are left out).
    examples : list of str
        Example ids in table order.
    """

    statistic: str
    tau: float
    n_examples: int
    n_layers: int
    n_heads: int
    percentiles: pd.DataFrame
    median: np.ndarray
    counts: pd.DataFrame
    p95: float
    top_n: int
    layer_counts: np.ndarray
    mean_depth: float
    stability_mean: float | None
    stability_median: float | None
    stability_pairs: int
    examples: list[str]

    def top(self, k: int = 10) -> pd.DataFrame:
        """The ``k`` heads with the highest median (rows of :attr:`percentiles`)."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        return self.percentiles.head(k).reset_index(drop=True)

    def layer_profile(self) -> pd.DataFrame:
        """``layer, count, fraction``: where the ``top_n`` heads by median sit."""
        total = max(int(self.layer_counts.sum()), 1)
        return pd.DataFrame(
            {
                "layer": np.arange(self.n_layers),
                "count": self.layer_counts,
                "fraction": self.layer_counts / total,
            }
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary (the percentile table as a list of records)."""
        counts = self.counts
        return {
            "statistic": self.statistic,
            "tau": self.tau,
            "n_examples": self.n_examples,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "p95": self.p95,
            "counts": {
                "above_tau": {
                    "mean": float(counts["above_tau"].mean()),
                    "median": float(counts["above_tau"].median()),
                    "min": int(counts["above_tau"].min()),
                    "max": int(counts["above_tau"].max()),
                },
                "above_p95": {
                    "mean": float(counts["above_p95"].mean()),
                    "median": float(counts["above_p95"].median()),
                    "min": int(counts["above_p95"].min()),
                    "max": int(counts["above_p95"].max()),
                },
                "per_example": [
                    {"example": e, "above_tau": int(t), "above_p95": int(p)}
                    for e, t, p in counts[["example", "above_tau", "above_p95"]].itertuples(
                        index=False
                    )
                ],
            },
            "layer_profile": {
                "top_n": self.top_n,
                "counts": [int(c) for c in self.layer_counts],
                "mean_relative_depth": self.mean_depth,
            },
            "stability": {
                "mean_spearman": json_float(self.stability_mean),
                "median_spearman": json_float(self.stability_median),
                "pairs": self.stability_pairs,
            },
            "median": self.median.tolist(),
            "percentiles": self.percentiles.to_dict(orient="records"),
        }

    def to_markdown(self, k: int = 10) -> str:
        """A short Markdown report: counts, stability, layer profile, top ``k`` heads."""
        c = self.counts
        lines = [
            f"# Head analysis ({self.statistic}, {self.n_examples} examples, "
            f"{self.n_layers} layers × {self.n_heads} heads)",
            "",
            f"- heads with {self.statistic} > τ = {self.tau:g} per example: mean "
            f"{c['above_tau'].mean():.1f}, median {c['above_tau'].median():g} "
            f"(range {c['above_tau'].min()}–{c['above_tau'].max()})",
            f"- heads above the dataset's 95th percentile ({self.p95:.3f}) per example: mean "
            f"{c['above_p95'].mean():.1f}, median {c['above_p95'].median():g}",
            f"- ranking stability (pairwise Spearman between examples, {self.stability_pairs} "
            f"pairs): mean {fmt(self.stability_mean)}, median {fmt(self.stability_median)}",
            f"- top {self.top_n} heads by median: mean relative depth {self.mean_depth:.2f} "
            f"(0 = first layer, 1 = last); per layer "
            + ", ".join(f"L{i}: {int(n)}" for i, n in enumerate(self.layer_counts) if n),
            "",
            "| rank | layer | head | min | p5 | p25 | median | p75 | p95 | max |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in self.top(k).itertuples(index=False):
            lines.append(
                f"| {row.rank} | {row.layer} | {row.head} | {row.min:.3f} | {row.p5:.3f} | "
                f"{row.p25:.3f} | {row.p50:.3f} | {row.p75:.3f} | {row.p95:.3f} | {row.max:.3f} |"
            )
        return "\n".join(lines) + "\n"


def summarize_matrix(m: HeadMatrix, statistic: str, tau: float, top_n: int) -> HeadSummary:
    """The :class:`HeadSummary` of a validated matrix (the body of :func:`summarize`)."""
    percentiles = _percentiles(m)
    p95 = float(np.percentile(m.values, 95))
    counts = pd.DataFrame(
        {
            "example": m.examples,
            "above_tau": (m.values > tau).sum(axis=1),
            "above_p95": (m.values > p95).sum(axis=1),
        }
    )
    layer_counts, depth = _layer_profile(percentiles, m.layers, top_n)
    mean_rho, median_rho, pairs = _stability(m.values)
    median = np.median(m.values, axis=0).reshape(m.layers, m.heads)
    return HeadSummary(
        statistic=statistic,
        tau=float(tau),
        n_examples=len(m.examples),
        n_layers=m.layers,
        n_heads=m.heads,
        percentiles=percentiles,
        median=median,
        counts=counts,
        p95=p95,
        top_n=min(top_n, m.layers * m.heads),
        layer_counts=layer_counts,
        mean_depth=depth,
        stability_mean=mean_rho,
        stability_median=median_rho,
        stability_pairs=pairs,
        examples=m.examples,
    )


def check_options(tau: float, top_n: int) -> None:
    """Raise ``ValueError`` for a ``tau`` that is not a finite number ``>= 0`` or a ``top_n``
    below 1."""
    check_tau("tau", tau)
    if top_n < 1:
        raise ValueError(f"top_n must be at least 1, got {top_n}")


def summarize(
    frame: pd.DataFrame,
    *,
    statistic: HeadStatistic = "upper",
    tau: float = DEFAULT_TAU,
    top_n: int = 20,
) -> HeadSummary:
    """Per-head distribution over a dataset, head counts, layer profile and stability.

    Parameters
    ----------
    frame : pandas.DataFrame
        The long table of :func:`rcstat.heads.collect`: columns ``example``, ``layer``,
        ``head`` and `statistic`; every example must hold every ``(layer, head)`` once.
    statistic : {"upper", "expected"}, default "upper"
        ``A_h`` (the paper's figures and threshold) or ``E_h``.
    tau : float, default 1.5
        Threshold of the per-example counts (paper §5.1).
    top_n : int, default 20
        Number of top heads (by median) whose layers make the depth profile.

    Returns
    -------
    HeadSummary

    Raises
    ------
    ValueError
        A missing column, an empty frame, a duplicate or missing head of an example, a
        non-finite value, an unknown `statistic`, a `tau` that is not a finite number ``>= 0``
        or ``top_n < 1``.

    Notes
    -----
    Percentiles are numpy's default (linear interpolation between order statistics). The
    "above 95th percentile" count uses the 95th percentile of all ``examples × heads`` values
    of this dataset: a threshold relative to the dataset, where ``tau`` is absolute.
    Stability is ``spearmanr`` between the examples' ``layers·heads`` vectors, averaged over
    all pairs of examples (:data:`MAX_STABILITY_EXAMPLES` at most).

    Examples
    --------
    >>> import pandas as pd
    >>> frame = pd.DataFrame({"example": ["a", "a", "b", "b"], "layer": [0, 0, 0, 0],
    ...                       "head": [0, 1, 0, 1], "upper": [2.0, 0.5, 3.0, 1.0]})
    >>> s = summarize(frame, tau=1.5)
    >>> s.counts["above_tau"].tolist(), s.percentiles[["head", "p50"]].values.tolist()
    ([1, 1], [[0.0, 2.5], [1.0, 0.75]])
    >>> round(s.stability_mean, 6)  # both examples rank the heads alike
    1.0
    """
    check_options(tau, top_n)
    return summarize_matrix(head_matrix(frame, statistic), statistic, tau, top_n)
