"""Grounding benchmark: FaithBench, SummEdits, users' labelled pairs (``jsonl``) and the SQuAD
supporting-vs-unrelated contrast.

Every item (a context and a response) is measured once (:class:`~rcstat.grounding.Measurer`:
the pass with the context and the short prior pass without it); from that measurement every
method is scored, so all of them see the same samples:

* ``rcstat``: the zero-shot score (word ``max(copy, exp(−NLL))``, sentence = weakest word,
  response = weakest sentence; docs/grounding.md);
* the designs it was chosen among, each with the same word and sentence aggregation:
  ``copy_words`` (the copy heads' attention on the word's source alone), ``nll_words``
  (``exp(−NLL_w)`` alone), ``pmi_words`` (``σ(NLL_w without context − NLL_w with it)``: how
  much the context raises the word), and ``exp_rc_nll`` (rcstat's earlier token score
  ``exp(−r·NLL)`` over the contextual heads, sentence = lower 0.2-quantile);
* same-pass baselines: ``lookback`` (Lookback Lens ratio), ``attention_score`` (LLM-Check),
  ``neg_nll``, ``overlap`` (bigram overlap);
* FaithBench's stored detectors (``hhem-2.1``, ``hhem-2.1-english``, GPT judges).

Every score is oriented "higher = more supported"; metrics take ``-score`` as the
hallucination score. The run folder holds ``run.json`` (manifest), ``predictions.jsonl``
(one line per item: its hash, label, group, every method's score and, per head, the lower
quantile over the tokens of each of :data:`~rcstat.grounding.features.HEAD_FEATURES`;
resumable) and, for FaithBench and labelled pairs,
``tokens/<item>.npz`` (per-token scores, labels and per-head statistics for the span-level
evaluation). :meth:`GroundingBench.summarize` rebuilds ``scores.csv``, ``metrics.csv``,
``breakdown.csv``, ``probe_folds.csv``, ``probe_rc.json``, ``spans.csv``, ``contrast.csv``,
``report.json`` and ``roc.png`` from those files.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rcstat.evaluation.bench.common import BenchRun
from rcstat.evaluation.bench.results import GroundingResult
from rcstat.grounding.cross_validation import cross_validate
from rcstat.grounding.grounder import Grounder, sentence_scores
from rcstat.grounding.measure import Measurement, baselines, feature_names
from rcstat.grounding.probe import GroundingProbe
from rcstat.grounding.score import response_words
from rcstat.metrics.detector import breakdown, evaluate
from rcstat.metrics.ranking import auroc, token_auroc
from rcstat.metrics.spans import char_prf, example_prf, group_bootstrap
from rcstat.metrics.thresholds import threshold_transfer
from rcstat.report.plots import save_figure
from rcstat.runs.folder import staged_output
from rcstat.runs.parts import RunFiles
from rcstat.runs.rows import RowFile, read_jsonl
from rcstat.runs.shards import Shard

__all__ = [
    "BASELINES",
    "VARIANTS",
    "GroundingBench",
    "method_scores",
]

#: The kind of run recorded in the manifest.
KIND = "bench grounding"


def token_file_name(item_id: str) -> str:
    """The name of an item's per-token file in ``tokens/``."""
    return hashlib.sha256(item_id.encode()).hexdigest()[:16] + ".npz"


#: The row file of a run and its folder of per-item files, as its parts and their merge see
#: them (:mod:`rcstat.runs.parts`).
RUN_FILES = RunFiles(
    KIND,
    (RowFile("predictions.jsonl", "item", commit=True),),
    folder="tokens",
    key_file=token_file_name,
)
#: The datasets of (supported, unsupported) pairs of one response or one sentence.
PAIR_DATASETS = ("squad-contrast", "squad-swaps")
#: The datasets whose responses carry annotated spans: per-token files and span-level metrics.
SPAN_DATASETS = ("ragtruth", "faithbench", "jsonl")
#: The datasets whose metrics are also given for each breakdown key (RAGTruth's tasks).
SCOPED_DATASETS = ("ragtruth",)
VARIANTS = ("rcstat", "zero_shot", "copy_words", "nll_words", "pmi_words", "exp_rc_nll")
BASELINES = ("lookback", "attention_score", "neg_nll", "overlap", "unigram_overlap")
#: The verdicts whose example- and span-level detection is reported: the default (the
#: grounder's: the trained detector when one ships) and the zero-shot word score's.
VERDICTS = ("rcstat", "zero_shot")


