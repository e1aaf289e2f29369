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

As every command, the demo is a library call: :class:`DemoConfig` → :func:`run` (load the model,
:func:`contrast`, write the folder when ``out`` is set) → :class:`DemoResult`, whose
:meth:`~DemoResult.write` writes the folder of ``rcstat demo`` (``report.html`` linking
``attribution.html``, the scores of both examples, ``attribution.json``, ``summary.json``).

>>> DemoConfig.from_dict({"tau": 2, "texts": {"max_new_tokens": 4}})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: unknown texts ['max_new_tokens']; known: ['answer', 'question', 'supporting', ...]
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, fields
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rcstat.checks import check_count, check_number, check_tau
from rcstat.defaults import DEFAULT_TAU, DEFAULT_TOP_K, DEFAULT_WINDOW, INSTALL_PRESS
from rcstat.evaluation.bench.common import load_for
from rcstat.progress import Step
from rcstat.runs.devices import Devices
from rcstat.runs.folder import staged_output
from rcstat.runs.job import Config

if TYPE_CHECKING:
    from rcstat.analysis import HeadAnalysis, Statistic
    from rcstat.attribution import Attribution
    from rcstat.evaluation.bench.common import Loader
    from rcstat.press.answer import CompressionReport

__all__ = [
    "DEMO_TEXTS",
    "MAX_NEW_TOKENS",
    "NAME",
    "SETTINGS",
    "AnswerComparison",
    "CompressedAnswer",
    "DemoConfig",
    "DemoResult",
    "DemoTexts",
    "Setting",
    "attribution_summary",
    "compare_answers",
    "contrast",
    "demo_data",
    "run",
    "summary_rows",
]

#: The command, and the owner of the folders it writes.
NAME = "demo"


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
#: Chosen by measuring c = 0.2 … 1.5 on the default model (docs/analysis.md, "The demo"): every c
#: up to 0.6 answers exactly as the full cache, and c = 0.5 (23 % of the KV entries evicted) sits
#: inside that range, not at its edge; c = 1 (the paper's setting) evicts 49 % and answers "… in
#: 2022" where the context says 1962.
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
    step: Step = nullcontext,
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
    """What :func:`contrast` measured: both analyses, the answers, the attribution, the
    summary; and the folder it was written to (None: not written)."""

    results: dict[str, HeadAnalysis]
    comparison: AnswerComparison
    attribution: Attribution
    rows: dict[str, dict[str, float]]
    grounding: str  # attribution_summary's line
    tau: float
    out: Path | None = None

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

    def write(self, out: Path) -> Path:
        """Write the folder of ``rcstat demo`` into ``out`` (staged: all or none):
        ``report.html`` (:meth:`report_html`) linking ``attribution.html``, the scores of each
        example (``scores_<name>.csv`` and ``.json``), ``attribution.json`` and
        ``summary.json`` (:meth:`summary`); remember it as :attr:`out`."""
        from rcstat.report.attribution_html import save_attribution_page

        out = Path(out)
        report = self.report_html()
        with staged_output(out, NAME) as stage:
            for name, scores in self.results.items():
                scores.to_frame().to_csv(stage / f"scores_{name}.csv", index=False)
                scores.save(stage / f"scores_{name}.json")
            (stage / "report.html").write_text(report, encoding="utf-8")
            save_attribution_page(stage / "attribution.html", self.attribution)
            (stage / "attribution.json").write_text(self.attribution.to_json(), encoding="utf-8")
            summary = json.dumps(self.summary(), indent=1)
            (stage / "summary.json").write_text(summary, encoding="utf-8")
        self.out = out
        return out


