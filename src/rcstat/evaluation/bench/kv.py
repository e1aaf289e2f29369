"""``rcstat bench kv`` as a library call: :class:`KVConfig` → :func:`run` → :class:`KVResult`
(KV-cache compression over a QA dataset, paper §5.2).

>>> config = KVConfig.from_dict({"presses": ["knorm"], "ratios": [0.5], "n": 2})
>>> config.presses, config.ratios, config.out.name
(['knorm'], [0.5], 'bench_kv')

:func:`run` refuses, before the model loads, an output folder of another command or a run
made with other options; loads the examples (QMSum transcripts cut to the window when asked)
and the model; then :func:`evaluate` skips the examples longer than the window, computes the
head scatter (shard 0 only), runs the :class:`KVJob` and summarises the run folder
(:func:`summarize_run`) — unless this process's part of a data-parallel run is done before the
others.

A run is a self-describing folder: ``run.json``, the manifest of everything that determines
its rows (model, tokenizer, rcstat version, dataset, the settings' keys, ``max_new_tokens``,
the press's scope, the cache; see :mod:`rcstat.runs`), ``config.json`` (the last call's settings
and the examples it skipped as too long) and ``predictions.jsonl`` with one row per (example,
setting), keyed ``"<example id>|<setting key>"`` and carrying the example's content hash, so
that an interrupted run resumes where it stopped, an example whose content changed is
evaluated again and a setting that failed on an example is retried (unless
``retry_failed=False``). The summaries are :mod:`rcstat.evaluation.kv_summary`'s.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rcstat.checks import check_count, check_number, optional_count
from rcstat.defaults import DATASET_MAX_NEW_TOKENS, DEFAULT_WINDOW, QUESTION_WINDOW
from rcstat.evaluation.bench.common import DatasetJob, JobConfig, resolved, say_default
from rcstat.evaluation.bench.results import KVResult
from rcstat.files import write_atomic
from rcstat.press.options import KNOBS, check_knob, knob_default
from rcstat.press.registry import PRESS_NAMES
from rcstat.runs.folder import staged_output
from rcstat.runs.job import Item
from rcstat.runs.manifest import RunMismatchError, content_hash, read_manifest
from rcstat.runs.parts import RunFiles, part_folder, read_parts
from rcstat.runs.rows import EXAMPLE_HASH, RowFile
from rcstat.runs.shards import Shard

if TYPE_CHECKING:
    from rcstat.data import QAExample
    from rcstat.evaluation.bench.common import Loader, Say
    from rcstat.evaluation.kv import CacheFactory
    from rcstat.evaluation.kv_settings import Setting


__all__ = ["KIND", "KVConfig", "KVJob", "evaluate", "run", "summarize_run"]

logger = logging.getLogger("rcstat.evaluation")

#: The kind of run recorded in the manifest (and the command whose output folder it is).
KIND = "bench kv"
#: The head scatter of a run (written by shard 0, read by whoever summarises).
SCATTER = "head_scatter.csv"
#: The row files of a run, and the file copied into its merge (:mod:`rcstat.runs.parts`).
RUN_FILES = RunFiles(
    KIND, (RowFile("predictions.jsonl", "work_id", commit=True),), copied=("config.json",)
)
#: Tokens left for the chat template around context and question.
TEMPLATE_TOKENS = 32
#: QMSum's ``context`` values: the whole transcript, the query's relevant turns, or the most
#: turns around them that fit the model's context.
CONTEXTS = ("full", "relevant", "fit")
#: The examples the head scatter averages over.
SCATTER_EXAMPLES = 10


def _knob_lists() -> dict[str, list[Any]]:
    """Each knob of the press at its default (``group``: the default of each mode)."""
    return {name: [knob_default(name)] for name in KNOBS}


@dataclass
class KVConfig(JobConfig):
    """Everything ``rcstat bench kv`` runs with (each field is the command's option; the
    shared ones in :class:`~rcstat.evaluation.bench.common.JobConfig`).

    ``knobs`` holds the values swept of each RCStatPress knob
    (:data:`~rcstat.press.options.KNOBS`; a missing knob is the press's default, a ``group``
    of None the default of each mode); ``windows`` holds token counts or
    :data:`~rcstat.defaults.QUESTION_WINDOW` (with ``press_scope`` ``"question"``: the press
    compresses the question with the context); ``n`` None takes every example; ``max_tokens``
    None is the model's window; ``context`` one of :data:`CONTEXTS` (QMSum only).
    """

    COMMAND = KIND
    TASK = "qa"

    dataset: str = "squad_v2"
    out: Path = Path("runs/bench_kv")
    presses: list[str] = field(default_factory=lambda: list(PRESS_NAMES))
    ratios: list[float] = field(default_factory=lambda: [0.3, 0.5, 0.7])
    thresholds: list[float] = field(default_factory=lambda: [0.2, 0.7, 0.8, 1.0, 1.2, 1.3, 1.8])
    windows: list[int | str] = field(default_factory=lambda: [DEFAULT_WINDOW, 16])
    max_new_tokens: int = DATASET_MAX_NEW_TOKENS
    knobs: dict[str, list[Any]] = field(default_factory=_knob_lists)
    press_scope: str = "context"
    context: str | None = None
    max_tokens: int | None = None

    def check_values(self) -> None:
        """The dataset (a QA set, by its registry name), the press names and every list's
        values (``ValueError`` naming the option)."""
        from rcstat.press.registry import check_press_names

        super().check_values()
        check_press_names(list(self.presses))
        for ratio in self.ratios:
            check_number("--ratios", ratio, low=0, high=1, high_open=True)
        for threshold in self.thresholds:
            check_number("--thresholds", threshold, low=0)
        for window in self.windows:
            if window != QUESTION_WINDOW:
                check_count("--window", window)

    def check(self, *, flags: bool = False) -> None:
        """The checks that tie options together and every knob's values (``ValueError``
        naming the options)."""
        unknown = sorted(set(self.knobs) - set(KNOBS))
        if unknown:
            raise ValueError(
                f"RCStatPress has no option {unknown[0]!r} (knobs: {', '.join(KNOBS)})"
            )
        self.knobs = {**_knob_lists(), **self.knobs}
        for name, values in self.knobs.items():
            if not values:
                raise ValueError(f"--{name} needs at least one value")
            if len(set(map(str, values))) != len(values):
                raise ValueError(f"--{name} lists a value twice: {','.join(map(str, values))}")
            self.knobs[name] = [check_knob(name, value, flags=True) for value in values]
        check_count("--max-new-tokens", self.max_new_tokens)
        optional_count("--n", self.n)
        optional_count("--max-tokens", self.max_tokens, low=2)
        if self.press_scope not in ("context", "question"):
            raise ValueError(f"--press-scope takes context or question, got {self.press_scope!r}")
        if self.context is not None and self.context not in CONTEXTS:
            raise ValueError(f"--context takes {', '.join(CONTEXTS)}, got {self.context!r}")
        if self.context is not None and self.dataset != "qmsum":
            raise ValueError("--context applies to --dataset qmsum only")
        if QUESTION_WINDOW in self.windows and self.press_scope != "question":
            raise ValueError(f"--window {QUESTION_WINDOW} needs --press-scope question")

    def grid(self) -> list[Setting]:
        """The settings grid (:func:`~rcstat.evaluation.kv_settings.settings_grid`)."""
        from rcstat.evaluation.kv_settings import settings_grid

        return settings_grid(self.presses, self.ratios, self.thresholds, self.windows, self.knobs)

    def run_options(self) -> dict[str, Any]:
        """The options recorded in the manifest besides the cache (not ``n``: a run grows by
        resuming with a larger ``n``)."""
        return {
            "settings": [s.key for s in self.grid()],
            "max_new_tokens": self.max_new_tokens,
            "press_scope": self.press_scope,
            "data": resolved(self.data),
            "context": self.context,
            "max_tokens": self.max_tokens,
        }

    def check_folder(self, compared: Mapping[str, Any] | None = None) -> None:
        """:meth:`JobConfig.check_folder`, and refuse a run folder of an rcstat that keyed its
        settings relative to the paper's press (no ``press_scope`` in its manifest): its rows
        cannot name this version's settings."""
        manifest = read_manifest(self.out)
        if manifest and manifest["kind"] == KIND and "press_scope" not in manifest["options"]:
            raise RunMismatchError(
                f"{self.out} holds a `{KIND}` run of an earlier rcstat, which keyed its "
                "settings relative to the paper's press: its rows cannot be resumed; rerun the "
                "same `rcstat bench kv` command with another --out"
            )
        super().check_folder(compared)


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
class KVJob(DatasetJob[KVConfig, "QAExample"]):
    """The KV-compression benchmark as a :class:`~rcstat.runs.job.Job`: one item per
    (example, setting of ``config.grid()``), keyed ``"<example id>|<setting key>"``; the
    full-cache reference of an example is computed once for all its settings (an example's
    items are contiguous). ``cache_factory`` overrides
    :func:`~rcstat.evaluation.kv_settings.cache_for` (e.g. ``DynamicCache`` to run RCStat in
    kvpress's masking mode, the memory-keeping reference); ``record`` is added to
    ``config.json`` (the window and the examples skipped as too long)."""

    kind: ClassVar[str] = KIND
    files: ClassVar[RunFiles] = RUN_FILES

    cache_factory: CacheFactory | None = None
    record: dict[str, Any] = field(default_factory=dict)
    _settings: list[Setting] = field(init=False, repr=False)
    _reference: tuple[str, Any] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._settings = self.config.grid()

    def manifest_options(self) -> dict[str, Any]:
        """The config's :meth:`~KVConfig.compared` options and the cache."""
        return {**self.config.compared(), "cache": _factory_name(self.cache_factory)}

    def items(self) -> list[Item]:
        return [
            Item(f"{e.id}|{s.key}", example_hash(e), index, (e, s))
            for index, e in enumerate(self.examples)
            for s in self._settings
        ]

    def progress_label(self) -> tuple[str, str]:
        return f"bench kv {self.config.dataset}", "run"

    def begin(self, folder: Path) -> None:
        config = self.config
        record = {
            "dataset": config.dataset,
            "model": self.source()[2],
            "settings": [s.to_row() for s in self._settings],
            "max_new_tokens": config.max_new_tokens,
            "press_scope": config.press_scope,
            **{k: v for k, v in config.run_options().items() if k != "settings"},
            **self.record,
        }
        write_atomic(folder / "config.json", json.dumps(record, indent=1))

    def run_one(self, item: Item, folder: Path | None) -> dict[str, list[dict[str, Any]]]:
        from rcstat.evaluation.kv import evaluate_example, full_reference
        from rcstat.evaluation.kv_settings import cache_for, make_press

        example, setting = item.data
        config = self.config
        row: dict[str, Any] = {
            "work_id": item.key,
            "example": example.id,
            EXAMPLE_HASH: item.hash,
            **setting.to_row(),
        }
        try:
            if self._reference is None or self._reference[0] != example.id:
                reference = full_reference(
                    self.model,
                    self.tokenizer,
                    example.context,
                    example.question,
                    max_new_tokens=config.max_new_tokens,
                    placement=config.press_scope,
                )
                self._reference = (example.id, reference)
            reference = self._reference[1]
            result = evaluate_example(
                self.model,
                self.tokenizer,
                example.context,
                example.question,
                example.answers,
                make_press(setting, reference.question_tokens),
                max_new_tokens=config.max_new_tokens,
                cache_factory=self.cache_factory or partial(cache_for, setting),
                full=reference,
            )
            row.update(result.to_dict(), answerable=bool(example.answers), error=None)
        except (ValueError, RuntimeError) as err:  # recorded; the run goes on
            row["error"] = f"{type(err).__name__}: {err}"
        return {RUN_FILES.commit.name: [row]}


