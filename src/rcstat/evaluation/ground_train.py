"""``rcstat ground-train`` as a library call: :class:`GroundTrainConfig` → :func:`run` →
:class:`GroundTrainResult`.

Trains a grounding detector (:mod:`rcstat.grounding.detector`) for any analysis model on
labelled responses: the grounding datasets (RAGTruth, FaithBench, SummEdits, users' labelled
pairs in JSON lines — spans optional) and, optionally, the copied and changed sentences that
:mod:`rcstat.grounding.swaps` builds from the documents of any datasets (no label needed).
Every response is measured once (:func:`~rcstat.grounding.training.measure_samples`; the
features are cached in ``<out>/samples/`` so a rerun with other fit options measures nothing
again), the detector is fitted on all of them (:func:`~rcstat.grounding.training.fit_detector`)
and, unless ``cross_validate`` is off, an honest report comes from refitting it inside outer
grouped folds (:func:`~rcstat.grounding.training.cross_validate_detector`).

The folder ``out`` receives ``detector.json`` (for ``rcstat ground --detector``),
``report.json`` (the out-of-fold metrics per dataset and per breakdown key: response AUROC,
example-level precision / recall / F1 at the verdict, the share of faithful responses flagged,
character-level span precision / recall / F1), ``predictions.csv`` (one row per response, out
of fold) and ``errors.csv`` (responses that could not be measured).

>>> GroundTrainConfig.from_dict(
...     {"datasets": ["ragtruth"], "swaps_from": ["squad_v2"], "weights": {"swaps": 0.1}}
... ).weights
(('swaps', 0.1),)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rcstat.checks import check_count, check_number, optional_count
from rcstat.runs.devices import Devices

if TYPE_CHECKING:  # the training imports torch: not before the options are checked
    from rcstat.grounding.training import DetectorSample, FitOptions, LabelledResponse

__all__ = [
    "GroundTrainConfig",
    "GroundTrainResult",
    "labelled_responses",
    "run",
    "swap_responses",
    "training_report",
]

COMMAND = "ground-train"
#: The datasets whose examples are labelled responses.
LABELLED = ("ragtruth", "faithbench", "summedits", "jsonl")
#: The pseudo-dataset of copied and changed sentences (:mod:`rcstat.grounding.swaps`).
SWAPS = "swaps"
#: The instruction of the summarization datasets (as the benchmark uses it).
_SUMMARY = "Summarize the passage above."
_SAMPLE_VERSION = "3"  # 3: every head's lookback ratio and log copy weight

Loader = Callable[[str | None, Devices], tuple[Any, Any]]


@dataclass
class GroundTrainConfig:
    """Everything ``rcstat ground-train`` runs with.

    Attributes
    ----------
    model, devices
        The analysis model and where it runs.
    datasets
        ``(name, path)`` of the labelled datasets (:data:`LABELLED`; path None: the developer
        slice, required for ``jsonl``).
    swaps_from
        ``(name, path)`` of datasets whose documents give copied/changed sentence pairs
        (dataset ``swaps``); none by default.
    n
        At most this many responses of each dataset.
    weights
        Relative weight of a dataset's total (``(("swaps", 0.1),)``), on top of balancing.
    out
        The output folder.
    folds, seed, max_false_alarms, max_copy_false_alarms, head_penalty
        As in :class:`~rcstat.grounding.training.FitOptions`.
    cross_validate
        Also refit inside outer folds for the out-of-sample report.
    """

    model: str | None = None
    devices: Devices = field(default_factory=Devices)
    datasets: tuple[tuple[str, str | None], ...] = (("ragtruth", None),)
    swaps_from: tuple[tuple[str, str | None], ...] = ()
    n: int | None = None
    weights: tuple[tuple[str, float], ...] = ()
    out: Path = Path("runs/ground_train")
    folds: int = 5
    seed: int = 0
    max_false_alarms: float = 0.2
    max_copy_false_alarms: float = 0.05
    head_penalty: float = 1.0
    cross_validate: bool = True

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GroundTrainConfig:
        """A checked config from plain values (``datasets`` and ``swaps_from`` as names or
        ``NAME:PATH`` strings, ``weights`` as a mapping)."""
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown option(s) {', '.join(sorted(unknown))}")
        values = dict(data)
        for key in ("datasets", "swaps_from"):
            if key in values:
                values[key] = tuple(_spec(item, key) for item in values[key])
        if "weights" in values:
            values["weights"] = tuple(
                (str(k), float(v)) for k, v in dict(values["weights"]).items()
            )
        if "out" in values:
            values["out"] = Path(values["out"])
        if "devices" in values and isinstance(values["devices"], Mapping):
            values["devices"] = Devices.from_dict(values["devices"])
        config = cls(**values)
        config.check()
        return config

    def check(self) -> None:
        """Every option in its range (``ValueError`` naming the option)."""
        if not self.datasets:
            raise ValueError("--dataset: name at least one labelled dataset")
        for name, path in self.datasets:
            if name not in LABELLED:
                raise ValueError(f"--dataset {name}: choose from {', '.join(LABELLED)}")
            if name == "jsonl" and path is None:
                raise ValueError("--dataset jsonl needs a file: jsonl:PATH (your labelled pairs)")
            if path is not None and not Path(path).exists():
                raise ValueError(f"--dataset {name}:{path}: no such file or folder")
        for name, path in self.swaps_from:
            if path is not None and not Path(path).exists():
                raise ValueError(f"--swaps-from {name}:{path}: no such file or folder")
        self.n = optional_count("--n", self.n)
        names = {name for name, _ in self.datasets} | ({SWAPS} if self.swaps_from else set())
        for name, value in self.weights:
            if name not in names:
                raise ValueError(f"--weight {name}: not a dataset of this run ({sorted(names)})")
            check_number(f"--weight {name}", value, low=0.0, high=1e6, low_open=True)
        check_count("--folds", self.folds, low=2, high=20)
        check_count("--seed", self.seed, low=0, high=2**32 - 1)
        for option, value in (
            ("--max-false-alarms", self.max_false_alarms),
            ("--max-copy-false-alarms", self.max_copy_false_alarms),
        ):
            check_number(option, value, low=0.0, high=1.0, low_open=True, high_open=True)
        check_number("--head-penalty", self.head_penalty, low=1.0, high=1e6)

    def fit_options(self) -> FitOptions:
        """The options of the fit."""
        from rcstat.grounding.training import FitOptions

        return FitOptions(
            folds=self.folds,
            seed=self.seed,
            max_false_alarms=self.max_false_alarms,
            max_copy_false_alarms=self.max_copy_false_alarms,
            dataset_weights=self.weights,
            head_penalty=self.head_penalty,
        )


@dataclass
class GroundTrainResult:
    """The trained detector, the report and the folder they were written to."""

    detector: Any
    report: dict[str, Any]
    out: Path

    def lines(self) -> list[str]:
        """A few lines for a person: where the files are and how the detector did."""
        lines = [f"detector written to {self.out}/detector.json"]
        for key, row in self.report.get("out_of_fold", {}).items():
            lines.append(
                f"{key}: AUROC {row['auroc']:.3f}, example F1 {row['example_f1']:.3f}, "
                f"faithful flagged {row['false_alarms']:.1%}, span F1 {row['span_f1']:.3f} "
                f"({row['responses']} responses)"
            )
        return lines


def labelled_responses(name: str, path: str | None, limit: int | None) -> list[LabelledResponse]:
    """The labelled responses of a grounding dataset (RAGTruth's task instruction as the
    question, the summarization instruction for FaithBench and SummEdits; the unwanted spans
    of FaithBench; a pair's own question)."""
    from rcstat.data import GroundingExample, load_dataset
    from rcstat.grounding.training import LabelledResponse

    out = []
    examples: list[GroundingExample] = load_dataset(name, path, limit=limit)  # type: ignore[assignment]
    for e in examples:
        if name == "faithbench":
            spans = [s for s in e.spans if any(lb.startswith("Unwanted") for lb in s.labels)]
        else:
            spans = list(e.spans)
        # a hallucinated response without spans has unknown spans (SummEdits, a pair without)
        known = name != "summedits" and (bool(spans) or not e.label)
        question = e.meta.get("question")
        out.append(
            LabelledResponse(
                id=f"{name}:{e.id}",
                context=e.context,
                question=str(question) if question else (_SUMMARY if name != "jsonl" else None),
                response=e.response,
                label=bool(e.label),
                spans=tuple((s.start, s.end) for s in spans),
                spans_known=known,
                group=str(e.group),
                dataset=name,
                by=str(e.meta.get("task", e.meta.get("summarizer", e.meta.get("domain", "")))),
            )
        )
    return out


def swap_responses(
    sources: Sequence[tuple[str, str | None]], limit: int | None = None
) -> list[LabelledResponse]:
    """The copied (supported) and changed (unsupported, the changed fact its span) sentences
    built from the documents of ``sources`` (:func:`~rcstat.grounding.swaps.swap_pairs`, two
    per document, seed 0); the two sentences of a pair share their group."""
    from rcstat.data import load_dataset
    from rcstat.grounding.calibrate import document_texts
    from rcstat.grounding.swaps import swap_pairs
    from rcstat.grounding.training import LabelledResponse

    texts = [t for name, path in sources for t in document_texts(load_dataset(name, path))]
    out = []
    for i, pair in enumerate(swap_pairs(list(dict.fromkeys(texts)), per_context=2, seed=0)):
        copy = LabelledResponse(
            id=f"swap:{i}:copy",
            context=pair.context,
            question=None,
            response=pair.copy,
            label=False,
            group=hashlib.sha256(pair.context.encode()).hexdigest()[:12],
            dataset=SWAPS,
            by=pair.kind,
        )
        spans = ((pair.start, pair.end),)
        edit = replace(copy, id=f"swap:{i}:edit", response=pair.edit, label=True, spans=spans)
        out += [copy, edit]
    return out[: None if limit is None else 2 * limit]


def run(config: GroundTrainConfig, *, loader: Loader | None = None) -> GroundTrainResult:
    """Measure, fit, cross-validate and write the folder of ``config`` (module notes).

    Raises
    ------
    ValueError
        A bad option or output folder (before the model loads), no labelled response, or
        samples a detector cannot be fitted on (one class, no labelled span, too few groups).
    """
    from rcstat.capture import attention_layout
    from rcstat.grounding import Measurer
    from rcstat.grounding.grounder import model_name
    from rcstat.grounding.training import cross_validate_detector, fit_detector
    from rcstat.progress import progress
    from rcstat.runs.folder import (
        check_output_folder,
        check_writable,
        claim_output_folder,
        staged_output,
    )

    config.check()
    check_output_folder(config.out, COMMAND)
    check_writable(config.out)
    items = [r for name, path in config.datasets for r in labelled_responses(name, path, config.n)]
    if config.swaps_from:
        items += swap_responses(config.swaps_from, config.n)
    if not items:
        raise ValueError("no labelled response to train on")
    if loader is None:
        from rcstat.models import load_model

        def loader(name: str | None, devices: Devices) -> tuple[Any, Any]:
            return load_model(name, **devices.load_kwargs())

    model, tokenizer = loader(config.model, config.devices)
    name = model_name(model)
    if Path(name).is_dir():  # a local folder (the converted default model): its name, no path
        name = Path(name).name
    layout = attention_layout(model)
    layers, heads = layout.num_layers, layout.num_heads
    measurer = Measurer(model, tokenizer, rc_heads=np.zeros(0, dtype=np.int64))
    claim_output_folder(config.out, COMMAND)  # the cache goes in before the results
    cache = config.out / "samples"
    samples, errors = _measure_cached(measurer, items, cache, name, progress)
    options = config.fit_options()
    detector, _ = fit_detector(
        samples,
        model=name,
        layers=layers,
        heads=heads,
        options=options,
        meta={"trained_on": [f"{n}:{p or 'slice'}" for n, p in config.datasets]},
    )
    report: dict[str, Any] = {"model": name, "responses": len(samples), "errors": len(errors)}
    predictions = None
    if config.cross_validate:
        oof = cross_validate_detector(
            samples,
            model=name,
            layers=layers,
            heads=heads,
            options=options,
            progress=lambda steps: progress(steps, desc="cross-validating", unit="fold"),
        )
        report["out_of_fold"], predictions = training_report(samples, oof)
        detector.meta["out_of_fold"] = report["out_of_fold"]
    import pandas as pd

    with staged_output(config.out, COMMAND, keep=("samples",)) as stage:
        detector.save(stage / "detector.json")
        (stage / "report.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
        pd.DataFrame(errors, columns=["id", "error"]).to_csv(stage / "errors.csv", index=False)
        if predictions is not None:
            predictions.to_csv(stage / "predictions.csv", index=False)
    return GroundTrainResult(detector, report, config.out)


def training_report(samples: Sequence[DetectorSample], oof: Any) -> tuple[dict[str, Any], Any]:
    """The out-of-fold metrics by dataset and by breakdown key, and the per-response frame."""
    import pandas as pd

    from rcstat.metrics.ranking import auc_pr, auroc
    from rcstat.metrics.spans import char_prf, example_prf

    frame = pd.DataFrame(
        {
            "id": [s.item.id for s in samples],
            "dataset": [s.item.dataset for s in samples],
            "by": [s.item.by for s in samples],
            "label": [s.item.label for s in samples],
            "probability": oof.probability,
            "flagged": oof.flagged,
            "spans": [json.dumps(v) for v in oof.spans],
            "labelled_spans": [json.dumps([list(x) for x in s.item.spans]) for s in samples],
        }
    )
    keys = [("all", np.ones(len(samples), dtype=bool))]
    keys += [(d, (frame["dataset"] == d).to_numpy()) for d in sorted(set(frame["dataset"]))]
    keys += [
        (f"{d}:{b}", ((frame["dataset"] == d) & (frame["by"] == b)).to_numpy())
        for d, b in sorted(set(zip(frame["dataset"], frame["by"], strict=True)))
        if b
    ]
    out: dict[str, Any] = {}
    for key, mask in keys:
        y = frame["label"].to_numpy()[mask]
        if y.all() or not y.any():
            continue
        index = np.flatnonzero(mask)
        known = [i for i in index if samples[i].item.spans_known]
        example = example_prf(oof.flagged[mask], y)
        spans = char_prf(
            [oof.spans[i] for i in known], [list(samples[i].item.spans) for i in known]
        )
        out[key] = {
            "responses": int(mask.sum()),
            "unsupported": int(y.sum()),
            "auroc": auroc(oof.probability[mask], y),
            "auc_pr": auc_pr(oof.probability[mask], y),
            "example_precision": example.precision,
            "example_recall": example.recall,
            "example_f1": example.f1,
            "false_alarms": float(oof.flagged[mask][~y].mean()),
            "span_precision": spans.precision,
            "span_recall": spans.recall,
            "span_f1": spans.f1,
        }
    return out, frame


def _measure_cached(
    measurer: Any,
    items: list[LabelledResponse],
    cache: Path,
    model: str,
    progress: Callable[..., Any],
) -> tuple[list[DetectorSample], list[tuple[str, str]]]:
    """Every item's sample, from ``cache`` when its key (model, texts, labels, feature
    version) is there, else measured and written there."""
    from rcstat.grounding.lexicon import Lexicon, ResponseWord
    from rcstat.grounding.training import DetectorSample, measure_samples

    cache.mkdir(parents=True, exist_ok=True)
    samples: list[DetectorSample] = []
    errors: list[tuple[str, str]] = []
    for item in progress(items, desc="measuring", unit="response"):
        key = hashlib.sha256(
            json.dumps(
                [_SAMPLE_VERSION, model, item.context, item.question, item.response, item.spans]
            ).encode()
        ).hexdigest()[:20]
        path = cache / f"{key}.npz"
        if path.is_file():
            with np.load(path) as data:
                words = tuple(
                    ResponseWord(int(a), int(b), item.response[int(a) : int(b)], *map(bool, f))
                    for (a, b), f in zip(data["word_spans"], data["word_flags"], strict=True)
                )
                samples.append(
                    DetectorSample(
                        item=item,
                        x=data["x"],
                        token_label=data["token_label"],
                        offsets=data["offsets"],
                        nll=data["nll"],
                        context_tokens=int(data["context_tokens"]),
                        words=words,
                        structured=Lexicon(item.context).structured,
                    )
                )
            continue
        found, failed = measure_samples(measurer, [item])
        errors.extend(failed)
        for sample in found:
            np.savez(
                path,
                x=sample.x,
                token_label=sample.token_label,
                offsets=sample.offsets,
                nll=sample.nll,
                context_tokens=sample.context_tokens,
                word_spans=np.array([(w.start, w.end) for w in sample.words]).reshape(-1, 2),
                word_flags=np.array(
                    [(w.known, w.bigram_known, w.copied) for w in sample.words]
                ).reshape(-1, 3),
            )
            samples.append(sample)
    return samples, errors


def _spec(item: Any, option: str) -> tuple[str, str | None]:
    """``NAME`` or ``NAME:PATH`` (a pair passes through), the name canonical."""
    from rcstat.data.registry import canonical_name

    if isinstance(item, (tuple, list)):
        name, path = str(item[0]), item[1]
    else:
        name, _, path = str(item).partition(":")
    flag = "--dataset" if option == "datasets" else f"--{option.replace('_', '-')}"
    if name.strip().lower() == SWAPS:
        raise ValueError(f"{flag}: swaps are built with --swaps-from")
    try:
        return canonical_name(name), (str(path) if path else None)
    except ValueError as err:
        raise ValueError(f"{flag}: {err}") from None