def method_scores(
    grounder: Grounder, measured: Measurement, response: str, context: str
) -> dict[str, float]:
    """Every method's response score (higher = more supported) from one measurement."""
    words = response_words(measured.example.part_text("answer"), measured.token_spans())
    copy = measured.copy_at(grounder.copy_heads)  # [G]
    prior = measured.nll if measured.prior_nll is None else measured.prior_nll
    gain = prior - measured.nll  # [G]: how much the context raised each token
    per_unit = [
        [i for i, w in enumerate(words) if unit.start <= w.start < unit.end]
        for unit in measured.units
    ]

    def weakest(values: np.ndarray) -> float:
        sentences = [values[inside].min() for inside in per_unit if inside]
        return float(min(sentences)) if sentences else float("nan")

    copied = np.array([min(1.0, copy[w.first : w.last].mean()) for w in words])
    likely = np.array([np.exp(-measured.nll[w.first : w.last].sum()) for w in words])
    raised = np.array([1 / (1 + np.exp(-gain[w.first : w.last].sum())) for w in words])
    _, _, old = sentence_scores(measured, grounder.heads, grounder.quantile)
    return {
        "rcstat": grounder.score(measured).score,
        "zero_shot": weakest(np.maximum(copied, likely)),
        "copy_words": weakest(copied),
        "nll_words": weakest(likely),
        "pmi_words": weakest(raised),
        "exp_rc_nll": min(old),
        **baselines(measured, response, context),
    }


