"""The resumable KV benchmark runner on a tiny model (baselines; files and resumption)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rcstat.data import QAExample
from rcstat.evaluation.kv_bench import KVBench, Setting, make_press, settings_grid
from tests._tiny_models import tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

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


def test_grid_and_presses() -> None:
    grid = settings_grid(["knorm", "rcstat"], [0.3, 0.5], [1.0], [8, 16])
    assert Setting("knorm", ratio=0.3) in grid
    assert Setting("rcstat", ratio=0.5, window=16) in grid
    assert Setting("rcstat", threshold=1.0, window=8) in grid
    assert len(grid) == 2 + 4 + 2
    assert make_press(Setting("rcstat", threshold=1.3, window=16)).threshold == 1.3
    with pytest.raises(ValueError, match="unknown press"):
        make_press(Setting("magic", ratio=0.5))


def test_run_writes_results_and_resumes(tmp_path: Path) -> None:
    bench = KVBench(
        tmp_path / "run",
        "toy",
        "tiny",
        [Setting("knorm", ratio=0.5), Setting("tova", ratio=0.5)],
        max_new_tokens=4,
    )
    summary = bench.run(tiny_model("llama"), make_tiny_tokenizer(), EXAMPLES)
    lines = (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == 4
    assert set(summary["method"]) == {"knorm", "tova"}
    assert (summary["examples"] == 2).all()
    for name in (
        "config.json",
        "results.csv",
        "summary.csv",
        "toy_tiny_baseline_df.csv",
        "toy_tiny_proposed_df.csv",
        "ver_vs_ratio.png",
        "rougeL_vs_ratio.png",
    ):
        assert (tmp_path / "run" / name).exists(), name
    baseline = pd.read_csv(tmp_path / "run" / "toy_tiny_baseline_df.csv")
    assert list(baseline.columns) == ["method", "ratio", "ver_mean", "ver_std"]
    # a second run finds everything done and adds nothing
    bench.run(tiny_model("llama"), make_tiny_tokenizer(), EXAMPLES)
    assert len((tmp_path / "run" / "predictions.jsonl").read_text().splitlines()) == 4


def test_head_scatter_on_a_tiny_model(tmp_path: Path) -> None:
    from rcstat.evaluation.head_scatter import head_scatter, plot_head_scatter

    frame = head_scatter(tiny_model("llama"), make_tiny_tokenizer(), EXAMPLES, window=4)
    assert list(frame.columns) == ["layer", "kv_head", "ratio", "rc", "rc_normalized"]
    assert len(frame) == 3 * 2  # layers × KV heads
    assert frame["ratio"].between(0, 1).all() and (frame["rc"] >= 0).all()
    assert -1 <= frame.attrs["spearman_rho"] <= 1 and frame.attrs["examples"] == 2
    plot_head_scatter(frame, tmp_path / "scatter.png")
    assert (tmp_path / "scatter.png").stat().st_size > 5000


def test_a_failing_setting_is_recorded_and_the_run_goes_on(tmp_path: Path) -> None:
    bench = KVBench(
        tmp_path / "run",
        "toy",
        "tiny",
        [Setting("rcstat", threshold=1.0, window=500), Setting("knorm", ratio=0.5)],
        max_new_tokens=3,
    )  # window 500 > the contexts: RCStatPress refuses
    summary = bench.run(tiny_model("llama"), make_tiny_tokenizer(), EXAMPLES)
    errors = pd.read_csv(tmp_path / "run" / "errors.csv")
    assert len(errors) == 2 and errors["error"].str.contains("window").all()
    assert list(summary["method"]) == ["knorm"]
