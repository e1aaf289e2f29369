"""``rcstat bench kv`` on a tiny random model saved to disk (needs the rcstat[press] extra)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rcstat import cli
from rcstat.press.options import KNOBS, knob_choices, knob_default, knob_type

pytestmark = pytest.mark.press


def test_bench_kv_on_a_squad_file(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    context = "The cat sat on the warm mat near the door. " * 4
    data = {
        "version": "v2.0",
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": context,
                        "qas": [
                            {
                                "question": "Where did the cat sit?",
                                "id": "q1",
                                "is_impossible": False,
                                "answers": [
                                    {
                                        "text": "on the warm mat",
                                        "answer_start": context.index("on the warm"),
                                    }
                                ],
                            },
                            {
                                "question": "Who is the king?",
                                "id": "q2",
                                "is_impossible": True,
                                "answers": [],
                            },
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "bench"
    args = ["bench", "kv", "--model", str(model_dir), "--dataset", "squad_v2"]
    args += ["--data", str(path), "--ratios", "0.5", "--out", str(out)]
    code = cli.main([*args, "--presses", "knorm,tova", "--max-new-tokens", "3"])
    assert code == 0
    assert "2 settings × 2 examples = 4 runs" in capsys.readouterr().err  # the grid, up front
    results = pd.read_csv(out / "results.csv")
    assert len(results) == 2 * 2  # 2 examples × 2 presses
    assert {"finished", "full_finished", "example_hash"} <= set(results.columns)
    assert (out / f"squad_v2_{model_dir.name}_baseline_df.csv").exists()
    assert (out / "ver_vs_ratio.png").exists()
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["kind"] == "bench kv" and manifest["options"]["max_new_tokens"] == 3
    assert manifest["model"]["name"] == str(model_dir.resolve())
    files = {p.name: p.read_bytes() for p in out.iterdir()}

    # The finding: another --max-new-tokens did no work and printed the old results (and
    # rewrote config.json). Now it is refused before the model loads, naming the field.
    capsys.readouterr()
    assert cli.main([*args, "--presses", "knorm,tova", "--max-new-tokens", "5"]) == 2
    captured = capsys.readouterr()
    assert "max_new_tokens: 3 in the run, 5 now" in " ".join(captured.err.split())
    assert "loading model" not in captured.err
    assert cli.main([*args, "--presses", "knorm", "--max-new-tokens", "3"]) == 2
    assert 'settings: ["knorm|r=0.5", "tova|r=0.5"] in the run' in " ".join(
        capsys.readouterr().err.splitlines()[-1].split()
    )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files

    # The same settings resume: nothing is computed again, the summaries are rebuilt.
    assert cli.main([*args, "--presses", "knorm,tova", "--max-new-tokens", "3"]) == 0
    assert (out / "predictions.jsonl").read_bytes() == files["predictions.jsonl"]
    assert "bench kv squad_v2: 0/0 run" in capsys.readouterr().err  # plain progress lines
    # A smaller --n resumes too; the summary still describes the whole folder, and says so.
    assert cli.main([*args, "--presses", "knorm,tova", "--max-new-tokens", "3", "--n", "1"]) == 0
    printed = capsys.readouterr().out
    assert "the run folder holds 2 examples, more than --n 1 asks for" in printed
    assert (out / "predictions.jsonl").read_bytes() == files["predictions.jsonl"]
    # A folder of another command is refused.
    heads = tmp_path / "heads"
    heads.mkdir()
    (heads / ".rcstat-output.json").write_text(json.dumps({"command": "heads", "files": []}))
    assert cli.main([*args[:-1], str(heads), "--presses", "knorm"]) == 2
    assert "holds the output of `rcstat heads`" in capsys.readouterr().err.splitlines()[-1]


def test_bench_kv_defaults_are_the_press_defaults_of_each_mode() -> None:
    """Without --group / --budget the grid holds the press's own defaults: the group's mean
    and the pooled budget with a target ratio, the any-head rule with a threshold."""
    import argparse

    from rcstat.cli.bench import register
    from rcstat.cli.bench.kv import from_namespace

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    ns = parser.parse_args(["bench", "kv", "--presses", "rcstat", "--thresholds", "1.0"])
    grid = from_namespace(ns).grid()
    target = [s for s in grid if s.ratio is not None]
    threshold = [s for s in grid if s.threshold is not None]
    assert target and all((s.knob("group"), s.knob("budget")) == ("mean", "pooled") for s in target)
    assert threshold and all(s.knob("group") == "max" for s in threshold)
    ns = parser.parse_args(["bench", "kv", "--presses", "rcstat", "--group", "max,mean"])
    assert from_namespace(ns).knobs["group"] == ["max", "mean"]
    ns = parser.parse_args(
        ["bench", "kv", "--presses", "rcstat", "--sinks", "0,4", "--floor", "0.1"]
    )
    knobs = from_namespace(ns).knobs
    assert knobs["sinks"] == [0, 4] and knobs["floor"] == [0.1]
    for flag, value, message in (
        ("--group", "max,max", "--group lists a value twice"),
        ("--score", "lower", "--score must be one of expected, upper"),
        ("--sinks", "-1", "--sinks"),
        ("--floor", "2", "--floor"),
        ("--ratios", "1.5", "--ratios"),
        ("--window", "question", "--window question needs --press-scope question"),
    ):
        with pytest.raises(ValueError, match=message):
            from_namespace(parser.parse_args(["bench", "kv", flag, value]))


def test_bench_kv_qmsum_fit_cuts_each_meeting_to_fit(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--context fit`` cuts each meeting to the turns around the query that fit; ``window``,
    its old name, is refused, and so is resuming a folder that recorded it (rerun into a new
    ``--out``)."""
    from tests.test_data import _qmsum_record, _write_jsonl

    record = _qmsum_record()
    for t, turn in enumerate(record["meeting_transcripts"]):
        turn["content"] = f"turn {t} " + "word " * 10  # about 48 tokens
    data = _write_jsonl(tmp_path / "val.jsonl", [record])
    out = tmp_path / "fit"
    args = ["bench", "kv", "--model", str(model_dir), "--dataset", "qmsum", "--data", str(data)]
    args += ["--presses", "knorm", "--ratios", "0.5", "--max-new-tokens", "2", "--out", str(out)]
    assert cli.main([*args, "--context", "fit", "--max-tokens", "200"]) == 0
    config = json.loads((out / "config.json").read_text())
    # turn 1 (the first specific query's span) fits with a neighbour; turns 1..4 do not
    assert len(config["skipped_too_long"]) == 1 and config["skipped_too_long"][0].endswith(":1")
    assert len(pd.read_csv(out / "results.csv")) == 2
    assert json.loads((out / "run.json").read_text())["options"]["context"] == "fit"
    with pytest.raises(SystemExit):  # the old name is no choice of --context
        cli.main([*args, "--context", "window", "--max-tokens", "200"])
    # a folder made when `fit` was called `window` is refused, naming what differs
    recorded = json.loads((out / "run.json").read_text())
    recorded["options"]["context"] = "window"
    (out / "run.json").write_text(json.dumps(recorded))
    capsys.readouterr()
    assert cli.main([*args, "--context", "fit", "--max-tokens", "200"]) == 2
    assert "context" in capsys.readouterr().err
    assert cli.main([*args, "--context", "relevant", "--max-tokens", "200"]) == 2