@dataclass
class GroundingBench(BenchRun):
    """A resumable grounding benchmark run writing into ``out`` (a
    :class:`~rcstat.evaluation.bench.common.BenchRun`; see the module notes)."""

    seed: int = 0
    n_resamples: int = 1000

    def manifest_options(self, grounder: Grounder) -> dict[str, Any]:
        """The options of the manifest (besides model, tokenizer and rcstat version)."""
        return {"dataset": self.dataset, "method": grounder.method, **self.options}

    def _token_file(self, item_id: str) -> Path:
        return self.out / "tokens" / token_file_name(item_id)

    def frame(self) -> pd.DataFrame:
        """One row per measured item: label, group, breakdown key and every method's score."""
        rows = []
        for line in read_jsonl(self.predictions):
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
            raise ValueError(f"no item could be measured (see {self.predictions})")
        return pd.DataFrame(rows)

    def summarize(self, into: Path | None = None, *, layers: int, heads: int) -> dict[str, Any]:
        """Write the summaries into ``into`` (default ``out``); return the report."""
        into = self.out if into is None else into
        frame = self.frame()
        frame.to_csv(into / "scores.csv", index=False)
        lines = read_jsonl(self.predictions)
        errors = [(v["item"], v["error"]) for v in lines if v.get("error")]
        pd.DataFrame(errors, columns=["item", "error"]).to_csv(into / "errors.csv", index=False)
        report: dict[str, Any] = {
            "dataset": self.dataset,
            "items": len(frame),
            "errors": len(errors),
            "positives": int(frame["label"].sum()),
        }
        methods = [*VARIANTS, *BASELINES, *sorted(c for c in frame if c.startswith("stored:"))]
        if self.dataset in PAIR_DATASETS:
            table = self._contrast(frame, methods)
        else:
            table = self._metrics(frame, methods)
            if self.dataset in SCOPED_DATASETS:
                scoped = [
                    self._metrics(frame[frame["by"] == key], methods).assign(scope=key)
                    for key in sorted(set(frame["by"]))
                ]
                table = pd.concat([table.assign(scope="all"), *scoped], ignore_index=True)
            detection = self._detection(frame)
            if not detection.empty:
                detection.to_csv(into / "detection.csv", index=False)
                report["detection"] = detection.to_dict(orient="records")
            if self.dataset == "faithbench":
                breakdown(
                    -frame["rcstat"].to_numpy(), frame["label"].to_numpy(), frame["by"].tolist()
                ).to_csv(into / "breakdown.csv", index=False)
            if self.dataset in SPAN_DATASETS:
                report["spans"] = _or_note(lambda: self._spans(frame, into, layers, heads))
            report["probe"] = _or_note(lambda: self._probe(frame, lines, into, layers, heads))
            if table.empty:  # no metric, no curve: say why instead
                report["note"] = one_class_note(frame)
            else:
                plot_roc(frame, list(table["method"]), into / "roc.png")
        table.to_csv(into / "metrics.csv", index=False)
        report["metrics"] = table.to_dict(orient="records")
        return report

    def _metrics(self, frame: pd.DataFrame, methods: Sequence[str]) -> pd.DataFrame:
        rows = []
        for method in methods:
            part = frame[frame[method].notna()]
            if part["label"].nunique() < 2:
                continue
            hallucination = -part[method].to_numpy(dtype=np.float64)
            labels = part["label"].to_numpy(dtype=bool)
            groups = part["group"].tolist()
            row: dict[str, Any] = {"method": method, "kind": _kind(method), "n": len(part)}
            row["auroc"] = auroc(hallucination, labels)
            row["auroc_best_orientation"] = max(row["auroc"], 1 - row["auroc"])
            notes = []
            try:  # a run over few groups may have resamples or halves with one class only
                report = evaluate(
                    hallucination,
                    labels,
                    groups=groups,
                    n_resamples=self.n_resamples,
                    seed=self.seed,
                )
                row["auroc_lo"], row["auroc_hi"] = report.auroc_interval
                row["auc_pr"] = report.auc_pr
                row["auc_pr_lo"], row["auc_pr_hi"] = report.auc_pr_interval
            except ValueError as err:
                notes.append(f"intervals: {err}")
            try:
                transfer = threshold_transfer(hallucination, labels, groups, seed=self.seed)
                row["balanced_accuracy_transfer"] = transfer.mean_balanced_accuracy
            except ValueError as err:
                notes.append(f"threshold transfer: {err}")
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

    def _detection(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Example-level precision / recall / F1 and the share of faithful responses flagged
        at each verdict of :data:`VERDICTS`, and (where spans are labelled) the
        character-level span precision / recall / F1 of its unsupported spans, each with a 95 %
        interval from resampling whole groups; for every scope (all, and each breakdown key of
        a scoped dataset)."""
        if "verdict" not in frame or frame["verdict"].isna().all():
            return pd.DataFrame()
        scopes = [("all", frame)]
        if self.dataset in SCOPED_DATASETS:
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
                            self.dataset in SPAN_DATASETS,
                            self.n_resamples,
                            self.seed,
                        ),
                    }
                )
        return pd.DataFrame(rows)

    def _contrast(self, frame: pd.DataFrame, methods: Sequence[str]) -> pd.DataFrame:
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
                "kind": _kind(method),
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

    def _spans(self, frame: pd.DataFrame, into: Path, layers: int, heads: int) -> dict[str, Any]:
        """Token-level AUROC of the zero-shot score and of a token probe on the annotated
        unwanted spans (hallucinated responses with annotated spans only)."""
        scores, labels, features, groups = [], [], [], []
        for item, group, label in zip(frame["item"], frame["group"], frame["label"], strict=True):
            path = self._token_file(item)
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
                seed=self.seed,
                max_features=(8, 32, None),
                Cs=(0.01, 0.1),
            )
            folds[name] = cv.auroc
        flat = {**result, **{f"probe_{k}_token_auroc": v for k, v in folds.items()}}
        pd.DataFrame([flat]).to_csv(into / "spans.csv", index=False)
        result["probe_token_auroc"] = folds
        return result

    def _probe(
        self, frame: pd.DataFrame, lines: list[dict[str, Any]], into: Path, layers: int, heads: int
    ) -> dict[str, Any]:
        """Grouped 5-fold probes on RC features vs lookback features (same folds)."""
        means = {v["item"]: v["head_features"] for v in lines if not v.get("error")}
        x = np.array([means[i] for i in frame["item"]], dtype=np.float64)  # [n, 3·L·H]
        y = frame["label"].to_numpy(dtype=bool)
        groups = frame["group"].tolist()
        names = feature_names(layers, heads)
        size = layers * heads
        out: dict[str, Any] = {}
        folds = []
        for name, columns in (("rc", slice(0, size)), ("lookback", slice(size, 2 * size))):
            cv = cross_validate(
                x[:, columns], y, groups, feature_names=names[columns], seed=self.seed
            )
            out[name] = {"auroc": cv.auroc, "balanced_accuracy": cv.balanced_accuracy}
            folds.append(cv.folds_frame().assign(features=name))
            if name == "rc":
                GroundingProbe.fit(
                    x[:, columns],
                    y,
                    groups,
                    feature_names=names[columns],
                    seed=self.seed,
                    meta={
                        "dataset": self.dataset,
                        "features": "rc, lower quantile over tokens per head",
                    },
                ).save(into / "probe_rc.json")
        pd.concat(folds).to_csv(into / "probe_folds.csv", index=False)
        return out


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
    """One row of :meth:`GroundingBench._detection` (NaN where a metric is undefined)."""

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


def summarize_run(
    out: Path, settings: Mapping[str, Any], *, shard: Shard | None = None
) -> GroundingResult:
    """Rebuild the summaries of a ``bench grounding`` run (or merged run) in ``out``,
    ``report.json`` included."""
    bench = GroundingBench(
        out, settings["dataset"], settings["model_name"], n_resamples=settings["resamples"]
    )
    with staged_output(out, KIND, keep=RUN_FILES.row_names()) as stage:
        report = bench.summarize(stage, layers=settings["layers"], heads=settings["heads"])
        (stage / "report.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    return GroundingResult(out, shard or Shard(), True, report)


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


def _kind(method: str) -> str:
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
