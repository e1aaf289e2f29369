"""The summaries of a ``rcstat bench grounding`` run folder, as plain functions of it:
:func:`summarize` reads ``predictions.jsonl`` (and the per-token files ``tokens/<hash>.npz``)
of the folder and writes ``scores.csv``, ``errors.csv``, ``metrics.csv``, ``detection.csv``,
``breakdown.csv``, ``probe_folds.csv``, ``probe_rc.json``, ``spans.csv`` and ``roc.png`` where
it is told, returning the report (``report.json``'s content).

Every score is oriented "higher = more supported"; the metrics take ``-score`` as the
hallucination score. The datasets of pairs (:data:`~rcstat.evaluation.choices.PAIR_DATASETS`)
are summarised by :func:`contrast_table` (how often the supporting item scores higher), the
others by :func:`metrics_table` (AUROC, AUC-PR with intervals over groups, threshold
transfer), :func:`detection_table` (example- and span-level detection at both verdicts), the
grouped probes (:func:`probe_summary`, :func:`span_summary`) and the ROC curves
(:func:`plot_roc`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rcstat.evaluation.choices import PAIR_DATASETS, SCOPED_DATASETS, SPAN_DATASETS
from rcstat.evaluation.grounding_methods import (
    BASELINES,
    PREDICTIONS,
    TOKENS,
    VARIANTS,
    token_file_name,
)
from rcstat.grounding.cross_validation import cross_validate
from rcstat.grounding.measurement import feature_names
from rcstat.grounding.probe import GroundingProbe
from rcstat.metrics.detector import breakdown, evaluate
from rcstat.metrics.ranking import auc_pr, auroc, token_auroc
from rcstat.metrics.spans import char_prf, example_prf, group_bootstrap
from rcstat.metrics.thresholds import threshold_transfer
from rcstat.report.plots import save_figure
from rcstat.runs.rows import read_jsonl

__all__ = [
    "SEED",
    "VERDICTS",
    "contrast_table",
    "detection_table",
    "method_kind",
    "metrics_table",
    "one_class_note",
    "plot_roc",
    "probe_summary",
    "scores_frame",
    "span_summary",
    "summarize",
]

#: The verdicts whose example- and span-level detection is reported: the default (the
#: grounder's: the trained detector when one ships) and the zero-shot word score's.
VERDICTS = ("rcstat", "zero_shot")
#: The seed of every resampling, fold split and probe of the summaries.
SEED = 0


def scores_frame(out: Path) -> pd.DataFrame:
    """One row per measured item of the run folder ``out``: label, group, breakdown key and
    every method's score (``ValueError`` when no item could be measured)."""
    predictions = out / PREDICTIONS
    rows = []
    for line in read_jsonl(predictions):
        if line.get("error"):
            continue
        row = {k: line[k] for k in ("item", "label", "group", "by", "pair")}
        row.update(line["scores"])
        row["threshold"] = line.get("threshold", float("nan"))
        row["zero_shot_threshold"] = line.get("zero_shot_threshold", float("nan"))
        row["verdict"] = line.get("verdict")
        for key in ("spans", "zero_shot_spans", "labelled_spans"):
            row[key] = line.get(key)
        row.update({f"stored:{k}": v for k, v in line["detectors"].items()})
        row["tokens"] = line["tokens"]
        row["context_tokens"] = line["context_tokens"]
        rows.append(row)
    if not rows:
        raise ValueError(f"no item could be measured (see {predictions})")
    return pd.DataFrame(rows)


