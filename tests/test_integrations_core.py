"""Tests of rcstat.integrations.core and of what needs no framework: the shared scorer, the
reason line, the missing-extra errors, TruLens' plain feedback callable.

The oracle of every score is ``Grounder.ground`` on the same texts with the same tiny grounder;
the framework tests (``test_integrations_<framework>.py``) import :func:`tiny_grounder` and
the texts from here.
"""

from __future__ import annotations

import importlib
import math
import sys
from typing import Any

import numpy as np
import pytest

from rcstat.grounding import Grounder, HeadProfile
from rcstat.integrations.core import (
    GroundingScorer,
    MissingFrameworkError,
    join_contexts,
    reason,
    require,
    succeeded,
)
from rcstat.integrations.trulens_feedback import Groundedness
from tests._tiny_models import tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

PASSAGES = [
    "The river flows through the city.",
    "The bridge was built in 1889 by a team of engineers.",
]
QUESTION = "Who built the bridge?"
RESPONSE = "The bridge was built in 1925. It crosses the river."
#: (contexts, response, question) triples of the evaluate-loop tests.
ROWS = [
    (PASSAGES, RESPONSE, QUESTION),
    (PASSAGES[1:], "Engineers built the bridge in 1889.", QUESTION),
    (PASSAGES[:1], "The river flows through the city.", None),
]
TOP_K = 5  # the tiny model has 12 heads


def tiny_profile() -> HeadProfile:
    rng = np.random.default_rng(0)
    return HeadProfile(
        model="tiny-llama",
        values=rng.uniform(0.2, 0.9, size=(3, 4)),
        copy_values=rng.uniform(0.0, 0.5, size=(3, 4)),
        threshold=0.0,
        quantile=0.1,
        fraction=0.5,
        source={"made": "by hand"},
    )


def tiny_grounder(threshold: float) -> Grounder:
    """A grounder of the tiny Llama with a hand-made profile and the given threshold (the
    random model scores every response near 0: 0.5 flags everything, 0.0 nothing)."""
    return Grounder(
        tiny_model("llama"),
        make_tiny_tokenizer(),
        profile=tiny_profile(),
        top_k=TOP_K,
        threshold=threshold,
    )


@pytest.fixture(scope="module")
def strict() -> Grounder:
    return tiny_grounder(0.5)


@pytest.fixture(scope="module")
def lenient() -> Grounder:
    return tiny_grounder(0.0)


def test_join_contexts() -> None:
    assert join_contexts(PASSAGES) == "\n\n".join(PASSAGES)
    assert join_contexts("a text") == "a text"
    assert join_contexts(("one",)) == "one"
    with pytest.raises(ValueError, match="empty list"):
        join_contexts([])


def test_scorer_equals_grounder(strict: Grounder) -> None:
    scorer = GroundingScorer(grounder=strict)
    for contexts, response, question in ROWS:
        ours = scorer.ground(contexts, response, question)
        ref = strict.ground("\n\n".join(contexts), response, question)
        assert ours.score == ref.score
        assert ours.threshold == ref.threshold
        assert [s.text for s in ours.spans] == [s.text for s in ref.spans]
    # an empty question is no question
    assert (
        scorer.ground(PASSAGES, RESPONSE, "").score
        == strict.ground("\n\n".join(PASSAGES), RESPONSE).score
    )


def test_scorer_builds_once_from_a_model_path(model_dir: Any) -> None:
    scorer = GroundingScorer(
        model=str(model_dir), options={"profile": tiny_profile(), "top_k": TOP_K}
    )
    assert scorer.grounder is None  # nothing loaded before the first score
    first = scorer.ground(PASSAGES, RESPONSE, QUESTION)
    grounder = scorer.get()
    assert scorer.get() is grounder
    ref = Grounder(tiny_model("llama"), make_tiny_tokenizer(), profile=tiny_profile(), top_k=TOP_K)
    assert first.score == pytest.approx(ref.ground("\n\n".join(PASSAGES), RESPONSE, QUESTION).score)


def test_scorer_checks_its_arguments(strict: Grounder) -> None:
    with pytest.raises(TypeError, match="unknown name"):
        GroundingScorer(options={"treshold": 0.5})
    with pytest.raises(ValueError, match="threshold"):
        GroundingScorer(options={"threshold": 1.5})
    with pytest.raises(ValueError, match="not both"):
        GroundingScorer(grounder=strict, model="x")


