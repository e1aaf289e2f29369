"""The demo job (``rcstat demo``): the paper's two contrasting examples (§5.1) on texts written
for rcstat, as a library call.

The same question and answer are analysed after a context that supports them and after an
unrelated context. As in the paper, the context is the prompt and question + answer form the
generation (``question_placement="generation"``). :func:`run` then answers the question on the
full KV cache of the supporting context and on caches compressed by RCStatPress at two settings
(a *faithful* one, whose answer equals the full-cache answer on the default model, and a
*strong* one, whose answer may not), each with its ROUGE-L against the full-cache answer — a
compressed answer alone cannot tell whether the compression changed it. Without the
``rcstat[press]`` extra only the full-cache answer is computed and the result says how to
install the extra. Finally the answer is attributed to the sentences of both contexts.

The texts, settings and report wording are data (``demo_texts.json`` in the package);
:mod:`rcstat.report.demo` renders the report.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING, Any

import numpy as np

from rcstat.defaults import DEFAULT_TOP_K, DEFAULT_WINDOW, INSTALL_PRESS

if TYPE_CHECKING:
    from rcstat.analysis import HeadAnalysis, Statistic
    from rcstat.attribution import Attribution
    from rcstat.press.answer import CompressionReport

__all__ = [
    "DEMO_TEXTS",
    "MAX_NEW_TOKENS",
    "SETTINGS",
    "AnswerComparison",
    "CompressedAnswer",
    "DemoResult",
    "DemoTexts",
    "Setting",
    "attribution_summary",
    "compare_answers",
    "demo_data",
    "run",
    "summary_rows",
]

#: Shows a message while a step runs (the CLI's spinner or log line); silent by default.
Step = Callable[[str], AbstractContextManager[Any]]


@contextmanager
def _silent(message: str) -> Iterator[None]:
    yield


@cache
def demo_data() -> dict[str, Any]:
    """The demo's texts, settings and report wording (``demo_texts.json``)."""
    text = files("rcstat").joinpath("demo_texts.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@dataclass(frozen=True)
class DemoTexts:
    """The demo's question, answer and two contexts."""

    question: str
    answer: str
    supporting: str
    unrelated: str


@dataclass(frozen=True)
class Setting:
    """One RCStatPress setting the demo compresses the supporting context with."""

    name: str
    threshold: float  # c of eq. (9): a token is evicted from a head when s_i <= c · mean s_i


DEMO_TEXTS = DemoTexts(
    **{k: demo_data()[k] for k in ("question", "answer", "supporting", "unrelated")}
)
#: Chosen by measuring c = 0.2 … 1.5 on the default model (README, "The demo"): every c up to
#: 0.6 answers exactly as the full cache, and c = 0.5 (23 % of the KV entries evicted) sits
#: inside that range, not at its edge; c = 1 (the paper's setting) evicts 49 % and answers
#: "… in 2022" where the context says 1962.
SETTINGS = tuple(Setting(**item) for item in demo_data()["settings"])
#: Token limit of the full-cache and compressed answers (the full answer needs 28).
MAX_NEW_TOKENS: int = demo_data()["max_new_tokens"]


def _same_text(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


@dataclass(frozen=True)
class CompressedAnswer:
    """The answer on a cache compressed at one setting, compared with the full-cache answer."""

    setting: Setting
    report: CompressionReport
    rouge_l: float  # ROUGE-L F1 against the full-cache answer
    same_as_full: bool  # the same text (up to white space), finished or cut alike

    def label(self) -> str:
        return f"{self.setting.name} (c = {self.setting.threshold:g})"

    def warning(self) -> str:
        """Why this answer must not be trusted as the model's answer ("" when it agrees)."""
        if self.same_as_full:
            return ""
        return (
            f"{self.label()}: the compressed-cache answer differs from the full-cache answer "
            f"(ROUGE-L {self.rouge_l:.2f}); the compression changed what the model says."
        )


@dataclass(frozen=True)
class AnswerComparison:
    """The full-cache answer and the compressed-cache answers of the supporting context."""

    full_answer: str
    full_finished: bool
    context_tokens: int
    max_new_tokens: int
    compressed: list[CompressedAnswer] = field(default_factory=list)
    missing_extra: str = ""  # why there are no compressed answers (kvpress not installed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "context_tokens": self.context_tokens,
            "max_new_tokens": self.max_new_tokens,
            "window": DEFAULT_WINDOW,
            "full": {"answer": self.full_answer, "finished": self.full_finished},
            "settings": [
                {
                    "name": c.setting.name,
                    "threshold": c.setting.threshold,
                    "rougeL_vs_full": c.rouge_l,
                    "same_as_full": c.same_as_full,
                    **asdict(c.report),
                }
                for c in self.compressed
            ],
            "missing_extra": self.missing_extra,
        }


def compare_answers(
    model: Any,
    tokenizer: Any,
    context: str,
    question: str,
    settings: tuple[Setting, ...] = SETTINGS,
    *,
    max_new_tokens: int = MAX_NEW_TOKENS,
    step: Step = _silent,
) -> AnswerComparison:
    """Answer on the full cache, then on a cache compressed at each of ``settings``.

    Both use the same prompt split and greedy decoding (:mod:`rcstat.press.answer`). Without
    kvpress only the full-cache answer is computed and ``missing_extra`` says what to install.
    """
    from rcstat.press.answer import answer_full, split_context_question
    from rcstat.press.extra import has_kvpress

    with step("answering on the full KV cache…"):
        full = answer_full(model, tokenizer, context, question, max_new_tokens=max_new_tokens)
    full_answer = tokenizer.decode(full.ids, skip_special_tokens=True)
    context_tokens = int(split_context_question(tokenizer, context, question)[0].shape[1])
    if not has_kvpress():
        missing = (
            "KV-cache compression needs the rcstat[press] extra (kvpress), which is not "
            f"installed; install it with: {INSTALL_PRESS}"
        )
        return AnswerComparison(
            full_answer, full.finished, context_tokens, max_new_tokens, missing_extra=missing
        )
    from rcstat.evaluation.metrics import rouge_f1
    from rcstat.press.answer import compress_and_answer
    from rcstat.press.rcstat_press import RCStatPress

    compressed = []
    for setting in settings:
        what = f"{setting.name}: RCStatPress, c = {setting.threshold:g}"
        with step(f"compressing the context and answering ({what})…"):
            report = compress_and_answer(
                model,
                tokenizer,
                context,
                question,
                RCStatPress(threshold=setting.threshold),
                max_new_tokens=max_new_tokens,
            )
        rouge_l = rouge_f1(report.answer, [full_answer])["rougeL"]
        same = _same_text(report.answer, full_answer) and report.finished == full.finished
        compressed.append(CompressedAnswer(setting, report, rouge_l, same))
    return AnswerComparison(full_answer, full.finished, context_tokens, max_new_tokens, compressed)


_MEDIANS: tuple[Statistic, ...] = ("upper", "expected", "normalized")


def summary_rows(results: dict[str, HeadAnalysis], tau: float) -> dict[str, dict[str, float]]:
    """Head counts above the thresholds and median statistics, one column per example."""
    rows: dict[str, dict[str, float]] = {}
    thresholds: tuple[tuple[str, Statistic, float], ...] = (
        (f"heads with upper bound A > {tau}", "upper", tau),
        (f"heads with expected E > {tau}", "expected", tau),
        ("heads with normalized RC > 0.5", "normalized", 0.5),
    )
    for label, by, threshold in thresholds:
        rows[label] = {n: r.count_above(threshold, by) for n, r in results.items()}
    for stat in _MEDIANS:
        rows[f"median {stat}"] = {n: float(np.median(r.values(stat))) for n, r in results.items()}
    return rows


def attribution_summary(result: Attribution) -> str:
    """One line: the sentence each method attributes the (single-sentence) answer to."""
    picks = {
        result.method: result.attributed[0],
        "all heads": result.scores_for("all", None)[1][0],
        "mean attention": result.attention_scores()[1][0],
    }
    parts = [
        f"{name} → {'none' if i is None else repr(result.spans[i].text)}"
        for name, i in picks.items()
    ]
    return "Attribution of the answer: " + "; ".join(parts)


@dataclass
class DemoResult:
    """What :func:`run` measured: both analyses, the answers, the attribution, the summary."""

    results: dict[str, HeadAnalysis]
    comparison: AnswerComparison
    attribution: Attribution
    rows: dict[str, dict[str, float]]
    grounding: str  # attribution_summary's line
    tau: float

    @property
    def lengths(self) -> str:
        """``"supporting N, unrelated M"``: the prompt tokens of each example."""
        return ", ".join(f"{n} {r.prompt_len}" for n, r in self.results.items())

    def summary(self) -> dict[str, Any]:
        """``summary.json``: the counts, the answers and the attribution line."""
        return {
            "tau": self.tau,
            "prompt_tokens": {n: r.prompt_len for n, r in self.results.items()},
            "rows": self.rows,
            "compression": self.comparison.to_dict(),
            "attribution": self.grounding,
        }

    def report_html(self) -> str:
        """The HTML report (:func:`rcstat.report.demo.render_demo_report`)."""
        from rcstat.report.demo import render_demo_report

        return render_demo_report(
            self.results,
            self.rows,
            self.tau,
            self.comparison,
            self.grounding,
            self.lengths,
            demo_data()["report"],
        )


def run(
    model: Any,
    tokenizer: Any,
    tau: float,
    *,
    texts: DemoTexts = DEMO_TEXTS,
    settings: tuple[Setting, ...] = SETTINGS,
    max_new_tokens: int = MAX_NEW_TOKENS,
    step: Step = _silent,
) -> DemoResult:
    """Analyse both examples, compare full-cache and compressed answers, attribute the answer
    (see the module docstring); ``step(message)`` shows progress."""
    from rcstat.analysis import analyze
    from rcstat.attribution import Attributor

    results = {}
    for name, context in (("supporting", texts.supporting), ("unrelated", texts.unrelated)):
        with step(f"analysing the {name} example…"):
            results[name] = analyze(
                model,
                tokenizer,
                context=context,
                question=texts.question,
                answer=texts.answer,
                question_placement="generation",
            )
    comparison = compare_answers(
        model,
        tokenizer,
        texts.supporting,
        texts.question,
        settings,
        max_new_tokens=max_new_tokens,
        step=step,
    )
    heads = results["supporting"].expected.size
    with step("attributing the answer to the sentences of both contexts…"):
        attribution = Attributor(model, tokenizer, top_k=min(DEFAULT_TOP_K, heads)).attribute(
            texts.unrelated + " " + texts.supporting,
            texts.question,
            texts.answer,
            granularity="sentence",
        )
    rows = summary_rows(results, tau)
    return DemoResult(results, comparison, attribution, rows, attribution_summary(attribution), tau)
