"""The resumable KV benchmark runner on a tiny model (baselines; files and resumption)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import DynamicCache

from rcstat.analysis import analyze
from rcstat.data import QAExample
from rcstat.evaluation.bench.kv import KVConfig, evaluate
from rcstat.evaluation.kv_settings import KNOB_DEFAULTS, Setting, make_press, settings_grid
from rcstat.press.answer import split_context_question
from rcstat.press.rcstat_press import RCStatPress
from rcstat.runs import RowFileError, RunMismatchError
from tests._tiny_models import tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

kv = importlib.import_module("rcstat.evaluation.kv")
kv_settings = importlib.import_module("rcstat.evaluation.kv_settings")

pytestmark = pytest.mark.press  # needs the rcstat[press] extra (kvpress)

EXAMPLES = [
    QAExample(
        f"ex{i}",
        "The cat sat on the mat by the door. " * (3 + i),
        "Where is the cat?",
        ("on the mat",),
        "toy",
        {},
    )
    for i in range(2)
]


def test_the_gqa_rule_is_a_setting() -> None:
    grid = settings_grid(["rcstat", "tova"], [0.5], [1.0], [8], {"group": ["max", "mean"]})
    knobs = "score=expected,budget=pooled,floor=0.2,sinks=0"
    assert [s.key for s in grid] == [
        f"rcstat|r=0.5|c=None|w=8|group=max,{knobs}",
        f"rcstat|r=None|c=1.0|w=8|group=max,{knobs}",
        f"rcstat|r=0.5|c=None|w=8|group=mean,{knobs}",
        f"rcstat|r=None|c=1.0|w=8|group=mean,{knobs}",
        "tova|r=0.5",
    ]
    assert make_press(grid[2]).group == "mean"
    # no group given: the press's default of each mode
    default = settings_grid(["rcstat"], [0.5], [1.0], [8])
    assert [s.knob("group") for s in default] == ["mean", "max"]
    assert [make_press(s).group for s in default] == ["mean", "max"]


def test_every_knob_is_named_in_the_key_and_reaches_the_press() -> None:
    """Each knob of the press (``KNOBS``) is swept, named in the key and set on the press;
    the threshold mode leaves out the knobs of the target-ratio mode."""
    grid = settings_grid(
        ["rcstat"], [0.5], [1.0], [8],
        {"score": ["expected", "upper"], "budget": ["layer", "pooled"], "floor": [0.1]},
    )  # fmt: skip
    assert [s.key for s in grid] == [
        "rcstat|r=0.5|c=None|w=8|group=mean,score=expected,budget=layer,floor=0.1,sinks=0",
        "rcstat|r=0.5|c=None|w=8|group=mean,score=expected,budget=pooled,floor=0.1,sinks=0",
        "rcstat|r=None|c=1.0|w=8|group=max,score=expected,budget=pooled,floor=0.2,sinks=0",
        "rcstat|r=0.5|c=None|w=8|group=mean,score=upper,budget=layer,floor=0.1,sinks=0",
        "rcstat|r=0.5|c=None|w=8|group=mean,score=upper,budget=pooled,floor=0.1,sinks=0",
        "rcstat|r=None|c=1.0|w=8|group=max,score=upper,budget=pooled,floor=0.2,sinks=0",
    ]
    pooled = make_press(grid[4])
    assert (pooled.score, pooled.budget, pooled.floor) == ("upper", "pooled", 0.1)
    sinks = settings_grid(["rcstat"], [0.5], [1.0], [8], {"sinks": [0, 4]})
    assert [s.knob("sinks") for s in sinks] == [0, 0, 4, 4]
    assert make_press(sinks[3]).sinks == 4
    for name, value in (
        ("group", "max"),
        ("score", "upper"),
        ("budget", "layer"),
        ("floor", 0.3),
        ("sinks", 2),
    ):
        setting = Setting.rcstat(ratio=0.5, **{name: value})
        assert getattr(make_press(setting), name) == value and setting.to_row()[name] == value
    assert set(Setting.rcstat(ratio=0.5).to_row()) == {
        "method",
        "ratio",
        "threshold",
        "window",
        *KNOB_DEFAULTS,
    }
    with pytest.raises(ValueError, match="no option 'colour'"):
        settings_grid(["rcstat"], [0.5], [1.0], [8], {"colour": ["red"]})
    question = Setting.rcstat(ratio=0.5, window="question")
    assert question.key.startswith("rcstat|r=0.5|c=None|w=question|")
    assert make_press(question, question_tokens=6).window_size == 6
    with pytest.raises(ValueError, match="needs the question inside the compressed prompt"):
        make_press(question)


def test_query_aware_placement_is_its_own_run(tmp_path: Path) -> None:
    """press_scope="question" compresses the question too: the question window holds exactly
    the question's tokens, and the run's manifest records the scope (rows never mix)."""
    made: list[int] = []
    real = kv_settings.make_press

    def spy(setting: Setting, question_tokens: int = 0) -> Any:
        press = real(setting, question_tokens)
        made.append(getattr(press, "window_size", -1))
        return press

    tok = make_tiny_tokenizer()
    want = len(tok(EXAMPLES[0].question, add_special_tokens=False)["input_ids"])
    scoped = {"presses": ["rcstat", "tova"], "windows": ["question"], "press_scope": "question"}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kv_settings, "make_press", spy)
        summary = _run(tmp_path / "q", tiny_model("llama"), tok, **scoped)
    assert made[0] == want and set(summary["window"]) == {"question", "8"}
    assert json.loads((tmp_path / "q" / "config.json").read_text())["press_scope"] == "question"
    manifest = json.loads((tmp_path / "q" / "run.json").read_text())
    assert manifest["options"]["press_scope"] == "question"
    with pytest.raises(RunMismatchError, match="press_scope"):
        _run(tmp_path / "q", tiny_model("llama"), tok, presses=["rcstat", "tova"], windows=[8])
    plain = _config(tmp_path / "c").compared()
    assert plain["press_scope"] == "context"


def test_a_run_of_an_earlier_rcstat_is_refused_with_the_command_to_rerun(tmp_path: Path) -> None:
    """A folder whose manifest predates the settings named by every knob (no press_scope) is
    refused before any work, saying why and how to rerun it."""
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    _run(tmp_path, model, tok)
    manifest = json.loads((tmp_path / "run.json").read_text())
    del manifest["options"]["press_scope"]
    (tmp_path / "run.json").write_text(json.dumps(manifest))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(
        RunMismatchError,
        match=r"earlier rcstat.*rerun the same `rcstat bench kv` command with another --out",
    ):
        _run(tmp_path, model, tok)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_grid_and_presses() -> None:
    grid = settings_grid(["knorm", "rcstat"], [0.3, 0.5], [1.0], [8, 16])
    assert Setting("knorm", ratio=0.3) in grid
    assert Setting.rcstat(ratio=0.5, window=16) in grid
    assert Setting.rcstat(threshold=1.0, window=8) in grid
    assert len(grid) == 2 + 4 + 2
    assert make_press(Setting.rcstat(threshold=1.3, window=16)).threshold == 1.3
    with pytest.raises(ValueError, match="unknown press"):
        make_press(Setting("magic", ratio=0.5))


def test_run_writes_results_and_resumes(tmp_path: Path) -> None:
    summary = _run(tmp_path / "run", tiny_model("llama"), make_tiny_tokenizer(), max_new_tokens=4)
    lines = (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == 4
    assert set(summary["method"]) == {"knorm", "tova"}
    assert (summary["examples"] == 2).all()
    for name in (
        "config.json",
        "results.csv",
        "summary.csv",
        "squad_v2_tiny_baseline_df.csv",
        "squad_v2_tiny_proposed_df.csv",
        "ver_vs_ratio.png",
        "rougeL_vs_ratio.png",
    ):
        assert (tmp_path / "run" / name).exists(), name
    baseline = pd.read_csv(tmp_path / "run" / "squad_v2_tiny_baseline_df.csv")
    assert list(baseline.columns) == ["method", "ratio", "ver_mean", "ver_std"]
    # the summaries recomputed from the row file by plain Python and numpy
    rows = [json.loads(line) for line in lines]
    written = pd.read_csv(tmp_path / "run" / "summary.csv")
    for method in ("knorm", "tova"):
        mine = [r for r in rows if r["method"] == method]
        got = written[written["method"] == method].iloc[0]
        for column, field in (("ver", "ver"), ("ratio", "realized_ratio")):
            values = np.array([r[field] for r in mine])
            assert got[f"{column}_mean"] == pytest.approx(values.mean(), rel=1e-12)
            assert got[f"{column}_std"] == pytest.approx(values.std(ddof=1), rel=1e-12)
        for column in ("rouge1", "rougeL", "rougeL_vs_full"):
            assert got[column] == pytest.approx(np.mean([r[column] for r in mine]), rel=1e-12)
        assert got["examples"] == len({r["example"] for r in mine}) == 2
        line = baseline[baseline["method"] == method].iloc[0]
        assert (line["ratio"], line["ver_mean"], line["ver_std"]) == pytest.approx(
            (0.5, got["ver_mean"], got["ver_std"]), rel=1e-12
        )
    assert len(written) == len(baseline) == 2
    # a second run finds everything done and adds nothing
    _run(tmp_path / "run", tiny_model("llama"), make_tiny_tokenizer(), max_new_tokens=4)
    assert len((tmp_path / "run" / "predictions.jsonl").read_text().splitlines()) == 4


def test_head_scatter_on_a_tiny_model(tmp_path: Path) -> None:
    from rcstat.evaluation.head_scatter import head_scatter, plot_head_scatter

    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    frame = head_scatter(model, tok, EXAMPLES, window=4)
    assert list(frame.columns) == ["layer", "kv_head", "ratio", "rc", "rc_normalized"]
    assert len(frame) == 3 * 2  # layers × KV heads
    assert frame["ratio"].between(0, 1).all() and (frame["rc"] >= 0).all()
    assert -1 <= frame.attrs["spearman_rho"] <= 1 and frame.attrs["examples"] == 2
    # recomputed by loops: the KV head's evicted share (from the masks kvpress applies) and
    # its query heads' mean RC, averaged over the examples
    want = {key: np.zeros((3, 2)) for key in ("ratio", "rc", "rc_normalized")}
    for example in EXAMPLES:
        result = analyze(
            model, tok, context=example.context, question=example.question,
            answer=example.answers[0], question_placement="generation",
        )  # fmt: skip
        context_ids, _ = split_context_question(tok, example.context, example.question)
        with torch.no_grad(), RCStatPress(threshold=1.0, window_size=4)(model):
            model(context_ids, past_key_values=DynamicCache())
        for layer in range(3):
            masked = model.model.layers[layer].self_attn.masked_key_indices
            for kv in range(2):
                evicted = 0 if masked is None else int((masked[1] == kv).sum())
                want["ratio"][layer, kv] += evicted / context_ids.shape[1] / len(EXAMPLES)
                for key, values in (("rc", result.expected), ("rc_normalized", result.normalized)):
                    group = [float(values[layer, h]) for h in (2 * kv, 2 * kv + 1)]
                    want[key][layer, kv] += sum(group) / 2 / len(EXAMPLES)
    for key, values in want.items():
        np.testing.assert_allclose(frame[key].to_numpy(), values.reshape(-1), rtol=1e-9)
    assert list(frame["layer"]) == [0, 0, 1, 1, 2, 2] and list(frame["kv_head"]) == [0, 1] * 3
    ranks = [pd.Series(frame[c]).rank().to_numpy() for c in ("rc", "ratio")]
    assert frame.attrs["spearman_rho"] == pytest.approx(np.corrcoef(*ranks)[0, 1])
    plot_head_scatter(frame, tmp_path / "scatter.png")
    assert (tmp_path / "scatter.png").stat().st_size > 5000


def test_a_failing_setting_is_recorded_and_the_run_goes_on(tmp_path: Path) -> None:
    summary = _run(
        tmp_path / "run", tiny_model("llama"), make_tiny_tokenizer(), **FAILING
    )  # window 500 > the contexts: RCStatPress refuses
    errors = pd.read_csv(tmp_path / "run" / "errors.csv")
    assert len(errors) == 2 and errors["error"].str.contains("window").all()
    assert list(summary["method"]) == ["knorm"]


#: A grid whose RCStat setting fails on every example (window 500 > the contexts; no head
#: scatter, which needs a window that fits).
FAILING: dict[str, Any] = {"presses": ["rcstat", "knorm"], "windows": [500], "scatter": False}


def _config(out: Path, **changes: Any) -> KVConfig:
    """Baselines knorm and tova at ratio 0.5 (no threshold), answers of 3 tokens."""
    fields: dict[str, Any] = {
        "out": out,
        "model": "tiny",
        "presses": ["knorm", "tova"],
        "ratios": [0.5],
        "thresholds": [],
        "windows": [8],
        "max_new_tokens": 3,
    }
    config = KVConfig(**{**fields, **changes})
    config.check()
    return config


def _run(
    out: Path, model: Any, tokenizer: Any, examples: Any = EXAMPLES, **changes: Any
) -> pd.DataFrame:
    """The summary of :func:`evaluate` of :func:`_config` on ``examples``."""
    scatter = changes.pop("scatter", True)
    result = evaluate(_config(out, **changes), model, tokenizer, examples, scatter=scatter)
    assert result.summary is not None
    return result.summary


def _lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(v) for v in (out / "predictions.jsonl").read_text().splitlines()]


def _counting(monkeypatch: pytest.MonkeyPatch, interrupt_at: int | None = None) -> list[str]:
    """Record the context of every evaluation; raise KeyboardInterrupt at call ``interrupt_at``."""
    calls: list[str] = []
    real = kv.evaluate_example

    def counting(model: Any, tokenizer: Any, context: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(context)
        if len(calls) == interrupt_at:
            raise KeyboardInterrupt
        return real(model, tokenizer, context, *args, **kwargs)

    monkeypatch.setattr(kv, "evaluate_example", counting)
    return calls


def _comparable(out: Path) -> list[dict[str, Any]]:
    return sorted(_lines(out), key=lambda line: line["work_id"])


def test_resuming_with_other_settings_is_refused(tmp_path: Path) -> None:
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    _run(tmp_path, model, tok)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(RunMismatchError, match="max_new_tokens: 3 in the run, 5 now"):
        _run(tmp_path, model, tok, max_new_tokens=5)
    with pytest.raises(RunMismatchError, match=r'settings: \["knorm\|r=0\.5'):
        _run(tmp_path, model, tok, presses=["knorm"], ratios=[0.3])
    with pytest.raises(RunMismatchError, match=r"model\.weights"):
        _run(tmp_path, tiny_model("qwen2"), tok)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_changed_example_is_evaluated_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    _run(tmp_path, model, tok)
    old = {line["work_id"]: line for line in _lines(tmp_path)}
    calls = _counting(monkeypatch)
    changed = [EXAMPLES[0], dataclasses.replace(EXAMPLES[1], context="The dog is in the garden.")]
    _run(tmp_path, model, tok, changed)
    assert calls == [changed[1].context] * 2  # both settings of the changed example
    lines = _lines(tmp_path)
    assert sorted(line["work_id"] for line in lines) == sorted(old)  # replaced, not added
    for line in lines:
        same = line["example"] == "ex0"
        assert (line["example_hash"] == old[line["work_id"]]["example_hash"]) == same


def test_failed_items_are_retried_unless_asked_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    _run(tmp_path, model, tok, **FAILING)  # window 500: fails
    calls = _counting(monkeypatch)
    _run(tmp_path, model, tok, **FAILING, retry_failed=False)
    assert calls == []
    _run(tmp_path, model, tok, **FAILING)
    assert len(calls) == 2  # the two failed items, tried again
    lines = _lines(tmp_path)
    assert len(lines) == 4 and sum(line["error"] is not None for line in lines) == 2


def test_cut_last_line_is_dropped_and_a_corrupt_one_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    _run(tmp_path, model, tok)
    path = tmp_path / "predictions.jsonl"
    whole = _comparable(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-40])  # an interrupted write of the fourth line
    calls = _counting(monkeypatch)
    with caplog.at_level(logging.WARNING):
        _run(tmp_path, model, tok)
    assert f"{path}, line 4: cut-off last line" in caplog.text
    assert len(calls) == 1
    assert _comparable(tmp_path) == whole
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[1][:30], *lines[2:]]) + "\n")
    with pytest.raises(RowFileError, match=r"predictions\.jsonl, line 2"):
        _run(tmp_path, model, tok)


def test_interrupted_run_resumes_to_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    _run(tmp_path / "whole", model, tok)
    _counting(monkeypatch, interrupt_at=2)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "cut", model, tok)
    assert len(_lines(tmp_path / "cut")) == 1  # the first item, whole
    calls = _counting(monkeypatch)
    _run(tmp_path / "cut", model, tok)
    assert len(calls) == 3
    assert _comparable(tmp_path / "cut") == _comparable(tmp_path / "whole")


def test_comparison_with_the_best_baseline_by_hand() -> None:
    from rcstat.evaluation.kv_summary import comparison

    rows = []
    for example, answerable, ver in (("a", True, (1.0, 2.0, 4.0)), ("b", False, (3.0, 2.0, 2.0))):
        rcstat, knorm, tova = ver
        common = {"example": example, "ratio": 0.5, "window": 8, "answerable": answerable}
        common |= {**KNOB_DEFAULTS, "group": "mean"}
        rows.append({**common, "method": "rcstat", "threshold": None, "ver": rcstat})
        rows.append({**common, "method": "knorm", "threshold": None, "ver": knorm})
        rows.append({**common, "method": "tova", "threshold": None, "ver": tova})
    rows.append({**rows[0], "threshold": 1.0, "ver": 100.0})  # threshold mode: not compared
    frame = pd.DataFrame(rows).assign(rougeL_vs_full=[0.5, 0.4, 0.3, 0.9, 0.9, 0.9, 0.0])
    found = comparison(frame).set_index(["subset", "metric"])
    everything = found.loc[("all", "ver")]
    assert everything["baseline"] == "knorm"  # mean VER 2.0 < tova's 3.0
    assert everything["rcstat"] == 2.0 and everything["quotient"] == 1.0
    assert (everything["wins"], everything["losses"]) == (1, 1)  # a lower VER wins
    assert found.loc[("answerable", "ver"), "difference"] == -1.0
    assert found.loc[("unanswerable", "ver"), "difference"] == 1.0
    only_answerable = comparison(frame.assign(answerable=True))
    assert set(only_answerable["subset"]) == {"all"}  # no subset that repeats "all"
    rouge = found.loc[("all", "rougeL_vs_full")]
    assert rouge["baseline"] in ("knorm", "tova") and rouge["difference"] == pytest.approx(0.05)


def test_every_knob_of_rcstat_is_its_own_row_of_the_summaries(tmp_path: Path) -> None:
    """Settings that differ in one knob only (GQA rule, score, budget, floor, sinks) are never
    pooled in ``summary.csv`` or ``comparison.csv``: each compares its own examples."""
    from rcstat.evaluation.kv_summary import comparison

    variants = [{}, {"group": "max"}, {"score": "upper"}, {"budget": "layer"}]
    variants += [{"floor": 0.0}, {"sinks": 24}]
    assert {k for v in variants for k in v} == set(KNOB_DEFAULTS)
    rows = []
    for example, base in (("a", 1.0), ("b", 3.0)):
        common = {"example": example, "ratio": 0.5, "window": 8, "threshold": None}
        common |= {**KNOB_DEFAULTS, "group": "mean"}
        rows.append({**common, "method": "tova", "ver": 2 * base, "rougeL_vs_full": 0.5})
        for j, knobs in enumerate(variants):
            ver = base + j
            rows.append({**common, "method": "rcstat", **knobs, "ver": ver, "rougeL_vs_full": 0.5})
    found = comparison(pd.DataFrame(rows))
    ver = found[found["metric"] == "ver"]
    assert len(ver) == len(variants) and (ver["examples"] == 2).all()
    assert sorted(ver["rcstat"]) == [2.0 + j for j in range(len(variants))]


def test_every_row_of_the_summary_is_on_a_curve_of_the_figures(tmp_path: Path) -> None:
    """The baselines, whose RCStat knobs are empty (NaN in ``summary.csv``), are curves of
    ``ver_vs_ratio.png`` and ``rougeL_vs_ratio.png`` beside RCStat's in both modes: every row
    of the summary is on exactly one curve, each in order of realized ratio."""
    from rcstat.evaluation.kv_summary import curves

    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="No artists with labels")  # an empty legend
        summary = _run(tmp_path, model, tok, presses=["knorm", "tova", "rcstat"], thresholds=[1.0])
    assert summary[["group"]].isna().any().all()  # the baselines' rows
    for metric in ("ver_mean", "rougeL"):
        found = curves(summary, metric)
        labels = [name for name, _ in found]
        assert labels.count("knorm") == labels.count("tova") == 1
        assert {name.split(" ")[0] for name in labels} == {"knorm", "tova", "rcstat"}
        assert "rcstat (target ratio, w = 8)" in labels  # each mode's GQA rule not shown
        assert "rcstat (threshold c, w = 8)" in labels
        assert sum(len(part) for _, part in found) == len(summary)
        assert all(part["ratio_mean"].is_monotonic_increasing for _, part in found)
