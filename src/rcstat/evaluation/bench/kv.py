"""``rcstat bench kv`` as a library call: :class:`KVConfig` → :func:`run` → :class:`KVResult`.

>>> config = KVConfig.from_dict({"presses": ["knorm"], "ratios": [0.5], "n": 2})
>>> config.presses, config.ratios, config.out.name
(['knorm'], [0.5], 'bench_kv')

:func:`run` refuses, before the model loads, an output folder of another command or a run
made with other options; loads the examples (QMSum transcripts cut to the window when asked)
and the model; skips the examples longer than the window; computes the head scatter (shard 0
only); runs the :class:`~rcstat.evaluation.kv_bench.KVJob` through
:func:`~rcstat.runs.job.run_job`; and summarises the run folder (:func:`summarize_run`) —
unless this process's part of a data-parallel run is done before the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rcstat.checks import check_count, check_number, optional_count
from rcstat.defaults import DATASET_MAX_NEW_TOKENS, DEFAULT_WINDOW, QUESTION_WINDOW
from rcstat.evaluation.bench.common import (
    JobConfig,
    Loader,
    Say,
    dataset_for,
    resolved,
    say_default,
    summarized,
)
from rcstat.evaluation.bench.results import KVResult
from rcstat.press.options import knob_default
from rcstat.press.registry import PRESS_NAMES
from rcstat.runs.parts import part_folder

__all__ = ["KVConfig", "run"]

SCATTER = "head_scatter.csv"
#: Tokens left for the chat template around context and question.
TEMPLATE_TOKENS = 32
#: QMSum's ``context`` values: the whole transcript, the query's relevant turns, or the most
#: turns around them that fit the model's context.
CONTEXTS = ("full", "relevant", "fit")


@dataclass
class KVConfig(JobConfig):
    """Everything ``rcstat bench kv`` runs with (each field is the command's option; the
    shared ones in :class:`~rcstat.evaluation.bench.common.JobConfig`).

    ``groups`` None entries are the press's default of each mode; ``windows`` holds token
    counts or :data:`~rcstat.defaults.QUESTION_WINDOW` (with ``question_placement``
    ``"question"``); ``n`` None takes every example; ``max_tokens`` None is the model's
    window; ``context`` one of :data:`CONTEXTS`.
    """

    COMMAND = "bench kv"

    dataset: str = "squad_v2"
    out: Path = Path("runs/bench_kv")
    presses: list[str] = field(default_factory=lambda: list(PRESS_NAMES))
    ratios: list[float] = field(default_factory=lambda: [0.3, 0.5, 0.7])
    thresholds: list[float] = field(default_factory=lambda: [0.2, 0.7, 0.8, 1.0, 1.2, 1.3, 1.8])
    windows: list[int | str] = field(default_factory=lambda: [DEFAULT_WINDOW, 16])
    max_new_tokens: int = DATASET_MAX_NEW_TOKENS
    groups: list[str | None] = field(default_factory=lambda: [None])
    scores: list[str] = field(default_factory=lambda: ["expected"])
    budgets: list[str] = field(default_factory=lambda: ["pooled"])
    floor: float = knob_default("floor")
    sinks: list[int] = field(default_factory=lambda: [0])
    question_placement: str = "context"
    context: str | None = None
    max_tokens: int | None = None

    def check_values(self) -> None:
        """The dataset (a QA set, by its registry name), the press names and every list's
        values (``ValueError`` naming the field)."""
        from rcstat.press.registry import check_press_names

        self.dataset = dataset_for(self.dataset, "qa", self.COMMAND)
        check_press_names(list(self.presses))
        for name in ("groups", "scores", "budgets"):  # values: checked by the press (run)
            if not getattr(self, name):
                raise ValueError(f"{name} needs at least one value")
        for ratio in self.ratios:
            check_number("ratios", ratio, low=0, high=1, high_open=True)
        for threshold in self.thresholds:
            check_number("thresholds", threshold, low=0)
        for window in self.windows:
            if window != QUESTION_WINDOW:
                check_count("windows", window)
        for sink in self.sinks:
            check_count("sinks", sink, low=0)

    def check(self) -> None:
        """The checks that tie options together (``ValueError`` naming the options)."""
        check_number("floor", self.floor, low=0, high=1)
        check_count("max_new_tokens", self.max_new_tokens)
        optional_count("n", self.n)
        optional_count("max_tokens", self.max_tokens, low=2)
        if self.context is not None and self.context not in CONTEXTS:
            raise ValueError(f"--context takes {', '.join(CONTEXTS)}, got {self.context!r}")
        if self.context is not None and self.dataset != "qmsum":
            raise ValueError("--context applies to --dataset qmsum only")
        if QUESTION_WINDOW in self.windows and self.question_placement != "question":
            raise ValueError(f"--window {QUESTION_WINDOW} needs --press-scope question")

    def grid(self) -> list[Any]:
        """The settings grid (:func:`~rcstat.evaluation.kv_bench.settings_grid`)."""
        from rcstat.evaluation.kv_bench import settings_grid

        return settings_grid(
            self.presses,
            self.ratios,
            self.thresholds,
            self.windows,
            self.groups,
            scores=self.scores,
            budgets=self.budgets,
            floor=self.floor,
            sinks=self.sinks,
        )

    def run_options(self) -> dict[str, Any]:
        """The options recorded in the manifest besides the grid (not ``n``: a run grows by
        resuming with a larger ``n``)."""
        return {"data": resolved(self.data), "context": self.context, "max_tokens": self.max_tokens}


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


def _check_presses(grid: Sequence[Any]) -> None:
    """Build the press of every setting once, so that a knob RCStatPress refuses stops the run
    before the model loads (a question window is checked with a window of tokens)."""
    from rcstat.evaluation.kv_bench import make_press

    for setting in grid:
        if setting.window == QUESTION_WINDOW:
            setting = replace(setting, window=DEFAULT_WINDOW)
        make_press(setting)


def run(config: KVConfig, *, loader: Loader | None = None, say: Say | None = None) -> KVResult:
    """Run (or resume) the KV-compression benchmark of ``config`` and summarise it; ``loader``,
    ``say`` and the ``ValueError`` raised as for every job (:mod:`rcstat.evaluation.bench`),
    and a ``ValueError`` when every example is longer than the window."""
    from rcstat.evaluation.kv_bench import summarize_run
    from rcstat.press.extra import require_kvpress

    require_kvpress("rcstat bench kv")
    from rcstat.data import QAExample, load_dataset
    from rcstat.evaluation.head_scatter import head_scatter
    from rcstat.evaluation.kv_bench import KVBench

    say = say or say_default
    grid = config.grid()
    _check_presses(grid)
    out = config.out
    bench = KVBench(
        dataset=config.dataset,
        settings=grid,
        max_new_tokens=config.max_new_tokens,
        placement=config.question_placement,
        **config.run_fields(),
    )
    config.check_folder(bench.manifest_options())
    options = {} if config.context is None else {"context": config.context}
    if config.context == "fit":  # whole transcripts, cut once the tokenizer is loaded
        options["context"] = "full"
    loaded = load_dataset(config.dataset, config.data, limit=config.n, **options)
    examples = [e for e in loaded if isinstance(e, QAExample)]
    config.require(examples)
    model, tokenizer = config.load_model(loader)
    window = int(model.config.max_position_embeddings)
    if config.max_tokens is not None:
        window = min(window, config.max_tokens)
    if config.context == "fit":
        examples = _fit_windows(tokenizer, examples, window - config.max_new_tokens)
    fitting = [e for e in examples if _fits(tokenizer, e, window - config.max_new_tokens)]
    skipped = [e.id for e in examples if e not in fitting]
    if skipped:
        say(f"skipping {len(skipped)} examples longer than {window} tokens")
    if not fitting:
        raise ValueError(f"every example is longer than the model's window ({window} tokens)")
    bench.config = {"skipped_too_long": skipped, "window": window}
    config.claim_folder()
    settings = {
        "dataset": config.dataset,
        "model_name": bench.model_name,
        "presses": config.presses,
        "scatter_examples": min(len(fitting), 10) if "rcstat" in config.presses else 0,
        "shards": config.shard.count,
    }
    scatter = None
    if "rcstat" in config.presses and config.shard.index == 0:  # before the rows: the last
        sized = [w for w in config.windows if isinstance(w, int)]  # process to finish
        scatter = head_scatter(  # summarises with it
            model, tokenizer, fitting[:10], window=sized[0] if sized else DEFAULT_WINDOW
        )
        if config.shard.split:
            folder = part_folder(out, config.shard)
            folder.mkdir(parents=True, exist_ok=True)
            scatter.to_csv(folder / SCATTER, index=False)
    bench.collect(model, tokenizer, fitting, shard=config.shard, merge_settings=settings)
    return summarized(
        bench,
        KVResult,
        config.shard,
        lambda: summarize_run(out, settings, scatter, shard=config.shard, say=say),
    )