def summarize(
    out: Path,
    into: Path,
    dataset: str,
    *,
    layers: int,
    heads: int,
    n_resamples: int,
    seed: int = SEED,
) -> dict[str, Any]:
    """Write the summaries of the run folder ``out`` (a run of ``dataset`` on a model of
    ``layers`` × ``heads``) into ``into``; return the report."""
    frame = scores_frame(out)
    frame.to_csv(into / "scores.csv", index=False)
    lines = read_jsonl(out / PREDICTIONS)
    errors = [(v["item"], v["error"]) for v in lines if v.get("error")]
    pd.DataFrame(errors, columns=["item", "error"]).to_csv(into / "errors.csv", index=False)
    report: dict[str, Any] = {
        "dataset": dataset,
        "items": len(frame),
        "errors": len(errors),
        "positives": int(frame["label"].sum()),
    }
    methods = [*VARIANTS, *BASELINES, *sorted(c for c in frame if c.startswith("stored:"))]
    if dataset in PAIR_DATASETS:
        table = contrast_table(frame, methods)
    else:
        table = metrics_table(frame, methods, n_resamples=n_resamples, seed=seed)
        if dataset in SCOPED_DATASETS:
            scoped = [
                metrics_table(
                    frame[frame["by"] == key], methods, n_resamples=n_resamples, seed=seed
                ).assign(scope=key)
                for key in sorted(set(frame["by"]))
            ]
            table = pd.concat([table.assign(scope="all"), *scoped], ignore_index=True)
        detection = detection_table(frame, dataset, n_resamples=n_resamples, seed=seed)
        if not detection.empty:
            detection.to_csv(into / "detection.csv", index=False)
            report["detection"] = detection.to_dict(orient="records")
        if dataset == "faithbench":
            breakdown(
                -frame["rcstat"].to_numpy(), frame["label"].to_numpy(), frame["by"].tolist()
            ).to_csv(into / "breakdown.csv", index=False)
        if dataset in SPAN_DATASETS:
            report["spans"] = _or_note(
                lambda: span_summary(frame, out / TOKENS, into, layers, heads, seed=seed)
            )
        report["probe"] = _or_note(
            lambda: probe_summary(frame, lines, into, dataset, layers, heads, seed=seed)
        )
        if table.empty:  # no metric, no curve: say why instead
            report["note"] = one_class_note(frame)
        else:
            plot_roc(frame, list(table["method"]), into / "roc.png")
    table.to_csv(into / "metrics.csv", index=False)
    report["metrics"] = table.to_dict(orient="records")
    return report


def metrics_table(
    frame: pd.DataFrame, methods: Sequence[str], *, n_resamples: int, seed: int = SEED
) -> pd.DataFrame:
    """Per method scored on both classes: its AUROC (and of the best orientation), AUC-PR,
    their 95 % intervals from resampling whole groups, and the balanced accuracy of a threshold
    chosen on half the groups and applied to the other half (a ``note`` says which of these a
    small run could not give)."""
    rows = []
    for method in methods:
        part = frame[frame[method].notna()]
        if part["label"].nunique() < 2:
            continue
        hallucination = -part[method].to_numpy(dtype=np.float64)
        labels = part["label"].to_numpy(dtype=bool)
        groups = part["group"].tolist()
        row: dict[str, Any] = {"method": method, "kind": method_kind(method), "n": len(part)}
        row["auroc"] = auroc(hallucination, labels)
        row["auroc_best_orientation"] = max(row["auroc"], 1 - row["auroc"])
        row["auc_pr"] = auc_pr(hallucination, labels)
        notes = []
        try:  # a run over few groups may have resamples or halves with one class only
            report = evaluate(
                hallucination,
                labels,
                groups=groups,
                n_resamples=n_resamples,
                seed=seed,
                transfer=False,  # below, apart: its failure leaves the intervals
            )
            row["auroc_lo"], row["auroc_hi"] = report.auroc_interval
            row["auc_pr_lo"], row["auc_pr_hi"] = report.auc_pr_interval
        except ValueError as err:
            notes.append(f"intervals: {err}")
        try:
            transfer = threshold_transfer(hallucination, labels, groups, seed=seed)
            row["balanced_accuracy_transfer"] = transfer.mean_balanced_accuracy
        except ValueError as err:  # its messages name it already
            text = str(err)
            notes.append(
                text if text.startswith("threshold transfer") else f"threshold transfer: {text}"
            )
        row["note"] = "; ".join(notes)
        rows.append(row)
    columns = [
        "method",
        "kind",
        "n",
        "auroc",
        "auroc_lo",
        "auroc_hi",
        "auroc_best_orientation",
        "auc_pr",
        "auc_pr_lo",
        "auc_pr_hi",
        "balanced_accuracy_transfer",
        "note",
    ]
    return pd.DataFrame(rows).reindex(columns=columns)


def detection_table(
    frame: pd.DataFrame, dataset: str, *, n_resamples: int, seed: int = SEED
) -> pd.DataFrame:
    """Example-level precision / recall / F1 and the share of faithful responses flagged at
    each verdict of :data:`VERDICTS`, and (where spans are labelled) the character-level span
    precision / recall / F1 of its unsupported spans, each with a 95 % interval from
    resampling whole groups; for every scope (all, and each breakdown key of a scoped
    dataset)."""
    if "verdict" not in frame or frame["verdict"].isna().all():
        return pd.DataFrame()
    scopes = [("all", frame)]
    if dataset in SCOPED_DATASETS:
        scopes += [(key, frame[frame["by"] == key]) for key in sorted(set(frame["by"]))]
    rows = []
    for scope, part in scopes:
        y = part["label"].to_numpy(dtype=bool)
        groups = part["group"].tolist()
        gold = [list(map(tuple, v or [])) for v in part["labelled_spans"]]
        for verdict in VERDICTS:
            if verdict == "rcstat":
                flagged = (part["verdict"] == "unsupported").to_numpy()
                spans = [list(map(tuple, v or [])) for v in part["spans"]]
            else:
                flagged = (part["zero_shot"] < part["zero_shot_threshold"]).to_numpy()
                spans = [list(map(tuple, v or [])) for v in part["zero_shot_spans"]]
            rows.append(
                {
                    "scope": scope,
                    "verdict": verdict,
                    **_detection_row(
                        flagged,
                        y,
                        spans,
                        gold,
                        groups,
                        dataset in SPAN_DATASETS,
                        n_resamples,
                        seed,
                    ),
                }
            )
    return pd.DataFrame(rows)