def test_reason_names_the_unsupported_spans(strict: Grounder, lenient: Grounder) -> None:
    flagged = strict.ground("\n\n".join(PASSAGES), RESPONSE, QUESTION)
    assert flagged.spans and not succeeded(flagged)
    line = reason(flagged)
    assert line.startswith("unsupported (score ")
    assert "< threshold 0.500" in line
    for span in flagged.spans:
        assert repr(span.text) in line
    passed = lenient.ground("\n\n".join(PASSAGES), RESPONSE, QUESTION)
    assert succeeded(passed) and not passed.spans
    assert reason(passed).endswith("no unsupported span")
    assert ">= threshold 0.000" in reason(passed)


def test_reason_cuts_long_span_lists(strict: Grounder) -> None:
    flagged = strict.ground("\n\n".join(PASSAGES), RESPONSE, QUESTION)
    many = type(flagged)(**{**flagged.__dict__, "spans": flagged.spans * 7})
    assert f"and {len(many.spans) - 2} more" in reason(many, limit=2)


def test_succeeded_is_score_at_least_threshold(strict: Grounder) -> None:
    grounding = strict.ground(PASSAGES[0], RESPONSE)
    for threshold, expected in (
        (grounding.score, True),
        (math.nextafter(grounding.score, 1), False),
    ):
        moved = type(grounding)(**{**grounding.__dict__, "threshold": threshold})
        assert succeeded(moved) is expected
        assert (moved.verdict == "unsupported") is not expected
    nan = type(grounding)(**{**grounding.__dict__, "score": float("nan")})
    assert not succeeded(nan)


def _hide(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """Make ``package`` unimportable for one test, as if it were not installed (its already
    imported submodules included; monkeypatch puts them back)."""
    for name in [n for n in sys.modules if n.startswith(package + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, package, None)


def test_require_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    assert require("math", "ragas") is math
    _hide(monkeypatch, "deepeval")
    with pytest.raises(MissingFrameworkError, match=r'pip install "rcstat\[deepeval\]"'):
        require("deepeval.metrics", "deepeval")


def test_require_keeps_a_dependency_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A framework that is installed but misses one of its own dependencies gets that error,
    not the misleading 'install rcstat[...]'."""
    monkeypatch.setitem(sys.modules, "somedep", None)

    def broken(name: str) -> Any:
        return importlib.import_module("somedep")

    monkeypatch.setattr("rcstat.integrations.core.import_module", broken)
    with pytest.raises(ModuleNotFoundError) as info:
        require("ragas.metrics", "ragas")
    assert not isinstance(info.value, MissingFrameworkError)


@pytest.mark.parametrize(
    ("module", "name", "framework"),
    [
        ("rcstat.integrations.ragas_metric", "RagasGrounding", "ragas"),
        ("rcstat.integrations.ragas_metric", "RagasGroundingLegacy", "ragas"),
        ("rcstat.integrations.deepeval_metric", "DeepEvalGrounding", "deepeval"),
    ],
)
def test_missing_framework_is_named_on_first_read(
    monkeypatch: pytest.MonkeyPatch, module: str, name: str, framework: str
) -> None:
    """The modules import without their framework; reading a metric class names the extra."""
    mod = importlib.import_module(module)
    build = mod._classes if hasattr(mod, "_classes") else mod._class
    build.cache_clear()
    _hide(monkeypatch, framework)
    try:
        with pytest.raises(MissingFrameworkError, match=rf"rcstat\[{framework}\]"):
            getattr(mod, name)
    finally:
        build.cache_clear()
    with pytest.raises(AttributeError):
        mod.NoSuchMetric  # noqa: B018


def test_trulens_feedback_needs_trulens(monkeypatch: pytest.MonkeyPatch) -> None:
    from rcstat.integrations.trulens_feedback import trulens_feedback

    _hide(monkeypatch, "trulens")
    with pytest.raises(MissingFrameworkError, match=r"rcstat\[trulens\]"):
        trulens_feedback(model="unused")


def test_groundedness_callable_equals_grounder(strict: Grounder) -> None:
    """The TruLens feedback function itself needs no TruLens."""
    feedback = Groundedness(strict)
    for contexts, response, question in ROWS:
        score, meta = feedback(contexts, response, question)
        ref = strict.ground("\n\n".join(contexts), response, question)
        assert score == ref.score
        assert meta["threshold"] == ref.threshold == 0.5
        assert meta["verdict"] == ref.verdict
        assert meta["spans"] == [s.text for s in ref.spans]
        assert meta["reason"] == reason(ref)
    with pytest.raises(ValueError, match="not both"):
        Groundedness(strict, scorer=GroundingScorer(grounder=strict))
