"""Dataset loaders: official upstream formats read from local files into typed examples.

Question answering (KV-cache compression, head analysis) → :class:`QAExample`:
:func:`load_squad_v2`, :func:`load_qmsum`, :func:`load_2wiki`. Attribution →
:class:`AttributionExample` with :class:`AttributedSpan` units: :func:`load_quotesum`,
:func:`load_verigran`. Grounding → :class:`GroundingExample` with :class:`LabeledSpan` spans:
:func:`load_faithbench`, :func:`load_summedits`, :func:`load_ragtruth` (a file, or a folder of
files), and users' own
labelled pairs :func:`load_labelled_pairs`; unlabelled pairs for ``rcstat ground --pairs``
→ :class:`ResponsePair` (:func:`load_pairs`).
:func:`load_dataset` dispatches by name; :func:`default_path` finds the developer slice under
``shared/data``. Malformed records raise :class:`DatasetFormatError`.
This package imports the standard library only.

Every loader is ``load_<name>(path, *, <its options>, limit=None)``: ``path`` is the upstream
file, or a folder (a shared slice) holding exactly one such file — FaithBench and SummEdits
read every ``*.json`` file of a folder, in natural name order (``batch_2`` before
``batch_10``); ``limit`` (None or an integer >= 0) returns at most that many examples, in file
order, and the files are read only as far as it needs (JSON-lines files line by line).
"""

from rcstat.data.examples import (
    AttributedSpan,
    AttributionExample,
    GroundingExample,
    LabeledSpan,
    QAExample,
)
from rcstat.data.faithbench import load_faithbench
from rcstat.data.markup import MarkedSpan, MarkupError, parse_span_markup
from rcstat.data.pairs import ResponsePair, load_labelled_pairs, load_pairs
from rcstat.data.qmsum import fit_turns, load_qmsum
from rcstat.data.quotesum import load_quotesum
from rcstat.data.ragtruth import load_ragtruth
from rcstat.data.records import DatasetFormatError, find_shared_data
from rcstat.data.registry import DATASETS, default_path, load_dataset
from rcstat.data.squad import load_squad_v2
from rcstat.data.summedits import load_summedits
from rcstat.data.verigran import load_verigran
from rcstat.data.wiki2 import load_2wiki

__all__ = [
    "DATASETS",
    "AttributedSpan",
    "AttributionExample",
    "DatasetFormatError",
    "GroundingExample",
    "LabeledSpan",
    "MarkedSpan",
    "MarkupError",
    "QAExample",
    "ResponsePair",
    "default_path",
    "find_shared_data",
    "fit_turns",
    "load_2wiki",
    "load_dataset",
    "load_faithbench",
    "load_labelled_pairs",
    "load_pairs",
    "load_qmsum",
    "load_quotesum",
    "load_ragtruth",
    "load_squad_v2",
    "load_summedits",
    "load_verigran",
    "parse_span_markup",
]
