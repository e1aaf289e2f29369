"""``rcstat attribute`` as a library call: attribute an answer to the context (paper eq. 10).

:class:`AttributeConfig` holds every option of the command with its default (the only home of
them) and checks them (:meth:`AttributeConfig.check`, whose messages name the command-line
flags); :func:`run` loads the model, attributes each sentence of the answer to context chunks,
sentences or tokens with an :class:`~rcstat.attribution.Attributor` (one forward pass) and
returns an :class:`AttributeResult`, which writes the command's folder (``attribution.csv``,
``attribution.json``, ``attribution.npz``, ``attribution.html``) — into ``config.out`` when it
is set. This module imports neither torch nor pandas: the options are checked before anything
heavy loads.

>>> from rcstat.commands.attribute import AttributeConfig
>>> AttributeConfig.from_dict({"context": ["a.", "b."], "question": "q?", "top_k": 3}).top_k
3
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rcstat.checks import check_count, check_language
from rcstat.defaults import (
    DEFAULT_LANGUAGE,
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_TOP_K,
    resolve_span_score,
)
from rcstat.evaluation.bench.common import load_for
from rcstat.progress import Step
from rcstat.runs.devices import Devices
from rcstat.runs.folder import staged_output
from rcstat.runs.job import Config

if TYPE_CHECKING:
    from rcstat.attribution import Attribution
    from rcstat.evaluation.bench.common import Loader

__all__ = [
    "GRANULARITIES",
    "NAME",
    "RANKINGS",
    "STATISTICS",
    "AttributeConfig",
    "AttributeResult",
    "run",
]

#: The command, and the owner of the folders it writes.
NAME = "attribute"
#: How the heads are chosen (:class:`~rcstat.attribution.Attributor`'s ``head_ranking``).
RANKINGS = ("top", "bottom", "all", "top_post_softmax", "bottom_post_softmax")
#: The candidate spans: the given chunks, the context's sentences or its tokens.
GRANULARITIES = ("chunk", "sentence", "token")
#: The RC statistic that scores spans and ranks heads.
STATISTICS = ("expected", "upper")


@dataclass
class AttributeConfig(Config):
    """The options of ``rcstat attribute``, a field a flag (:mod:`rcstat.commands`).

    Attributes
    ----------
    context
        The context: one text, or a list of chunks (``--chunks-file``).
    question
        The question.
    answer
        The answer to attribute; None: generated greedily.
    granularity
        Candidate spans (``chunk``, ``sentence`` or ``token``); None: ``chunk`` for a list of
        chunks, else ``sentence``.
    top_k
        Number of heads (unused with ``ranking="all"``).
    ranking
        How the heads are chosen (:data:`RANKINGS`).
    statistic
        The RC statistic that scores spans and ranks heads (:data:`STATISTICS`).
    span_score
        How a span's tokens make its score (``mean``, ``sum``, ``sentence``); None: the
        default of ``statistic`` (:func:`rcstat.defaults.default_span_score`).
    question_first
        Write the question before the context in the prompt.
    max_new_tokens
        Most tokens of a generated answer.
    language
        Language code of the sentence splitter.
    allow_special_tokens
        Special-token strings in the texts become special tokens (trusted text only).
    """

    context: str | list[str] | None = None
    question: str | None = None
    answer: str | None = None
    granularity: str | None = None
    top_k: int = DEFAULT_TOP_K
    ranking: str = "top"
    statistic: str = "expected"
    span_score: str | None = None
    question_first: bool = False
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    language: str = DEFAULT_LANGUAGE
    allow_special_tokens: bool = False
    model: str | None = None
    devices: Devices = field(default_factory=Devices)
    out: Path | None = None

    def check(self) -> None:
        """Refuse a config that ``rcstat attribute`` refuses (``ValueError`` naming the flag).

        >>> AttributeConfig(context="c.", question="q?", top_k=0).check()
        Traceback (most recent call last):
        ...
        ValueError: --top-k must be an integer in [1, ∞), got 0
        """
        context = self.context
        if isinstance(context, list) and not all(isinstance(c, str) for c in context):
            raise ValueError("--chunks-file: expected a list of strings")
        if context is not None and not isinstance(context, (str, list)):
            raise ValueError(f"--context: expected a text, got {type(context).__name__}")
        if context is None or self.question is None:
            raise ValueError(
                "attribute needs a context (--context, --context-file or --chunks-file) "
                "and --question"
            )
        texts = {"--context": context} if isinstance(context, str) else {}
        for flag, text in {**texts, "--question": self.question, "--answer": self.answer}.items():
            if text is not None and not text.strip():
                raise ValueError(f"{flag} is empty or whitespace only")
        if isinstance(context, list):
            if not context:
                raise ValueError("--chunks-file: the context has no chunk")
            for index, chunk in enumerate(context):
                if not chunk.strip():
                    raise ValueError(f"--chunks-file: chunk {index} is empty")
        elif self.granularity == "chunk":
            raise ValueError("--granularity chunk needs the context as chunks (--chunks-file)")
        check_count("--top-k", self.top_k)
        for flag, value, allowed in (
            ("--ranking", self.ranking, RANKINGS),
            ("--statistic", self.statistic, STATISTICS),
            ("--granularity", self.granularity, (None, *GRANULARITIES)),
        ):
            if value not in allowed:
                names = ", ".join(str(a) for a in allowed if a is not None)
                raise ValueError(f"{flag} {value!r}: choose one of {names}")
        check_count("--max-new-tokens", self.max_new_tokens)
        check_language(self.language)
        resolve_span_score(self.span_score, self.statistic, names=("--span-score", "--statistic"))
        for name in ("question_first", "allow_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"--{name.replace('_', '-')}: expected True or False")


@dataclass
class AttributeResult:
    """What :func:`run` measured: the :class:`~rcstat.attribution.Attribution` of the answer
    (its units, candidate spans, scores, and the mean-attention baseline), and the folder it
    was written to (None: not written)."""

    attribution: Attribution
    out: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``rcstat attribute --json``: :meth:`Attribution.to_dict
        <rcstat.attribution.Attribution.to_dict>` (the texts, the heads, the candidate spans
        and, for each answer unit, its character span, every span's score and the index of the
        attributed span) and ``out``, the folder the files were written to (None when they
        were not)."""
        return {
            **self.attribution.to_dict(),
            "out": None if self.out is None else str(self.out),
        }

    def write(self, out: Path) -> None:
        """Write ``attribution.csv``, ``attribution.json``, ``attribution.npz`` and the page
        ``attribution.html`` into ``out`` (staged: the folder is replaced only when everything
        was written) and remember it as :attr:`out`."""
        from rcstat.report.attribution_html import save_attribution_page

        result = self.attribution
        with staged_output(Path(out), NAME) as stage:
            result.to_frame().to_csv(stage / "attribution.csv", index=False)
            (stage / "attribution.json").write_text(result.to_json(), encoding="utf-8")
            result.save(stage / "attribution.npz")
            save_attribution_page(stage / "attribution.html", result)
        self.out = Path(out)


