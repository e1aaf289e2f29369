"""The summaries of an attribution benchmark run (``rcstat bench attribution``,
:mod:`rcstat.evaluation.bench.attribution`), rebuilt from every line of its
``predictions.jsonl`` by :func:`write_summaries`: ``units.csv``, ``errors.csv``,
``accuracy.csv`` (per method and ``k``), ``accuracy_by_length.csv`` (:data:`LENGTH_BUCKETS`),
``comparison.csv``, ``table1.csv`` (the rows of the paper's Table 1 rcstat produces) and
``accuracy_vs_k.png`` (Fig. 7).

**Paired comparisons** (``comparison.csv``, :mod:`rcstat.metrics.paired`): the RC rankings at
the table's ``k`` (:func:`table_k`) against mean attention and all heads, per example
(weighted by its units), with a bootstrap interval over examples and the share of examples
each wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from rcstat.evaluation.attribution_scoring import ALL, FIXED, RANKED_METHODS
from rcstat.metrics.paired import paired_difference
from rcstat.report.plots import save_figure
from rcstat.runs.rows import read_jsonl

__all__ = [
    "BASELINES",
    "COMPARED",
    "LENGTH_BUCKETS",
    "TABLE_K",
    "by_length",
    "comparison",
    "plot_accuracy_vs_k",
    "table1",
    "table_k",
    "write_summaries",
]

#: Prompt-length buckets of ``accuracy_by_length.csv``: ``[low, high)`` in tokens.
LENGTH_BUCKETS = ((0, 1000), (1000, 2500), (2500, None))
#: The methods compared with the baselines in ``comparison.csv`` (at the table's k) and the
#: baselines.
COMPARED = ("top", "top_post_softmax", FIXED)
BASELINES = ("attention", ALL)
#: The ``k`` of ``table1.csv`` and ``comparison.csv``: the largest of the run's at most this.
TABLE_K = 20


def write_summaries(
    predictions: Path, into: Path, *, ks: Sequence[int], title: str, most: int = TABLE_K
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write every summary of the lines of ``predictions`` into the folder ``into`` (see the
    module notes; ``ks`` the run's ``k`` values, ``title`` the figure's, ``most`` the largest
    ``k`` of the table); return the accuracy table and the paired comparison.

    Raises
    ------
    ValueError
        No line holds a scored unit (every example failed).
    """
    lines = read_jsonl(predictions)
    errors = [(v["example"], v["error"]) for v in lines if v["error"]]
    pd.DataFrame(errors, columns=["example", "error"]).to_csv(into / "errors.csv", index=False)
    units = pd.DataFrame(
        [
            {
                "example": v["example"],
                "chunks": v["chunks"],
                "prompt_tokens": v.get("prompt_tokens"),
                **r,
            }
            for v in lines
            for r in v["rows"]
        ]
    )
    if units.empty:
        raise ValueError(f"no example could be scored (see {predictions})")
    units.to_csv(into / "units.csv", index=False)
    accuracy = _accuracy(units, ["method", "k"])
    chance = float((1.0 / units.drop_duplicates(["example", "unit"])["chunks"]).mean())
    accuracy["chance"] = chance
    accuracy.to_csv(into / "accuracy.csv", index=False)
    by_length(units).to_csv(into / "accuracy_by_length.csv", index=False)
    compared = comparison(units, ks, most)
    compared.to_csv(into / "comparison.csv", index=False)
    table1(accuracy, ks, most).to_csv(into / "table1.csv", index=False)
    plot_accuracy_vs_k(accuracy, into / "accuracy_vs_k.png", title=title)
    return accuracy, compared


def table_k(ks: Sequence[int], most: int = TABLE_K) -> int | None:
    """The ``k`` of the table: the largest of ``ks`` at most ``most`` (None: none is).

    >>> table_k([1, 5, 50, 270]), table_k([50, 270])
    (5, None)
    """
    return max(v for v in ks if v <= most) if min(ks) <= most else None


