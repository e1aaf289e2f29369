"""``rcstat bench kv``: KV-cache compression benchmark over a dataset (paper §5.2).

A run is a self-describing folder. Rows: ``run.json``, the manifest of everything that
determines them (model, tokenizer, rcstat version, dataset, settings grid, ``max_new_tokens``,
cache; see :mod:`rcstat.runs`), ``config.json`` (the last call's settings and the examples it
skipped as too long) and ``predictions.jsonl`` with one line per (example, method, setting),
keyed by a work id and carrying the example's content hash, so that an interrupted run
resumes where it stopped, an example whose content changed is evaluated again and a setting
that failed on an example is retried (unless ``retry_failed=False``; failures are listed in
``errors.csv`` and left out of the summaries). Summaries, rebuilt from every row by
:meth:`KVBench.summarize`: ``results.csv`` (per example, with whether each answer finished
or was cut at ``max_new_tokens``), ``summary.csv``, the paper-shaped
``<dataset>_<model>_baseline_df.csv`` (mean/std VER per method and ratio) and
``<dataset>_<model>_proposed_df.csv`` (mean/std VER and realized ratio per threshold ``c``
and window), and ``ver_vs_ratio.png`` / ``rougeL_vs_ratio.png`` (the paper's Fig. 5/6).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from rcstat.data import QAExample
from rcstat.defaults import DEFAULT_WINDOW, QUESTION_WINDOW
from rcstat.evaluation.kv import CacheFactory, FullReference, evaluate_example, full_reference
from rcstat.press.registry import make_press as build_press
from rcstat.report.console import progress
from rcstat.report.plots import save_figure
from rcstat.runs import (
    EXAMPLE_HASH,
    MANIFEST_FILE,
    RunManifest,
    append_jsonl,
    content_hash,
    open_run,
    read_jsonl,
    resume_jsonl,
)
from rcstat.runs.parts import RunFiles, merge_if_last, start_part
from rcstat.runs.rows import RowFile
from rcstat.runs.shards import Shard

#: The kind of run recorded in the manifest.
KIND = "bench kv"
#: The files a run grows item by item (kept when the summaries are rewritten).
ROW_FILES = (MANIFEST_FILE, "config.json", "predictions.jsonl")
#: The row files of a run as its parts and their merge see them (:mod:`rcstat.merge`).
RUN_FILES = RunFiles(
    KIND, (RowFile("predictions.jsonl", "work_id", commit=True),), copied=("config.json",)
)


@dataclass(frozen=True)
class Setting:
    """One compression configuration: a method and its knobs.

    The knobs' defaults are the paper's press (per-layer budget, any-head rule), so that the
    keys of runs made before a knob existed still name their rows; ``rcstat bench kv`` passes
    the press's own defaults (pooled budget, the group's mean) explicitly.
    """

    method: str  # "rcstat" or a baseline name
    ratio: float | None = None  # target ratio (baselines, RCStat target-ratio mode)
    threshold: float | None = None  # RCStat threshold mode (c)
    window: int | str = DEFAULT_WINDOW  # RCStat's window: tokens, or QUESTION_WINDOW
    group: str = "max"  # RCStat's GQA rule (RCStatPress.group)
    score: str = "expected"  # RCStatPress.score
    budget: str = "layer"  # RCStatPress.budget
    floor: float = 0.2  # RCStatPress.floor (pooled budget only)
    sinks: int = 0  # RCStatPress.sinks

    @property
    def key(self) -> str:
        # options at their defaults add nothing, so the keys of earlier runs stand
        rule = "" if self.group == "max" else f"|g={self.group}"
        score = "" if self.score == "expected" else f"|s={self.score}"
        budget = "" if self.budget == "layer" else f"|b={self.budget},f={self.floor}"
        sinks = "" if self.sinks == 0 else f"|sinks={self.sinks}"
        base = f"{self.method}|r={self.ratio}|c={self.threshold}|w={self.window}"
        return base + rule + score + budget + sinks


def make_press(setting: Setting, question_tokens: int = 0) -> Any:
    """The press of a setting (see :func:`rcstat.press.registry.make_press`); a
    :data:`QUESTION_WINDOW` window is the ``question_tokens`` ending the compressed prompt."""
    window = setting.window
    if window == QUESTION_WINDOW:
        if question_tokens <= 0:
            raise ValueError(
                "a question window needs the question inside the compressed prompt "
                "(placement 'question')"
            )
        window = question_tokens
    return build_press(
        setting.method,
        ratio=setting.ratio,
        threshold=setting.threshold,
        window=int(window),
        group=setting.group,
        score=setting.score,
        budget=setting.budget,
        floor=setting.floor,
        sinks=setting.sinks,
    )


def cache_for(setting: Setting) -> Any:
    """A fresh cache for a setting: RCStat evicts for real into a :class:`RaggedCache`;
    kvpress's presses truncate (or, for AdaKV, mask) a :class:`DynamicCache`."""
    from transformers import DynamicCache

    from rcstat.press.cache import RaggedCache

    return RaggedCache() if setting.method == "rcstat" else DynamicCache()


