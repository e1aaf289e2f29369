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
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from rcstat.data import QAExample
from rcstat.defaults import DATASET_MAX_NEW_TOKENS, DEFAULT_WINDOW, QUESTION_WINDOW
from rcstat.evaluation.bench.common import BenchRun
from rcstat.evaluation.bench.results import KVResult
from rcstat.evaluation.kv import CacheFactory, FullReference, evaluate_example, full_reference
from rcstat.files import write_atomic
from rcstat.press.options import KNOBS, PAPER_KNOBS, knob_default
from rcstat.press.registry import make_press as build_press
from rcstat.report.plots import save_figure
from rcstat.runs.folder import staged_output
from rcstat.runs.job import Item, Job
from rcstat.runs.manifest import content_hash
from rcstat.runs.parts import RunFiles, read_parts
from rcstat.runs.rows import EXAMPLE_HASH, RowFile, read_jsonl
from rcstat.runs.shards import Shard

logger = logging.getLogger("rcstat.evaluation")

#: The kind of run recorded in the manifest (and the command whose output folder it is).
KIND = "bench kv"
#: The head scatter of a run (written by shard 0, read by whoever summarises).
SCATTER = "head_scatter.csv"
#: The row files of a run, and the file copied into its merge (:mod:`rcstat.runs.parts`).
RUN_FILES = RunFiles(
    KIND, (RowFile("predictions.jsonl", "work_id", commit=True),), copied=("config.json",)
)


