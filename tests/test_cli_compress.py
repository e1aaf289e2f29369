"""``rcstat compress`` on a tiny random model saved to disk (needs the rcstat[press] extra)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from transformers import DynamicCache

from rcstat import cli
from rcstat.models import load_model
from rcstat.press.answer import split_context_question
from rcstat.press.rcstat_press import RCStatPress

pytestmark = pytest.mark.press


def _flat(text: str) -> str:
    """Console output with rich's line wrapping and padding collapsed to single spaces."""
    return " ".join(text.split())


def test_compress_prints_answer_ratios_and_memory(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    context = "The cat sat on the warm mat near the door. " * 4
    code = cli.main(
        [
            "compress",
            "--model",
            str(model_dir),
            "--context",
            context,
            "--question",
            "Where did the cat sit?",
            "--ratio",
            "0.5",
            "--max-new-tokens",
            "3",
        ]
    )
    assert code == 0
    out = _flat(capsys.readouterr().out)
    assert "global 0.5" in out
    full, live = re.search(r"full ([\d.]+) KiB → live ([\d.]+) KiB", out).groups()  # type: ignore[union-attr]
    assert float(live) / float(full) == pytest.approx(0.5, abs=0.02)
    # recomputed: the default target-ratio press in kvpress's masking mode, its evictions
    # counted from the masks per layer and KV head; the full answer by a cache-free loop
    model, tok = load_model(model_dir)
    question = "Where did the cat sit?"
    context_ids, question_ids = split_context_question(tok, context, question)
    length = context_ids.shape[1]
    with torch.no_grad(), RCStatPress(compression_ratio=0.5)(model):
        model(context_ids, past_key_values=DynamicCache())
    rows, kept = [], 0
    for layer, block in enumerate(model.model.layers):
        heads = block.self_attn.masked_key_indices[1]
        evicted = [int((heads == kv).sum()) for kv in range(2)]
        kept += 2 * length - sum(evicted)
        shares = " ".join(f"{e / length:.2f}" for e in evicted)
        rows.append(f"{layer} {sum(evicted) / (2 * length):.3f} {shares}")
    assert " ".join(rows) in _flat(out.replace("│", " "))  # the table's rows, borders apart
    entry = 2 * 16 * 4 / 1024  # KiB of one key and value: head_dim 16, float32
    assert f"{length}-token context: full {3 * 2 * length * entry:.1f} KiB" in out
    assert f"→ live {kept * entry:.1f} KiB ({kept / (3 * 2 * length):.1%}" in out
    ids = torch.cat([context_ids, question_ids], dim=1)
    with torch.no_grad():
        for _ in range(3):
            ids = torch.cat([ids, model(ids).logits[:, -1:].argmax(-1)], dim=1)
    full_answer = tok.decode(ids[0, -3:], skip_special_tokens=True)
    assert f"answer (full cache) : {full_answer!r} [cut at the token limit]" in out


def test_compress_json_is_the_library_result_as_one_object(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--json``: one JSON object on standard output, nothing else there, holding what
    ``rcstat.commands.compress.run`` returns for the same options (answers, ratios per layer
    and KV head, KV bytes, the full-cache answer)."""
    from rcstat.commands.compress import CompressConfig
    from rcstat.commands.compress import run as run_compress

    context = "The cat sat on the warm mat near the door. " * 4
    question = "Where did the cat sit?"
    argv = ["compress", "--model", str(model_dir), "--context", context, "--question", question]
    assert cli.main([*argv, "--ratio", "0.5", "--max-new-tokens", "3", "--json"]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1
    printed = json.loads(out)
    config = CompressConfig(
        context=context, question=question, ratio=0.5, max_new_tokens=3, model=str(model_dir)
    )
    result = run_compress(config)
    report, full = result.reports[0], result.fulls[0]
    assert full is not None
    [entry] = printed["questions"]
    assert printed["batched"] is False and printed["format"] == 1
    assert entry["question"] == question and entry["answer"] == report.answer
    assert entry["finished"] is report.finished is False  # cut at 3 tokens
    assert entry["ratio"] == pytest.approx(report.ratio) and report.ratio == pytest.approx(
        0.5, abs=0.02
    )
    assert entry["layer_ratios"] == {
        str(k): pytest.approx(v) for k, v in report.layer_ratios.items()
    }
    assert len(entry["head_ratios"]) == 3 and len(entry["head_ratios"][0]) == 2
    assert entry["kv_bytes"] == {
        "full": report.dense_bytes,
        "live": report.live_bytes,
        "allocated": report.allocated_bytes,
    }
    # the live bytes are the kept entries: ratio of the whole model, keys and values in float32
    entry_bytes = 2 * 16 * 4  # head_dim 16
    assert report.dense_bytes == 3 * 2 * report.context_tokens * entry_bytes
    assert report.live_bytes == pytest.approx((1 - report.ratio) * report.dense_bytes)
    assert entry["full_answer"] == {
        "text": full.text,
        "finished": full.finished,
        "agreement": pytest.approx(full.agreement),
    }
    no_full = [*argv, "--ratio", "0.5", "--max-new-tokens", "2", "--json", "--no-full"]
    assert cli.main(no_full) == 0
    assert json.loads(capsys.readouterr().out)["questions"][0]["full_answer"] is None


def test_compress_needs_context_and_question(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["compress", "--model", str(model_dir), "--question", "q?"]) == 2
    printed = capsys.readouterr()
    message = "error: compress needs --context (or --context-file) and --question"
    assert _flat(printed.out + printed.err) == message  # refused before loading the model


def test_compress_passes_the_gqa_rule_to_the_press(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rcstat.press import rcstat_press

    made: list[str] = []

    class Spy(rcstat_press.RCStatPress):
        def __post_init__(self) -> None:
            made.append(self.group)
            super().__post_init__()

    monkeypatch.setattr(rcstat_press, "RCStatPress", Spy)
    context = "The cat sat on the warm mat near the door. " * 4
    argv = ["compress", "--model", str(model_dir), "--context", context, "--question", "Where?"]
    assert cli.main([*argv, "--group", "mean", "--max-new-tokens", "2", "--no-full"]) == 0
    assert made == ["mean"]
    assert "global" in _flat(capsys.readouterr().out)


def test_compress_query_aware_with_the_question_as_window(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--press-scope question --window question: the press's window is the question's tokens,
    which end the compressed prompt; the pooled budget and the upper-bound score reach it."""
    from rcstat.press import answer

    seen: list[tuple[int, str, str, int, int]] = []
    real = answer.prefill

    def spy(model, context, press, cache):  # type: ignore[no-untyped-def]
        if press is not None:
            shape = int(context.shape[1])
            seen.append((press.window_size, press.score, press.budget, press.sinks, shape))
        return real(model, context, press, cache)

    monkeypatch.setattr(answer, "prefill", spy)
    context = "The cat sat on the warm mat near the door. " * 4
    argv = ["compress", "--model", str(model_dir), "--context", context, "--question", "Where?"]
    extra = ["--press-scope", "question", "--window", "question", "--ratio", "0.5"]
    knobs = ["--budget", "pooled", "--floor", "0.1", "--score", "upper", "--sinks", "3"]
    assert cli.main([*argv, *extra, *knobs, "--max-new-tokens", "2", "--no-full"]) == 0
    split = answer.split_prompt(_tokenizer(model_dir), context, "Where?", placement="question")
    assert seen == [(split.question_tokens, "upper", "pooled", 3, split.compressed.shape[1])]
    assert "global 0.5" in _flat(capsys.readouterr().out)


def _tokenizer(model_dir: Path):  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


@pytest.mark.parametrize("command", [["compress"], ["bench", "kv"]])
def test_press_scope_is_the_one_flag_of_what_is_compressed(command: list[str]) -> None:
    """``--press-scope`` sets what the press compresses; ``--question-placement`` means where
    the question sits in ``rcstat analyze`` only, and ``--placement`` is gone."""
    parser = cli.build_parser()
    assert parser.parse_args([*command, "--press-scope", "question"]).question_placement == (
        "question"
    )
    assert parser.parse_args(command).question_placement == "context"
    for gone in ("--placement", "--question-placement"):
        with pytest.raises(SystemExit):
            parser.parse_args([*command, gone, "question"])
    sub = parser._subparsers._group_actions[0].choices[command[0]]  # type: ignore[union-attr]
    if len(command) > 1:
        sub = sub._subparsers._group_actions[0].choices[command[1]]  # type: ignore[union-attr]
    text = " ".join(sub.format_help().split())
    assert "--press-scope {context,question}" in text and "--placement" not in text


def test_a_questions_file_is_answered_in_one_batch_as_each_alone(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--questions-file``: questions of different lengths in one padded batch; each answer and
    ratio equal the one ``compress_and_answer`` gives that question alone."""
    from rcstat.press.answer import compress_and_answer

    context = "The cat sat on the warm mat near the door. " * 4
    questions = ["Where did the cat sit?", "What was warm?", "Near which thing was the mat?"]
    path = tmp_path / "questions.txt"
    path.write_text("\n".join([questions[0], "", *questions[1:]]) + "\n", encoding="utf-8")
    argv = ["compress", "--model", str(model_dir), "--context", context]
    code = cli.main(
        [*argv, "--questions-file", str(path), "--ratio", "0.5", "--max-new-tokens", "4"]
    )
    assert code == 0
    out = _flat(capsys.readouterr().out)
    assert "3 questions answered in one batch" in out
    model, tok = load_model(model_dir)
    for index, question in enumerate(questions, 1):
        alone = compress_and_answer(
            model, tok, context, question, RCStatPress(compression_ratio=0.5), max_new_tokens=4
        )
        assert f"question {index}: {question}" in out
        assert f"answer (compressed cache): {alone.answer!r}" in out
        assert f"│ {index} │ {alone.ratio:.3f} │" in out


def test_a_questions_file_is_checked(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty, two = tmp_path / "empty.txt", tmp_path / "two.txt"
    empty.write_text("\n \n", encoding="utf-8")
    two.write_text("Where?\nWhat?\n", encoding="utf-8")
    argv = ["compress", "--model", str(model_dir), "--context", "a b c d e f g h i j k l"]
    cases = [
        (["--questions-file", str(empty)], "holds no question"),
        (["--questions-file", str(empty), "--question", "q?"], "not both"),
        (["--questions-file", str(tmp_path / "missing.txt")], "cannot read --questions-file"),
        (
            [
                "--questions-file",
                str(two),
                "--window",
                "question",
                "--press-scope",
                "question",
            ],
            "one at a time",
        ),
    ]
    for extra, message in cases:
        assert cli.main([*argv, *extra]) == 2
        assert message in capsys.readouterr().err
