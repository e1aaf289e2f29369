"""Chunk-level attribution accuracy on QuoteSum / VERI-GRAN (paper §5.3, Table 1, Fig. 7).

For every example the annotated answer is teacher-forced once (one forward pass,
:class:`~rcstat.attribution.Attributor`); every annotated span of the answer is a unit with a
gold chunk. From that single pass every method is scored:

* ``top`` / ``bottom``: the ``k`` heads with the highest / lowest RC of raw scores;
* ``top_post_softmax`` / ``bottom_post_softmax``: ranked by RC of post-softmax weights
  (supplement Table 2);
* ``all``: RC summed over every head;
* ``attention``: mean post-softmax attention over all heads and layers (the standard
  attention attribution);
* ``top_fixed`` (with ``fixed_rankings``): one head set for every example, the ``k`` heads of
  lowest mean rank over the head rankings of another run's examples
  (:func:`~rcstat.attribution.consensus_heads`; the ranking reads no gold label, so that run
  may be of the same examples).

The RC methods score a span by its best sentence (the default), its keys' mean (the paper's
eq. 10) or their sum (``span_score``, :meth:`~rcstat.attribution.Attribution.head_totals`); the
question follows the sources unless ``question_first``. Each line keeps the example's head
ranking (``head_scores``, ``[layers, heads]``), which a later run reads as its fixed set.

A unit is correct when its argmax chunk is the gold one (docs/definitions.md); a unit whose scores
are all zero counts as wrong.

**Layout** (:data:`~rcstat.evaluation.choices.LAYOUTS`): every method sees the same prompt.
``numbered`` renders the
sources as RAG prompts do, one per paragraph, ``[k] Title: text`` (the title where the dataset
has one, QuoteSum's; VERI-GRAN's passages have none), and a candidate span is a whole source
entry, marker and title included (some QuoteSum units quote a title); ``numbered-text`` is the
same prompt with the chunk's own text as the candidate span (marker and title left out);
``plain`` joins the bare chunks with blank lines (the layout of the first benchmark runs, kept
for comparison).
**Lengths**: each line records the prompt's token count (chat template, context and question);
``accuracy_by_length.csv`` splits the accuracy by :data:`LENGTH_BUCKETS`. **Paired
comparisons** (``comparison.csv``, :mod:`rcstat.metrics.paired`): the RC rankings at the
table's ``k`` against mean attention and all heads, per example (weighted by its units), with
a bootstrap interval over examples and the share of examples each wins.

The run folder holds ``run.json`` (the manifest: model, tokenizer, rcstat version, dataset,
``k`` values, the attributor's statistic, the layout; see :mod:`rcstat.runs`) and
``predictions.jsonl`` (one line per example with its content hash, resumable: a changed
example is scored again, a failed one retried unless ``retry_failed=False``), and the
summaries rebuilt from every line: ``units.csv``, ``errors.csv``, ``accuracy.csv`` (per
method and ``k``), ``accuracy_by_length.csv``, ``comparison.csv``, ``table1.csv`` (the rows of
the paper's Table 1 rcstat produces) and ``accuracy_vs_k.png`` (Fig. 7).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from rcstat.attribution import Attribution, Attributor, consensus_heads
from rcstat.data import AttributionExample
from rcstat.evaluation.bench.common import BenchRun
from rcstat.evaluation.bench.results import AttributionResult
from rcstat.evaluation.choices import LAYOUTS
from rcstat.metrics.paired import paired_difference
from rcstat.report.plots import save_figure
from rcstat.runs.folder import staged_output
from rcstat.runs.job import Item, Job
from rcstat.runs.manifest import MANIFEST_FILE, RunManifest, content_hash
from rcstat.runs.parts import RunFiles
from rcstat.runs.rows import EXAMPLE_HASH, RowFile, read_jsonl
from rcstat.runs.shards import Shard

__all__ = [
    "RANKED_METHODS",
    "AttributionBench",
    "AttributionJob",
    "by_length",
    "example_hash",
    "parse_ks",
    "prompt_tokens",
    "read_head_scores",
    "render",
    "score_example",
]

#: The kind of run recorded in the manifest.
KIND = "bench attribution"
#: The row file of a run, as its parts and their merge see it (:mod:`rcstat.runs.parts`).
RUN_FILES = RunFiles(KIND, (RowFile("predictions.jsonl", "example", commit=True),))

RANKED_METHODS = ("top", "bottom", "top_post_softmax", "bottom_post_softmax")
#: The method of a head set fixed over a dataset (``fixed_rankings``).
FIXED = "top_fixed"
ALL = "all"
#: Prompt-length buckets of ``accuracy_by_length.csv``: ``[low, high)`` in tokens.
LENGTH_BUCKETS = ((0, 1000), (1000, 2500), (2500, None))
#: The methods compared with the baselines in ``comparison.csv`` (at the table's k) and the
#: baselines.
COMPARED = ("top", "top_post_softmax", FIXED)
BASELINES = ("attention", ALL)


def render(
    example: AttributionExample, layout: str
) -> tuple[str | list[str], list[tuple[int, int]] | None]:
    """The context of ``example`` in ``layout`` and its candidate spans (character offsets;
    None: the chunks themselves, for ``plain``).

    >>> from rcstat.data import AttributionExample
    >>> ex = AttributionExample("x", "Q?", ("Red won.", "Blue lost."), "Red won.", (), "quotesum",
    ...                         {"titles": ("Final", "")})
    >>> render(ex, "numbered")
    ('[1] Final: Red won.\\n\\n[2] Blue lost.', [(0, 19), (21, 35)])
    >>> render(ex, "numbered-text")[1]
    [(11, 19), (25, 35)]
    """
    if layout == "plain":
        return list(example.chunks), None
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    titles = tuple(example.meta.get("titles", ())) if example.meta else ()
    entries, spans, start = [], [], 0
    for k, chunk in enumerate(example.chunks):
        title = titles[k].strip() if k < len(titles) and titles[k] else ""
        head = f"[{k + 1}] {title}: " if title else f"[{k + 1}] "
        entry = head + chunk
        # numbered: the whole entry; numbered-text: the chunk's own text only
        spans.append(
            (start, start + len(entry))
            if layout == "numbered"
            else (start + len(head), start + len(entry))
        )
        entries.append(entry)
        start += len(entry) + 2
    return "\n\n".join(entries), spans


def prompt_tokens(
    tokenizer: Any, example: AttributionExample, layout: str, *, question_first: bool = False
) -> int:
    """The prompt's length in tokens (chat template, rendered context and question)."""
    from rcstat.segments import segment_chat

    context, _ = render(example, layout)
    text = context if isinstance(context, str) else "\n\n".join(context)
    return segment_chat(tokenizer, text, example.question, question_first=question_first).prompt_len


