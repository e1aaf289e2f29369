"""``rcstat analyze`` as a library call: per-head RC scores of one example (paper §5.1).

:class:`AnalyzeConfig` holds every option of the command with its default (the only home of
them) and checks them (:meth:`AnalyzeConfig.check`, whose messages name the command-line
flags); :func:`run` loads the model, analyses the example in one forward pass
(:func:`rcstat.analysis.analyze`) and returns an :class:`AnalyzeResult`, which writes the
command's folder (``scores.csv``, ``scores.json``, ``heatmap.png`` and one
``head_<layer>_<head>.png`` per ``heads``) — into ``config.out`` when it is set. This module
imports neither torch nor pandas: the options are checked before anything heavy loads.

>>> from rcstat.commands.analyze import AnalyzeConfig
>>> AnalyzeConfig.from_dict({"prompt": "Once upon a time", "top": 3}).top
3
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rcstat.checks import check_count, check_tau
from rcstat.defaults import DEFAULT_MAX_NEW_TOKENS, DEFAULT_TAU
from rcstat.evaluation.bench.common import load_for
from rcstat.progress import Step
from rcstat.runs.devices import Devices
from rcstat.runs.folder import staged_output
from rcstat.runs.job import Config

if TYPE_CHECKING:
    from rcstat.analysis import HeadAnalysis
    from rcstat.evaluation.bench.common import Loader

__all__ = ["NAME", "PLACEMENTS", "AnalyzeConfig", "AnalyzeResult", "run"]

#: The command, and the owner of the folders it writes.
NAME = "analyze"
#: Chat mode: the question ends the prompt, or starts the generation (as in the paper's §5.1).
PLACEMENTS = ("prompt", "generation")


@dataclass
class AnalyzeConfig(Config):
    """The options of ``rcstat analyze``, a field a flag (:mod:`rcstat.commands`).

    Chat mode gives ``context`` and ``question`` (and ``answer``, generated when absent), raw
    mode gives ``prompt`` (and ``generation``, generated when absent); not both.

    Attributes
    ----------
    context, question, answer
        Chat mode's texts (the chat template is applied).
    prompt, generation
        Raw mode's texts (no chat template).
    question_placement
        Chat mode: the question ends the prompt (``"prompt"``) or starts the generation.
    tau
        Threshold of the head counts printed and of the heatmap's title.
    top
        Rows of the top-heads table.
    heads
        ``(layer, head)`` pairs whose cross and self scores are plotted.
    max_new_tokens
        Most tokens of a generated answer.
    scaled
        Use ``<q, k>/sqrt(d)`` instead of raw ``<q, k>``.
    lower_bound
        Compute the lower bound ``a``; None: where it is free (not on CUDA with Triton).
    allow_special_tokens
        Special-token strings in the texts become special tokens (trusted text only).
    """

    context: str | None = None
    question: str | None = None
    answer: str | None = None
    prompt: str | None = None
    generation: str | None = None
    question_placement: str = "prompt"
    model: str | None = None
    devices: Devices = field(default_factory=Devices)
    out: Path | None = None
    tau: float = DEFAULT_TAU
    top: int = 10
    heads: tuple[tuple[int, int], ...] = ()
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    scaled: bool = False
    lower_bound: bool | None = None
    allow_special_tokens: bool = False

    @property
    def raw(self) -> bool:
        """Whether the example is given in raw mode (``prompt``)."""
        return self.prompt is not None or self.generation is not None

    def check(self) -> None:
        """Refuse a config that ``rcstat analyze`` refuses (``ValueError`` naming the flag).

        >>> AnalyzeConfig(prompt="Once upon a time", tau=float("nan")).check()
        Traceback (most recent call last):
        ...
        ValueError: --tau must be a finite number, got nan
        """
        texts = {name: getattr(self, name) for name in _TEXTS}
        for name, text in texts.items():
            if text is not None and not isinstance(text, str):
                raise ValueError(f"--{name}: expected a text, got {type(text).__name__}")
            if text is not None and not text.strip():
                raise ValueError(f"--{name}: is empty or whitespace only")
        chat = [f"--{n}" for n in ("context", "question", "answer") if texts[n] is not None]
        raw = [f"--{n}" for n in ("prompt", "generation") if texts[n] is not None]
        if chat and raw:
            raise ValueError(
                f"give chat-mode inputs ({', '.join(chat)}) or raw-mode inputs "
                f"({', '.join(raw)}), not both"
            )
        if raw and self.prompt is None:
            raise ValueError("raw mode needs --prompt (or --prompt-file)")
        if not raw and (self.context is None or self.question is None):
            raise ValueError("give --context and --question (chat mode) or --prompt (raw mode)")
        if self.question_placement not in PLACEMENTS:
            raise ValueError(
                f"--question-placement {self.question_placement!r}: choose one of "
                f"{', '.join(PLACEMENTS)}"
            )
        for pair in self.heads:
            if len(pair) != 2 or not all(isinstance(n, int) for n in pair):
                raise ValueError(f"--head {pair!r}: expected a (layer, head) pair of integers")
            layer, head = pair
            if layer < 0 or head < 0:
                raise ValueError(f"--head {layer}.{head}: layer and head are >= 0")
        check_tau("--tau", self.tau)
        check_count("--top", self.top)
        check_count("--max-new-tokens", self.max_new_tokens)
        for name in ("scaled", "allow_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"--{name.replace('_', '-')}: expected True or False")

    def inputs(self) -> dict[str, Any]:
        """The texts as :func:`rcstat.analysis.analyze` takes them (raw or chat mode)."""
        if self.raw:
            return {"prompt": self.prompt, "generation": self.generation}
        return {
            "context": self.context,
            "question": self.question,
            "answer": self.answer,
            "question_placement": self.question_placement,
        }


#: The text fields (each the flag ``--NAME`` or ``--NAME-file`` on the command line).
_TEXTS = ("context", "question", "answer", "prompt", "generation")


@dataclass
class AnalyzeResult:
    """What :func:`run` measured: the :class:`~rcstat.analysis.HeadAnalysis` of the example,
    with the ``tau`` and ``top`` it is shown with, and the folder it was written to (None: not
    written)."""

    analysis: HeadAnalysis
    tau: float = DEFAULT_TAU
    top: int = 10
    out: Path | None = None

    def title(self) -> str:
        """The top-heads table's title: how many heads it shows, and the head counts above
        ``tau`` of the upper bound A and of the expected RC E."""
        layers, heads = self.analysis.shape
        return (
            f"top {self.top} of {layers * heads} heads by expected RC — "
            f"A > {self.tau}: {self.analysis.count_above(self.tau, 'upper')} heads, "
            f"E > {self.tau}: {self.analysis.count_above(self.tau, 'expected')} heads"
        )

    def columns(self) -> tuple[str, ...]:
        """The top-heads table's columns: ``layer``, ``head`` and each statistic held."""
        names = ("expected", "upper", "lower", "normalized")
        return ("layer", "head", *(n for n in names if n in self.analysis.statistics))

    def rows(self) -> list[tuple[str, ...]]:
        """The ``top`` heads by expected RC, highest first, as the table prints them."""
        shown = self.columns()[2:]
        return [
            (str(row["layer"]), str(row["head"]), *(f"{row[name]:.3f}" for name in shown))
            for row in self.analysis.top(self.top).to_dict("records")
        ]

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``rcstat analyze --json``: :meth:`HeadAnalysis.to_dict
        <rcstat.analysis.HeadAnalysis.to_dict>` (texts, lengths, every head's statistics as
        ``[layer][head]`` lists), then ``tau``, the head counts above it (``heads_above_tau``:
        of the upper bound A and of the expected RC E), the ``top`` heads by expected RC as
        the table shows them (``top_heads``: layer, head and each statistic, highest first)
        and ``out``, the folder the files were written to (None when they were not)."""
        analysis = self.analysis
        return {
            **analysis.to_dict(),
            "tau": self.tau,
            "heads_above_tau": {
                by: analysis.count_above(self.tau, by) for by in ("upper", "expected")
            },
            "top_heads": analysis.top(self.top).to_dict("records"),
            "out": None if self.out is None else str(self.out),
        }

    def write(self, out: Path) -> None:
        """Write ``scores.csv``, ``scores.json``, ``heatmap.png`` and the head plots into
        ``out`` (staged: the folder is replaced only when everything was written) and remember
        it as :attr:`out`."""
        from rcstat.report.plots import heatmap, save_figure, score_distributions

        result = self.analysis
        with staged_output(Path(out), NAME) as stage:
            result.to_frame().to_csv(stage / "scores.csv", index=False)
            result.save(stage / "scores.json")
            save_figure(
                heatmap(
                    result.values("upper"),
                    label="upper",
                    title=f"upper bound A per head (τ = {self.tau:g})",
                ),
                stage / "heatmap.png",
            )
            for sample in result.samples:
                fig = score_distributions(
                    sample.cross, sample.self_, title=f"layer {sample.layer}, head {sample.head}"
                )
                save_figure(fig, stage / f"head_{sample.layer}_{sample.head}.png")
        self.out = Path(out)


def run(
    config: AnalyzeConfig, *, loader: Loader | None = None, step: Step = nullcontext
) -> AnalyzeResult:
    """Analyse the example of ``config`` and, when ``config.out`` is set, write the folder
    of ``rcstat analyze`` there.

    ``config`` (checked again), ``loader``, ``step`` and the ``ValueError`` of a bad option or
    folder as for every command (:mod:`rcstat.commands`); a ``ValueError`` also for a ``heads``
    pair the model does not have.
    """
    from rcstat.analysis import analyze
    from rcstat.capture import attention_layout

    model, tokenizer = load_for(config, loader, NAME)
    layout = attention_layout(model)
    for layer, head in config.heads:
        if layer >= layout.num_layers or head >= layout.num_heads:
            raise ValueError(
                f"--head {layer}.{head} does not exist: the model has {layout.num_layers} "
                f"layers × {layout.num_heads} heads"
            )
    with step("generating and analysing (one forward pass)…"):
        analysis = analyze(
            model,
            tokenizer,
            **config.inputs(),
            max_new_tokens=config.max_new_tokens,
            scaled=config.scaled,
            lower_bound=config.lower_bound,
            keep_samples=list(config.heads),
            allow_special_tokens=config.allow_special_tokens,
        )
    result = AnalyzeResult(analysis, tau=float(config.tau), top=config.top)
    if config.out is not None:
        with step("writing results…"):
            result.write(Path(config.out))
    return result
