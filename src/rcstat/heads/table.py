"""The rows of a ``rcstat heads`` run: its two row files, their columns, and reading them.

``heads.csv`` holds one row per ``(example, layer, head)`` (:data:`COLUMNS`); ``examples.csv``
one line per attempted example (:data:`EXAMPLE_COLUMNS`), which commits the example's rows
(:mod:`rcstat.runs.job`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rcstat.runs.parts import RunFiles
from rcstat.runs.rows import RowFile

__all__ = [
    "COLUMNS",
    "DTYPES",
    "EXAMPLES_FILE",
    "EXAMPLE_COLUMNS",
    "HEADS_FILE",
    "KIND",
    "RUN_FILES",
    "empty_heads",
    "read_heads",
]

#: Columns of the long table returned by :func:`~rcstat.heads.collection.collect` and stored
#: in ``heads.csv``.
COLUMNS = ("example", "layer", "head", "expected", "upper", "prompt_len", "gen_len")
#: Columns of ``examples.csv`` (one line per attempted example). ``finished``: whether the
#: answer the model generated ended by itself (``False``: cut at ``max_new_tokens``), empty when
#: the answer was given; ``hash``: :func:`rcstat.runs.content_hash` of the example's texts.
EXAMPLE_COLUMNS = ("id", "prompt_len", "gen_len", "finished", "seconds", "error", "hash")
DTYPES = {
    "example": str,
    "layer": np.int16,
    "head": np.int16,
    "expected": np.float32,
    "upper": np.float32,
    "prompt_len": np.int32,
    "gen_len": np.int32,
}
#: The row files.
HEADS_FILE = "heads.csv"
EXAMPLES_FILE = "examples.csv"
#: The kind of run recorded in the manifest.
KIND = "heads"
#: The row files of a run, as its parts and their merge see them (:mod:`rcstat.runs.parts`):
#: ``examples.csv`` commits an example (its content hash in ``hash``).
RUN_FILES = RunFiles(
    KIND,
    (
        RowFile(HEADS_FILE, "example", COLUMNS),
        RowFile(EXAMPLES_FILE, "id", EXAMPLE_COLUMNS, commit=True, hash_field="hash"),
    ),
)


def read_heads(path: str | Path) -> pd.DataFrame:
    """Read a ``heads.csv`` written by :func:`~rcstat.heads.collection.collect` (ids stay
    strings, compact dtypes).

    Parameters
    ----------
    path : str or Path
        The ``heads.csv`` file, or the run folder holding it.

    Raises
    ------
    FileNotFoundError
        If there is no such file.
    ValueError
        If the file lacks a column of :data:`COLUMNS`.
    """
    path = Path(path)
    if path.is_dir():
        path = path / HEADS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {HEADS_FILE} at {path}")
    frame = pd.read_csv(path, dtype={"example": str}, keep_default_na=False)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; not a heads.csv of rcstat heads")
    return frame.astype(DTYPES)[list(COLUMNS)]


def empty_heads() -> pd.DataFrame:
    """An empty table of :data:`COLUMNS` with their dtypes."""
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in DTYPES.items()})[list(COLUMNS)]