def read_head_scores(run: Path) -> tuple[list[np.ndarray], dict[str, Any]]:
    """The per-example head rankings (``[layers, heads]``) of a finished ``bench attribution``
    run, and the model identity of its manifest (a fixed head set must come from the same
    model).

    Raises
    ------
    ValueError
        ``run`` is not an attribution run, or none of its lines holds a ranking (runs of
        rcstat before rankings were kept).
    """
    import json

    path = Path(run)
    try:
        manifest = json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: no readable run manifest ({err})") from err
    if manifest.get("kind") != KIND:
        raise ValueError(f"{path}: a {manifest.get('kind')!r} run, not a {KIND!r} run")
    rankings = [
        np.asarray(line["head_scores"], dtype=np.float64)
        for line in read_jsonl(path / "predictions.jsonl")
        if line.get("head_scores") is not None
    ]
    if not rankings:
        raise ValueError(f"{path}: no example holds a head ranking (run it again to keep them)")
    return rankings, manifest["model"]


def parse_ks(text: str, num_heads: int) -> list[int]:
    """``"1,2,5,all"`` → sorted distinct ``k`` values; ``all`` (and any ``k`` above the
    model's head count) means every head.

    >>> parse_ks("1,5,all,5", 270)
    [1, 5, 270]
    """
    ks: set[int] = set()
    for item in (v.strip() for v in text.split(",") if v.strip()):
        if item == ALL:
            ks.add(num_heads)
            continue
        k = int(item)
        if k < 1:
            raise ValueError(f"k must be positive, got {k}")
        ks.add(min(k, num_heads))
    if not ks:
        raise ValueError("no k given")
    return sorted(ks)


def score_example(
    result: Attribution,
    gold: Sequence[int],
    ks: Sequence[int],
    fixed: dict[int, list[tuple[int, int]]] | None = None,
) -> list[dict]:
    """Per unit and method, the predicted chunk and whether it is the gold one (``fixed``:
    the fixed head set of each ``k``)."""
    rows: list[dict[str, Any]] = []

    def add(method: str, k: int | None, attributed: Sequence[int | None]) -> None:
        for unit, (predicted, want) in enumerate(zip(attributed, gold, strict=True)):
            rows.append(
                {
                    "method": method,
                    "k": k,
                    "unit": unit,
                    "predicted": predicted,
                    "gold": want,
                    "correct": predicted == want,
                }
            )

    for method in RANKED_METHODS:
        for k in ks:
            add(method, k, result.scores_for(method, k)[1])  # type: ignore[arg-type]
    for k, heads in (fixed or {}).items():
        add(FIXED, k, result.scores_for_heads(heads)[1])
    add(ALL, result.num_heads, result.scores_for("all", None)[1])
    add("attention", result.num_heads, result.attention_scores()[1])
    return rows


