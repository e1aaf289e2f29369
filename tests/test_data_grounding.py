"""Tests of the grounding loaders: FaithBench and SummEdits, and their registry entries.

Two tiers, like ``tests/test_data.py``. Hermetic tests write tiny files in the upstream formats
into ``tmp_path`` (including FaithBench's Python-literal-string variant of ``annotations`` and
``metadata``) plus a malformed variant for every error the loaders raise. Slice tests read the
developer slices in ``shared/data`` and skip when they are absent; their counts come from the
slices' READMEs, the label balances were measured on the slices, and the labels are recomputed
from the raw JSON by an independent oracle.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rcstat.data import (
    DATASETS,
    DatasetFormatError,
    GroundingExample,
    LabeledSpan,
    default_path,
    find_shared_data,
    load_dataset,
    load_faithbench,
    load_summedits,
)
from rcstat.data.registry import canonical_name, dataset_task

SHARED = find_shared_data()


def _slice(folder: str) -> Path:
    if SHARED is None or not (SHARED / folder).is_dir():
        pytest.skip(f"shared/data/{folder} not available")
    return SHARED / folder


def _write_json(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document, indent=1), encoding="utf-8")
    return path


# ------------------------------------------------------------------ FaithBench fixtures

SOURCE_A = "The council approved the budget on Monday. It rises by 4 percent."
SOURCE_B = "Rain is expected in the north tomorrow."
SUMMARY_A = " The council approved the budget on Friday. The budget rises by 4 percent."


def _annotation(
    summary: str,
    span: str,
    labels: list[str],
    annotator: str = "ann-1",
    source: str | None = None,
    source_span: str | None = None,
) -> dict[str, Any]:
    start = summary.index(span)
    record: dict[str, Any] = {
        "annot_id": 1,
        "annotator_id": annotator,
        "annotator_name": "Ann",
        "label": labels,
        "note": "",
        "summary_span": span,
        "summary_start": start,
        "summary_end": start + len(span),
        "source_span": None,
        "source_start": None,
        "source_end": None,
    }
    if source is not None and source_span is not None:
        s = source.index(source_span)
        record.update(source_span=source_span, source_start=s, source_end=s + len(source_span))
    return record


def _metadata(**changes: Any) -> dict[str, Any]:
    metadata = {
        "summarizer": "org/model-a",
        "hhemv1": 0.25,
        "hhem-2.1": 0.5,
        "hhem-2.1-english": 1,  # an int probability: normalised to 1.0
        "trueteacher": 0,
        "true_nli": None,  # upstream's one exception: absent from `detectors`
        "gpt-3.5-turbo": 1,
        "gpt-4-turbo": 1.0,  # a float verdict: normalised to 1
        "gpt_4o": 0,
        "raw_sample_id": 7,
    }
    metadata.update(changes)
    return {k: v for k, v in metadata.items() if v is not ...}


def _sample(sample_id: int, source: str, summary: str, annotations: list[Any]) -> dict[str, Any]:
    return {
        "sample_id": sample_id,
        "source": source,
        "summary": summary,
        "annotations": annotations,
        "metadata": _metadata(),
    }


def _batch_a() -> dict[str, Any]:
    """batch_2: an Unwanted sample (two annotators), a Questionable-only one, a Benign one."""
    unwanted = [
        _annotation(
            SUMMARY_A,
            "on Friday",
            ["Unwanted", "Unwanted.Intrinsic"],
            "ann-1",
            SOURCE_A,
            "on Monday",
        ),
        _annotation(SUMMARY_A, " The council approved the budget on Friday.", ["Unwanted"], "a-2"),
    ]
    questionable = "The budget grows by 4 percent, a record."
    benign = "Approved: a budget up 4 percent."
    return {
        "samples": [
            _sample(0, SOURCE_A, SUMMARY_A, unwanted),
            _sample(
                1, SOURCE_A, questionable, [_annotation(questionable, "a record", ["Questionable"])]
            ),
            _sample(2, SOURCE_A, benign, [_annotation(benign, "Approved:", ["Benign"])]),
        ]
    }


def _batch_b() -> dict[str, Any]:
    """batch_10: a source shared with batch_2 (same group) and an unannotated sample."""
    return {
        "samples": [
            _sample(0, SOURCE_B, "Rain is expected tomorrow in the north.", []),
            _sample(5, SOURCE_A, "The budget was approved.", []),
        ]
    }


def _faithbench_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "faithbench"
    folder.mkdir()
    _write_json(folder / "batch_10.json", _batch_b())
    _write_json(folder / "batch_2.json", _batch_a())
    (folder / "README.md").write_text("not data", encoding="utf-8")
    return folder


def _as_literal_strings(batch: dict[str, Any]) -> dict[str, Any]:
    """The Python-literal-string variant: ``annotations`` and ``metadata`` as ``repr`` text."""
    out = copy.deepcopy(batch)
    for sample in out["samples"]:
        sample["annotations"] = repr(sample["annotations"])
        sample["metadata"] = repr(sample["metadata"])
    return out


# --------------------------------------------------------------------- FaithBench hermetic


def test_faithbench_folder_mapping(tmp_path):
    examples = load_faithbench(_faithbench_folder(tmp_path))
    # natural name order: batch_2 before batch_10; ids carry the batch
    assert [e.id for e in examples] == [
        "batch_2:0",
        "batch_2:1",
        "batch_2:2",
        "batch_10:0",
        "batch_10:5",
    ]
    assert all(type(e) is GroundingExample and e.dataset == "faithbench" for e in examples)
    assert [e.label for e in examples] == [True, False, False, False, False]
    assert [e.meta["worst_label"] for e in examples] == [
        "Unwanted",
        "Questionable",
        "Benign",
        "Consistent",
        "Consistent",
    ]
    # every summary of SOURCE_A shares one group, across batches; SOURCE_B has its own
    groups = [e.group for e in examples]
    assert groups[0] == groups[1] == groups[2] == groups[4] != groups[3]
    first = examples[0]
    assert first.context == SOURCE_A and first.response == SUMMARY_A
    assert first.span_texts == ("on Friday", " The council approved the budget on Friday.")
    assert first.spans[0] == LabeledSpan(
        SUMMARY_A.index("on Friday"),
        SUMMARY_A.index("on Friday") + len("on Friday"),
        ("Unwanted", "Unwanted.Intrinsic"),
        "ann-1",
        SOURCE_A.index("on Monday"),
        SOURCE_A.index("on Monday") + len("on Monday"),
    )
    assert first.spans[1].source_start is None and first.spans[1].annotator == "a-2"
    assert first.spans[0].hallucinated() and not examples[1].spans[0].hallucinated()
    assert examples[1].spans[0].hallucinated(questionable=True)
    assert examples[3].spans == ()
    assert first.meta == {
        "batch": "batch_2",
        "sample_id": 0,
        "summarizer": "org/model-a",
        "worst_label": "Unwanted",
        "raw_sample_id": 7,
        "detectors": {
            "hhemv1": 0.25,
            "hhem-2.1": 0.5,
            "hhem-2.1-english": 1.0,
            "trueteacher": 0,
            "gpt-3.5-turbo": 1,
            "gpt-4-turbo": 1,
            "gpt_4o": 0,
        },
    }
    detectors = first.meta["detectors"]
    assert type(detectors["hhem-2.1-english"]) is float and type(detectors["gpt-4-turbo"]) is int


def test_faithbench_questionable_option(tmp_path):
    folder = _faithbench_folder(tmp_path)
    plain = load_faithbench(folder)
    counted = load_faithbench(folder, questionable=True)
    assert [e.label for e in counted] == [True, True, False, False, False]
    assert [e.id for e in counted] == [e.id for e in plain]
    assert load_dataset("faithbench", folder, questionable=True) == counted
    with pytest.raises(TypeError, match="questionable must be a bool"):
        load_faithbench(folder, questionable=1)  # type: ignore[arg-type]


def test_faithbench_python_literal_strings(tmp_path):
    json_file = _write_json(tmp_path / "batch_2.json", _batch_a())
    literal = copy.deepcopy(_batch_a())
    literal["samples"][1]["annotations"][0]["label"] = "['Questionable']"
    literal["samples"][2]["annotations"][0]["label"] = "Benign"  # a bare label string
    literal = _as_literal_strings(literal)
    assert isinstance(literal["samples"][0]["metadata"], str)
    (tmp_path / "lit").mkdir()
    lit_file = _write_json(tmp_path / "lit" / "batch_2.json", literal)
    assert load_faithbench(lit_file) == load_faithbench(json_file)


def test_faithbench_single_file_and_limit(tmp_path):
    folder = _faithbench_folder(tmp_path)
    full = load_faithbench(folder)
    assert load_faithbench(folder / "batch_2.json") == full[:3]
    assert load_faithbench(str(folder), limit=4) == full[:4]
    assert load_faithbench(folder, limit=0) == []
    assert load_faithbench(folder, limit=100) == full
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="limit must be"):
            load_faithbench(folder, limit=bad)  # type: ignore[arg-type]
    # files are read lazily: a broken file after the limit is never opened
    (folder / "batch_99.json").write_text("{not json", encoding="utf-8")
    assert load_faithbench(folder, limit=5) == full
    with pytest.raises(DatasetFormatError, match=r"batch_99\.json: line 1 column 2: invalid JSON"):
        load_faithbench(folder)


def test_faithbench_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        load_faithbench(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README.md").write_text("x", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match=r"no '\*\.json' file in"):
        load_faithbench(empty)


def _sample0(batch: dict[str, Any]) -> dict[str, Any]:
    sample: dict[str, Any] = batch["samples"][0]
    return sample


def _ann0(batch: dict[str, Any]) -> dict[str, Any]:
    annotation: dict[str, Any] = _sample0(batch)["annotations"][0]
    return annotation


FAITHBENCH_ERRORS = [
    ("not an object", lambda b: b.update(samples="x"), "document: key 'samples' must be a list"),
    (
        "no source",
        lambda b: _sample0(b).pop("source"),
        r"samples\[0\] \(sample_id 0\): missing key 'source'",
    ),
    (
        "empty summary",
        lambda b: _sample0(b).update(summary="  "),
        r"samples\[0\] \(sample_id 0\): key 'summary' is empty",
    ),
    (
        "sample_id as text",
        lambda b: _sample0(b).update(sample_id="0"),
        "key 'sample_id' must be an integer, got str",
    ),
    (
        "duplicate sample_id",
        lambda b: b["samples"][2].update(sample_id=0),
        r"samples\[2\]: duplicate sample_id 0 \(also samples\[0\]\)",
    ),
    (
        "span text mismatch",
        lambda b: _ann0(b).update(summary_span="on Monday"),
        r"samples\[0\] \(sample_id 0\)\.annotations\[0\]: summary_span 'on Monday' does not "
        r"match summary\[\d+:\d+\] 'on Friday'",
    ),
    (
        "offsets out of range",
        lambda b: _ann0(b).update(summary_end=10_000),
        r"annotations\[0\]: summary offsets \[\d+, 10000\) are not a non-empty range",
    ),
    (
        "empty range",
        lambda b: _ann0(b).update(summary_end=_ann0(b)["summary_start"]),
        "are not a non-empty range of the summary",
    ),
    (
        "source span mismatch",
        lambda b: _ann0(b).update(source_start=0),
        r"annotations\[0\]: source_span 'on Monday' does not match source\[0:",
    ),
    (
        "half a source span",
        lambda b: _ann0(b).update(source_span=None),
        r"annotations\[0\]: key 'source_span' must be a string, got NoneType",
    ),
    ("unknown label", lambda b: _ann0(b).update(label=["Wrong"]), "unknown label 'Wrong'"),
    ("empty label", lambda b: _ann0(b).update(label=[]), r"annotations\[0\]: empty 'label' list"),
    ("no label", lambda b: _ann0(b).pop("label"), r"annotations\[0\]: missing key 'label'"),
    (
        "annotation not an object",
        lambda b: _sample0(b)["annotations"].append(3),
        r"annotations\[2\]: the annotation must be an object, got int",
    ),
    (
        "no metadata",
        lambda b: _sample0(b).pop("metadata"),
        r"samples\[0\] \(sample_id 0\): missing key 'metadata'",
    ),
    (
        "no summarizer",
        lambda b: _sample0(b)["metadata"].pop("summarizer"),
        r"samples\[0\] \(sample_id 0\)\.metadata: missing key 'summarizer'",
    ),
    (
        "probability out of range",
        lambda b: _sample0(b)["metadata"].update({"hhem-2.1": 1.5}),
        r"\.metadata: metadata 'hhem-2.1' must be a probability in \[0, 1\], got 1.5",
    ),
    (
        "probability as text",
        lambda b: _sample0(b)["metadata"].update(hhemv1="0.3"),
        "metadata 'hhemv1' must be a probability",
    ),
    (
        "verdict not binary",
        lambda b: _sample0(b)["metadata"].update(gpt_4o=2),
        r"metadata 'gpt_4o' must be 0 or 1 \(1 = consistent\), got 2",
    ),
    (
        "garbage literal string",
        lambda b: _sample0(b).update(annotations="[{'label': "),
        "key 'annotations' is a string that is neither a Python literal nor JSON",
    ),
    (
        "code is never run",
        lambda b: _sample0(b).update(metadata="__import__('os').getcwd()"),
        "key 'metadata' is a string that is neither a Python literal nor JSON",
    ),
    (
        "literal of the wrong type",
        lambda b: _sample0(b).update(metadata="[1, 2]"),
        "key 'metadata' must be an object, got list",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [pytest.param(m, msg, id=name) for name, m, msg in FAITHBENCH_ERRORS],
)
def test_faithbench_errors_are_located(tmp_path, mutate, message):
    batch = _batch_a()
    mutate(batch)
    path = _write_json(tmp_path / "batch_2.json", batch)
    with pytest.raises(DatasetFormatError, match=message) as info:
        load_faithbench(path)
    assert info.value.path == path


def test_faithbench_document_must_be_an_object(tmp_path):
    path = _write_json(tmp_path / "batch_1.json", [1])
    with pytest.raises(DatasetFormatError, match="document: the document must be an object"):
        load_faithbench(path)


# -------------------------------------------------------------------- SummEdits fixtures


def _row(row_id: str, label: Any, summary: str, seed: str, doc: str, **extra: Any) -> dict:
    row = {
        "id": row_id,
        "doc": doc,
        "summary": summary,
        "label": label,
        "original_summary": seed,
        "edit_types": [],
        "split": "evaluation",
    }
    row.update(extra)
    return row


DOC_1 = "Alice met Bob in Paris on Tuesday to sign the contract."
SEED_1 = "Alice and Bob signed the contract in Paris."
DOC_2 = "The quarterly revenue grew by 12 percent to 3 billion dollars."
SEED_2 = "Revenue grew 12 percent to 3 billion dollars."


def _news() -> list[dict[str, Any]]:
    return [
        _row("a_og", 1, SEED_1, SEED_1, DOC_1),
        _row(
            "a_1",
            0,
            "Alice and Bob signed the contract in Rome.",
            SEED_1,
            DOC_1,
            edit_types=["entity_modification"],
        ),
        _row("a_2", "1", "Alice and Bob signed the deal in Paris.", SEED_1, DOC_1),
    ]


def _ectsum() -> list[dict[str, Any]]:
    return [
        _row(
            "b_1",
            "0",
            "Revenue fell 12 percent.",
            SEED_2,
            DOC_2,
            edit_types=["antonym_swap", "entity_modification"],
        ),
        _row("b_og", 1, SEED_2, SEED_2, DOC_2),
    ]


def _summedits_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "summedits"
    folder.mkdir()
    _write_json(folder / "summedits_news.json", _news())
    _write_json(folder / "summedits_ectsum.json", _ectsum())
    (folder / "README.md").write_text("not data", encoding="utf-8")
    return folder


# --------------------------------------------------------------------- SummEdits hermetic


def test_summedits_folder_mapping(tmp_path):
    examples = load_summedits(_summedits_folder(tmp_path))
    assert [e.id for e in examples] == [
        "ectsum:b_1",
        "ectsum:b_og",
        "news:a_og",
        "news:a_1",
        "news:a_2",
    ]
    assert all(type(e) is GroundingExample and e.dataset == "summedits" for e in examples)
    # label 0 (int or "0") = inconsistent = True
    assert [e.label for e in examples] == [True, False, False, True, False]
    assert [e.meta["domain"] for e in examples] == ["ectsum"] * 2 + ["news"] * 3
    assert examples[0].meta == {
        "domain": "ectsum",
        "split": "evaluation",
        "edit_types": ("antonym_swap", "entity_modification"),
        "original_summary": SEED_2,
    }
    assert examples[0].context == DOC_2 and examples[0].response == "Revenue fell 12 percent."
    assert examples[0].spans == ()
    groups = [e.group for e in examples]
    assert groups[0] == groups[1] != groups[2] == groups[3] == groups[4]


def test_summedits_single_file_limit_and_dispatch(tmp_path):
    folder = _summedits_folder(tmp_path)
    full = load_summedits(folder)
    assert load_summedits(folder / "summedits_news.json") == full[2:]
    assert load_summedits(folder, limit=3) == full[:3]
    assert load_summedits(folder, limit=0) == []
    assert load_dataset("SummEdits", folder) == full
    assert load_dataset("summedits", folder, limit=1) == full[:1]
    # a file not named summedits_<domain>.json: the domain is its stem
    other = _write_json(tmp_path / "mine.json", _ectsum())
    assert {e.meta["domain"] for e in load_summedits(other)} == {"mine"}
    with pytest.raises(ValueError, match="limit must be"):
        load_summedits(folder, limit=-1)
    with pytest.raises(TypeError):
        load_dataset("summedits", folder, questionable=True)


SUMMEDITS_ERRORS = [
    (
        "label 2",
        lambda rows: rows[1].update(label=2),
        r"record 1 \(id 'a_1'\): key 'label' must be 0 or 1",
    ),
    ("label bool", lambda rows: rows[1].update(label=False), "key 'label' must be 0 or 1"),
    ("label float", lambda rows: rows[1].update(label=0.0), "key 'label' must be 0 or 1"),
    ("label word", lambda rows: rows[1].update(label="yes"), "got 'yes'"),
    ("no label", lambda rows: rows[1].pop("label"), r"record 1 \(id 'a_1'\): missing key 'label'"),
    ("no doc", lambda rows: rows[2].pop("doc"), r"record 2 \(id 'a_2'\): missing key 'doc'"),
    ("empty summary", lambda rows: rows[0].update(summary=""), "key 'summary' is empty"),
    ("no seed", lambda rows: rows[0].pop("original_summary"), "missing key 'original_summary'"),
    ("id not text", lambda rows: rows[0].update(id=3), r"record 0: key 'id' must be a string"),
    (
        "duplicate id",
        lambda rows: rows[2].update(id="a_og"),
        r"record 2: duplicate id 'a_og' \(also record 0\)",
    ),
    (
        "edit types",
        lambda rows: rows[1].update(edit_types=[1]),
        r"key 'edit_types'\[0\] must be a string",
    ),
    ("row not an object", lambda rows: rows.append([]), "record 3: the record must be an object"),
]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [pytest.param(m, msg, id=name) for name, m, msg in SUMMEDITS_ERRORS],
)
def test_summedits_errors_are_located(tmp_path, mutate, message):
    rows = _news()
    mutate(rows)
    path = _write_json(tmp_path / "summedits_news.json", rows)
    with pytest.raises(DatasetFormatError, match=message) as info:
        load_summedits(path)
    assert info.value.path == path


def test_summedits_document_must_be_a_list(tmp_path):
    path = _write_json(tmp_path / "summedits_news.json", {"rows": []})
    with pytest.raises(DatasetFormatError, match="document: the document must be a list"):
        load_summedits(path)


# ---------------------------------------------------------------- registry, example types


def test_registry_entries(tmp_path, monkeypatch):
    for name in ("faithbench", "summedits"):
        assert dataset_task(name) == "grounding" and DATASETS[name].folder
    assert canonical_name("FaithBench") == "faithbench"
    assert not any(
        DATASETS[n].folder for n in ("squad_v2", "qmsum", "2wiki", "quotesum", "verigran")
    )
    # default_path returns the slice folder for the grounding datasets
    monkeypatch.setattr("rcstat.data.registry.find_shared_data", lambda: tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no data file in .*faithbench.*--data"):
        default_path("faithbench")
    folder = _faithbench_folder(tmp_path)
    assert default_path("faithbench") == folder
    assert load_dataset("faithbench") == load_faithbench(folder)
    (tmp_path / "summedits").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no data file in .*summedits.*--data"):
        default_path("summedits")


def test_example_types_validate_spans():
    with pytest.raises(ValueError, match="start < end"):
        LabeledSpan(2, 2, ("Unwanted",))
    with pytest.raises(ValueError, match="both be set or both be None"):
        LabeledSpan(0, 1, ("Unwanted",), source_start=0)
    with pytest.raises(ValueError, match="source_start < source_end"):
        LabeledSpan(0, 1, ("Unwanted",), source_start=3, source_end=1)
    with pytest.raises(ValueError, match="exceeds the response"):
        GroundingExample("x", "ctx", "ab", True, "g", "d", (LabeledSpan(0, 3, ()),))
    with pytest.raises(ValueError, match="exceeds the context"):
        GroundingExample("x", "ctx", "ab", True, "g", "d", (LabeledSpan(0, 2, (), "", 0, 4),))
    assert LabeledSpan(0, 1, ("Benign",)).hallucinated(questionable=True) is False
    assert LabeledSpan(0, 1, ("Unwanted.Extrinsic",)).hallucinated() is True


# ------------------------------------------------------------------------- the slices


def _faithbench_oracle(folder: Path) -> dict[str, tuple[bool, bool]]:
    """``id -> (any Unwanted*, any Unwanted* or Questionable)``, straight from the raw JSON."""
    out = {}
    for file in folder.glob("*.json"):
        for sample in json.loads(file.read_text("utf-8"))["samples"]:
            labels = {label for a in sample["annotations"] for label in a["label"]}
            unwanted = any(label.startswith("Unwanted") for label in labels)
            out[f"{file.stem}:{sample['sample_id']}"] = (
                unwanted,
                unwanted or "Questionable" in labels,
            )
    return out


def test_faithbench_slice():
    folder = _slice("faithbench")
    examples = load_dataset("faithbench")
    assert default_path("faithbench") == folder
    assert examples == load_faithbench(folder)
    # README: all 10 summaries of 15 sources, 150 samples
    assert len(examples) == 150 and len({e.id for e in examples}) == 150
    by_group = Counter(e.group for e in examples)
    assert len(by_group) == 15 and set(by_group.values()) == {10}
    for group in by_group:
        members = [e for e in examples if e.group == group]
        assert len({e.context for e in members}) == 1
        assert len({e.meta["summarizer"] for e in members}) == 10
    # labels against the raw-JSON oracle; measured: 100 hallucinated, 110 counting Questionable
    oracle = _faithbench_oracle(folder)
    counted = load_faithbench(folder, questionable=True)
    assert [(e.label, q.label) for e, q in zip(examples, counted, strict=True)] == [
        oracle[e.id] for e in examples
    ]
    assert sum(e.label for e in examples) == 100 and sum(e.label for e in counted) == 110
    assert Counter(e.meta["worst_label"] for e in examples) == {
        "Unwanted": 100,
        "Consistent": 32,
        "Questionable": 10,
        "Benign": 8,
    }
    # spans: offsets valid (checked against summary_span at load), 571 annotations
    spans = [(e, s) for e in examples for s in e.spans]
    assert len(spans) == 571
    assert all(0 <= s.start < s.end <= len(e.response) for e, s in spans)
    assert sum(s.source_start is not None for _, s in spans) == 288
    assert all(e.spans == () for e in examples if e.meta["worst_label"] == "Consistent")
    # all eight stored predictions present and typed on the slice
    for e in examples:
        detectors = e.meta["detectors"]
        assert len(detectors) == 8
        assert all(type(detectors[k]) is float for k in ("hhemv1", "hhem-2.1", "hhem-2.1-english"))
        assert all(
            detectors[k] in (0, 1) and type(detectors[k]) is int for k in ("gpt_4o", "true_nli")
        )


# measured on the slice: domain -> (inconsistent, consistent)
SUMMEDITS_BALANCE = {
    "ectsum": (71, 46),
    "news": (82, 51),
    "podcast": (69, 55),
    "qmsumm": (58, 55),
    "sales_call": (80, 51),
    "sales_email": (97, 35),
    "samsum": (73, 48),
    "scitldr": (87, 28),
}


def test_summedits_slice():
    folder = _slice("summedits")
    examples = load_dataset("summedits")
    assert default_path("summedits") == folder
    assert examples == load_summedits(folder)
    assert len(examples) == 986 and len({e.id for e in examples}) == 986  # README
    balance = Counter((e.meta["domain"], e.label) for e in examples)
    assert {
        d: (balance[d, True], balance[d, False]) for d in SUMMEDITS_BALANCE
    } == SUMMEDITS_BALANCE
    assert sum(balance.values()) == 986
    assert {e.meta["split"] for e in examples} == {"evaluation"}
    # 4 seed summaries per domain; a seed's edits share the document and the domain
    groups: dict[str, list[GroundingExample]] = {}
    for e in examples:
        groups.setdefault(e.group, []).append(e)
    assert len(groups) == 32
    for members in groups.values():
        assert (
            len({(e.meta["domain"], e.context, e.meta["original_summary"]) for e in members}) == 1
        )
    # the seed itself is one consistent row per group (upstream id suffix "_og")
    seeds = [e for e in examples if e.response == e.meta["original_summary"]]
    assert len(seeds) == 32 and all(e.id.endswith("_og") and not e.label for e in seeds)
