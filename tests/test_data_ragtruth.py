"""Tests of the RAGTruth loader (``rcstat.data.ragtruth``) in both upstream layouts.

Hermetic tests write tiny files into ``tmp_path``: per-task files as FaithJudge packages the
test responses (one source a line), and the RAGTruth release folder (``source_info.jsonl`` +
``response.jsonl``). Every expected context and question is written out by hand (not built
with the loader's constants), and every error the loader raises has a malformed variant. One
test counts the developer slice in ``shared/data/ragtruth`` and skips when it is absent.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rcstat.data import (
    DatasetFormatError,
    GroundingExample,
    LabeledSpan,
    find_shared_data,
    load_dataset,
    load_ragtruth,
)

# ---------------------------------------------------------------------------- fixtures

QA_SOURCE = {
    "question": "  who built the bridge ",
    "passages": "passage 1:The bridge was built in 1889 by engineers.\n\npassage 2:It is red.\n\n",
}
QA_QUESTION = (
    "Briefly answer the following question: who built the bridge\n"
    "Bear in mind that your response should be strictly based on the passages above."
)
QA_RESPONSES = [
    {"response": "Engineers built it in 1889.", "model": "gpt-4-0613", "labels": []},
    {
        "response": "Engineers built it in 1925.",
        "model": "llama-2-7b-chat",
        "labels": [
            {
                "start": 22,
                "end": 26,
                "text": "1925",
                "label_type": "Evident Conflict",
                "implicit_true": False,
                "due_to_null": False,
            }
        ],
    },
]
SUMMARY_SOURCE = "The council approved the budget on Monday. It rises by 4 percent."
SUMMARY_RESPONSES = [
    {
        "response": "On Friday the council approved a budget that doubles.",
        "model": "mistral-7B-instruct",
        "labels": [
            {
                "start": 0,
                "end": 9,
                "text": "On Friday",
                "label_type": "Evident Conflict",
                "implicit_true": False,
                "due_to_null": False,
            },
            {
                "start": 45,
                "end": 52,
                "text": "doubles",
                "label_type": "Subtle Baseless Info",
                "implicit_true": True,
                "due_to_null": True,
            },
        ],
    }
]
DATA_SOURCE = {
    "name": "Café Rouge",
    "hours": {"Monday": "17:00-21:00"},
    "attributes": {"OutdoorSeating": True, "WiFi": "free"},
    "business_stars": 4.5,
}
DATA_RESPONSES = [
    {"response": "Café Rouge opens at 5 pm and has free WiFi.", "model": "gpt-3.5", "labels": []},
    {"response": "Café Rouge has 5 stars.", "model": "gpt-3.5", "labels": []},
]
SUMMARY_QUESTION = "Summarize the news above."
DATA_QUESTION = (
    "Write an objective overview about the local business above based only on the provided "
    "structured data in the JSON format."
)


def _write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _task_files(folder: Path) -> Path:
    """Per-task files: one QA source (2 responses), one summary source (1), one data source
    (2); the data file has FaithJudge's slice suffix."""
    folder.mkdir(exist_ok=True)
    _write_jsonl(
        folder / "ragtruth_qa.jsonl",
        [{"source_id": 14394, "source": QA_SOURCE, "responses": QA_RESPONSES}],
    )
    _write_jsonl(
        folder / "ragtruth_summary.jsonl",
        [{"source_id": "s-7", "source": SUMMARY_SOURCE, "responses": SUMMARY_RESPONSES}],
    )
    _write_jsonl(
        folder / "ragtruth_data2txt.slice.jsonl",
        [{"source_id": 3, "source": DATA_SOURCE, "responses": DATA_RESPONSES}],
    )
    (folder / "notes.jsonl").write_text('{"not": "ragtruth"}\n', encoding="utf-8")
    return folder


def _release(folder: Path) -> Path:
    """The release layout: a QA and a Data2txt source; responses of both splits."""
    folder.mkdir(exist_ok=True)
    _write_jsonl(
        folder / "source_info.jsonl",
        [
            {"source_id": "100", "task_type": "QA", "source_info": QA_SOURCE},
            {"source_id": "200", "task_type": "Data2txt", "source_info": DATA_SOURCE},
            {"source_id": "300", "task_type": "Summary", "source_info": SUMMARY_SOURCE},
        ],
    )
    rows = [
        ("1", "100", QA_RESPONSES[0], "train"),
        ("2", "200", DATA_RESPONSES[0], "test"),
        ("3", "100", QA_RESPONSES[1], "test"),
        ("4", "300", SUMMARY_RESPONSES[0], "train"),
    ]
    _write_jsonl(
        folder / "response.jsonl",
        [{"id": i, "source_id": s, **r, "split": split} for i, s, r, split in rows],
    )
    return folder