def example_hash(example: AttributionExample) -> str:
    """The content hash of what determines an example's rows: chunks, question, answer and
    the annotated units with their gold chunks."""
    return content_hash(
        {
            "chunks": example.chunks,
            "question": example.question,
            "answer": example.answer,
            "units": [(u.start, u.end, u.gold_chunk) for u in example.units],
        }
    )


@dataclass
class AttributionBench(BenchRun):
    """A resumable attribution benchmark run writing into ``out`` (a
    :class:`~rcstat.evaluation.bench.common.BenchRun`).

    ``dataset``, ``model_name``, ``ks`` and ``options`` (e.g. the data file) are recorded in
    the run's manifest with the model, the tokenizer and the attributor's settings, and
    compared on resume; ``table_k`` only shapes ``table1.csv``. ``retry_failed`` scores again
    the examples recorded with an error. ``fixed_rankings`` (:func:`read_head_scores` of
    another run, with ``fixed_source`` its folder and ``fixed_model`` its model) adds the
    ``top_fixed`` method.
    """

    ks: list[int]
    table_k: int = 20
    layout: str = "numbered"
    fixed_rankings: list[np.ndarray] | None = None
    fixed_source: str | None = None
    fixed_model: dict[str, Any] | None = None

    def manifest_options(self, attributor: Attributor) -> dict[str, Any]:
        """The options of the manifest (besides model, tokenizer and rcstat version)."""
        options: dict[str, Any] = {
            "dataset": self.dataset,
            "ks": list(self.ks),
            "statistic": attributor.statistic,
            "allow_special_tokens": attributor.allow_special_tokens,
            "layout": self.layout,
            **self.options,
        }
        # recorded only when set, so that runs made before these options still resume
        if attributor.span_score != "mean":
            options["span_score"] = attributor.span_score
        if attributor.question_first:
            options["question_first"] = True
        if self.fixed_rankings is not None:
            options["fixed_heads"] = {
                "from": self.fixed_source,
                "rankings": content_hash([r.tolist() for r in self.fixed_rankings]),
            }
        return options

    def run(self, attributor: Attributor, examples: Sequence[AttributionExample]) -> pd.DataFrame:
        """:meth:`collect`, then :meth:`summarize` into ``out``; return the accuracy table."""
        self.collect(attributor, examples)
        return self.summarize()

    def collect(
        self,
        attributor: Attributor,
        examples: Sequence[AttributionExample],
        *,
        shard: Shard | None = None,
        merge_settings: dict[str, Any] | None = None,
    ) -> int:
        """Attribute every example not yet done (see the module notes): :meth:`run_job` of an
        :class:`AttributionJob` (sharding, merging and the errors raised are described there);
        return how many."""
        return self.run_job(AttributionJob(self, attributor, examples), shard, merge_settings)

    def _fixed_heads(self, model: dict[str, Any]) -> dict[int, list[tuple[int, int]]] | None:
        """The fixed head set of every ``k`` (None without ``fixed_rankings``)."""
        if self.fixed_rankings is None:
            return None
        if self.fixed_model is not None and self.fixed_model.get("weights") != model["weights"]:
            raise ValueError(
                f"fixed heads: {self.fixed_source} was run with another model "
                f"({self.fixed_model.get('name')}); a head set only means something for its "
                "own model"
            )
        return {k: consensus_heads(self.fixed_rankings, k) for k in self.ks}

    def summarize(self, into: Path | None = None) -> pd.DataFrame:
        """Write ``units.csv``, ``errors.csv``, ``accuracy.csv``, ``table1.csv`` and the Fig. 7
        plot of every line of ``predictions.jsonl`` into ``into`` (default ``out``); return the
        accuracy table."""
        return self.summaries(into)[0]

    def summaries(self, into: Path | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
        """:meth:`summarize`; return the accuracy table and the paired comparison."""
        into = self.out if into is None else into
        lines = read_jsonl(self.predictions)
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
            raise ValueError(f"no example could be scored (see {self.out / 'predictions.jsonl'})")
        units.to_csv(into / "units.csv", index=False)
        accuracy = (
            units.groupby(["method", "k"])
            .agg(
                accuracy=("correct", "mean"),
                units=("correct", "size"),
                examples=("example", "nunique"),
            )
            .reset_index()
        )
        chance = float((1.0 / units.drop_duplicates(["example", "unit"])["chunks"]).mean())
        accuracy["chance"] = chance
        accuracy.to_csv(into / "accuracy.csv", index=False)
        by_length(units).to_csv(into / "accuracy_by_length.csv", index=False)
        compared = self.comparison(units)
        compared.to_csv(into / "comparison.csv", index=False)
        self._table1(accuracy).to_csv(into / "table1.csv", index=False)
        plot_accuracy_vs_k(accuracy, into / "accuracy_vs_k.png", title=self.dataset)
        return accuracy, compared

    def _table_k(self) -> int | None:
        return (
            max(v for v in self.ks if v <= self.table_k) if min(self.ks) <= self.table_k else None
        )

    def comparison(self, units: pd.DataFrame) -> pd.DataFrame:
        """Each of :data:`COMPARED` at the table's k against each of :data:`BASELINES`, paired
        over examples (accuracy in points; see :mod:`rcstat.metrics.paired`)."""
        k = self._table_k()
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

    def _table1(self, accuracy: pd.DataFrame) -> pd.DataFrame:
        k = self._table_k()
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


@dataclass
class AttributionJob(Job):
    """The attribution benchmark as a :class:`~rcstat.runs.job.Job`: one item per example
    (one forward pass scores every method and ``k``)."""

    kind: ClassVar[str] = KIND
    files: ClassVar[RunFiles] = RUN_FILES

    bench: AttributionBench
    attributor: Attributor
    examples: Sequence[AttributionExample]
    _fixed: dict[int, list[tuple[int, int]]] | None = field(default=None, init=False)

    def source(self) -> tuple[Any, Any, str | None]:
        return self.attributor.model, self.attributor.tokenizer, self.bench.model_name

    def manifest_options(self) -> dict[str, Any]:
        return self.bench.manifest_options(self.attributor)

    def items(self) -> list[Item]:
        return [Item(e.id, example_hash(e), i, e) for i, e in enumerate(self.examples)]

    def progress_label(self) -> tuple[str, str]:
        return f"bench attribution {self.bench.dataset}", "example"

    def check(self, manifest: RunManifest) -> None:
        self._fixed = self.bench._fixed_heads(manifest.model)

    def run_one(self, item: Item, folder: Path | None) -> dict[str, list[dict[str, Any]]]:
        example: AttributionExample = item.data
        bench, attributor = self.bench, self.attributor
        line: dict[str, Any] = {
            "example": example.id,
            EXAMPLE_HASH: item.hash,
            "chunks": len(example.chunks),
        }
        try:
            context, spans = render(example, bench.layout)
            result = attributor.attribute(
                context,
                example.question,
                example.answer,
                spans=spans,
                units=[(u.start, u.end) for u in example.units],
            )
            gold = [u.gold_chunk for u in example.units]
            line["prompt_tokens"] = prompt_tokens(
                attributor.tokenizer,
                example,
                bench.layout,
                question_first=attributor.question_first,
            )
            line["rows"] = score_example(result, gold, bench.ks, self._fixed)
            line["head_scores"] = result.head_scores.tolist()
            line["error"] = None
        except ValueError as err:  # recorded (e.g. longer than the window)
            line["rows"], line["error"] = [], f"{type(err).__name__}: {err}"
        return {RUN_FILES.commit.name: [line]}


def summarize_run(
    out: Path, settings: Mapping[str, Any], *, shard: Shard | None = None
) -> AttributionResult:
    """Rebuild the summaries of a ``bench attribution`` run (or merged run) in ``out``."""
    bench = AttributionBench(out, settings["dataset"], settings["model_name"], settings["ks"])
    with staged_output(out, KIND, keep=RUN_FILES.row_names()) as stage:
        accuracy, comparison = bench.summaries(stage)
    return AttributionResult(out, shard or Shard(), True, accuracy, comparison)


def by_length(units: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per method, k and prompt-length bucket (:data:`LENGTH_BUCKETS`)."""
    tokens = pd.to_numeric(units["prompt_tokens"], errors="coerce")
    bucket = pd.Series("unknown", index=units.index)
    for low, high in LENGTH_BUCKETS:
        inside = (tokens >= low) & (tokens < high if high is not None else True)
        bucket[inside] = f"{low}-{high}" if high is not None else f">={low}"
    return (
        units.assign(bucket=bucket)
        .groupby(["method", "k", "bucket"])
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
    ax.axhline(100 * float(accuracy["chance"].iloc[0]), color="tab:red", ls="-.", label="chance")
    ax.set_xscale("log")
    ax.set_xlabel("number of heads k")
    ax.set_ylabel("chunk-level accuracy (%)")
    ax.set_title(f"{title}: attribution accuracy vs k")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
