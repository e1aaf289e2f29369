"""The summaries of a ``rcstat bench kv`` run folder, rebuilt from its rows (paper §5.2).

:func:`write_summaries` reads ``predictions.jsonl`` and writes ``results.csv`` (per example, with
whether each answer finished or was cut at ``max_new_tokens``), ``errors.csv`` (the items
recorded with an error, left out of the rest), ``summary.csv``, ``comparison.csv``
(:func:`comparison`), the paper-shaped ``<dataset>_<model>_baseline_df.csv`` (mean/std VER per
method and ratio) and ``<dataset>_<model>_proposed_df.csv`` (mean/std VER and realized ratio per
threshold ``c`` and window), and ``ver_vs_ratio.png`` / ``rougeL_vs_ratio.png`` (the paper's
Fig. 5/6).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rcstat.evaluation.kv_settings import KNOB_DEFAULTS, mode_group
from rcstat.report.plots import save_figure
from rcstat.runs.rows import read_jsonl

__all__ = ["COMPARED_METRICS", "SETTING_COLUMNS", "comparison", "curves", "write_summaries"]

#: The columns that name a setting in the summaries.
SETTING_COLUMNS = ["method", "ratio", "threshold", "window", *KNOB_DEFAULTS]
#: The metrics ``comparison.csv`` compares, and whether higher is better.
COMPARED_METRICS = (("ver", False), ("rougeL_vs_full", True))


def write_summaries(
    rows: Path, into: Path, dataset: str, model_name: str
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write the per-example table, the summaries and the plots of every row of the row file
    ``rows`` into the folder ``into``; return the summary and the paired comparison.

    Raises
    ------
    ValueError
        ``rows`` holds no row, or every item failed.
    """
    frame = pd.DataFrame(read_jsonl(rows))
    if frame.empty:
        raise ValueError(f"{rows} holds no rows")
    frame.to_csv(into / "results.csv", index=False)
    if "error" in frame:
        failed = frame[frame["error"].notna()]
        failed[["work_id", "error"]].to_csv(into / "errors.csv", index=False)
        frame = frame[frame["error"].isna()]
    if frame.empty:
        raise ValueError(f"every item failed (see {into / 'errors.csv'})")
    frame = _window_as_text(frame)
    summary = (
        frame.groupby(SETTING_COLUMNS, dropna=False, sort=False)
        .agg(
            ver_mean=("ver", "mean"),
            ver_std=("ver", "std"),
            ratio_mean=("realized_ratio", "mean"),
            ratio_std=("realized_ratio", "std"),
            rouge1=("rouge1", "mean"),
            rougeL=("rougeL", "mean"),
            rougeL_vs_full=("rougeL_vs_full", "mean"),
            examples=("example", "nunique"),
        )
        .reset_index()
    )
    summary.to_csv(into / "summary.csv", index=False)
    compared = comparison(frame)
    compared.to_csv(into / "comparison.csv", index=False)
    stem = f"{dataset}_{Path(model_name).name or 'model'}"
    baselines = summary[summary["method"] != "rcstat"]
    baselines[["method", "ratio", "ver_mean", "ver_std"]].to_csv(
        into / f"{stem}_baseline_df.csv", index=False
    )
    proposed = summary[(summary["method"] == "rcstat") & summary["threshold"].notna()]
    proposed[["threshold", "window", "ver_mean", "ver_std", "ratio_mean", "ratio_std"]].to_csv(
        into / f"{stem}_proposed_df.csv", index=False
    )
    _plot(summary, into)
    return summary, compared