def settings_grid(
    presses: Sequence[str],
    ratios: Sequence[float],
    thresholds: Sequence[float],
    windows: Sequence[int | str],
    groups: Sequence[str | None] = ("max",),
    *,
    scores: Sequence[str] = ("expected",),
    budgets: Sequence[str] = ("layer",),
    floor: float = 0.2,
    sinks: Sequence[int] = (0,),
) -> list[Setting]:
    """Every baseline at every ratio; RCStat at every ratio (target mode) and every threshold
    (threshold mode), for every window, GQA group rule, score and number of sinks, and at
    every ratio for every budget (the pooled budget has no threshold mode). A group rule of
    None is the press's default of each mode: the mean with a target ratio, any head with a
    threshold."""
    grid: list[Setting] = []
    for method in presses:
        if method != "rcstat":
            grid += [Setting(method, ratio=r) for r in ratios]
            continue
        for g, s, k in itertools.product(groups, scores, sinks):
            base = Setting("rcstat", group=g or "mean", score=s, sinks=k)
            for b in budgets:
                budgeted = base if b == "layer" else replace(base, budget=b, floor=floor)
                grid += [replace(budgeted, ratio=r, window=w) for w in windows for r in ratios]
            base = replace(base, group=g or "max")
            grid += [replace(base, threshold=c, window=w) for w in windows for c in thresholds]
    return grid


def example_hash(example: QAExample) -> str:
    """The content hash of what determines an example's rows: context, question, answers."""
    return content_hash(
        {"context": example.context, "question": example.question, "answers": example.answers}
    )


def _factory_name(factory: CacheFactory | None) -> str:
    if factory is None:
        return "default"
    inner = getattr(factory, "func", factory)  # functools.partial
    return f"{getattr(inner, '__module__', '?')}.{getattr(inner, '__qualname__', repr(inner))}"


