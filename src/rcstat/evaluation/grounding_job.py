"""The grounding benchmark's :class:`~rcstat.runs.job.Job`: one row per (context, response),
the items measured several a pass (:meth:`~rcstat.grounding.Measurer.measure_many`) and scored
by every method of :mod:`rcstat.evaluation.grounding_bench`; FaithBench items also keep their
per-token file ``tokens/<hash>.npz``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rcstat.evaluation.grounding_bench import (
    KIND,
    RUN_FILES,
    SPAN_DATASETS,
    GroundingBench,
    method_scores,
    token_file_name,
)
from rcstat.evaluation.grounding_items import GroundingItem
from rcstat.grounding.features import HEAD_FEATURES
from rcstat.grounding.grounder import Grounder
from rcstat.grounding.measure import Measurement, Prepared
from rcstat.runs.job import Item, Job
from rcstat.runs.parts import RunFiles
from rcstat.runs.rows import EXAMPLE_HASH

__all__ = ["ITEMS_PER_BATCH", "GroundingJob"]

#: Items given to each batch of passes where a pass takes several (their rows are written
#: after it).
ITEMS_PER_BATCH = 64


def _token_labels(measured: Measurement, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """``[G]`` True for response tokens overlapping an annotated span (character offsets)."""
    offsets = measured.token_spans()  # [G, 2]
    labels = np.zeros(len(offsets), dtype=bool)
    for start, end in spans:
        labels |= (offsets[:, 1] > start) & (offsets[:, 0] < end)
    return labels


def _save_tokens(
    folder: Path, grounder: Grounder, item: GroundingItem, measured: Measurement
) -> None:
    """Write the per-token scores, labels and per-head statistics of ``item`` (FaithBench)."""
    path = folder / "tokens" / token_file_name(item.id)
    path.parent.mkdir(parents=True, exist_ok=True)
    scores = grounder.score(measured).token_scores
    flat = measured.features.reshape(len(HEAD_FEATURES), -1, len(measured.nll))
    np.savez(
        path,
        score=scores,
        label=_token_labels(measured, item.spans),
        nll=measured.nll,
        rc=flat[0].T.astype(np.float16),  # [G, L·H]
        lookback=flat[1].T.astype(np.float16),  # [G, L·H]
    )


@dataclass
class GroundingJob(Job):
    """The grounding benchmark as a :class:`~rcstat.runs.job.Job`: one item per (context,
    response); FaithBench items also keep their per-token file ``tokens/<hash>.npz``."""

    kind: ClassVar[str] = KIND
    files: ClassVar[RunFiles] = RUN_FILES

    bench: GroundingBench
    grounder: Grounder
    measured: Sequence[GroundingItem]
    zero_shot: Grounder
    batch_tokens: int | None = None

    def source(self) -> tuple[Any, Any, str | None]:
        measurer = self.grounder.measurer
        return measurer.model, measurer.tokenizer, self.bench.model_name

    def manifest_options(self) -> dict[str, Any]:
        return self.bench.manifest_options(self.grounder)

    def items(self) -> list[Item]:
        return [Item(it.id, it.hash(), i, it) for i, it in enumerate(self.measured)]

    def progress_label(self) -> tuple[str, str]:
        return f"bench grounding {self.bench.dataset}", "item"

    def batch_size(self) -> int:
        """:data:`ITEMS_PER_BATCH` items at a time where passes take several."""
        budget = self.grounder.measurer.batch_budget(self.batch_tokens)
        return 1 if budget == 1 else ITEMS_PER_BATCH

    def run_one(self, item: Item, folder: Path | None) -> dict[str, list[dict[str, Any]]]:
        return self.run_batch([item], folder)[0]

    def run_batch(
        self, items: Sequence[Item], folder: Path | None
    ) -> list[dict[str, list[dict[str, Any]]]]:
        """Measure the items, several in each pass (:meth:`Measurer.measure_many`), then
        score each with every method."""
        measurer = self.grounder.measurer
        lines: list[dict[str, Any]] = []
        ready: list[tuple[dict[str, Any], GroundingItem, Prepared]] = []
        for item in items:
            entry: GroundingItem = item.data
            line: dict[str, Any] = {
                "item": entry.id,
                EXAMPLE_HASH: item.hash,
                "label": entry.label,
                "group": entry.group,
                "by": entry.by,
                "pair": entry.pair,
                "detectors": entry.detectors,
            }
            lines.append(line)
            try:
                ready.append(
                    (line, entry, measurer.prepare(entry.context, entry.response, entry.question))
                )
            except ValueError as err:  # recorded (e.g. longer than the window)
                line["error"] = f"{type(err).__name__}: {err}"
        measured = measurer.measure_many([p for _, _, p in ready], batch_tokens=self.batch_tokens)
        for (line, entry, _), one in zip(ready, measured, strict=True):
            try:
                line.update(self._scored(entry, one, folder))
            except ValueError as err:
                line["error"] = f"{type(err).__name__}: {err}"
        return [{RUN_FILES.commit.name: [line]} for line in lines]

    def _scored(
        self, entry: GroundingItem, measured: Measurement, folder: Path | None
    ) -> dict[str, Any]:
        """One item's scores by every method, verdicts and spans from its measurement."""
        grounder = self.grounder
        line: dict[str, Any] = {
            "scores": method_scores(grounder, measured, entry.response, entry.context)
        }
        result = grounder.score(measured)
        line["threshold"] = result.threshold
        line["verdict"] = result.verdict
        line["spans"] = [[s.start, s.end] for s in result.spans]
        zero_shot = self.zero_shot.score(measured)
        line["zero_shot_threshold"] = zero_shot.threshold
        line["zero_shot_spans"] = [[s.start, s.end] for s in zero_shot.spans]
        line["labelled_spans"] = [list(span) for span in entry.spans]
        line["head_features"] = measured.head_vector().round(5).tolist()
        line["tokens"] = len(measured.nll)
        line["context_tokens"] = int(np.diff(measured.example.token_span("context"))[0])
        if self.bench.dataset in SPAN_DATASETS and folder is not None:
            _save_tokens(folder, grounder, entry, measured)
        line["error"] = None
        return line