#: RCStat's knobs besides ratio, threshold and window, at their defaults: the press's own
#: (:class:`~rcstat.press.options.RCStatOptions`) except where the paper's press differs
#: (:data:`~rcstat.press.options.PAPER_KNOBS`: rows of runs from before a knob existed hold
#: the paper's value, and a setting's key names only what differs from it).
KNOB_DEFAULTS: dict[str, Any] = {name: knob_default(name) for name in KNOBS} | PAPER_KNOBS


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
    group: str = KNOB_DEFAULTS["group"]  # RCStat's GQA rule (RCStatPress.group)
    score: str = KNOB_DEFAULTS["score"]  # RCStatPress.score
    budget: str = KNOB_DEFAULTS["budget"]  # RCStatPress.budget
    floor: float = KNOB_DEFAULTS["floor"]  # RCStatPress.floor (pooled budget only)
    sinks: int = KNOB_DEFAULTS["sinks"]  # RCStatPress.sinks

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
    floor: float = KNOB_DEFAULTS["floor"],
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
class KVBench(BenchRun):
    """A resumable benchmark run writing into ``out`` (a
    :class:`~rcstat.evaluation.bench.common.BenchRun`).

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
    options : dict, keyword only
        More settings that change rows (data file, context mode, token budget); recorded in the
        manifest and compared on resume.
    retry_failed : bool, default True, keyword only
        Evaluate again the items recorded with an error.
    placement : {"context", "question"}, default "context"
        Where the prompt is cut for compression (:func:`rcstat.press.answer.split_prompt`):
        question-agnostic, or query-aware with the question compressed too (part of the
        manifest when not the default, so query-aware rows never mix with the others).
    """

    settings: list[Setting]
    max_new_tokens: int = DATASET_MAX_NEW_TOKENS
    config: dict[str, Any] = field(default_factory=dict)
    placement: str = "context"

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
        """Evaluate every (example, setting) not yet in ``predictions.jsonl``: :meth:`run_job`
        of a :class:`KVJob` (sharding, merging and the errors raised are described there);
        return how many items were evaluated now.

        ``cache_factory`` overrides :func:`cache_for` (e.g. ``DynamicCache`` to run RCStat in
        kvpress's masking mode, the memory-keeping reference).
        """
        return self.run_job(
            KVJob(self, model, tokenizer, examples, cache_factory), shard, merge_settings
        )

    def config_record(self) -> dict[str, Any]:
        """What ``config.json`` holds: the last call's settings (not compared on resume)."""
        return {
            "dataset": self.dataset,
            "model": self.model_name,
            "settings": [asdict(s) for s in self.settings],
            "max_new_tokens": self.max_new_tokens,
            "placement": self.placement,
            **self.options,
            **self.config,
        }

    def summarize(self, into: Path | None = None) -> pd.DataFrame:
        """Write the per-example table, the summaries and the plots of every row of
        ``predictions.jsonl`` into ``into`` (default ``out``); return the summary."""
        return self.summaries(into)[0]

    def summaries(self, into: Path | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
        """:meth:`summarize`; return the summary and the paired comparison."""
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
        compared = comparison(frame)
        compared.to_csv(into / "comparison.csv", index=False)
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
        return summary, compared

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


@dataclass
class KVJob(Job):
    """The KV-compression benchmark as a :class:`~rcstat.runs.job.Job`: one item per
    (example, setting), keyed ``"<example id>|<setting key>"``; the full-cache reference of an
    example is computed once for all its settings (an example's items are contiguous)."""

    kind: ClassVar[str] = KIND
    files: ClassVar[RunFiles] = RUN_FILES

    bench: KVBench
    model: Any
    tokenizer: Any
    examples: Sequence[QAExample]
    cache_factory: CacheFactory | None = None
    _reference: tuple[str, FullReference] | None = field(default=None, init=False, repr=False)

    def source(self) -> tuple[Any, Any, str | None]:
        return self.model, self.tokenizer, self.bench.model_name

    def manifest_options(self) -> dict[str, Any]:
        return self.bench.manifest_options(self.cache_factory)

    def items(self) -> list[Item]:
        return [
            Item(f"{e.id}|{s.key}", example_hash(e), index, (e, s))
            for index, e in enumerate(self.examples)
            for s in self.bench.settings
        ]

    def progress_label(self) -> tuple[str, str]:
        return f"bench kv {self.bench.dataset}", "run"

    def begin(self, folder: Path) -> None:
        write_atomic(folder / "config.json", json.dumps(self.bench.config_record(), indent=1))

    def run_one(self, item: Item, folder: Path | None) -> dict[str, list[dict[str, Any]]]:
        example, setting = item.data
        bench = self.bench
        row: dict[str, Any] = {
            "work_id": item.key,
            "example": example.id,
            EXAMPLE_HASH: item.hash,
            **asdict(setting),
        }
        try:
            if self._reference is None or self._reference[0] != example.id:
                self._reference = (
                    example.id,
                    full_reference(
                        self.model,
                        self.tokenizer,
                        example.context,
                        example.question,
                        max_new_tokens=bench.max_new_tokens,
                        placement=bench.placement,
                    ),
                )
            reference = self._reference[1]
            result = evaluate_example(
                self.model,
                self.tokenizer,
                example.context,
                example.question,
                example.answers,
                make_press(setting, reference.question_tokens),
                max_new_tokens=bench.max_new_tokens,
                cache_factory=self.cache_factory or partial(cache_for, setting),
                full=reference,
            )
            row.update(result.to_dict(), answerable=bool(example.answers), error=None)
        except (ValueError, RuntimeError) as err:  # recorded; the run goes on
            row["error"] = f"{type(err).__name__}: {err}"
        return {RUN_FILES.commit.name: [row]}


def summarize_run(
    out: Path,
    settings: Mapping[str, Any],
    scatter: pd.DataFrame | None = None,
    *,
    shard: Shard | None = None,
    say: Callable[[str], None] | None = None,
) -> KVResult:
    """Rebuild the summaries of a ``bench kv`` run (or merged run) in ``out``; ``scatter``
    (the head scatter) is read from shard 0's part when not given."""
    from rcstat.evaluation.head_scatter import plot_head_scatter, with_spearman

    if scatter is None and settings["scatter_examples"]:
        first = read_parts(out, count=settings["shards"])[0].folder / SCATTER
        if first.is_file():  # round trip: the floats shard 0 wrote, to the last digit
            frame = pd.read_csv(first, float_precision="round_trip")
            scatter = with_spearman(frame, settings["scatter_examples"])
        else:  # shard 0 has not started yet (its part was complete before it ran)
            (say or logger.info)(f"no head scatter yet: {first} is not written")
    bench = KVBench(out, settings["dataset"], settings["model_name"], [])
    with staged_output(out, KIND, keep=RUN_FILES.row_names()) as stage:
        summary, comparison = bench.summaries(stage)
        if scatter is not None:
            scatter.to_csv(stage / SCATTER, index=False)
            plot_head_scatter(scatter, stage / "head_scatter.png")
    return KVResult(out, shard or Shard(), True, summary, comparison, scatter)


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
    that ratio, both means, their quotient, and :func:`~rcstat.metrics.paired.paired_difference`
    of RCStat minus that baseline over the examples both scored (interval, wins, ties, losses).
    """
    from rcstat.metrics.paired import paired_difference

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
