"""``rcstat bench kv``: KV-cache compression benchmark over a dataset (paper §5.2).

A run is a self-describing folder: ``config.json``; ``predictions.jsonl`` with one line per
(example, method, setting), keyed by a work id so that an interrupted run resumes where it
stopped (a setting that fails on an example is recorded with its error, listed in
``errors.csv`` and left out of the summaries); ``results.csv`` (per example);
``summary.csv``; the paper-shaped ``<dataset>_<model>_baseline_df.csv`` (mean/std VER per
method and ratio) and
``<dataset>_<model>_proposed_df.csv`` (mean/std VER and realized ratio per threshold ``c``
and window); and ``ver_vs_ratio.png`` / ``rougeL_vs_ratio.png`` (the paper's Fig. 5/6).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from rcstat.data import QAExample
from rcstat.defaults import DEFAULT_WINDOW
from rcstat.evaluation.kv import CacheFactory, FullReference, evaluate_example, full_reference
from rcstat.evaluation.resume import done_keys
from rcstat.press.registry import make_press as build_press
from rcstat.report.plots import save_figure


@dataclass(frozen=True)
class Setting:
    """One compression configuration: a method and its knob."""

    method: str  # "rcstat" or a baseline name
    ratio: float | None = None  # target ratio (baselines, RCStat target-ratio mode)
    threshold: float | None = None  # RCStat threshold mode (c)
    window: int = DEFAULT_WINDOW

    @property
    def key(self) -> str:
        return f"{self.method}|r={self.ratio}|c={self.threshold}|w={self.window}"


def make_press(setting: Setting) -> Any:
    """The press of a setting (see :func:`rcstat.press.registry.make_press`)."""
    return build_press(
        setting.method, ratio=setting.ratio, threshold=setting.threshold, window=setting.window
    )


def cache_for(setting: Setting) -> Any:
    """A fresh cache for a setting: RCStat evicts for real into a :class:`RaggedCache`;
    kvpress's presses truncate (or, for AdaKV, mask) a :class:`DynamicCache`."""
    from transformers import DynamicCache

    from rcstat.press.cache import RaggedCache

    return RaggedCache() if setting.method == "rcstat" else DynamicCache()


def settings_grid(
    presses: Sequence[str],
    ratios: Sequence[float],
    thresholds: Sequence[float],
    windows: Sequence[int],
) -> list[Setting]:
    """Every baseline at every ratio; RCStat at every ratio (target mode) and every threshold
    and window (threshold mode)."""
    grid: list[Setting] = []
    for method in presses:
        if method == "rcstat":
            grid += [Setting("rcstat", ratio=r, window=w) for w in windows for r in ratios]
            grid += [Setting("rcstat", threshold=c, window=w) for w in windows for c in thresholds]
        else:
            grid += [Setting(method, ratio=r) for r in ratios]
    return grid