# ------------------------------------------------------------------------- per-task files


def test_per_task_files_are_read_in_natural_name_order(tmp_path: Path) -> None:
    examples = load_ragtruth(_task_files(tmp_path / "rt"))
    assert [e.id for e in examples] == [
        "data2txt:3:0",
        "data2txt:3:1",
        "qa:14394:0",
        "qa:14394:1",
        "summary:s-7:0",
    ]
    assert all(isinstance(e, GroundingExample) and e.dataset == "ragtruth" for e in examples)
    assert [e.label for e in examples] == [False, False, False, True, True]
    assert [e.group for e in examples] == [
        "data2txt:3",
        "data2txt:3",
        "qa:14394",
        "qa:14394",
        "summary:s-7",
    ]
    assert [e.meta["model"] for e in examples] == [
        "gpt-3.5",
        "gpt-3.5",
        "gpt-4-0613",
        "llama-2-7b-chat",
        "mistral-7B-instruct",
    ]
    assert [e.meta["task"] for e in examples] == ["data2txt"] * 2 + ["qa"] * 2 + ["summary"]
    assert [e.meta["source_id"] for e in examples] == ["3", "3", "14394", "14394", "s-7"]


def test_each_task_has_its_context_and_question(tmp_path: Path) -> None:
    by_task = {e.meta["task"]: e for e in load_ragtruth(_task_files(tmp_path / "rt"))}
    qa, summary, data = by_task["qa"], by_task["summary"], by_task["data2txt"]
    assert qa.context == QA_SOURCE["passages"]
    assert qa.meta["question"] == QA_QUESTION  # the question stripped inside the instruction
    assert summary.context == SUMMARY_SOURCE
    assert summary.meta["question"] == SUMMARY_QUESTION
    assert data.meta["question"] == DATA_QUESTION
    # the data's JSON text: keys in upstream order, non-ASCII kept, readable back
    assert json.loads(data.context) == DATA_SOURCE
    assert list(json.loads(data.context)) == list(DATA_SOURCE)
    assert data.context.startswith('{"name": "Café Rouge", "hours": {"Monday": "17:00-21:00"}')
    assert '"OutdoorSeating": true' in data.context


def test_labels_become_spans_with_their_type_and_flags(tmp_path: Path) -> None:
    by_id = {e.id: e for e in load_ragtruth(_task_files(tmp_path / "rt"))}
    wrong = by_id["qa:14394:1"]
    assert wrong.spans == (LabeledSpan(22, 26, ("Evident Conflict",)),)
    assert wrong.response[22:26] == "1925"
    assert wrong.meta["span_flags"] == ({"implicit_true": False, "due_to_null": False},)
    summary = by_id["summary:s-7:0"]
    assert summary.spans == (
        LabeledSpan(0, 9, ("Evident Conflict",)),
        LabeledSpan(45, 52, ("Subtle Baseless Info",)),
    )
    assert [summary.response[s.start : s.end] for s in summary.spans] == ["On Friday", "doubles"]
    assert summary.meta["span_flags"] == (
        {"implicit_true": False, "due_to_null": False},
        {"implicit_true": True, "due_to_null": True},
    )
    faithful = by_id["qa:14394:0"]
    assert faithful.spans == () and faithful.label is False and faithful.meta["span_flags"] == ()


def test_a_label_without_type_or_flags(tmp_path: Path) -> None:
    response = "It opened in 1925."
    record = {
        "source_id": 1,
        "source": SUMMARY_SOURCE,
        "responses": [{"response": response, "labels": [{"start": 13, "end": 17}]}],
    }
    path = _write_jsonl(tmp_path / "ragtruth_summary.jsonl", [record])
    (example,) = load_ragtruth(path)
    assert example.spans == (LabeledSpan(13, 17, ()),)
    assert example.label is True and example.meta["model"] == ""
    assert example.meta["span_flags"] == ({"implicit_true": False, "due_to_null": False},)