@dataclass
class KVBench:
    """A resumable benchmark run writing into ``out``.

    Parameters
    ----------
    out : Path
        The run folder.
    dataset, model_name : str
        Recorded in the manifest (the model's weights and tokenizer are hashed as well).
    settings : list of Setting
        The grid; part of the manifest.
    max_new_tokens : int, default 32
        Answer length limit; part of the manifest.
    config : dict
        Written to ``config.json`` as it is (not compared on resume).
    options : dict
        More settings that change rows (data file, context mode, token budget); recorded in the
        manifest and compared on resume.
    retry_failed : bool, default True
        Evaluate again the items recorded with an error.
    placement : {"context", "question"}, default "context"
        Where the prompt is cut for compression (:func:`rcstat.press.answer.split_prompt`):
        question-agnostic, or query-aware with the question compressed too (part of the
        manifest when not the default, so query-aware rows never mix with the others).
    """

    out: Path
    dataset: str
    model_name: str
    settings: list[Setting]
    max_new_tokens: int = 32
    config: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    retry_failed: bool = True
    placement: str = "context"
    #: Whether the last :meth:`collect` with a shard merged the run.
    merged: bool = field(default=False, init=False)

    @property
    def predictions(self) -> Path:
        return self.out / "predictions.jsonl"

    def manifest_options(self, cache_factory: CacheFactory | None = None) -> dict[str, Any]:
        """The options of the manifest (besides model, tokenizer and rcstat version)."""
        return {
            "dataset": self.dataset,
            "settings": [s.key for s in self.settings],
            "max_new_tokens": self.max_new_tokens,
            "cache": _factory_name(cache_factory),
            **({} if self.placement == "context" else {"placement": self.placement}),
            **self.options,
        }

    def run(
        self,
        model: Any,
        tokenizer: Any,
        examples: Sequence[QAExample],
        cache_factory: CacheFactory | None = None,
    ) -> pd.DataFrame:
        """:meth:`collect`, then :meth:`summarize` into ``out``; return the summary."""
        self.collect(model, tokenizer, examples, cache_factory)
        return self.summarize()

    def collect(
        self,
        model: Any,
        tokenizer: Any,
        examples: Sequence[QAExample],
        cache_factory: CacheFactory | None = None,
        *,
        shard: Shard | None = None,
        merge_settings: dict[str, Any] | None = None,
    ) -> int:
        """Evaluate every (example, setting) not yet in ``predictions.jsonl``.

        ``cache_factory`` overrides :func:`cache_for` (e.g. ``DynamicCache`` to run RCStat in
        kvpress's masking mode, the memory-keeping reference). With a ``shard`` of several,
        only its examples are evaluated, into the shard's part ``out/parts/<i>-of-<N>/``, and
        the process that completes the last part merges the run (:mod:`rcstat.merge`; see
        :attr:`merged`); ``merge_settings`` are recorded in the part. Returns the number of
        items evaluated now.

        Raises
        ------
        RunMismatchError
            ``out`` holds a run with other settings (each difference named) or rows without a
            manifest.
        RowFileError
            A line of ``predictions.jsonl`` before the last is malformed (a cut last line is
            dropped with a warning naming file and line).
        """
        self.merged = False
        if shard is not None and shard.split:
            settings = len(self.settings)
            plan = [
                (index * settings + j, f"{e.id}|{s.key}")
                for index, e in shard.take(list(enumerate(examples)))
                for j, s in enumerate(self.settings)
            ]
            part = start_part(self.out, RUN_FILES, shard, plan, merge_settings)
            count = replace(self, out=part).collect(
                model, tokenizer, shard.take(examples), cache_factory
            )
            self.merged = merge_if_last(self.out, part, RUN_FILES)
            return count
        manifest = RunManifest.build(
            self.out,
            KIND,
            model,
            tokenizer,
            self.manifest_options(cache_factory),
            model_name=self.model_name,
        )
        open_run(self.out, manifest, rows=ROW_FILES[1:])
        config = {
            "dataset": self.dataset,
            "model": self.model_name,
            "settings": [asdict(s) for s in self.settings],
            "max_new_tokens": self.max_new_tokens,
            "placement": self.placement,
            **self.options,
            **self.config,
        }
        (self.out / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
        hashes = {e.id: example_hash(e) for e in examples}
        wanted = {f"{e.id}|{s.key}": hashes[e.id] for e in examples for s in self.settings}
        done = resume_jsonl(self.predictions, wanted, key="work_id", retry_failed=self.retry_failed)
        work = [(e, s) for e in examples for s in self.settings if f"{e.id}|{s.key}" not in done]
        reference: tuple[str, FullReference] | None = None  # one example's work is contiguous
        for example, setting in progress(work, desc=f"bench kv {self.dataset}", unit="run"):
            row: dict[str, Any] = {
                "work_id": f"{example.id}|{setting.key}",
                "example": example.id,
                EXAMPLE_HASH: hashes[example.id],
                **asdict(setting),
            }
            try:
                if reference is None or reference[0] != example.id:
                    reference = (
                        example.id,
                        full_reference(
                            model,
                            tokenizer,
                            example.context,
                            example.question,
                            max_new_tokens=self.max_new_tokens,
                            placement=self.placement,
                        ),
                    )
                result = evaluate_example(
                    model,
                    tokenizer,
                    example.context,
                    example.question,
                    example.answers,
                    make_press(setting, reference[1].question_tokens),
                    max_new_tokens=self.max_new_tokens,
                    cache_factory=cache_factory or partial(cache_for, setting),
                    full=reference[1],
                )
                row.update(result.to_dict(), answerable=bool(example.answers), error=None)
            except (ValueError, RuntimeError) as err:  # recorded; the run goes on
                row["error"] = f"{type(err).__name__}: {err}"
            append_jsonl(self.predictions, row)
        return len(work)

    def summarize(self, into: Path | None = None) -> pd.DataFrame:
        """Write the per-example table, the summaries and the plots of every row of
        ``predictions.jsonl`` into ``into`` (default ``out``); return the summary."""
        into = self.out if into is None else into
        frame = pd.DataFrame(read_jsonl(self.predictions))
        if frame.empty:
            raise ValueError(f"{self.predictions} holds no rows")
        frame.to_csv(into / "results.csv", index=False)
        if "error" in frame:
            failed = frame[frame["error"].notna()]
            failed[["work_id", "error"]].to_csv(into / "errors.csv", index=False)
            frame = frame[frame["error"].isna()]
        if frame.empty:
            raise ValueError(f"every item failed (see {into / 'errors.csv'})")
        frame = with_knobs(frame)
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
        comparison(frame).to_csv(into / "comparison.csv", index=False)
        stem = f"{self.dataset}_{Path(self.model_name).name or 'model'}"
        baselines = summary[summary["method"] != "rcstat"]
        baselines[["method", "ratio", "ver_mean", "ver_std"]].to_csv(
            into / f"{stem}_baseline_df.csv", index=False
        )
        proposed = summary[(summary["method"] == "rcstat") & summary["threshold"].notna()]
        proposed[["threshold", "window", "ver_mean", "ver_std", "ratio_mean", "ratio_std"]].to_csv(
            into / f"{stem}_proposed_df.csv", index=False
        )
        self._plot(summary, into)
        return summary

    def _plot(self, summary: pd.DataFrame, into: Path) -> None:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        for metric, label in (("ver_mean", "VER (lower is better)"), ("rougeL", "ROUGE-L F1")):
            fig, ax = plt.subplots(figsize=(6, 4))
            mode = summary["threshold"].notna().rename("mode")
            knobs = [summary[c] for c in SETTING_COLUMNS if c not in ("ratio", "threshold")]
            for (method, window, *options, threshold), part in summary.groupby(
                [*knobs, mode], sort=False
            ):
                part = part.sort_values("ratio_mean")
                knob = dict(zip(KNOB_DEFAULTS, options, strict=True))
                shown = [f"{n} {v}" for n, v in knob.items() if v != KNOB_DEFAULTS[n]]
                if knob["budget"] == "layer":  # the floor belongs to the pooled budget
                    shown = [text for text in shown if not text.startswith("floor")]
                elif knob["floor"] == KNOB_DEFAULTS["floor"]:
                    shown.append(f"floor {knob['floor']}")
                extra = "".join(f", {text}" for text in shown)
                kind = "threshold c" if threshold else "target ratio"
                name = f"{method} ({kind}, w = {window}{extra})" if method == "rcstat" else method
                ax.plot(part["ratio_mean"], part[metric], marker="o", label=name)
            if metric == "ver_mean" and (summary[metric] > 0).all():
                ax.set_yscale("log")  # VER spans orders of magnitude across ratios
            ax.set_xlabel("realized compression ratio")
            ax.set_ylabel(label)
            ax.legend(fontsize=8)
            save_figure(fig, into / f"{metric.split('_')[0]}_vs_ratio.png")


#: RCStat's knobs besides ratio, threshold and window, at their defaults (rows of runs from
#: before a knob existed hold its default).
KNOB_DEFAULTS: dict[str, Any] = {
    "group": "max",
    "score": "expected",
    "budget": "layer",
    "floor": 0.2,
    "sinks": 0,
}
#: The columns that name a setting in the summaries.
SETTING_COLUMNS = ["method", "ratio", "threshold", "window", *KNOB_DEFAULTS]


def with_knobs(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every knob column of :data:`KNOB_DEFAULTS` present and filled, and the
    window as text (a number of tokens, or the question)."""
    filled = {
        name: frame[name].fillna(default) if name in frame else default
        for name, default in KNOB_DEFAULTS.items()
    }
    return frame.assign(**filled, window=frame["window"].astype(str))


#: The metrics ``comparison.csv`` compares, and whether higher is better.
COMPARED_METRICS = (("ver", False), ("rougeL_vs_full", True))


def comparison(frame: pd.DataFrame) -> pd.DataFrame:
    """RCStat (target-ratio mode) against the best baseline at each ratio, paired by example.

    For every subset (all examples, and answerable / unanswerable ones apart when the rows
    hold both),
    ratio, window and metric of :data:`COMPARED_METRICS`: the baseline with the best mean at
    that ratio, both means, their quotient, and :func:`~rcstat.evaluation.paired.paired_difference`
    of RCStat minus that baseline over the examples both scored (interval, wins, ties, losses).
    """
    from rcstat.evaluation.paired import paired_difference

    frame = with_knobs(frame)
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
