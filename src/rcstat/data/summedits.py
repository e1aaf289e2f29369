"""SummEdits loader: one :class:`~rcstat.data.examples.GroundingExample` per row.

Reads the upstream files ``data/summedits/summedits_<domain>.json`` (salesforce/factualNLG), each
a JSON list of rows ``{"id", "doc", "summary", "label", "original_summary", "edit_types",
"split"}``; a folder is read file by file in natural name order, so ``limit`` stops early.
``label`` is 1 when the (edited) summary is consistent with ``doc`` and 0 when it is not; some
exports write it as the string ``"1"``/``"0"``, which is accepted.

Mapping to :class:`GroundingExample`
------------------------------------
* ``id`` is ``"<domain>:<id>"``, the domain being the file name without ``summedits_`` and
  ``.json`` (``"news"``); ``context`` is ``doc`` and ``response`` is ``summary``.
* ``label`` is ``True`` (inconsistent) when ``label == 0``.
* ``group`` is a hash of ``original_summary``: all edits of one seed summary share it and must
  stay in one cross-validation fold.
* ``spans`` is ``()``: SummEdits labels whole summaries.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rcstat.data.examples import GroundingExample
from rcstat.data.faithbench import text_group
from rcstat.data.records import Where, keyed_records, load_limited, read_json

__all__ = ["load_summedits"]

DATASET = "summedits"
_PREFIX = "summedits_"


def load_summedits(path: str | Path, *, limit: int | None = None) -> list[GroundingExample]:
    """Load SummEdits rows from upstream ``summedits_<domain>.json`` files.

    Parameters
    ----------
    path : str or Path
        One ``summedits_<domain>.json`` file, or a folder of them (:mod:`rcstat.data`).
    limit : int, optional
        At most this many examples (:mod:`rcstat.data`).

    Returns
    -------
    list of GroundingExample
        In file order. ``meta`` holds ``domain``, ``split`` (``""`` when absent),
        ``edit_types`` (a tuple of str) and ``original_summary`` (the seed text).

    Raises
    ------
    DatasetFormatError
        On invalid JSON, a document that is not a list, a missing or mistyped key, an empty
        document or summary, a label other than 0/1 (or ``"0"``/``"1"``), or a duplicate
        ``id`` in a file.
    FileNotFoundError
        If `path` does not exist or a folder holds no ``*.json`` file.
    """
    return load_limited(path, DATASET, ".json", _iter_domain, limit, every_file=True)


def _consistent(where: Where, record: dict[str, Any]) -> bool:
    """Upstream ``label`` (1 = consistent) as a bool; the strings ``"1"``/``"0"`` too."""
    if "label" not in record:
        raise where.error("missing key 'label'")
    value = record["label"]
    if isinstance(value, str) and value.strip() in ("0", "1"):
        return value.strip() == "1"
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return value == 1
    raise where.error(f"key 'label' must be 0 or 1 (1 = consistent), got {value!r}")


def _iter_domain(path: Path) -> Iterator[GroundingExample]:
    domain = path.stem.removeprefix(_PREFIX)
    document = Where(path, "document").check(read_json(path), list, "the document")
    records = keyed_records(
        path,
        document,
        label="record {}",
        key="id",
        read_key=lambda where, record: where.text(record, "id", non_empty=True),
    )
    for row_id, where, record in records:
        doc = where.text(record, "doc", non_empty=True)
        summary = where.text(record, "summary", non_empty=True)
        seed = where.text(record, "original_summary", non_empty=True)
        consistent = _consistent(where, record)
        edit_types = where.strings(
            where.get_optional(record, "edit_types", list, []), "key 'edit_types'"
        )
        meta: dict[str, Any] = {
            "domain": domain,
            "split": where.get_optional(record, "split", str, ""),
            "edit_types": tuple(edit_types),
            "original_summary": seed,
        }
        yield GroundingExample(
            f"{domain}:{row_id}", doc, summary, not consistent, text_group(seed), DATASET, (), meta
        )