def test_task_limit_and_split_of_per_task_files(tmp_path: Path) -> None:
    folder = _task_files(tmp_path / "rt")
    assert [e.id for e in load_ragtruth(folder, task="qa")] == ["qa:14394:0", "qa:14394:1"]
    assert [e.id for e in load_ragtruth(folder, task="summary")] == ["summary:s-7:0"]
    assert [e.id for e in load_ragtruth(folder, limit=3)] == [
        "data2txt:3:0",
        "data2txt:3:1",
        "qa:14394:0",
    ]
    assert load_ragtruth(folder, limit=0) == []
    assert [e.id for e in load_ragtruth(folder, task="qa", limit=1)] == ["qa:14394:0"]
    # one file: read alone; another task's filter leaves nothing
    single = folder / "ragtruth_data2txt.slice.jsonl"
    assert len(load_ragtruth(single)) == 2
    assert load_ragtruth(single, task="qa") == []
    # the files hold test responses: split="test" reads them all
    assert [e.id for e in load_ragtruth(folder, split="test")] == [
        e.id for e in load_ragtruth(folder)
    ]
    with pytest.raises(ValueError, match="test responses only; --split train needs the RAGTruth"):
        load_ragtruth(folder, split="train")


def test_through_load_dataset(tmp_path: Path) -> None:
    folder = _task_files(tmp_path / "rt")
    examples = load_dataset("ragtruth", folder, task="data2txt")
    assert [e.id for e in examples] == ["data2txt:3:0", "data2txt:3:1"]  # type: ignore[union-attr]
    assert [e.id for e in load_dataset("RAGTruth", folder, limit=1)] == ["data2txt:3:0"]  # type: ignore[union-attr]
    bad = tmp_path / "bad"
    bad.mkdir()
    _write_jsonl(bad / "ragtruth_qa.jsonl", [{"source_id": 1, "source": QA_SOURCE}])
    with pytest.raises(DatasetFormatError, match=r"missing key 'responses' \(expected: RAGTruth"):
        load_dataset("ragtruth", bad)
    with pytest.raises(
        FileNotFoundError, match=r"no ragtruth_<task>\.jsonl .*\(expected: RAGTruth"
    ):
        load_dataset("ragtruth", tmp_path / "rt" / "notes.jsonl")
    with pytest.raises(TypeError):
        load_dataset("ragtruth", folder, questionable=True)


# ------------------------------------------------------------------------------ release


def test_release_folder(tmp_path: Path) -> None:
    folder = _release(tmp_path / "release")
    examples = load_ragtruth(folder)
    assert [e.id for e in examples] == ["qa:100:1", "data2txt:200:2", "qa:100:3", "summary:300:4"]
    assert [e.label for e in examples] == [False, False, True, True]
    assert [e.group for e in examples] == ["qa:100", "data2txt:200", "qa:100", "summary:300"]
    qa, data = examples[0], examples[1]
    assert qa.context == QA_SOURCE["passages"] and qa.meta["question"] == QA_QUESTION
    assert json.loads(data.context) == DATA_SOURCE and data.meta["question"] == DATA_QUESTION
    assert examples[3].context == SUMMARY_SOURCE
    assert examples[2].spans == (LabeledSpan(22, 26, ("Evident Conflict",)),)
    assert [e.id for e in load_ragtruth(folder, split="train")] == ["qa:100:1", "summary:300:4"]
    assert [e.id for e in load_ragtruth(folder, split="test")] == ["data2txt:200:2", "qa:100:3"]
    assert [e.id for e in load_ragtruth(folder, task="qa")] == ["qa:100:1", "qa:100:3"]
    assert [e.id for e in load_ragtruth(folder, task="qa", split="test")] == ["qa:100:3"]
    assert [e.id for e in load_ragtruth(folder, limit=2)] == ["qa:100:1", "data2txt:200:2"]
    # through the registry, with the split
    via = load_dataset("ragtruth", folder, split="train", task="summary")
    assert [e.id for e in via] == ["summary:300:4"]  # type: ignore[union-attr]


