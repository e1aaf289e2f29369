"""Tests of benchmarks/reworded_changes.py: the hand-written pairs become labelled responses
whose spans locate exactly the changed fact, or the added claim, in a response that differs
from its faithful one only there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import reworded_changes as module


@pytest.mark.parametrize("added", [False, True])
def test_each_pair_is_a_faithful_answer_and_one_labelled_change(added: bool) -> None:
    rows = module.rows(added)
    assert len(rows) == 2 * len(module.PAIRS)
    for k, (context, question, faithful, old, new) in enumerate(module.PAIRS):
        copy, edit = rows[2 * k], rows[2 * k + 1]
        assert copy["group"] == edit["group"] and copy["id"] != edit["id"]
        assert (copy["label"], copy["spans"], copy["response"]) == (0, [], faithful)
        assert edit["label"] == 1 and copy["context"] == edit["context"] == context
        assert copy["question"] == edit["question"] == question
        [[start, end]] = edit["spans"]
        response = edit["response"]
        assert isinstance(response, str)
        if added:  # the faithful answer, then the claim, then its period
            claim = module.ADDED[k].lstrip(",; ")
            assert response[start:end] == claim and response.endswith(claim + ".")
            assert response[:start].rstrip(",; ") + "." == faithful
        else:  # the same answer with one fact replaced
            assert response[start:end] == new
            assert response[:start] + old + response[end:] == faithful


def test_the_added_claims_are_new_to_their_contexts() -> None:
    """An added claim is a claim the context does not hold: none of it is copied from there."""
    assert len(module.ADDED) == len(module.PAIRS)
    for (context, *_), claim in zip(module.PAIRS, module.ADDED, strict=True):
        assert claim.lstrip(",; ") not in context


def test_the_command_writes_the_rows_and_refuses_an_existing_file(tmp_path: Path) -> None:
    out = tmp_path / "added.jsonl"
    command = [sys.executable, "-m", "benchmarks.reworded_changes", "--added", "--out", str(out)]
    root = Path(module.__file__).resolve().parents[1]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, check=True)
    assert "24 labelled responses" in done.stdout
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == module.rows(True)
    again = subprocess.run(command, cwd=root, capture_output=True, text=True)
    assert again.returncode != 0 and "exists" in again.stderr
