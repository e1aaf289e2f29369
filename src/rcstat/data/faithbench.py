"""FaithBench loader: one :class:`~rcstat.data.examples.GroundingExample` per summary.

Reads the upstream release files ``data_for_release/batch_<k>.json`` (vectara/FaithBench), each
``{"samples": [...]}`` with per sample ``sample_id`` (unique within its batch only), ``source``,
``summary``, ``annotations`` and ``metadata``; a folder is read file by file in natural name
order, so ``limit`` stops early. Each annotation carries
``label`` (a list among ``Unwanted``, ``Unwanted.Intrinsic``, ``Unwanted.Extrinsic``,
``Questionable``, ``Benign``), ``summary_start``/``summary_end`` with the copied
``summary_span``, an optional linked source passage (``source_start``/``source_end``/
``source_span``, all ``null`` when absent) and ``annotator_id``. ``annotations == []`` means
not annotated, i.e. consistent.

Mapping to :class:`GroundingExample`
------------------------------------
* ``id`` is ``"<file stem>:<sample_id>"`` (``"batch_10:3"``); ``context`` is ``source`` and
  ``response`` is ``summary``, both as written (the summaries often start with a space).
* ``label`` follows upstream ``scripts/binarize.py``, strategy "worst": hallucinated when any
  annotation carries an ``Unwanted*`` label; with ``questionable=True`` a ``Questionable``
  label counts too. ``meta["worst_label"]`` keeps the most severe label (``"Unwanted"`` >
  ``"Questionable"`` > ``"Benign"`` > ``"Consistent"`` for no annotation), so both variants
  can be read from one load.
* ``spans`` are the annotations in upstream order; the offsets are checked against the stored
  ``summary_span`` (and ``source_span``) text, a mismatch is an error.
* ``group`` is a hash of ``source``: all summaries of one document share it.

Some exports store ``annotations``, ``metadata`` or a ``label`` list as a Python-literal string
(``"[{'annot_id': 1, ...}]"``); such strings are parsed with :func:`ast.literal_eval` (JSON
as a fallback), never evaluated.

:func:`text_group` is shared with the SummEdits loader (and :func:`data_files`, which lives
in :mod:`rcstat.data.records` and is importable from here).
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from rcstat.data.examples import GroundingExample, LabeledSpan
from rcstat.data.records import Where, keyed_records, load_limited, read_json

__all__ = [
    "BINARY_DETECTORS",
    "PROBABILITY_DETECTORS",
    "load_faithbench",
    "text_group",
]

DATASET = "faithbench"

#: Stored detector predictions that are consistency probabilities in [0, 1].
PROBABILITY_DETECTORS = ("hhemv1", "hhem-2.1", "hhem-2.1-english")
#: Stored detector predictions that are binary, 1 = consistent.
BINARY_DETECTORS = ("trueteacher", "true_nli", "gpt-3.5-turbo", "gpt-4-turbo", "gpt_4o")

# Upstream binarize.py severities ("worst" keeps the maximum over all annotations' labels).
_SEVERITY = {
    "Benign": 1,
    "Questionable": 2,
    "Unwanted": 3,
    "Unwanted.Intrinsic": 3,
    "Unwanted.Extrinsic": 3,
}
_WORST = {0: "Consistent", 1: "Benign", 2: "Questionable", 3: "Unwanted"}


def load_faithbench(
    path: str | Path, *, questionable: bool = False, limit: int | None = None
) -> list[GroundingExample]:
    """Load FaithBench samples from upstream ``batch_<k>.json`` files.

    Parameters
    ----------
    path : str or Path
        One ``batch_<k>.json`` file, or a folder of them (:mod:`rcstat.data`).
    questionable : bool, default False
        Also count ``Questionable`` annotations as hallucinated (the upstream variant with
        hallucinated classes ``Unwanted*`` + ``Questionable``).
    limit : int, optional
        At most this many examples (:mod:`rcstat.data`).

    Returns
    -------
    list of GroundingExample
        In file order. ``meta`` holds ``batch`` (the file stem), ``sample_id``,
        ``raw_sample_id`` (when present), ``summarizer``, ``worst_label`` and ``detectors``:
        the stored predictions by upstream name, :data:`PROBABILITY_DETECTORS` as floats
        (probability of consistent) and :data:`BINARY_DETECTORS` as ints (1 = consistent); a
        missing or ``null`` prediction is absent from the dict.

    Raises
    ------
    DatasetFormatError
        On invalid JSON, a missing or mistyped key, an empty source or summary, a duplicate
        ``sample_id`` in a batch, an unknown or empty label list, offsets outside the text or
        not matching the stored span text, or a prediction of the wrong type or range.
    FileNotFoundError
        If `path` does not exist or a folder holds no ``*.json`` file.
    """
    if not isinstance(questionable, bool):
        raise TypeError(f"questionable must be a bool, got {type(questionable).__name__}")
    read = partial(_iter_batch, questionable=questionable)
    return load_limited(path, DATASET, ".json", read, limit, every_file=True)


def text_group(text: str) -> str:
    """A short stable hash of `text`: the cross-validation group of the examples it seeds."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _literal(where: Where, value: Any, what: str) -> Any:
    """`value`, or the Python literal (else JSON) it spells when it is a string."""
    if not isinstance(value, str):
        return value
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise where.error(
            f"{what} is a string that is neither a Python literal nor JSON: {value[:60]!r}"
        ) from None