def _count(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _fits(tokenizer: Any, example: Any, budget: int) -> bool:
    """Whether the chat-rendered context + question fit in ``budget`` tokens."""
    text = example.context + "\n\n" + example.question
    return _count(tokenizer, text) + TEMPLATE_TOKENS <= budget


def _fit_windows(tokenizer: Any, examples: Sequence[Any], budget: int) -> list[Any]:
    """Each QMSum query's transcript cut to the turns around its span that fit ``budget``
    with the question and template (:func:`rcstat.data.qmsum.fit_turns`); a query whose span
    alone is too long keeps its whole transcript (and is then skipped as too long)."""
    from rcstat.data.qmsum import fit_turns

    fitted = []
    for example in examples:
        room = budget - TEMPLATE_TOKENS - _count(tokenizer, "\n\n" + example.question)
        cut = fit_turns(example, lambda text: _count(tokenizer, text), room)
        fitted.append(example if cut is None else cut)
    return fitted


def _check_presses(grid: Sequence[Setting]) -> None:
    """Build the press of every setting once, so that a knob RCStatPress refuses stops the run
    before the model loads (a question window is checked with a window of tokens)."""
    from rcstat.evaluation.kv_settings import make_press

    for setting in grid:
        if setting.window == QUESTION_WINDOW:
            setting = replace(setting, window=DEFAULT_WINDOW)
        make_press(setting)


def run(config: KVConfig, *, loader: Loader | None = None, say: Say | None = None) -> KVResult:
    """Run (or resume) the KV-compression benchmark of ``config`` on its dataset and summarise
    it; ``loader``, ``say`` and the ``ValueError`` raised as for every job
    (:mod:`rcstat.evaluation.bench`), and a ``ValueError`` when every example is longer than
    the window."""
    from rcstat.press.extra import require_kvpress

    require_kvpress("rcstat bench kv")
    from rcstat.data import QAExample, load_dataset

    _check_presses(config.grid())
    config.check_folder()
    options = {} if config.context is None else {"context": config.context}
    if config.context == "fit":  # whole transcripts, cut once the tokenizer is loaded
        options["context"] = "full"
    loaded = load_dataset(config.dataset, config.data, limit=config.n, **options)
    examples = [e for e in loaded if isinstance(e, QAExample)]
    config.require(examples)
    model, tokenizer = config.load_model(loader)
    return _evaluate(config, model, tokenizer, examples, None, True, say or say_default)


def evaluate(
    config: KVConfig,
    model: Any,
    tokenizer: Any,
    examples: Sequence[QAExample],
    *,
    cache_factory: CacheFactory | None = None,
    scatter: bool = True,
    say: Say | None = None,
) -> KVResult:
    """Run (or resume) ``config``'s grid on ``examples`` with a loaded model into ``config.out`` and
    summarise it: the examples longer than the window are skipped (``say`` tells how many, and
    how many runs the grid makes), shard 0 computes the head scatter where RCStat runs (unless
    ``scatter`` is False; :func:`~rcstat.evaluation.head_scatter.head_scatter`), the
    :class:`KVJob` runs (``cache_factory`` as there), and the process that completes the run
    summarises it (:func:`summarize_run`)."""
    config.check_folder()
    return _evaluate(config, model, tokenizer, examples, cache_factory, scatter, say or say_default)


def _evaluate(
    config: KVConfig,
    model: Any,
    tokenizer: Any,
    examples: Sequence[QAExample],
    cache_factory: CacheFactory | None,
    scatter: bool,
    say: Say,
) -> KVResult:
    """:func:`evaluate` once the folder is checked (:func:`run` checks it before loading)."""
    from rcstat.evaluation.head_scatter import head_scatter

    window = int(model.config.max_position_embeddings)
    if config.max_tokens is not None:
        window = min(window, config.max_tokens)
    budget = window - config.max_new_tokens
    if config.context == "fit":
        examples = _fit_windows(tokenizer, examples, budget)
    fitting = [e for e in examples if _fits(tokenizer, e, budget)]
    skipped = [e.id for e in examples if e not in fitting]
    if skipped:
        say(f"skipping {len(skipped)} examples longer than {window} tokens")
    if not fitting:
        raise ValueError(f"every example is longer than the model's window ({window} tokens)")
    config.claim_folder()
    job = KVJob(config, model, tokenizer, fitting, cache_factory)
    job.record = {"skipped_too_long": skipped, "window": window}
    grid = len(config.grid())
    say(
        f"{grid} settings × {len(fitting)} examples = {grid * len(fitting)} runs (the grid of "
        "--presses, --ratios, --thresholds, --window and the knobs)"
    )
    scatter = scatter and "rcstat" in config.presses
    settings = {
        "dataset": config.dataset,
        "model_name": job.source()[2],
        "presses": config.presses,
        "scatter_examples": min(len(fitting), SCATTER_EXAMPLES) if scatter else 0,
        "shards": config.shard.count,
    }
    heads = None
    if scatter and config.shard.index == 0:  # before the rows: the last
        sized = [w for w in config.windows if isinstance(w, int)]  # process to finish
        heads = head_scatter(  # summarises with it
            model,
            tokenizer,
            fitting[:SCATTER_EXAMPLES],
            window=sized[0] if sized else DEFAULT_WINDOW,
        )
        if config.shard.split:
            folder = part_folder(config.out, config.shard)
            folder.mkdir(parents=True, exist_ok=True)
            heads.to_csv(folder / SCATTER, index=False)
    done = config.run_job(job, settings)
    result = KVResult(config.out, config.shard, done.merged)
    if result.part_only:
        return result
    return summarize_run(config.out, settings, heads, shard=config.shard, say=say)


def summarize_run(
    out: Path,
    settings: Mapping[str, Any],
    scatter: Any = None,
    *,
    shard: Shard | None = None,
    say: Say | None = None,
) -> KVResult:
    """Rebuild the summaries of a ``bench kv`` run (or merged run) in ``out``
    (:func:`~rcstat.evaluation.kv_summary.write_summaries`); ``scatter`` (the head scatter) is
    read from shard 0's part when not given."""
    import pandas as pd

    from rcstat.evaluation.head_scatter import plot_head_scatter, with_spearman
    from rcstat.evaluation.kv_summary import write_summaries

    if scatter is None and settings["scatter_examples"]:
        first = read_parts(out, count=settings["shards"])[0].folder / SCATTER
        if first.is_file():  # round trip: the floats shard 0 wrote, to the last digit
            frame = pd.read_csv(first, float_precision="round_trip")
            scatter = with_spearman(frame, settings["scatter_examples"])
        else:  # shard 0 has not started yet (its part was complete before it ran)
            (say or logger.info)(f"no head scatter yet: {first} is not written")
    rows = out / RUN_FILES.commit.name
    with staged_output(out, KIND, keep=RUN_FILES.row_names()) as stage:
        summary, comparison = write_summaries(
            rows, stage, settings["dataset"], settings["model_name"]
        )
        if scatter is not None:
            scatter.to_csv(stage / SCATTER, index=False)
            plot_head_scatter(scatter, stage / "head_scatter.png")
    return KVResult(out, shard or Shard(), True, summary, comparison, scatter)