def _detection_row(
    flagged: np.ndarray,
    y: np.ndarray,
    spans: list[list[tuple[int, int]]],
    gold: list[list[tuple[int, int]]],
    groups: list[str],
    with_spans: bool,
    n_resamples: int,
    seed: int,
) -> dict[str, Any]:
    """One row of :func:`detection_table` (NaN where a metric is undefined)."""

    def example(index: np.ndarray) -> tuple[float, float, float, float]:
        found = example_prf(flagged[index], y[index])
        faithful = ~y[index]
        alarms = float(flagged[index][faithful].mean()) if faithful.any() else float("nan")
        return found.precision, found.recall, found.f1, alarms

    def characters(index: np.ndarray) -> tuple[float, float, float]:
        found = char_prf([spans[i] for i in index], [gold[i] for i in index])
        return found.precision, found.recall, found.f1

    everything = np.arange(len(y))
    row: dict[str, Any] = {"n": len(y), "unsupported": int(y.sum())}
    kept = ("example_precision", "example_recall", "example_f1", "false_alarms")
    row.update(dict(zip(kept, example(everything), strict=True)))
    measures: list[tuple[str, Callable[[np.ndarray], float]]] = [
        ("example_f1", lambda i: example(i)[2]),
        ("false_alarms", lambda i: example(i)[3]),
    ]
    if with_spans:
        span_names = ("span_precision", "span_recall", "span_f1")
        row.update(dict(zip(span_names, characters(everything), strict=True)))
        measures.append(("span_f1", lambda i: characters(i)[2]))
    for name, measure in measures:
        try:
            row[f"{name}_lo"], row[f"{name}_hi"] = group_bootstrap(
                measure, len(y), groups=groups, n_resamples=n_resamples, seed=seed
            )
        except ValueError:
            row[f"{name}_lo"] = row[f"{name}_hi"] = float("nan")
    return row


def contrast_table(frame: pd.DataFrame, methods: Sequence[str]) -> pd.DataFrame:
    """Per method, over the pairs: how often the supporting item scores higher than the
    unsupported one, and ties; for ``rcstat``, the share of each flagged at its threshold."""
    rows = []
    for method in methods:
        if method not in frame:
            continue
        pivot = frame.pivot_table(index="pair", columns="label", values=method)
        pivot = pivot.dropna()
        wins = (pivot[False] > pivot[True]).to_numpy()
        ties = (pivot[False] == pivot[True]).to_numpy()
        row = {
            "method": method,
            "kind": method_kind(method),
            "pairs": len(pivot),
            "supporting_higher": float(wins.mean()),
            "ties": float(ties.mean()),
        }
        if method == "rcstat":  # the verdicts at the grounder's threshold
            flagged = frame["rcstat"] < frame["threshold"]
            row["supported_flagged"] = float(flagged[~frame["label"]].mean())
            row["unsupported_flagged"] = float(flagged[frame["label"]].mean())
        rows.append(row)
    return pd.DataFrame(rows)


def span_summary(
    frame: pd.DataFrame,
    tokens: Path,
    into: Path,
    layers: int,
    heads: int,
    *,
    seed: int = SEED,
) -> dict[str, Any]:
    """Token-level AUROC of the zero-shot score and of a token probe on the annotated
    unwanted spans (hallucinated responses with annotated spans only; their per-token files in
    the folder ``tokens``), written to ``into/spans.csv``."""
    scores, labels, features, groups = [], [], [], []
    for item, group, label in zip(frame["item"], frame["group"], frame["label"], strict=True):
        path = tokens / token_file_name(item)
        if not label or not path.is_file():
            continue
        with np.load(path) as data:
            if not data["label"].any():
                continue
            scores.append(1 - data["score"])
            labels.append(data["label"])
            features.append(np.hstack([data["rc"], data["lookback"]]).astype(np.float32))
            groups.extend([group] * len(data["label"]))
    if not labels:
        return {"note": "no annotated span"}
    result: dict[str, Any] = {
        "responses": len(labels),
        "tokens": int(sum(len(v) for v in labels)),
        "span_tokens": int(sum(int(v.sum()) for v in labels)),
        "rcstat_zero_shot_token_auroc": token_auroc(scores, labels),
    }
    num_heads = layers * heads
    names = [n for n in feature_names(layers, heads) if not n.startswith("attention_score")]
    x, y = np.vstack(features), np.concatenate(labels)
    folds = {}
    for name, columns in (("rc", slice(0, num_heads)), ("lookback", slice(num_heads, None))):
        cv = cross_validate(
            x[:, columns],
            y,
            groups,
            feature_names=names[columns],
            n_splits=5,
            seed=seed,
            max_features=(8, 32, None),
            Cs=(0.01, 0.1),
        )
        folds[name] = cv.auroc
    flat = {**result, **{f"probe_{k}_token_auroc": v for k, v in folds.items()}}
    pd.DataFrame([flat]).to_csv(into / "spans.csv", index=False)
    result["probe_token_auroc"] = folds
    return result