def test_release_response_without_split_is_read_without_a_split_only(tmp_path: Path) -> None:
    folder = _release(tmp_path / "release")
    lines = (folder / "response.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    del record["split"]
    lines[0] = json.dumps(record)
    (folder / "response.jsonl").write_text("\n".join(lines) + "\n")
    assert len(load_ragtruth(folder)) == 4
    assert [e.id for e in load_ragtruth(folder, split="train")] == ["summary:300:4"]


def _release_error(folder: Path, which: str, change: Any) -> None:
    path = folder / which
    records = [json.loads(v) for v in path.read_text().splitlines()]
    change(records)
    _write_jsonl(path, records)


@pytest.mark.parametrize(
    ("which", "change", "message"),
    [
        (
            "source_info.jsonl",
            lambda r: r[1].update(task_type="Dialogue"),
            r"source_info\.jsonl: line 2: unknown task_type 'Dialogue' \(expected QA, Summary",
        ),
        (
            "source_info.jsonl",
            lambda r: r[0].pop("task_type"),
            r"source_info\.jsonl: line 1: missing key 'task_type'",
        ),
        (
            "source_info.jsonl",
            lambda r: r[0].update(source_info="just text"),
            r"line 1 source_info: the QA source must be an object, got str",
        ),
        (
            "source_info.jsonl",
            lambda r: r[2].update(source_info="  "),
            r"line 3 source_info: the summary source is empty",
        ),
        (
            "source_info.jsonl",
            lambda r: r[1].update(source_info={}),
            r"line 2 source_info: the data-to-text source is empty",
        ),
        (
            "response.jsonl",
            lambda r: r[2].update(source_id="999"),
            r"response\.jsonl: line 3: source_id '999' is not in source_info\.jsonl",
        ),
        (
            "response.jsonl",
            lambda r: r[0].pop("id"),
            r"response\.jsonl: line 1: missing key 'id'",
        ),
    ],
)
def test_release_errors(tmp_path: Path, which: str, change: Any, message: str) -> None:
    folder = _release(tmp_path / "release")
    _release_error(folder, which, change)
    with pytest.raises(DatasetFormatError, match=message):
        load_ragtruth(folder)


def test_release_split_must_be_a_string_where_a_split_is_chosen(tmp_path: Path) -> None:
    folder = _release(tmp_path / "release")
    _release_error(folder, "response.jsonl", lambda r: r[0].update(split=2024))
    with pytest.raises(DatasetFormatError, match="line 1: key 'split' must be a string, got int"):
        load_ragtruth(folder, split="test")


def test_release_without_source_info(tmp_path: Path) -> None:
    folder = _release(tmp_path / "release")
    (folder / "source_info.jsonl").unlink()
    with pytest.raises(FileNotFoundError):
        load_ragtruth(folder)


# ------------------------------------------------------------------------------- errors


def _qa_record(**changes: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "source_id": 1,
        "source": copy.deepcopy(QA_SOURCE),
        "responses": copy.deepcopy(QA_RESPONSES),
    }
    record.update(changes)
    return record


def _label(start: int, end: int, text: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"start": start, "end": end, "label_type": "Evident Conflict"}
    if text is not None:
        out["text"] = text
    return out


def _with_label(label: Any) -> dict[str, Any]:
    return _qa_record(responses=[{"response": "Engineers built it in 1925.", "labels": [label]}])


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (
            _with_label(_label(22, 28)),
            r"line 1 responses\[0\] labels\[0\]: span \[22, 28\) is not inside the response "
            r"\(27 characters\)",
        ),
        (_with_label(_label(-1, 3)), r"span \[-1, 3\) is not inside the response"),
        (_with_label(_label(5, 5)), r"span \[5, 5\) is not inside the response"),
        (_with_label(_label(9, 4)), r"span \[9, 4\) is not inside the response"),
        (_with_label({"end": 4}), r"labels\[0\]: missing key 'start'"),
        (_with_label({"start": "0", "end": 4}), r"key 'start' must be an integer, got str"),
        (_with_label({"start": True, "end": 4}), r"key 'start' must be an integer, got bool"),
        (_with_label("1925"), r"labels\[0\]: the label must be an object, got str"),
        (
            _with_label({"start": 0, "end": 4, "label_type": 3}),
            r"key 'label_type' must be a string, got int",
        ),
        (
            # the stored text has the span's length but other characters: the offsets are wrong
            _with_label(_label(22, 26, "1889")),
            r"labels\[0\]: span \[22, 26\) is '1925' in the response, not its text '1889'",
        ),
        (_qa_record(responses={"response": "x"}), r"line 1: key 'responses' must be a list"),
        (_qa_record(responses=["Engineers."]), r"responses\[0\]: the response must be an object"),
        (
            _qa_record(responses=[{"labels": []}]),
            r"line 1 responses\[0\]: missing key 'response'",
        ),
        (
            _qa_record(responses=[{"response": "  ", "labels": []}]),
            r"responses\[0\]: key 'response' is empty",
        ),
        (
            _qa_record(responses=[{"response": "Engineers."}]),
            r"responses\[0\]: missing key 'labels'",
        ),
        (
            _qa_record(responses=[{"response": "Engineers.", "labels": [], "model": 7}]),
            r"responses\[0\]: key 'model' must be a string, got int",
        ),
        (_qa_record(source_id=True), r"key 'source_id' must be an integer or a non-empty string"),
        (_qa_record(source_id=" "), r"key 'source_id' must be an integer or a non-empty string"),
        (_qa_record(source_id=[1]), r"key 'source_id' must be an integer or a non-empty string"),
        ({"source": QA_SOURCE, "responses": []}, r"line 1: missing key 'source_id'"),
        (_qa_record(source="passages"), r"line 1 source: the QA source must be an object"),
        (
            _qa_record(source={"passages": "p"}),
            r"line 1 source: missing key 'question'",
        ),
        (
            _qa_record(source={"question": "q", "passages": " "}),
            r"line 1 source: key 'passages' is empty",
        ),
    ],
)
def test_malformed_records_name_the_line_and_the_problem(
    tmp_path: Path, record: dict[str, Any], message: str
) -> None:
    path = _write_jsonl(tmp_path / "ragtruth_qa.jsonl", [_qa_record(), record])
    with pytest.raises(DatasetFormatError, match=message.replace("line 1", "line 2")) as info:
        load_ragtruth(path)
    assert info.value.path == path


