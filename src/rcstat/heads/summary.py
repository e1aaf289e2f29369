"""Dataset-level summaries of per-head RC (paper §5.1, Fig. 4c/d, supplement Figs 1–6).

:func:`summarize` turns the long table of :func:`rcstat.heads.collect` into a
:class:`HeadSummary`: each head's distribution over examples (min, 5th, 25th, 50th, 75th,
95th percentile, max; heads ordered by median; docs/definitions.md), the layers × heads median
matrix, how many heads of each example contextualize (statistic above ``τ``, and above the
dataset's own 95th percentile), where the top heads sit in depth, and how stable the head
ranking is from one example to the next. :func:`compare` contrasts two datasets (the paper's
"QMSum recruits more high-RC heads than SQuAD, p < 0.05") with a Mann–Whitney U test on the
per-example head counts.

Everything works on an ``[examples, layers·heads]`` matrix built once per frame
(:func:`_matrix`); the frame is validated in one place (every example must hold the same
complete grid of heads).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy.stats import mannwhitneyu, spearmanr

__all__ = ["PERCENTILES", "Comparison", "HeadSummary", "MannWhitney", "compare", "summarize"]

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


def _num(value: float | None) -> float | None:
    """A JSON-safe float: ``None`` for NaN / missing."""
    if value is None or not math.isfinite(float(value)):
        return None
    return float(value)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


@dataclass(frozen=True)
class _Matrix:
    examples: list[str]
    values: np.ndarray  # [example, layer·head] float64
    layers: int
    heads: int


def _matrix(frame: pd.DataFrame, statistic: str, name: str = "frame") -> _Matrix:
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
    return _Matrix([str(e) for e in examples], values, layers, heads)


def _percentiles(m: _Matrix) -> pd.DataFrame:
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
                "mean_spearman": _num(self.stability_mean),
                "median_spearman": _num(self.stability_median),
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
            f"pairs): mean {_fmt(self.stability_mean)}, median {_fmt(self.stability_median)}",
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


def _summarize(m: _Matrix, statistic: str, tau: float, top_n: int) -> HeadSummary:
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


def _check_options(tau: float, top_n: int) -> None:
    if not math.isfinite(tau):
        raise ValueError(f"tau must be a finite number, got {tau}")
    if top_n < 1:
        raise ValueError(f"top_n must be at least 1, got {top_n}")


def summarize(
    frame: pd.DataFrame,
    *,
    statistic: HeadStatistic = "upper",
    tau: float = 1.5,
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
        non-finite value, an unknown `statistic`, a non-finite `tau` or ``top_n < 1``.

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
    _check_options(tau, top_n)
    return _summarize(_matrix(frame, statistic), statistic, tau, top_n)


@dataclass(frozen=True)
class MannWhitney:
    """A two-sided Mann–Whitney U test of dataset A's counts against dataset B's.

    Attributes
    ----------
    u : float
        scipy's statistic: ``U_A`` = number of pairs ``(a, b)`` with ``a > b`` plus half the
        ties.
    p_value : float
        Two-sided p-value (scipy's default method: exact for small samples without ties,
        else the normal approximation).
    effect : float
        Rank-biserial correlation ``r = 1 − 2·U_A / (n_A·n_B)`` in ``[−1, 1]``; equal to
        ``P(b > a) − P(a > b)`` over all pairs: **positive when dataset B has more heads above
        the threshold**, negative when A has more, 0 for no difference.
    """

    u: float
    p_value: float
    effect: float

    def to_dict(self) -> dict[str, float | None]:
        return {"u": _num(self.u), "p_value": _num(self.p_value), "effect": _num(self.effect)}


def _mann_whitney(a: np.ndarray, b: np.ndarray) -> MannWhitney:
    test = mannwhitneyu(a, b, alternative="two-sided")
    u = float(test.statistic)
    return MannWhitney(u, float(test.pvalue), 1.0 - 2.0 * u / (len(a) * len(b)))


@dataclass
class Comparison:
    """Two datasets' head counts and head rankings side by side.

    Attributes
    ----------
    labels : tuple of str
        Names of dataset A and B.
    statistic, tau
        As in :func:`summarize`.
    common_threshold : float
        The 95th percentile of the pooled values of both datasets (see :func:`compare`).
    counts : pandas.DataFrame
        ``dataset, example, above_tau, above_common``: one row per example of either dataset.
    tests : dict of str to MannWhitney
        ``"tau"`` and ``"common"``: A's counts against B's.
    rank_correlation, rank_correlation_p : float
        Spearman rho (and its p-value) between the two datasets' per-head median vectors.
    a, b : HeadSummary
        Each dataset's own summary (percentiles, layer profile, stability).
    """

    labels: tuple[str, str]
    statistic: str
    tau: float
    common_threshold: float
    counts: pd.DataFrame
    tests: dict[str, MannWhitney]
    rank_correlation: float
    rank_correlation_p: float
    a: HeadSummary
    b: HeadSummary

    def count_stats(self) -> pd.DataFrame:
        """``dataset, n, mean/median of above_tau, mean/median of above_common``."""
        grouped = self.counts.groupby("dataset", sort=False)
        table = grouped.agg(
            n=("example", "size"),
            mean_above_tau=("above_tau", "mean"),
            median_above_tau=("above_tau", "median"),
            mean_above_common=("above_common", "mean"),
            median_above_common=("above_common", "median"),
        )
        return table.reindex(list(self.labels)).reset_index()

    def layer_profiles(self) -> pd.DataFrame:
        """``layer, <label A>, <label B>``: counts of each dataset's top heads per layer."""
        return pd.DataFrame(
            {
                "layer": np.arange(self.a.n_layers),
                self.labels[0]: self.a.layer_counts,
                self.labels[1]: self.b.layer_counts,
            }
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable comparison."""
        stats = self.count_stats()
        per_dataset = {
            str(row["dataset"]): {
                "n": int(row["n"]),
                **{k: _num(v) for k, v in row.items() if k not in ("dataset", "n")},
            }
            for row in stats.to_dict(orient="records")
        }
        return {
            "labels": list(self.labels),
            "statistic": self.statistic,
            "tau": self.tau,
            "common_threshold": self.common_threshold,
            "common_threshold_definition": "95th percentile of the pooled values of both datasets",
            "counts": per_dataset,
            "mann_whitney": {k: v.to_dict() for k, v in self.tests.items()},
            "effect_sign": "rank-biserial r = 1 - 2U/(n_a n_b) > 0 means the second dataset "
            f"({self.labels[1]}) has more heads above the threshold",
            "median_rank_correlation": {
                "spearman": _num(self.rank_correlation),
                "p_value": _num(self.rank_correlation_p),
            },
            "layer_profile": {
                "top_n": self.a.top_n,
                self.labels[0]: {
                    "counts": [int(c) for c in self.a.layer_counts],
                    "mean_relative_depth": self.a.mean_depth,
                },
                self.labels[1]: {
                    "counts": [int(c) for c in self.b.layer_counts],
                    "mean_relative_depth": self.b.mean_depth,
                },
            },
            "stability": {
                self.labels[0]: _num(self.a.stability_mean),
                self.labels[1]: _num(self.b.stability_mean),
            },
        }

    def to_markdown(self) -> str:
        """A short Markdown report of the comparison."""
        la, lb = self.labels
        lines = [
            f"# {la} vs {lb}: heads with high {self.statistic}",
            "",
            f"Thresholds: τ = {self.tau:g}; common = {self.common_threshold:.3f} (95th "
            "percentile of the pooled values of both datasets).",
            "",
            "| dataset | examples | mean > τ | median > τ | mean > common | median > common |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for row in self.count_stats().itertuples(index=False):
            lines.append(
                f"| {row.dataset} | {row.n} | {row.mean_above_tau:.1f} | "
                f"{row.median_above_tau:g} | {row.mean_above_common:.1f} | "
                f"{row.median_above_common:g} |"
            )
        lines += ["", "Mann–Whitney U (two-sided), counts of A against B:", ""]
        for name, test in self.tests.items():
            what = f"> τ = {self.tau:g}" if name == "tau" else "> common threshold"
            lines.append(
                f"- {what}: U = {test.u:g}, p = {_fmt(test.p_value, 4)}, rank-biserial "
                f"r = {_fmt(test.effect)} (r > 0: {lb} has more such heads)"
            )
        lines += [
            "",
            f"Spearman correlation of the per-head medians: {_fmt(self.rank_correlation)} "
            f"(p = {_fmt(self.rank_correlation_p, 4)}).",
            f"Top {self.a.top_n} heads by median, mean relative depth: {la} "
            f"{self.a.mean_depth:.2f}, {lb} {self.b.mean_depth:.2f}.",
            "",
        ]
        return "\n".join(lines)


def compare(
    frame_a: pd.DataFrame,
    frame_b: pd.DataFrame,
    *,
    labels: tuple[str, str] = ("a", "b"),
    statistic: HeadStatistic = "upper",
    tau: float = 1.5,
    top_n: int = 20,
) -> Comparison:
    """Do the examples of dataset B recruit more high-RC heads than those of A?

    Parameters
    ----------
    frame_a, frame_b : pandas.DataFrame
        Long tables of :func:`rcstat.heads.collect` from the same model.
    labels : (str, str), default ("a", "b")
        Names of the two datasets (distinct).
    statistic, tau, top_n
        As in :func:`summarize`.

    Returns
    -------
    Comparison

    Raises
    ------
    ValueError
        Frames with different numbers of layers or heads (different models), equal labels,
        or any problem :func:`summarize` reports.

    Notes
    -----
    Each example is reduced to its number of heads above a threshold, then the two samples of
    counts are compared with ``scipy.stats.mannwhitneyu(a, b, alternative="two-sided")``.
    Two thresholds: the absolute ``tau`` and a **common** one, the 95th percentile of the
    *pooled* values of both datasets. A per-dataset 95th percentile would put about 5 % of
    each dataset's values above its own threshold by construction, so both datasets would
    count about the same number of heads whatever their RC; pooling puts both on one scale,
    and a dataset with higher RC then has more heads above it. The effect size is the
    rank-biserial correlation ``r = 1 − 2U/(n_a·n_b)``, positive when B's counts are larger.
    The paper's §5.1 reports "QMSum requires 9× more high-RC heads than SQuAD (p < 0.05)".
    """
    _check_options(tau, top_n)
    if len(labels) != 2 or labels[0] == labels[1]:
        raise ValueError(f"labels must be two distinct names, got {labels!r}")
    ma, mb = _matrix(frame_a, statistic, "frame_a"), _matrix(frame_b, statistic, "frame_b")
    if (ma.layers, ma.heads) != (mb.layers, mb.heads):
        raise ValueError(
            f"the datasets come from different models: {ma.layers}×{ma.heads} vs "
            f"{mb.layers}×{mb.heads} (layers × heads)"
        )
    common = float(np.percentile(np.concatenate([ma.values.ravel(), mb.values.ravel()]), 95))
    parts = []
    for label, m in zip(labels, (ma, mb), strict=True):
        parts.append(
            pd.DataFrame(
                {
                    "dataset": label,
                    "example": m.examples,
                    "above_tau": (m.values > tau).sum(axis=1),
                    "above_common": (m.values > common).sum(axis=1),
                }
            )
        )
    counts = pd.concat(parts, ignore_index=True)
    tests = {
        name: _mann_whitney(
            parts[0][column].to_numpy(dtype=float), parts[1][column].to_numpy(dtype=float)
        )
        for name, column in (("tau", "above_tau"), ("common", "above_common"))
    }
    sa, sb = _summarize(ma, statistic, tau, top_n), _summarize(mb, statistic, tau, top_n)
    med_a, med_b = sa.median.ravel(), sb.median.ravel()
    if np.ptp(med_a) == 0 or np.ptp(med_b) == 0:
        rho, rho_p = math.nan, math.nan  # a constant vector has no ranking
    else:
        result = spearmanr(med_a, med_b)
        rho, rho_p = float(result.statistic), float(result.pvalue)
    return Comparison(
        labels=(str(labels[0]), str(labels[1])),
        statistic=statistic,
        tau=float(tau),
        common_threshold=common,
        counts=counts,
        tests=tests,
        rank_correlation=rho,
        rank_correlation_p=rho_p,
        a=sa,
        b=sb,
    )
