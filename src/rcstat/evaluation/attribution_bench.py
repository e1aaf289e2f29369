"""Chunk-level attribution accuracy on QuoteSum / VERI-GRAN (paper §5.3, Table 1, Fig. 7).

For every example the annotated answer is teacher-forced once (one forward pass,
:class:`~rcstat.attribution.Attributor`); every annotated span of the answer is a unit with a
gold chunk. From that single pass every method is scored:

* ``top`` / ``bottom``: the ``k`` heads with the highest / lowest RC of raw scores;
* ``top_post_softmax`` / ``bottom_post_softmax``: ranked by RC of post-softmax weights
  (supplement Table 2);
* ``all``: RC summed over every head;
* ``attention``: mean post-softmax attention over all heads and layers (the standard
  attention attribution).

A unit is correct when its argmax chunk is the gold one (docs/definitions.md); a unit whose scores
are all zero counts as wrong. The run folder holds ``predictions.jsonl`` (one line per
example, resumable), ``units.csv``, ``accuracy.csv`` (per method and ``k``), ``table1.csv``
(the rows of the paper's Table 1 rcstat produces) and ``accuracy_vs_k.png`` (Fig. 7).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from rcstat.attribution import Attribution, Attributor
from rcstat.data import AttributionExample
from rcstat.evaluation.resume import done_keys
from rcstat.report.plots import save_figure

__all__ = ["RANKED_METHODS", "AttributionBench", "parse_ks", "score_example"]

RANKED_METHODS = ("top", "bottom", "top_post_softmax", "bottom_post_softmax")
ALL = "all"


def parse_ks(text: str, num_heads: int) -> list[int]:
    """``"1,2,5,all"`` → sorted distinct ``k`` values; ``all`` (and any ``k`` above the
    model's head count) means every head.

    >>> parse_ks("1,5,all,5", 270)
    [1, 5, 270]
    """
    ks: set[int] = set()
    for item in (v.strip() for v in text.split(",") if v.strip()):
        if item == ALL:
            ks.add(num_heads)
            continue
        k = int(item)
        if k < 1:
            raise ValueError(f"k must be positive, got {k}")
        ks.add(min(k, num_heads))
    if not ks:
        raise ValueError("no k given")
    return sorted(ks)


def score_example(result: Attribution, gold: Sequence[int], ks: Sequence[int]) -> list[dict]:
    """Per unit and method, the predicted chunk and whether it is the gold one."""
    rows: list[dict[str, Any]] = []

    def add(method: str, k: int | None, attributed: Sequence[int | None]) -> None:
        for unit, (predicted, want) in enumerate(zip(attributed, gold, strict=True)):
            rows.append(
                {
                    "method": method,
                    "k": k,
                    "unit": unit,
                    "predicted": predicted,
                    "gold": want,
                    "correct": predicted == want,
                }
            )

    for method in RANKED_METHODS:
        for k in ks:
            add(method, k, result.scores_for(method, k)[1])  # type: ignore[arg-type]
    add(ALL, result.num_heads, result.scores_for("all", None)[1])
    add("attention", result.num_heads, result.attention_scores()[1])
    return rows


@dataclass
class AttributionBench:
    """A resumable attribution benchmark run writing into ``out``."""

    out: Path
    dataset: str
    model_name: str
    ks: list[int]
    table_k: int = 20

    @property
    def predictions(self) -> Path:
        return self.out / "predictions.jsonl"

    def done(self) -> set[str]:
        return done_keys(self.predictions, "example")

    def run(self, attributor: Attributor, examples: Sequence[AttributionExample]) -> pd.DataFrame:
        """Attribute every example not yet done; write and return the accuracy table."""
        self.out.mkdir(parents=True, exist_ok=True)
        config = {
            "dataset": self.dataset,
            "model": self.model_name,
            "ks": self.ks,
            "examples": len(examples),
        }
        (self.out / "config.json").write_text(json.dumps(config, indent=1))
        finished = self.done()
        todo = [e for e in examples if e.id not in finished]
        with self.predictions.open("a") as sink:
            for example in tqdm(todo, desc=f"bench attribution {self.dataset}", unit="example"):
                line: dict[str, Any] = {"example": example.id, "chunks": len(example.chunks)}
                try:
                    result = attributor.attribute(
                        list(example.chunks),
                        example.question,
                        example.answer,
                        units=[(u.start, u.end) for u in example.units],
                    )
                    gold = [u.gold_chunk for u in example.units]
                    line["rows"] = score_example(result, gold, self.ks)
                    line["error"] = None
                except ValueError as err:  # recorded (e.g. longer than the window)
                    line["rows"], line["error"] = [], f"{type(err).__name__}: {err}"
                sink.write(json.dumps(line) + "\n")
                sink.flush()
        return self.summarize()

    def summarize(self) -> pd.DataFrame:
        """Write ``units.csv``, ``accuracy.csv``, ``table1.csv`` and the Fig. 7 plot."""
        lines = [json.loads(v) for v in self.predictions.read_text().splitlines()]
        errors = [(v["example"], v["error"]) for v in lines if v["error"]]
        pd.DataFrame(errors, columns=["example", "error"]).to_csv(
            self.out / "errors.csv", index=False
        )
        units = pd.DataFrame(
            [
                {"example": v["example"], "chunks": v["chunks"], **r}
                for v in lines
                for r in v["rows"]
            ]
        )
        if units.empty:
            raise ValueError(f"no example could be scored (see {self.out / 'errors.csv'})")
        units.to_csv(self.out / "units.csv", index=False)
        accuracy = (
            units.groupby(["method", "k"])
            .agg(
                accuracy=("correct", "mean"),
                units=("correct", "size"),
                examples=("example", "nunique"),
            )
            .reset_index()
        )
        chance = float((1.0 / units.drop_duplicates(["example", "unit"])["chunks"]).mean())
        accuracy["chance"] = chance
        accuracy.to_csv(self.out / "accuracy.csv", index=False)
        self._table1(accuracy).to_csv(self.out / "table1.csv", index=False)
        plot_accuracy_vs_k(accuracy, self.out / "accuracy_vs_k.png", title=self.dataset)
        return accuracy

    def _table1(self, accuracy: pd.DataFrame) -> pd.DataFrame:
        k = max(v for v in self.ks if v <= self.table_k) if min(self.ks) <= self.table_k else None
        wanted = [
            ("attention", None, "mean attention (all heads)"),
            (ALL, None, "RC, all heads"),
            ("bottom", k, f"least RC, k={k}"),
            ("top", k, f"most RC, k={k}"),
            ("bottom_post_softmax", k, f"least RC post-softmax, k={k}"),
            ("top_post_softmax", k, f"most RC post-softmax, k={k}"),
        ]
        rows = []
        for method, want_k, label in wanted:
            hit = accuracy[accuracy["method"] == method]
            if want_k is not None:
                hit = hit[hit["k"] == want_k]
            if len(hit):
                rows.append({"row": label, "accuracy": 100 * float(hit["accuracy"].iloc[0])})
        return pd.DataFrame(rows)


def plot_accuracy_vs_k(accuracy: pd.DataFrame, path: Path, *, title: str) -> None:
    """Accuracy vs number of heads for the ranked methods, with the all-heads, attention and
    chance levels as horizontal lines (the paper's Fig. 7)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for method in RANKED_METHODS:
        part = accuracy[accuracy["method"] == method].sort_values("k")
        if len(part):
            style = "-" if method.startswith("top") else "--"
            ax.plot(part["k"], 100 * part["accuracy"], style, marker="o", label=method)
    for method, color in ((ALL, "black"), ("attention", "tab:gray")):
        part = accuracy[accuracy["method"] == method]
        if len(part):
            ax.axhline(100 * float(part["accuracy"].iloc[0]), color=color, ls=":", label=method)
    ax.axhline(100 * float(accuracy["chance"].iloc[0]), color="tab:red", ls="-.", label="chance")
    ax.set_xscale("log")
    ax.set_xlabel("number of heads k")
    ax.set_ylabel("chunk-level accuracy (%)")
    ax.set_title(f"{title}: attribution accuracy vs k")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