def _window_as_text(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the window as text (a number of tokens, or the question)."""
    return frame.assign(window=frame["window"].astype(str))


def curves(summary: pd.DataFrame, metric: str) -> list[tuple[str, pd.DataFrame]]:
    """The curves of ``metric`` against the realized ratio in ``summary``: one a press setting
    (a baseline by its name; RCStat by mode, window and the knobs off their defaults, the GQA
    rule's being the mode's), each with its label and its rows in order of realized ratio. A
    baseline's RCStat knobs are empty (``NaN``): such rows form their own curve instead of
    being dropped."""
    mode = summary["threshold"].notna().rename("mode")
    knobs = [summary[c] for c in SETTING_COLUMNS if c not in ("ratio", "threshold")]
    found = []
    for (method, window, *options, threshold), part in summary.groupby(
        [*knobs, mode], sort=False, dropna=False
    ):
        knob = dict(zip(KNOB_DEFAULTS, options, strict=True))
        rule = mode_group(None if threshold else float(part["ratio"].iloc[0]))
        defaults = {**KNOB_DEFAULTS, "group": rule}  # the GQA rule's default is the mode's
        shown = [f"{n} {v}" for n, v in knob.items() if v != defaults[n]]
        if threshold or knob["budget"] == "layer":  # the floor belongs to the pooled budget
            shown = [text for text in shown if not text.startswith("floor")]
        extra = "".join(f", {text}" for text in shown)
        kind = "threshold c" if threshold else "target ratio"
        name = f"{method} ({kind}, w = {window}{extra})" if method == "rcstat" else str(method)
        found.append((name, part.sort_values("ratio_mean")[["ratio_mean", metric]]))
    return found


def _plot(summary: pd.DataFrame, into: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    for metric, label in (("ver_mean", "VER (lower is better)"), ("rougeL", "ROUGE-L F1")):
        fig, ax = plt.subplots(figsize=(6, 4))
        for name, part in curves(summary, metric):
            ax.plot(part["ratio_mean"], part[metric], marker="o", label=name)
        if metric == "ver_mean" and (summary[metric] > 0).all():
            ax.set_yscale("log")  # VER spans orders of magnitude across ratios
        ax.set_xlabel("realized compression ratio")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
        save_figure(fig, into / f"{metric.split('_')[0]}_vs_ratio.png")


def comparison(frame: pd.DataFrame) -> pd.DataFrame:
    """RCStat (target-ratio mode) against the best baseline at each ratio, paired by example.

    For every subset (all examples, and answerable / unanswerable ones apart when the rows
    hold both), ratio, window, knobs and metric of :data:`COMPARED_METRICS`: the baseline with
    the best mean at that ratio, both means, their quotient, and
    :func:`~rcstat.metrics.paired.paired_difference` of RCStat minus that baseline over the
    examples both scored (interval, wins, ties, losses).
    """
    from rcstat.metrics.paired import paired_difference

    frame = _window_as_text(frame)
    subsets: list[tuple[str, pd.DataFrame]] = [("all", frame)]
    if "answerable" in frame and frame["answerable"].notna().all():
        answerable = frame["answerable"].astype(bool)
        if answerable.any() and not answerable.all():  # a dataset with both kinds (SQuAD v2)
            subsets += [("answerable", frame[answerable]), ("unanswerable", frame[~answerable])]
    rows = []
    for subset, part in subsets:
        ours = part[(part["method"] == "rcstat") & part["threshold"].isna()]
        baselines = part[part["method"] != "rcstat"]
        knobs = ["window", *KNOB_DEFAULTS]
        for (ratio, *values), mine in ours.groupby(["ratio", *knobs], sort=False):
            at_ratio = baselines[baselines["ratio"] == ratio]
            for metric, higher in COMPARED_METRICS:
                if at_ratio.empty or metric not in part:
                    continue
                means = at_ratio.groupby("method")[metric].mean()
                best = str(means.idxmax() if higher else means.idxmin())
                theirs = at_ratio[at_ratio["method"] == best][["example", metric]]
                both = mine[["example", metric]].merge(theirs, on="example", suffixes=("", "_b"))
                both = both.dropna()
                if both.empty:
                    continue
                found = paired_difference(
                    both[metric], both[f"{metric}_b"], higher_is_better=higher
                )
                ours_mean, best_mean = float(both[metric].mean()), float(both[f"{metric}_b"].mean())
                rows.append(
                    {
                        "subset": subset,
                        "ratio": ratio,
                        **dict(zip(knobs, values, strict=True)),
                        "metric": metric,
                        "baseline": best,
                        "rcstat": ours_mean,
                        "baseline_value": best_mean,
                        "quotient": ours_mean / best_mean if best_mean else float("nan"),
                        **found.to_dict(),
                    }
                )
    return pd.DataFrame(rows)