def run(
    config: AttributeConfig, *, loader: Loader | None = None, step: Step = nullcontext
) -> AttributeResult:
    """Attribute the answer of ``config`` and, when ``config.out`` is set, write the folder of
    ``rcstat attribute`` there.

    ``config`` (checked again), ``loader``, ``step`` and the ``ValueError`` of a bad option or
    folder as for every command (:mod:`rcstat.commands`); a ``ValueError`` also for a ``top_k``
    beyond the model's heads.
    """
    from rcstat.attribution import Attributor
    from rcstat.capture import attention_layout

    model, tokenizer = load_for(config, loader, NAME)
    layout = attention_layout(model)
    heads = layout.num_layers * layout.num_heads
    if config.ranking != "all" and config.top_k > heads:
        raise ValueError(f"--top-k {config.top_k}: the model has {heads} heads (layers × heads)")
    attributor = Attributor(
        model,
        tokenizer,
        top_k=config.top_k,
        head_ranking=config.ranking,  # type: ignore[arg-type]
        statistic=config.statistic,  # type: ignore[arg-type]
        max_new_tokens=config.max_new_tokens,
        allow_special_tokens=config.allow_special_tokens,
        language=check_language(config.language),
        span_score=resolve_span_score(
            config.span_score, config.statistic, names=("--span-score", "--statistic")
        ),
        question_first=config.question_first,
    )
    assert config.context is not None and config.question is not None  # checked
    with step("attributing (one forward pass)…"):
        attribution = attributor.attribute(
            config.context,
            config.question,
            config.answer,
            granularity=config.granularity,  # type: ignore[arg-type]
        )
    result = AttributeResult(attribution)
    if config.out is not None:
        with step("writing results…"):
            result.write(Path(config.out))
    return result