@dataclass
class DemoConfig(Config):
    """The options of ``rcstat demo`` (the flag ``--tau`` is the field ``tau``; the texts, the
    settings and the answer length are the package's unless a caller gives others, e.g. short
    texts for a tiny model; ``model``, ``devices`` and ``out`` as in every command,
    :mod:`rcstat.commands`).

    Attributes
    ----------
    tau
        Threshold of the head counts on the upper bound A and the expected RC E.
    texts
        The question, answer and two contexts (:data:`DEMO_TEXTS`).
    settings
        The RCStatPress settings the supporting context is compressed with (:data:`SETTINGS`).
    max_new_tokens
        Token limit of the full-cache and compressed answers (:data:`MAX_NEW_TOKENS`).
    """

    model: str | None = None
    devices: Devices = field(default_factory=Devices)
    out: Path | None = None
    tau: float = DEFAULT_TAU
    texts: DemoTexts = DEMO_TEXTS
    settings: tuple[Setting, ...] = SETTINGS
    max_new_tokens: int = MAX_NEW_TOKENS

    @classmethod
    def prepared(cls, data: dict[str, Any]) -> dict[str, Any]:
        """``texts`` as :class:`DemoTexts` and ``settings`` as :class:`Setting` from mappings of
        their fields (an unknown key refused, naming it)."""
        if isinstance(data.get("texts"), Mapping):
            data["texts"] = DemoTexts(**_known("texts", DemoTexts, data["texts"]))
        if "settings" in data:
            data["settings"] = tuple(
                Setting(**_known("settings", Setting, item)) if isinstance(item, Mapping) else item
                for item in data["settings"]
            )
        return data

    def check(self) -> None:
        """Refuse what ``rcstat demo`` refuses before the model loads (``ValueError`` naming
        the flag, or the field where it has none).

        >>> DemoConfig(tau=float("-inf")).check()
        Traceback (most recent call last):
        ...
        ValueError: --tau must be a finite number, got -inf
        """
        self.tau = check_tau("--tau", self.tau)
        self.max_new_tokens = check_count("max_new_tokens", self.max_new_tokens)
        for item in fields(DemoTexts):
            text = getattr(self.texts, item.name)
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"texts.{item.name} must be a text that is not empty")
        self.settings = tuple(self.settings)
        for setting in self.settings:
            check_number(f"the threshold of setting {setting.name!r}", setting.threshold, low=0.0)


def _known(what: str, kind: type, values: Mapping[str, Any]) -> Mapping[str, Any]:
    """``values`` when its keys are the fields of the dataclass ``kind``; ``ValueError`` naming
    the unknown or missing ones otherwise."""
    allowed = sorted(f.name for f in fields(kind))
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        raise ValueError(f"unknown {what} {unknown}; known: {allowed}")
    missing = sorted(set(allowed) - set(values))
    if missing:
        raise ValueError(f"{what} without {missing}")
    return values


def run(
    config: DemoConfig, *, loader: Loader | None = None, step: Step = nullcontext
) -> DemoResult:
    """Run the demo of ``config`` (:func:`contrast` on its model) and, when ``config.out`` is
    set, write the folder of ``rcstat demo`` there.

    ``config`` (checked again), ``loader``, ``step`` and the ``ValueError`` of a bad option or
    folder as for every command (:mod:`rcstat.commands`).
    """
    model, tokenizer = load_for(config, loader, NAME)
    result = contrast(
        model,
        tokenizer,
        config.tau,
        texts=config.texts,
        settings=config.settings,
        max_new_tokens=config.max_new_tokens,
        step=step,
    )
    if config.out is not None:
        with step("writing the report…"):
            result.write(Path(config.out))
    return result


def contrast(
    model: Any,
    tokenizer: Any,
    tau: float,
    *,
    texts: DemoTexts = DEMO_TEXTS,
    settings: tuple[Setting, ...] = SETTINGS,
    max_new_tokens: int = MAX_NEW_TOKENS,
    step: Step = nullcontext,
) -> DemoResult:
    """Analyse both examples, compare full-cache and compressed answers, attribute the answer
    (see the module docstring) with a loaded model; ``step(message)`` shows progress."""
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
