"""``rcstat compress`` as a library call: answer on a KV cache compressed by RCStatPress.

:class:`CompressConfig` holds every option of the command with its default (the only home of
them; the press's knobs default to :class:`~rcstat.press.options.RCStatOptions`') and checks
them (:meth:`CompressConfig.check`, whose messages name the command-line flags); :func:`run`
builds the press, loads the model, compresses the context into a ragged cache (evicted entries
are freed, paper eq. 9) and answers the question on it — several questions in one padded batch
— and, unless ``full`` is False, answers with the full cache too and measures the agreement
(ROUGE-L). It returns a :class:`CompressResult` (``to_dict``: what ``rcstat compress --json``
prints). The command writes no folder, so neither does this call. This module imports neither
torch nor kvpress: the options are checked before anything heavy loads (the press needs the
``rcstat[press]`` extra).

>>> from rcstat.commands.compress import CompressConfig
>>> CompressConfig.from_dict({"context": "c", "question": "q?", "ratio": 0.5}).ratio
0.5
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from rcstat.checks import check_count, check_number
from rcstat.defaults import DEFAULT_MAX_NEW_TOKENS, DEFAULT_WINDOW, QUESTION_WINDOW
from rcstat.evaluation.bench.common import load_for
from rcstat.press.options import KNOBS, check_knob, knob_default
from rcstat.progress import Step
from rcstat.runs.devices import Devices
from rcstat.runs.job import Config

if TYPE_CHECKING:
    from rcstat.evaluation.bench.common import Loader
    from rcstat.press.answer import CompressionReport
    from rcstat.press.rcstat_press import RCStatPress

__all__ = [
    "COMPRESS_FORMAT",
    "NAME",
    "SCOPES",
    "CompressConfig",
    "CompressResult",
    "FullAnswer",
    "run",
]

#: The command.
NAME = "compress"
#: What the press compresses (``--press-scope``): the context alone, or with the question.
SCOPES = ("context", "question")
#: The version of :meth:`CompressResult.to_dict`'s layout.
COMPRESS_FORMAT = 1


@dataclass
class CompressConfig(Config):
    """The options of ``rcstat compress``, a field a flag (:mod:`rcstat.commands`).

    Attributes
    ----------
    context
        The context whose KV cache is compressed.
    question
        The question answered on it.
    questions
        Several questions on the context (``--questions-file``), answered in one padded batch
        instead of ``question``.
    threshold
        ``c`` of eq. 9 (threshold mode); None: the press's default.
    ratio
        Target compression ratio in ``[0, 1)`` (target-ratio mode instead of ``threshold``).
    window
        The press's window ``w`` in tokens, or ``"question"``: the question's tokens (with
        ``press_scope="question"``).
    knobs
        The press's knobs given (``{"sinks": 4}``: any of
        :data:`~rcstat.press.options.KNOBS`); the others at the press's defaults
        (:class:`~rcstat.press.options.RCStatOptions`; ``group``: the default of the mode).
    press_scope
        What the press compresses: the context alone (``"context"``, question-agnostic) or the
        context with the question (``"question"``, query-aware).
    max_new_tokens
        Most tokens of an answer.
    full
        Answer with the full cache too, and compare.
    allow_special_tokens
        Special-token strings in the texts become special tokens (trusted text only).
    """

    context: str | None = None
    question: str | None = None
    questions: tuple[str, ...] = ()
    threshold: float | None = None
    ratio: float | None = None
    window: int | str = DEFAULT_WINDOW
    knobs: dict[str, Any] = field(default_factory=dict)
    press_scope: str = "context"
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    full: bool = True
    allow_special_tokens: bool = False
    model: str | None = None
    devices: Devices = field(default_factory=Devices)

    PATHS = ()

    @classmethod
    def prepared(cls, data: dict[str, Any]) -> dict[str, Any]:
        """``questions`` as a tuple."""
        if isinstance(data.get("questions"), list):
            data["questions"] = tuple(data["questions"])
        return data

    def check(self) -> None:
        """Refuse a config that ``rcstat compress`` refuses (``ValueError`` naming the flag).

        >>> CompressConfig(context="c", question="q?", window="question").check()
        Traceback (most recent call last):
        ...
        ValueError: --window question needs --press-scope question
        """
        if self.questions:
            if self.question is not None:
                raise ValueError("give --question (one) or --questions-file (several), not both")
            if not all(isinstance(q, str) and q.strip() for q in self.questions):
                raise ValueError("--questions-file: every question is a non-empty text")
            if self.window == QUESTION_WINDOW:
                raise ValueError(
                    "--window question makes each question its own window: answer them one "
                    "at a time with --question"
                )
        if self.context is None or (self.question is None and not self.questions):
            raise ValueError("compress needs --context (or --context-file) and --question")
        if self.ratio is not None and self.threshold is not None:
            raise ValueError(
                "--ratio and --threshold: give one of them (target-ratio or threshold mode)"
            )
        if self.ratio is not None:
            check_number("--ratio", self.ratio, low=0, high=1, high_open=True)
        unknown = sorted(set(self.knobs) - set(KNOBS))
        if unknown:
            raise ValueError(f"--{unknown[0]}: RCStatPress has no such option")
        self.knobs = {name: check_knob(name, v, flags=True) for name, v in self.knobs.items()}
        if self.knobs.get("budget") == "pooled" and self.ratio is None:
            raise ValueError("--budget pooled needs --ratio (a target ratio for the whole model)")
        if self.threshold is not None:
            check_number("--threshold", self.threshold, low=0)
        if self.window == QUESTION_WINDOW:
            if self.press_scope != "question":
                raise ValueError(f"--window {QUESTION_WINDOW} needs --press-scope question")
        else:
            check_count("--window", self.window)
        check_count("--max-new-tokens", self.max_new_tokens)
        if self.press_scope not in SCOPES:
            raise ValueError(
                f"--press-scope {self.press_scope!r}: choose one of {', '.join(SCOPES)}"
            )
        for name in ("full", "allow_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: expected True or False")

    def press(self) -> RCStatPress:
        """The press of these options (needs the ``rcstat[press]`` extra)."""
        from rcstat.press.rcstat_press import RCStatPress

        return RCStatPress(
            threshold=knob_default("threshold") if self.threshold is None else self.threshold,
            window_size=DEFAULT_WINDOW if self.window == QUESTION_WINDOW else int(self.window),
            compression_ratio=self.ratio,
            **self.knobs,
        )


@dataclass(frozen=True)
class FullAnswer:
    """The full-cache answer to one question, and its agreement (ROUGE-L F1) with the answer
    on the compressed cache."""

    text: str
    finished: bool  # False: cut at the token limit
    agreement: float


@dataclass
class CompressResult:
    """What :func:`run` did: per question, the :class:`~rcstat.press.answer.CompressionReport`
    of the compressed cache (answer, ratios, memory) and the full-cache answer (None without
    ``full``); ``batched`` when the questions were answered in one batch (``questions``)."""

    questions: list[str]
    reports: list[CompressionReport]
    fulls: list[FullAnswer | None]
    batched: bool = False

    def agreements(self) -> list[float | None]:
        """Each question's ROUGE-L of the compressed answer against the full-cache answer."""
        return [None if full is None else full.agreement for full in self.fulls]

    def to_dict(self) -> dict[str, Any]:
        """What ``rcstat compress --json`` prints: per question its compressed answer (and
        whether it was cut at the token limit), the share of the context's KV entries evicted
        (whole model, per layer — keys are layer indices — and per layer and KV head), the KV
        memory in bytes and the full-cache answer with its ROUGE-L agreement (None without
        ``full``)."""
        return {
            "format": COMPRESS_FORMAT,
            "batched": self.batched,
            "questions": [
                {
                    "question": question,
                    "answer": report.answer,
                    "finished": report.finished,
                    "context_tokens": report.context_tokens,
                    "ratio": report.ratio,
                    "layer_ratios": {str(k): v for k, v in sorted(report.layer_ratios.items())},
                    "head_ratios": report.head_ratios,
                    "kv_bytes": {
                        "full": report.dense_bytes,
                        "live": report.live_bytes,
                        "allocated": report.allocated_bytes,
                    },
                    "full_answer": None if full is None else asdict(full),
                }
                for question, report, full in zip(
                    self.questions, self.reports, self.fulls, strict=True
                )
            ],
        }


