"""``rcstat bench kv`` on a tiny random model saved to disk (needs the rcstat[press] extra)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rcstat import cli

pytestmark = pytest.mark.press


def test_bench_kv_on_a_squad_file(model_dir: Path, tmp_path: Path) -> None:
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
    code = cli.main(
        [
            "bench",
            "kv",
            "--model",
            str(model_dir),
            "--dataset",
            "squad_v2",
            "--data",
            str(path),
            "--presses",
            "knorm,tova",
            "--ratios",
            "0.5",
            "--max-new-tokens",
            "3",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    results = (out / "results.csv").read_text().splitlines()
    assert len(results) == 1 + 2 * 2  # header + 2 examples × 2 presses
    assert (out / f"squad_v2_{model_dir.name}_baseline_df.csv").exists()
    assert (out / "ver_vs_ratio.png").exists()