@dataclass
class KVBench:
    """A resumable benchmark run writing into ``out``."""

    out: Path
    dataset: str
    model_name: str
    settings: list[Setting]
    max_new_tokens: int = 32
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def predictions(self) -> Path:
        return self.out / "predictions.jsonl"

    def done(self) -> set[str]:
        return done_keys(self.predictions, "work_id")

    def run(
        self,
        model: Any,
        tokenizer: Any,
        examples: Sequence[QAExample],
        cache_factory: CacheFactory | None = None,
    ) -> pd.DataFrame:
        """Evaluate every (example, setting) not yet in ``predictions.jsonl``; summarise.

        ``cache_factory`` overrides :func:`cache_for` (e.g. ``DynamicCache`` to run RCStat in
        kvpress's masking mode, the memory-keeping reference)."""
        self.out.mkdir(parents=True, exist_ok=True)
        config = {
            "dataset": self.dataset,
            "model": self.model_name,
            "settings": [asdict(s) for s in self.settings],
            "max_new_tokens": self.max_new_tokens,
            **self.config,
        }
        (self.out / "config.json").write_text(json.dumps(config, indent=1))
        finished = self.done()
        work = [
            (e, s) for e in examples for s in self.settings if f"{e.id}|{s.key}" not in finished
        ]
        reference: tuple[str, FullReference] | None = None  # one example's work is contiguous
        with self.predictions.open("a") as sink:
            for example, setting in tqdm(work, desc=f"bench kv {self.dataset}", unit="run"):
                row: dict[str, Any] = {
                    "work_id": f"{example.id}|{setting.key}",
                    "example": example.id,
                    **asdict(setting),
                }
                try:
                    if reference is None or reference[0] != example.id:
                        reference = (
                            example.id,
                            full_reference(
                                model,
                                tokenizer,
                                example.context,
                                example.question,
                                max_new_tokens=self.max_new_tokens,
                            ),
                        )
                    result = evaluate_example(
                        model,
                        tokenizer,
                        example.context,
                        example.question,
                        example.answers,
                        make_press(setting),
                        max_new_tokens=self.max_new_tokens,
                        cache_factory=cache_factory or partial(cache_for, setting),
                        full=reference[1],
                    )
                    row.update(result.to_dict(), error=None)
                except (ValueError, RuntimeError) as err:  # recorded; the run goes on
                    row["error"] = f"{type(err).__name__}: {err}"
                sink.write(json.dumps(row) + "\n")
                sink.flush()
        return self.summarize()

    def summarize(self) -> pd.DataFrame:
        """Write the per-example table, the summaries and the plots; return the summary."""
        frame = pd.read_json(self.predictions, lines=True)
        frame.to_csv(self.out / "results.csv", index=False)
        if "error" in frame:
            failed = frame[frame["error"].notna()]
            failed[["work_id", "error"]].to_csv(self.out / "errors.csv", index=False)
            frame = frame[frame["error"].isna()]
        keys = ["method", "ratio", "threshold", "window"]
        summary = (
            frame.groupby(keys, dropna=False)
            .agg(
                ver_mean=("ver", "mean"),
                ver_std=("ver", "std"),
                ratio_mean=("realized_ratio", "mean"),
                ratio_std=("realized_ratio", "std"),
                rouge1=("rouge1", "mean"),
                rougeL=("rougeL", "mean"),
                rougeL_vs_full=("rougeL_vs_full", "mean"),
                examples=("example", "nunique"),
            )
            .reset_index()
        )
        summary.to_csv(self.out / "summary.csv", index=False)
        stem = f"{self.dataset}_{Path(self.model_name).name or 'model'}"
        baselines = summary[summary["method"] != "rcstat"]
        baselines[["method", "ratio", "ver_mean", "ver_std"]].to_csv(
            self.out / f"{stem}_baseline_df.csv", index=False
        )
        proposed = summary[(summary["method"] == "rcstat") & summary["threshold"].notna()]
        proposed[["threshold", "window", "ver_mean", "ver_std", "ratio_mean", "ratio_std"]].to_csv(
            self.out / f"{stem}_proposed_df.csv", index=False
        )
        self._plot(summary)
        return summary

    def _plot(self, summary: pd.DataFrame) -> None:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        for metric, label in (("ver_mean", "VER (lower is better)"), ("rougeL", "ROUGE-L F1")):
            fig, ax = plt.subplots(figsize=(6, 4))
            groups = summary.groupby(
                [summary["method"], summary["threshold"].notna(), summary["window"]]
            )
            for (method, mode, window), part in groups:
                part = part.sort_values("ratio_mean")
                name = (
                    f"{method} ({'threshold c' if mode else 'target ratio'}, w = {window})"
                    if method == "rcstat"
                    else method
                )
                ax.plot(part["ratio_mean"], part[metric], marker="o", label=name)
            if metric == "ver_mean" and (summary[metric] > 0).all():
                ax.set_yscale("log")  # VER spans orders of magnitude across ratios
            ax.set_xlabel("realized compression ratio")
            ax.set_ylabel(label)
            ax.legend(fontsize=8)
            save_figure(fig, self.out / f"{metric.split('_')[0]}_vs_ratio.png")