def run(
    config: CompressConfig, *, loader: Loader | None = None, step: Step = nullcontext
) -> CompressResult:
    """Answer the question(s) of ``config`` on the compressed cache (and on the full cache).

    ``config`` (checked again), ``loader`` and ``step`` as for every command
    (:mod:`rcstat.commands`).

    Raises
    ------
    ValueError
        A bad option (before the model loads).
    MissingExtraError
        kvpress is not installed (``pip install "rcstat[press]"``).
    """
    from rcstat.press.extra import require_kvpress

    config.check()
    require_kvpress("rcstat compress")
    from rcstat.evaluation.metrics import rouge_f1
    from rcstat.press.answer import (
        answer_full_batch,
        compress_and_answer,
        compress_and_answer_batch,
    )

    press = config.press()
    model, tokenizer = load_for(config, loader)
    assert config.context is not None  # checked
    questions = list(config.questions) or [str(config.question)]
    contexts = [config.context] * len(questions)
    options: dict[str, Any] = {
        "max_new_tokens": config.max_new_tokens,
        "allow_special_tokens": config.allow_special_tokens,
        "placement": config.press_scope,
    }
    with step(f"compressing the context and answering {len(questions)} question(s)…"):
        if config.questions:  # one padded batch
            reports = compress_and_answer_batch(
                model, tokenizer, contexts, questions, press, **options
            )
        else:
            single = compress_and_answer(
                model, tokenizer, config.context, questions[0], press,
                question_window=config.window == QUESTION_WINDOW, **options,
            )  # fmt: skip
            reports = [single]
    fulls: Sequence[FullAnswer | None] = [None] * len(questions)
    if config.full:
        with step("answering with the full cache for comparison…"):
            generated = answer_full_batch(model, tokenizer, contexts, questions, **options)
        texts = [tokenizer.decode(full.ids, skip_special_tokens=True) for full in generated]
        fulls = [
            FullAnswer(text, full.finished, float(rouge_f1(report.answer, [text])["rougeL"]))
            for text, full, report in zip(texts, generated, reports, strict=True)
        ]
    return CompressResult(questions, reports, list(fulls), batched=bool(config.questions))
