"""``benchmarks/opposite_swaps.py``: the labelled pairs it writes for ``bench grounding`` and
``ground-train``, from a SQuAD v2 file written here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks import opposite_swaps
from rcstat.data.pairs import load_labelled_pairs

PARAGRAPHS = [
    "Profits rose by 12 percent in the first year. The firm sold its shops in the north.",
    "The bridge was finished before the war began. It stands on the eastern bank today.",
]


def _squad(path: Path) -> Path:
    data = {
        "version": "v2.0",
        "data": [
            {
                "title": f"t{i}",
                "paragraphs": [
                    {
                        "context": text,
                        "qas": [
                            {
                                "id": f"q{i}",
                                "question": "What?",
                                "is_impossible": False,
                                "answers": [{"text": text.split()[0], "answer_start": 0}],
                            }
                        ],
                    }
                ],
            }
            for i, text in enumerate(PARAGRAPHS)
        ],
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_the_pairs_are_labelled_copies_and_opposites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source, out = _squad(tmp_path / "squad.json"), tmp_path / "opposites.jsonl"
    argv = ["opposite_swaps", "--from", f"squad_v2:{source}", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    opposite_swaps.main()
    assert "4 pairs from 2 documents" in capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["label"] for r in rows] == [0, 1] * 4
    for copy, edit in zip(rows[::2], rows[1::2], strict=True):
        assert copy["group"] == edit["group"] and copy["context"] == edit["context"]
        assert copy["response"] in copy["context"] and copy["spans"] == []
        [[start, end]] = edit["spans"]
        changed = edit["response"][start:end]
        assert changed.lower() not in copy["context"].lower().split()
        assert edit["response"][:start] == copy["response"][:start]
    # the file reads back as labelled pairs (what bench grounding and ground-train take)
    assert len(load_labelled_pairs(out)) == 8
    with pytest.raises(SystemExit, match="exists"):  # never over a file
        opposite_swaps.main()
