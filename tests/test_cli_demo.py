"""``rcstat demo`` on the tiny random Llama with short texts (the real model: test_end_to_end).

The tiny model answers gibberish, so whether a compressed answer agrees with the full-cache
one is forced where a test needs it, by replacing ``compress_and_answer``.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rcstat import cli
from rcstat.cli import demo
from rcstat.cli._common import CUT_MARK
from rcstat.defaults import INSTALL_PRESS
from rcstat.demo import DemoTexts

TEXTS = DemoTexts(
    question="When was the lighthouse automated?",
    answer="It was automated in 1962.",
    supporting="The lighthouse was built in 1871. It was automated in 1962 with a timer.",
    unrelated="Bread rises because of yeast. Bakers feed the culture every day.",
)
MAX_NEW_TOKENS = 4


def _run(model_dir: Path, out: Path) -> int:
    return demo.run_contrast(str(model_dir), out, 1.5, texts=TEXTS, max_new_tokens=MAX_NEW_TOKENS)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _images(report: str) -> list[str]:
    return re.findall(r"<img alt='([^']*)' src='data:image/png;base64,", report)


@pytest.mark.press
def test_report_shows_full_and_compressed_answers(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    assert _run(model_dir, out) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    compression = summary["compression"]
    assert [s["name"] for s in compression["settings"]] == ["faithful", "strong"]
    assert [s["threshold"] for s in compression["settings"]] == [0.5, 1.0]
    assert compression["missing_extra"] == ""
    report = (out / "report.html").read_text(encoding="utf-8")
    # both answers, each compressed one with its ROUGE-L against the full-cache one
    full = compression["full"]
    assert html.escape(full["answer"]) in report
    for setting in compression["settings"]:
        assert 0.0 <= setting["rougeL_vs_full"] <= 1.0
        assert 0.0 <= setting["ratio"] < 1.0
        assert html.escape(setting["answer"]) in report
        assert f"<td>{setting['rougeL_vs_full']:.2f}</td>" in report
    assert "ROUGE-L vs full" in report
    # four tokens are not enough for the tiny model to stop: every answer is marked as cut
    assert not full["finished"]
    assert report.count(html.escape(CUT_MARK)) == 3
    # the attribution page is linked and written next to the report
    assert "<a href='attribution.html'>" in report
    assert (out / "attribution.html").is_file()
    # the supporting − unrelated difference heatmaps (upper bound and normalized RC)
    alts = _images(report)
    assert alts.count("per-head difference") == 2
    assert "diverging colour map centred at 0" in report
    printed = _flat(capsys.readouterr().out)
    assert "full cache: " in printed and "faithful (c = 0.5): " in printed
    assert printed.count("ROUGE-L vs full") == 2


@pytest.mark.press
def test_a_differing_compressed_answer_is_flagged(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    import rcstat.press.answer as answer

    real_compress, real_full = answer.compress_and_answer, answer.answer_full

    def fake_compress(
        model: Any, tokenizer: Any, context: str, question: str, press: Any, **kw: Any
    ) -> Any:
        report = real_compress(model, tokenizer, context, question, press, **kw)
        if press.threshold == 0.5:  # faithful: the full-cache answer, finished alike
            full = real_full(model, tokenizer, context, question, **kw)
            text = tokenizer.decode(full.ids, skip_special_tokens=True)
            return replace(report, answer=text, finished=full.finished)
        return replace(report, answer="It stopped in 2022.", finished=True)

    monkeypatch.setattr(answer, "compress_and_answer", fake_compress)
    out = tmp_path / "demo"
    assert _run(model_dir, out) == 0
    settings = json.loads((out / "summary.json").read_text())["compression"]["settings"]
    assert [s["same_as_full"] for s in settings] == [True, False]
    assert settings[0]["rougeL_vs_full"] == pytest.approx(1.0)
    report = (out / "report.html").read_text(encoding="utf-8")
    warnings = re.findall(r"<p class='warning' role='alert'>([^<]*)</p>", report)
    assert len(warnings) == 1
    assert "strong (c = 1)" in warnings[0] and "differs from the full-cache answer" in warnings[0]
    assert f"ROUGE-L {settings[1]['rougeL_vs_full']:.2f}" in warnings[0]
    assert report.count("<tr class='differs'>") == 1
    assert "It stopped in 2022." in report
    assert "faithful (c = 0.5): the same answer as the full cache" in report
    printed = _flat(capsys.readouterr().out)
    assert printed.count("⚠ WARNING") == 1
    assert "⚠ WARNING: strong (c = 1): the compressed-cache answer differs" in printed
    assert "same answer as the full cache" in printed


def test_without_kvpress_the_demo_says_how_to_install_it(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    import rcstat.press.answer as answer
    import rcstat.press.extra as extra

    def no_press(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the press must not run without kvpress")

    monkeypatch.setattr(extra, "has_kvpress", lambda: False)
    monkeypatch.setattr(answer, "compress_and_answer", no_press)
    out = tmp_path / "demo"
    assert _run(model_dir, out) == 0
    compression = json.loads((out / "summary.json").read_text())["compression"]
    assert compression["settings"] == []
    assert INSTALL_PRESS in compression["missing_extra"]
    report = (out / "report.html").read_text(encoding="utf-8")
    assert f"<pre>{html.escape(INSTALL_PRESS)}</pre>" in report
    assert html.escape(compression["full"]["answer"]) in report  # the full-cache answer stays
    assert "<a href='attribution.html'>" in report
    assert INSTALL_PRESS in _flat(capsys.readouterr().out)


def test_cli_demo_prints_plain_progress_lines(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    import rcstat.press.extra as extra

    monkeypatch.setattr(demo, "DEMO_TEXTS", TEXTS)
    monkeypatch.setattr(demo, "MAX_NEW_TOKENS", MAX_NEW_TOKENS)
    monkeypatch.setattr(extra, "has_kvpress", lambda: False)  # keeps this test press-free
    out = tmp_path / "demo"
    assert cli.main(["demo", "--model", str(model_dir), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    for message in (
        "loading model…",
        "analysing the supporting example…",
        "answering on the full KV cache…",
        "attributing the answer to the sentences of both contexts…",
        "writing the report…",
    ):
        assert message in lines
    assert sum(line.startswith("  done in ") for line in lines) >= 5
    assert "\x1b[" not in captured.err  # no terminal codes in a log
    assert (out / "report.html").is_file()


def test_difference_heatmap_is_centred_at_zero() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rcstat.report.plots import difference_heatmap

    first = np.array([[1.0, 2.0], [3.0, 4.0]])
    second = np.array([[2.0, 2.0], [0.0, 4.5]])
    fig, ax = plt.subplots()
    difference_heatmap(first, second, ax=ax)
    image = ax.get_images()[0]
    np.testing.assert_allclose(image.get_array(), first - second)
    assert image.get_clim() == (-3.0, 3.0)
    assert image.get_cmap().name == "RdBu_r"
    plt.close(fig)
    with pytest.raises(ValueError, match="shapes differ"):
        difference_heatmap(first, second[:1])