def comparison(units: pd.DataFrame, ks: Sequence[int], most: int = TABLE_K) -> pd.DataFrame:
    """Each of :data:`COMPARED` at the table's k (:func:`table_k`) against each of
    :data:`BASELINES`, paired over examples (accuracy in points; see
    :mod:`rcstat.metrics.paired`)."""
    k = table_k(ks, most)
    per = (
        units.groupby(["method", "k", "example"], sort=False)
        .agg(correct=("correct", "sum"), units=("correct", "size"))
        .reset_index()
    )
    per["accuracy"] = 100 * per["correct"] / per["units"]

    def scores(method: str, want_k: int | None) -> pd.DataFrame:
        part = per[per["method"] == method]
        return part[part["k"] == want_k] if want_k is not None else part

    rows = []
    for method in COMPARED:
        ours = scores(method, k)
        for baseline in BASELINES:
            theirs = scores(baseline, None)
            both = ours.merge(theirs, on="example", suffixes=("", "_base"))
            if both.empty:
                continue
            found = paired_difference(
                both["accuracy"], both["accuracy_base"], weights=both["units"]
            )
            rows.append({"method": method, "k": k, "baseline": baseline, **found.to_dict()})
    return pd.DataFrame(rows)


def table1(accuracy: pd.DataFrame, ks: Sequence[int], most: int = TABLE_K) -> pd.DataFrame:
    """The rows of the paper's Table 1 that the accuracy table holds (in points), at the
    table's k (:func:`table_k`)."""
    k = table_k(ks, most)
    wanted = [
        ("attention", None, "mean attention (all heads)"),
        (ALL, None, "RC, all heads"),
        ("bottom", k, f"least RC, k={k}"),
        ("top", k, f"most RC, k={k}"),
        (FIXED, k, f"most RC, one set for the dataset, k={k}"),
        ("bottom_post_softmax", k, f"least RC post-softmax, k={k}"),
        ("top_post_softmax", k, f"most RC post-softmax, k={k}"),
    ]
    rows = []
    for method, want_k, label in wanted:
        hit = accuracy[accuracy["method"] == method]
        if want_k is not None:
            hit = hit[hit["k"] == want_k]
        if len(hit):
            rows.append({"row": label, "accuracy": 100 * float(hit["accuracy"].iloc[0])})
    return pd.DataFrame(rows)


def by_length(units: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per method, k and prompt-length bucket (:data:`LENGTH_BUCKETS`)."""
    tokens = pd.to_numeric(units["prompt_tokens"], errors="coerce")
    bucket = pd.Series("unknown", index=units.index)
    for low, high in LENGTH_BUCKETS:
        inside = (tokens >= low) & (tokens < high if high is not None else True)
        bucket[inside] = f"{low}-{high}" if high is not None else f">={low}"
    return _accuracy(units.assign(bucket=bucket), ["method", "k", "bucket"])


def _accuracy(units: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Per group of the columns ``by``: the share of correct units (``accuracy``), the number
    of units and of examples."""
    return (
        units.groupby(by)
        .agg(
            accuracy=("correct", "mean"),
            units=("correct", "size"),
            examples=("example", "nunique"),
        )
        .reset_index()
    )


def plot_accuracy_vs_k(accuracy: pd.DataFrame, path: Path, *, title: str) -> None:
    """Accuracy vs number of heads for the ranked methods, with the all-heads, attention and
    chance levels as horizontal lines (the paper's Fig. 7)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for method in (*RANKED_METHODS, FIXED):
        part = accuracy[accuracy["method"] == method].sort_values("k")
        if len(part):
            style = "-" if method.startswith("top") else "--"
            ax.plot(part["k"], 100 * part["accuracy"], style, marker="o", label=method)
    for method, color in ((ALL, "black"), ("attention", "tab:gray")):
        part = accuracy[accuracy["method"] == method]
        if len(part):
            ax.axhline(100 * float(part["accuracy"].iloc[0]), color=color, ls=":", label=method)
    chance = 100 * float(accuracy["chance"].iloc[0])  # a colour no ranked method's curve takes
    ax.axhline(chance, color="tab:olive", ls="-.", label="chance")
    ax.set_xscale("log")
    ax.set_xlabel("number of heads k")
    ax.set_ylabel("chunk-level accuracy (%)")
    ax.set_title(f"{title}: attribution accuracy vs k")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
