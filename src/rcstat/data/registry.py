"""Dispatch by dataset name and locate the shared developer slices.

:func:`load_dataset` maps a name to its loader; :func:`default_path` finds the slice of a
dataset under the nearest ``shared/data`` folder, for demos and tests. Real evaluations pass
the path of the full upstream file (or, for the grounding datasets, which ship as several
files, of a folder of them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rcstat.data.examples import AttributionExample, GroundingExample, QAExample
from rcstat.data.faithbench import load_faithbench
from rcstat.data.pairs import LABELLED_FORMAT, load_labelled_pairs
from rcstat.data.qmsum import load_qmsum
from rcstat.data.quotesum import load_quotesum
from rcstat.data.ragtruth import load_ragtruth
from rcstat.data.records import DatasetFormatError, find_shared_data
from rcstat.data.squad import load_squad_v2
from rcstat.data.summedits import load_summedits
from rcstat.data.verigran import load_verigran
from rcstat.data.wiki2 import load_2wiki

__all__ = [
    "ALIASES",
    "DATASETS",
    "canonical_name",
    "dataset_names",
    "dataset_task",
    "default_path",
    "fold_name",
    "load_dataset",
]


@dataclass(frozen=True)
class DatasetInfo:
    """How to load one dataset.

    Parameters
    ----------
    loader : callable
        ``loader(path, *, limit=None, **options) -> list[example]``.
    slice_folder : str
        Folder of its slice under ``shared/data``.
    suffix : str
        File ending of its data files.
    task : str
        ``"qa"`` (:class:`QAExample`), ``"attribution"`` (:class:`AttributionExample`) or
        ``"grounding"`` (:class:`GroundingExample`).
    expects : str
        The upstream file format ``--data`` must name, for error messages.
    folder : bool, default False
        The slice is a folder of several data files that the loader reads together, and
        :func:`default_path` returns the folder; otherwise it holds exactly one data file.
    """

    loader: Callable[..., list[Any]]
    slice_folder: str
    suffix: str
    task: str
    expects: str
    folder: bool = False


#: The datasets :func:`load_dataset` knows, by canonical name: the one table of dataset names.
DATASETS: dict[str, DatasetInfo] = {
    "squad_v2": DatasetInfo(
        load_squad_v2, "squad_v2", ".json", "qa", "SQuAD 2.0 JSON (dev-v2.0.json)"
    ),
    "qmsum": DatasetInfo(load_qmsum, "qmsum", ".jsonl", "qa", "QMSum JSON lines (val.jsonl)"),
    "2wiki": DatasetInfo(
        load_2wiki, "2wikimultihopqa", ".json", "qa", "2WikiMultihopQA JSON (dev.json)"
    ),
    "quotesum": DatasetInfo(
        load_quotesum, "quotesum", ".jsonl", "attribution", "QuoteSum JSON lines (dev.jsonl)"
    ),
    "verigran": DatasetInfo(
        load_verigran,
        "veri_gran",
        ".jsonl",
        "attribution",
        "VeriGran JSON lines (verifiability_granular_dev.jsonl)",
    ),
    "faithbench": DatasetInfo(
        load_faithbench,
        "faithbench",
        ".json",
        "grounding",
        "FaithBench JSON (batch_<k>.json, or a folder of them)",
        folder=True,
    ),
    "summedits": DatasetInfo(
        load_summedits,
        "summedits",
        ".json",
        "grounding",
        "SummEdits JSON (summedits_<domain>.json, or a folder of them)",
        folder=True,
    ),
    "ragtruth": DatasetInfo(
        load_ragtruth,
        "ragtruth",
        ".jsonl",
        "grounding",
        "RAGTruth JSON lines (ragtruth_<task>.jsonl, a folder of them, or the RAGTruth release "
        "folder with response.jsonl and source_info.jsonl)",
        folder=True,
    ),
    "jsonl": DatasetInfo(
        load_labelled_pairs,
        "jsonl",
        ".jsonl",
        "grounding",
        f"your labelled pairs, JSON lines of {LABELLED_FORMAT}",
    ),
}

#: Other names of the datasets (folded by :func:`fold_name`).
ALIASES = {"squad": "squad_v2", "2wikimultihopqa": "2wiki", "veri_gran": "verigran"}


def fold_name(name: str) -> str:
    """The one folding rule of dataset names: case, surrounding blanks and ``-``/``_`` ignored.

    >>> fold_name(" SQuAD-v2 ")
    'squad_v2'
    """
    return name.strip().lower().replace("-", "_")


def canonical_name(name: str) -> str:
    """The canonical name of dataset ``name`` (aliases, case and ``-``/``_`` folded by
    :func:`fold_name`); ``ValueError`` listing the known names otherwise."""
    key = fold_name(name)
    key = ALIASES.get(key, key)
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    return key


def dataset_names(tasks: Sequence[str]) -> tuple[str, ...]:
    """The canonical names of the datasets for ``tasks`` (``"qa"``, ``"attribution"``,
    ``"grounding"``), in :data:`DATASETS`' order.

    >>> dataset_names(["qa"])
    ('squad_v2', 'qmsum', '2wiki')
    """
    return tuple(name for name, info in DATASETS.items() if info.task in tasks)


def dataset_task(name: str) -> str:
    """``"qa"``, ``"attribution"`` or ``"grounding"``: what the examples of dataset ``name``
    are for."""
    return DATASETS[canonical_name(name)].task


def default_path(name: str) -> Path:
    """The data file (or folder) of the shared developer slice of dataset `name`.

    Parameters
    ----------
    name : str
        A dataset name (see :data:`DATASETS`).

    Returns
    -------
    Path
        The one data file in ``<ancestor>/shared/data/<slice folder>``, the first
        ``shared/data`` found walking up from the package and from the working directory; for
        a dataset read from several files (:attr:`DatasetInfo.folder`: FaithBench, SummEdits),
        the slice folder itself once it holds at least one data file.

    Raises
    ------
    FileNotFoundError
        If there is no ``shared/data``, no slice folder, or the folder holds no data file (e.g.
        2WikiMultihopQA, whose data is not redistributed); the message says to pass ``--data``.
    """
    key = canonical_name(name)
    info = DATASETS[key]
    shared = find_shared_data()
    hint = f"pass the path of a {key} file in its upstream format, {info.expects} (--data PATH)"
    if shared is None:
        raise FileNotFoundError(f"no shared/data folder found for {key!r}; {hint}")
    folder = shared / info.slice_folder
    files = sorted(folder.glob(f"*{info.suffix}")) if folder.is_dir() else []
    if info.folder and files:
        return folder
    if len(files) != 1 or info.folder:
        found = "no data file" if not files else f"{len(files)} data files"
        raise FileNotFoundError(f"{found} in {folder} for {key!r} (see its README); {hint}")
    return files[0]


def load_dataset(
    name: str, path: str | Path | None = None, *, limit: int | None = None, **options: Any
) -> list[QAExample] | list[AttributionExample] | list[GroundingExample]:
    """Load a dataset by name from a file in its upstream format.

    Parameters
    ----------
    name : str
        ``"squad_v2"``, ``"qmsum"``, ``"2wiki"``, ``"quotesum"``, ``"verigran"``,
        ``"faithbench"``, ``"summedits"``, ``"ragtruth"`` or ``"jsonl"`` (users' labelled
        pairs, no default slice: :mod:`rcstat.data.pairs`) (also ``"squad"``, ``"2wikimultihopqa"``,
        ``"veri_gran"``; case and ``-``/``_`` ignored).
    path : str or Path, optional
        The upstream file, or a folder holding exactly one data file (FaithBench and
        SummEdits: a folder whose data files are all read). Default: :func:`default_path`
        (the shared slice).
    limit : int, optional
        Return at most this many examples.
    **options
        Passed to the dataset's loader (``include_unanswerable``, ``context``,
        ``allow_missing_answer``, ``answer``, ``questionable``, RAGTruth's ``task`` and
        ``split``).

    Returns
    -------
    list of QAExample, AttributionExample or GroundingExample
        See :func:`load_squad_v2`, :func:`load_qmsum`, :func:`load_2wiki`,
        :func:`load_quotesum`, :func:`load_verigran`, :func:`load_faithbench`,
        :func:`load_summedits`, :func:`~rcstat.data.ragtruth.load_ragtruth`,
        :func:`~rcstat.data.pairs.load_labelled_pairs`.

    Raises
    ------
    ValueError
        For an unknown name (:class:`DatasetFormatError`, a ``ValueError``, for a malformed
        record; its message names the expected format, :attr:`DatasetInfo.expects`).
    FileNotFoundError
        If `path` (or the default slice) does not exist (the message names the expected
        format).
    TypeError
        For an option the loader does not take.
    """
    key = canonical_name(name)
    if path is None:
        path = default_path(key)
    info = DATASETS[key]
    result: list[QAExample] | list[AttributionExample] | list[GroundingExample]
    try:
        result = info.loader(path, limit=limit, **options)
    except FileNotFoundError as err:
        raise FileNotFoundError(f"{err} (expected: {info.expects})") from err
    except DatasetFormatError as err:
        raise DatasetFormatError(
            err.path, err.location, f"{err.problem} (expected: {info.expects})"
        ) from err
    return result