def _labels(where: Where, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) and value.strip() in _SEVERITY:
        value = [value.strip()]
    labels = where.strings(_literal(where, value, "key 'label'"), "key 'label'")
    if not labels:
        raise where.error("empty 'label' list")
    for label in labels:
        if label not in _SEVERITY:
            raise where.error(f"unknown label {label!r}; expected one of {', '.join(_SEVERITY)}")
    return tuple(labels)


def _offsets(where: Where, annotation: dict[str, Any], side: str, text: str) -> tuple[int, int]:
    """Checked ``[<side>_start, <side>_end)`` of ``<side>_span`` in `text`."""
    keys = (f"{side}_start", f"{side}_end", f"{side}_span")
    start = where.get(annotation, keys[0], int)
    end = where.get(annotation, keys[1], int)
    stored = where.get(annotation, keys[2], str)
    if not 0 <= start < end <= len(text):
        raise where.error(
            f"{side} offsets [{start}, {end}) are not a non-empty range of the {side} "
            f"({len(text)} chars)"
        )
    if text[start:end] != stored:
        raise where.error(
            f"{keys[2]} {stored[:60]!r} does not match {side}[{start}:{end}] "
            f"{text[start:end][:60]!r}"
        )
    return start, end


def _span(where: Where, annotation: Any, source: str, summary: str) -> LabeledSpan:
    annotation = where.check(_literal(where, annotation, "the annotation"), dict, "the annotation")
    if "label" not in annotation:
        raise where.error("missing key 'label'")
    labels = _labels(where, annotation["label"])
    start, end = _offsets(where, annotation, "summary", summary)
    annotator = where.get_optional(annotation, "annotator_id", str, "")
    if all(annotation.get(f"source_{key}") is None for key in ("start", "end", "span")):
        return LabeledSpan(start, end, labels, annotator)  # no linked source passage
    source_start, source_end = _offsets(where, annotation, "source", source)
    return LabeledSpan(start, end, labels, annotator, source_start, source_end)


def _detectors(where: Where, metadata: dict[str, Any]) -> dict[str, float | int]:
    """The stored predictions, typed: probabilities as floats, binary verdicts as 0/1 ints."""
    out: dict[str, float | int] = {}
    for name in PROBABILITY_DETECTORS:
        value = metadata.get(name)
        if value is None:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not (math.isfinite(value) and 0.0 <= value <= 1.0)
        ):
            raise where.error(f"metadata {name!r} must be a probability in [0, 1], got {value!r}")
        out[name] = float(value)
    for name in BINARY_DETECTORS:
        value = metadata.get(name)
        if value is None:
            continue
        if not isinstance(value, int | float) or value not in (0, 1):
            raise where.error(f"metadata {name!r} must be 0 or 1 (1 = consistent), got {value!r}")
        out[name] = int(value)
    return out


def _iter_batch(path: Path, questionable: bool) -> Iterator[GroundingExample]:
    root = Where(path, "document")
    document = root.check(read_json(path), dict, "the document")
    samples = keyed_records(
        path,
        root.get(document, "samples", list),
        label="samples[{}]",
        key="sample_id",
        read_key=lambda where, sample: where.get(sample, "sample_id", int),
        what="the sample",
    )
    for sample_id, where, sample in samples:
        source = where.text(sample, "source", non_empty=True)
        summary = where.text(sample, "summary", non_empty=True)
        raw = _literal(where, sample.get("annotations", []), "key 'annotations'")
        annotations = where.check(raw, list, "key 'annotations'")
        spans = tuple(
            _span(where.child(f".annotations[{j}]"), annotation, source, summary)
            for j, annotation in enumerate(annotations)
        )
        if "metadata" not in sample:
            raise where.error("missing key 'metadata'")
        metadata = where.check(
            _literal(where, sample["metadata"], "key 'metadata'"), dict, "key 'metadata'"
        )
        md_where = where.child(".metadata")
        worst = _WORST[max((_SEVERITY[lab] for s in spans for lab in s.labels), default=0)]
        meta: dict[str, Any] = {
            "batch": path.stem,
            "sample_id": sample_id,
            "summarizer": md_where.text(metadata, "summarizer", non_empty=True),
            "worst_label": worst,
            "detectors": _detectors(md_where, metadata),
        }
        raw_id = metadata.get("raw_sample_id")
        if raw_id is not None:
            meta["raw_sample_id"] = md_where.check(raw_id, int, "key 'raw_sample_id'")
        label = worst == "Unwanted" or (questionable and worst == "Questionable")
        yield GroundingExample(
            f"{path.stem}:{sample_id}",
            source,
            summary,
            label,
            text_group(source),
            DATASET,
            spans,
            meta,
        )
