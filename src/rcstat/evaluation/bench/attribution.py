"""``rcstat bench attribution`` as a library call: :class:`AttributionConfig` → :func:`run` →
:class:`AttributionResult`.

>>> config = AttributionConfig.from_dict({"dataset": "verigran", "ks": ["1", "all"], "n": 3})
>>> config.dataset, config.ks, config.span_score
('verigran', ['1', 'all'], 'sentence')

:func:`run` refuses, before the model loads, an output folder of another command or a run
made with other options; loads the annotated examples and the model; skips the prompts longer
than ``max_tokens``; runs the :class:`~rcstat.evaluation.attribution_bench.AttributionJob`
through :func:`~rcstat.runs.job.run_job`; and summarises the folder (:func:`summarize_run`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from rcstat.checks import check_count, optional_count
from rcstat.defaults import default_span_score, resolve_span_score
from rcstat.evaluation.bench.common import (
    JobConfig,
    Loader,
    Say,
    dataset_for,
    resolved,
    say_default,
    summarized,
)
from rcstat.evaluation.bench.results import AttributionResult
from rcstat.evaluation.choices import LAYOUTS

__all__ = ["AttributionConfig", "run"]

_STATISTICS = ("expected", "upper")


@dataclass
class AttributionConfig(JobConfig):
    """Everything ``rcstat bench attribution`` runs with (each field is the command's option;
    the shared ones in :class:`~rcstat.evaluation.bench.common.JobConfig`).

    ``ks`` holds numbers of heads as text, ``"all"`` for every head (resolved against the
    model's head count); ``span_score`` None is the default of ``statistic``.
    """

    COMMAND = "bench attribution"

    dataset: str = "quotesum"
    out: Path = Path("runs/bench_attribution")
    ks: list[str] = field(default_factory=lambda: "1,2,5,10,20,50,100,all".split(","))
    layout: str = "numbered"
    max_tokens: int | None = None
    statistic: str = "expected"
    span_score: str | None = None
    question_first: bool = False
    fixed_heads_from: Path | None = None

    def __post_init__(self) -> None:
        if self.span_score is None:
            self.span_score = default_span_score(self.statistic)

    PATHS = ("out", "fixed_heads_from")

    def check_values(self) -> None:
        """The ``k`` values as text and the dataset (an attribution set, by its registry
        name)."""
        self.ks = [str(k) for k in self.ks]
        self.dataset = dataset_for(self.dataset, "attribution", self.COMMAND)

    def check(self) -> None:
        """Every option in its range (``ValueError`` naming the option)."""
        if not self.ks:
            raise ValueError("--k needs at least one value")
        for k in self.ks:
            if k != "all":
                try:
                    check_count("--k", int(k))
                except ValueError as err:
                    raise ValueError(f"--k: {k!r} is not an integer in [1, ∞)") from err
        optional_count("--n", self.n)
        optional_count("--max-tokens", self.max_tokens, low=2)
        if self.layout not in LAYOUTS:
            raise ValueError(f"--layout {self.layout!r}: choose one of {', '.join(LAYOUTS)}")
        if self.statistic not in _STATISTICS:
            raise ValueError(f"--statistic {self.statistic!r}: choose expected or upper")
        resolve_span_score(str(self.span_score), self.statistic)
        source = self.fixed_heads_from
        if source is not None:
            if not (source / "predictions.jsonl").is_file():
                raise ValueError(f"--fixed-heads-from {source}: no bench attribution run there")
            if source.resolve() == self.out.resolve():
                raise ValueError("--fixed-heads-from: give another run than --out")

    def run_options(self) -> dict[str, Any]:
        """The data options of the manifest (the k values are compared once resolved)."""
        return {"data": resolved(self.data), "max_tokens": self.max_tokens}

    def compared(self) -> dict[str, Any]:
        """The manifest options known before the model loads: the dataset, ``layout``,
        ``statistic``, :meth:`run_options` and the prompt options set."""
        compared: dict[str, Any] = {
            "dataset": self.dataset,
            "layout": self.layout,
            "statistic": self.statistic,
            **self.run_options(),
        }
        if self.span_score != "mean":  # recorded only when set (older runs resume)
            compared["span_score"] = self.span_score
        if self.question_first:
            compared["question_first"] = True
        return compared


def run(
    config: AttributionConfig, *, loader: Loader | None = None, say: Say | None = None
) -> AttributionResult:
    """Run (or resume) the attribution benchmark of ``config`` and summarise it; ``loader``,
    ``say`` and the ``ValueError`` raised as for every job (:mod:`rcstat.evaluation.bench`),
    where an example needs annotated spans, and a ``ValueError`` when every prompt is longer
    than ``max_tokens``."""
    from rcstat.attribution import Attributor
    from rcstat.capture import attention_layout
    from rcstat.data import AttributionExample, load_dataset
    from rcstat.evaluation.attribution_bench import (
        AttributionBench,
        parse_ks,
        prompt_tokens,
        read_head_scores,
        summarize_run,
    )

    say = say or say_default
    out = config.out
    config.check_folder()
    fixed = read_head_scores(config.fixed_heads_from) if config.fixed_heads_from else None
    loaded = load_dataset(config.dataset, config.data, limit=config.n)
    examples = [e for e in loaded if isinstance(e, AttributionExample) and e.units]
    if len(examples) != len(loaded):
        say(f"skipping {len(loaded) - len(examples)} examples without annotated spans")
    if not examples:
        raise ValueError(f"no annotated example in {config.dataset} ({config.data or 'slice'})")
    model, tokenizer = config.load_model(loader)
    layout = attention_layout(model)
    if config.max_tokens is not None:
        limit, first = config.max_tokens, config.question_first
        fitting = [
            e
            for e in examples
            if prompt_tokens(tokenizer, e, config.layout, question_first=first) <= limit
        ]
        if len(fitting) != len(examples):
            say(
                f"skipping {len(examples) - len(fitting)} examples whose prompt is longer than "
                f"{limit} tokens"
            )
        if not fitting:
            raise ValueError(f"every example's prompt is longer than {limit} tokens")
        examples = fitting
    attributor = Attributor(  # k is set per accuracy row
        model,
        tokenizer,
        top_k=None,
        head_ranking="all",
        rank_post_softmax=True,
        statistic=config.statistic,  # type: ignore[arg-type]
        span_score=config.span_score,  # type: ignore[arg-type]
        question_first=config.question_first,
    )
    bench = AttributionBench(
        dataset=config.dataset,
        ks=parse_ks(",".join(config.ks), layout.num_layers * layout.num_heads),
        layout=config.layout,
        fixed_rankings=None if fixed is None else fixed[0],
        fixed_source=None if config.fixed_heads_from is None else str(config.fixed_heads_from),
        fixed_model=None if fixed is None else fixed[1],
        **config.run_fields(),
    )
    config.claim_folder()
    settings = {"dataset": config.dataset, "model_name": bench.model_name, "ks": bench.ks}
    bench.collect(attributor, examples, shard=config.shard, merge_settings=settings)
    summary = partial(summarize_run, out, settings, shard=config.shard)
    return summarized(bench, AttributionResult, config.shard, summary)