def probe_summary(
    frame: pd.DataFrame,
    lines: list[dict[str, Any]],
    into: Path,
    dataset: str,
    layers: int,
    heads: int,
    *,
    seed: int = SEED,
) -> dict[str, Any]:
    """Grouped 5-fold probes on RC features vs lookback features (same folds), from the rows'
    ``head_features``: ``into/probe_folds.csv``, and the RC probe fitted on every item,
    ``into/probe_rc.json``."""
    means = {v["item"]: v["head_features"] for v in lines if not v.get("error")}
    x = np.array([means[i] for i in frame["item"]], dtype=np.float64)  # [n, 3·L·H]
    y = frame["label"].to_numpy(dtype=bool)
    groups = frame["group"].tolist()
    names = feature_names(layers, heads)
    size = layers * heads
    out: dict[str, Any] = {}
    folds = []
    for name, columns in (("rc", slice(0, size)), ("lookback", slice(size, 2 * size))):
        cv = cross_validate(x[:, columns], y, groups, feature_names=names[columns], seed=seed)
        out[name] = {"auroc": cv.auroc, "balanced_accuracy": cv.balanced_accuracy}
        folds.append(cv.folds_frame().assign(features=name))
        if name == "rc":
            GroundingProbe.fit(
                x[:, columns],
                y,
                groups,
                feature_names=names[columns],
                seed=seed,
                meta={
                    "dataset": dataset,
                    "features": "rc, lower quantile over tokens per head",
                },
            ).save(into / "probe_rc.json")
    pd.concat(folds).to_csv(into / "probe_folds.csv", index=False)
    return out


def _or_note(summary: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The summary, or ``{"note": why}`` when the run is too small for it (e.g. fewer groups
    than cross-validation folds): the other summaries are still written."""
    try:
        return summary()
    except ValueError as err:
        return {"note": str(err)}


def one_class_note(frame: pd.DataFrame) -> str:
    """Why no AUROC (nor ROC curve) could be computed: the measured items hold one class."""
    positives = int(frame["label"].sum())
    return (
        f"no AUROC, interval or ROC curve: the {len(frame)} measured items hold "
        f"{positives} unsupported and {len(frame) - positives} supported responses; each "
        "metric needs both (run on more items, e.g. a larger --n)"
    )


def method_kind(method: str) -> str:
    """What kind of method ``method`` is, as ``metrics.csv`` names it.

    >>> [method_kind(m) for m in ("rcstat", "zero_shot", "lookback", "stored:hhem-2.1")]
    ['rcstat default verdict', 'rcstat variant', 'same-pass baseline', 'stored detector']
    """
    if method == "rcstat":
        return "rcstat default verdict"
    if method in VARIANTS:
        return "rcstat variant"
    if method in BASELINES:
        return "same-pass baseline"
    return "stored detector"


def plot_roc(frame: pd.DataFrame, methods: Sequence[str], path: Path) -> None:
    """ROC curves of the methods (hallucinated = positive, ``-score`` ranks)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import roc_curve

    fig, ax = plt.subplots(figsize=(6, 6))
    for method in methods:
        part = frame[frame[method].notna()]
        labels = part["label"].to_numpy(dtype=bool)
        fpr, tpr, _ = roc_curve(labels, -part[method].to_numpy(dtype=np.float64))
        value = auroc(-part[method].to_numpy(dtype=np.float64), labels)
        style = "-" if method in VARIANTS else ("--" if method in BASELINES else ":")
        width = 2.5 if method == "rcstat" else 1.2
        ax.plot(fpr, tpr, style, lw=width, label=f"{method} ({value:.3f})")
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate (unsupported found)")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("ROC: unsupported responses")
    fig.tight_layout()
    save_figure(fig, path)