@pytest.mark.parametrize("bench", ["kv", "attribution", "grounding", "heads"])
def test_the_command_defaults_are_the_library_defaults(bench: str) -> None:
    """``rcstat bench NAME`` / ``rcstat heads`` without options build the config the library
    builds from an empty mapping (the defaults live in the config; the flags repeat them)."""
    import argparse

    from rcstat.cli import bench as bench_cli
    from rcstat.cli import heads as heads_cli
    from rcstat.evaluation.bench.attribution import AttributionConfig
    from rcstat.evaluation.bench.grounding import GroundingConfig
    from rcstat.evaluation.bench.heads import HeadsConfig
    from rcstat.evaluation.bench.kv import KVConfig

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    bench_cli.register(sub)
    heads_cli.register(sub)
    if bench == "heads":
        made = heads_cli.from_namespace(parser.parse_args(["heads"]))
        library: object = HeadsConfig.from_dict({})
    else:
        made = bench_cli.from_namespace(parser.parse_args(["bench", bench])).config
        configs = {"kv": KVConfig, "attribution": AttributionConfig, "grounding": GroundingConfig}
        library = configs[bench].from_dict({})
    assert made == library


def test_a_library_config_refuses_what_the_command_refuses() -> None:
    from rcstat.evaluation.bench.attribution import AttributionConfig
    from rcstat.evaluation.bench.grounding import GroundingConfig
    from rcstat.evaluation.bench.kv import KVConfig

    with pytest.raises(ValueError, match=r"unknown option\(s\) \['ratio'\]"):
        KVConfig.from_dict({"ratio": 0.5})
    with pytest.raises(ValueError, match=r"--ratios must be in \[0, 1\)"):
        KVConfig.from_dict({"ratios": [1.0]})
    with pytest.raises(ValueError, match="--context applies to --dataset qmsum only"):
        KVConfig.from_dict({"context": "fit"})
    with pytest.raises(ValueError, match="--context takes full, relevant, fit, got 'window'"):
        KVConfig.from_dict({"dataset": "qmsum", "context": "window"})
    with pytest.raises(ValueError, match="--context takes full, relevant, fit, got 'turns'"):
        KVConfig.from_dict({"dataset": "qmsum", "context": "turns"})
    with pytest.raises(ValueError, match="bench kv needs"):
        KVConfig.from_dict({"dataset": "quotesum"})
    with pytest.raises(ValueError, match="span_score 'sum' adds up"):
        AttributionConfig.from_dict({"statistic": "upper", "span_score": "sum"})
    assert AttributionConfig.from_dict({"statistic": "upper"}).span_score == "mean"
    with pytest.raises(ValueError, match="--questionable applies to --dataset faithbench"):
        GroundingConfig.from_dict({"dataset": "summedits", "questionable": True})
    assert GroundingConfig.from_dict({"shard": "1/4"}).shard.name == "1-of-4"


@pytest.mark.parametrize("name", KNOBS)
def test_every_press_knob_reaches_the_press_from_its_flag(name: str) -> None:
    """``--<knob>`` of ``rcstat bench kv`` exists for every knob of the press and its value is
    the one the press of the setting is built with (a knob added to RCStatOptions fails here
    until it has a flag)."""
    import argparse

    from rcstat.cli.bench import register
    from rcstat.cli.bench.kv import from_namespace
    from rcstat.evaluation.kv_settings import make_press

    kind = knob_type(name)
    value: object = {float: 0.35, int: 3}.get(kind)
    if kind is str:  # a named value that is not the target-ratio mode's default
        value = next(v for v in knob_choices(name) if v not in (knob_default(name), "mean"))
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    flags = ["bench", "kv", "--presses", "rcstat", "--ratios", "0.5", "--thresholds", "1.0"]
    grid = from_namespace(parser.parse_args([*flags, f"--{name}", str(value)])).grid()
    target = [s for s in grid if s.ratio is not None]
    assert len(target) == 2  # the two default windows
    for setting in target:
        assert setting.knob(name) == value
        assert getattr(make_press(setting), name) == value