def test_a_stored_text_of_another_length_is_not_compared(tmp_path: Path) -> None:
    # upstream texts are sometimes trimmed or re-spaced: only equal lengths are checked
    record = _with_label(_label(22, 26, " 1925."))
    (example,) = load_ragtruth(_write_jsonl(tmp_path / "ragtruth_qa.jsonl", [record]))
    assert example.spans == (LabeledSpan(22, 26, ("Evident Conflict",)),)


@pytest.mark.parametrize(
    ("task", "source", "message"),
    [
        ("summary", {"text": "x"}, r"line 1 source: the summary source must be a string"),
        ("summary", "", r"line 1 source: the summary source is empty"),
        ("data2txt", "name: Cafe", r"line 1 source: the data-to-text source must be an object"),
        ("data2txt", {}, r"line 1 source: the data-to-text source is empty"),
    ],
)
def test_malformed_sources_of_each_task(
    tmp_path: Path, task: str, source: Any, message: str
) -> None:
    record = {"source_id": 1, "source": source, "responses": []}
    path = _write_jsonl(tmp_path / f"ragtruth_{task}.jsonl", [record])
    with pytest.raises(DatasetFormatError, match=message):
        load_ragtruth(path)


def test_bad_arguments_and_missing_files(tmp_path: Path) -> None:
    folder = _task_files(tmp_path / "rt")
    with pytest.raises(ValueError, match="task must be one of qa, summary, data2txt, not 'QA'"):
        load_ragtruth(folder, task="QA")
    with pytest.raises(ValueError, match="split must be 'train' or 'test', not 'dev'"):
        load_ragtruth(folder, split="dev")
    with pytest.raises(ValueError, match="limit must be None or an integer >= 0"):
        load_ragtruth(folder, limit=-1)
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        load_ragtruth(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError):
        load_ragtruth(empty)
    other = tmp_path / "other"
    other.mkdir()
    (other / "ragtruth_dialogue.jsonl").write_text("{}\n")
    (other / "ragtruth_qa2.jsonl").write_text("{}\n")
    with pytest.raises(FileNotFoundError, match=r"no ragtruth_<task>\.jsonl file"):
        load_ragtruth(other)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "ragtruth_qa.jsonl").write_text("{not json\n")
    with pytest.raises(DatasetFormatError, match="line 1: invalid JSON"):
        load_ragtruth(broken)


# ------------------------------------------------------------------------- shared slice


def test_the_shared_slice_counts() -> None:
    shared = find_shared_data()
    if shared is None or not (shared / "ragtruth").is_dir():
        pytest.skip("shared/data/ragtruth not available")
    examples = load_dataset("ragtruth")
    assert len(examples) == 216
    counts = Counter((e.meta["task"], e.label) for e in examples)  # type: ignore[union-attr]
    assert {t: counts[t, True] + counts[t, False] for t in ("qa", "summary", "data2txt")} == {
        "qa": 72,
        "summary": 72,
        "data2txt": 72,
    }
    assert {t: counts[t, True] for t in ("qa", "summary", "data2txt")} == {
        "qa": 31,
        "summary": 18,
        "data2txt": 51,
    }
    # 12 sources per task, each response's spans are the stored texts
    assert len({e.group for e in examples}) == 36  # type: ignore[union-attr]
    for e in examples:
        assert e.label == bool(e.spans)  # type: ignore[union-attr]
    assert [e.id for e in load_dataset("ragtruth", task="qa")] == [  # type: ignore[union-attr]
        e.id
        for e in examples
        if e.meta["task"] == "qa"  # type: ignore[union-attr]
    ]
