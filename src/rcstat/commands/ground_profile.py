"""``rcstat ground-profile`` as a library call: :class:`GroundProfileConfig` → :func:`run` →
:class:`GroundProfileResult`.

The model answers each question of a QA dataset greedily from its context; every head's
token-level normalized RC is averaged over those answers, and the threshold is calibrated on
sentences copied from the contexts and the same sentences with a number or name swapped
(:func:`rcstat.grounding.calibrate.build_profile`; no hallucination label is used). The
result writes the command's folder (:meth:`GroundProfileResult.write`: ``profile.json``, the
:class:`~rcstat.grounding.HeadProfile` that ``rcstat ground --profile`` reads, and a heatmap
``profile.png``). This module imports neither torch nor pandas.

>>> GroundProfileConfig.from_dict({"dataset": "SQuAD-v2", "fraction": 0.5}).dataset
'squad_v2'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rcstat.checks import check_count, check_number, optional_count, split_list
from rcstat.data.registry import DATASETS, canonical_name, dataset_names
from rcstat.defaults import DEFAULT_GROUNDING_FRACTION, DEFAULT_THRESHOLD_QUANTILE
from rcstat.evaluation.bench.common import load_for
from rcstat.runs.devices import Devices
from rcstat.runs.folder import check_output_folder, staged_output
from rcstat.runs.job import Config

if TYPE_CHECKING:
    from rcstat.evaluation.bench.common import Loader
    from rcstat.grounding.profile import HeadProfile

__all__ = ["FILES", "NAME", "QA_DATASETS", "GroundProfileConfig", "GroundProfileResult", "run"]

#: The command, and the owner of the folders it writes.
NAME = "ground-profile"
#: The files of the folder (:meth:`GroundProfileResult.write`).
FILES = ("profile.json", "profile.png")
#: The datasets with questions and contexts, which a profile is measured on.
QA_DATASETS = dataset_names(("qa",))


@dataclass
class GroundProfileConfig(Config):
    """The options of ``rcstat ground-profile``, a field a flag (:mod:`rcstat.commands`).

    Attributes
    ----------
    dataset
        The QA dataset answered (one of :data:`QA_DATASETS`).
    data
        Its file (or folder) in the upstream format; None: the shared slice.
    n
        The first ``n`` examples; None: all.
    max_new_tokens
        Length limit of each answer.
    fraction
        Share of the heads the score uses, in ``(0, 1]``.
    threshold_quantile
        Share of the copied calibration sentences flagged (the false-alarm rate), in
        ``(0, 1)``.
    calibrate_on
        More datasets whose contexts (or chunks) give calibration pairs: ``NAME`` reads its
        developer slice, ``NAME:PATH`` a file in its format (a string: a comma-separated
        list).
    """

    model: str | None = None
    devices: Devices = field(default_factory=Devices)
    dataset: str = "squad_v2"
    data: str | None = None
    n: int | None = None
    max_new_tokens: int = 48
    fraction: float = DEFAULT_GROUNDING_FRACTION
    threshold_quantile: float = DEFAULT_THRESHOLD_QUANTILE
    calibrate_on: tuple[str, ...] = ()
    out: Path | None = None

    def check(self) -> None:
        """Refuse what ``rcstat ground-profile`` refuses before anything loads (``ValueError``
        naming the flag); the dataset names become the registry's."""
        dataset = canonical_name(self.dataset)
        if dataset not in QA_DATASETS:
            raise ValueError(
                f"ground-profile needs questions with contexts; --dataset must be one of "
                f"{', '.join(QA_DATASETS)}, got {self.dataset!r}"
            )
        self.dataset = dataset
        self.n = optional_count("--n", self.n)
        self.max_new_tokens = check_count("--max-new-tokens", self.max_new_tokens)
        self.fraction = check_number("--fraction", self.fraction, low=0.0, high=1.0, low_open=True)
        self.threshold_quantile = check_number(
            "--threshold-quantile",
            self.threshold_quantile,
            low=0.0,
            high=1.0,
            low_open=True,
            high_open=True,
        )
        items = self.calibrate_on
        if isinstance(items, str):
            items = tuple(split_list(items))
        self.calibrate_on = tuple(_dataset_spec(str(item)) for item in items)

    def calibration_sets(self) -> list[tuple[str, str | None]]:
        """``(dataset, path or None)`` of each :attr:`calibrate_on` item."""
        items = (item.partition(":") for item in self.calibrate_on)
        return [(name, path or None) for name, _, path in items]


def _dataset_spec(item: str) -> str:
    """``NAME`` or ``NAME:PATH`` of ``--calibrate-on``, the name the registry's, the path
    checked."""
    name, _, path = item.partition(":")
    try:
        name = canonical_name(name)
    except ValueError:
        raise ValueError(
            f"--calibrate-on: unknown dataset {name!r}; choose one of {', '.join(DATASETS)}"
        ) from None
    if path and not Path(path).exists():
        raise ValueError(f"--calibrate-on {item}: no such file or folder")
    return f"{name}:{path}" if path else name


@dataclass
class GroundProfileResult:
    """What :func:`run` measured: the :class:`~rcstat.grounding.HeadProfile`, and the folder
    it was written to (None: not written)."""

    profile: HeadProfile
    out: Path | None = None

    def lines(self) -> list[str]:
        """What ``rcstat ground-profile`` prints: the contextual heads, the threshold and its
        calibration, and (when written) where the profile is and how to use it."""
        profile = self.profile
        heads = profile.heads()
        per_layer = profile.values.shape[1]
        top = ", ".join(f"L{h // per_layer}H{h % per_layer}" for h in heads[:8])
        calibration = profile.source["calibration"]
        lines = [
            f"{len(heads)} contextual heads (top: {top}); threshold "
            f"{profile.threshold:.4f} from {calibration['pairs']} copied/swapped sentence pairs: "
            f"{calibration['false_alarms']:.1%} of copies flagged, {calibration['caught']:.1%} "
            f"of swaps caught ({profile.source['answers']} answers)"
        ]
        if self.out is not None:
            lines.append(
                f"profile written to {self.out}/profile.json — use it with "
                f"`rcstat ground --profile {self.out}/profile.json`"
            )
        return lines

    def write(self, out: Path) -> Path:
        """Write :data:`FILES` into ``out`` (staged: all or none) and remember it as
        :attr:`out`."""
        out = Path(out)
        with staged_output(out, NAME) as stage:
            self.profile.save(stage / "profile.json")
            _heatmap(self.profile.values, stage / "profile.png", self.profile.model)
        self.out = out
        return out


def _heatmap(values: Any, path: Path, model: str) -> None:
    """The mean token-level normalized RC of every head, layers down and heads across."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6))
    image = ax.imshow(values, aspect="auto", cmap="viridis", vmin=0, vmax=1)
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(f"mean token-level normalized RC\n{model}")
    fig.colorbar(image, ax=ax)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def run(config: GroundProfileConfig, *, loader: Loader | None = None) -> GroundProfileResult:
    """Measure the head profile of ``config.model`` and, when ``config.out`` is set, write the
    folder of ``rcstat ground-profile`` there (progress on standard error).

    ``config`` (checked again) and ``loader`` as for every command (:mod:`rcstat.commands`).

    Raises
    ------
    ValueError
        A bad option, an output folder of another command or with files rcstat did not write,
        a dataset without examples (before the model loads), or contexts with no sentence to
        calibrate on.
    """
    from rcstat.data import load_dataset
    from rcstat.grounding.calibrate import build_profile, document_texts
    from rcstat.progress import progress

    config.check()
    if config.out is not None:
        check_output_folder(Path(config.out), NAME)
    examples = load_dataset(config.dataset, config.data, limit=config.n)
    if not examples:
        raise ValueError(f"no examples in {config.dataset} ({config.data or 'default slice'})")
    extra = [
        text
        for name, path in config.calibration_sets()
        for text in document_texts(load_dataset(name, path))
    ]
    model, tokenizer = load_for(config, loader)
    profile = build_profile(
        model,
        tokenizer,
        progress(examples, desc="answering and measuring", unit="example"),  # type: ignore[arg-type]
        max_new_tokens=config.max_new_tokens,
        fraction=config.fraction,
        threshold_quantile=config.threshold_quantile,
        calibration_contexts=extra,
        progress=lambda pairs: progress(pairs, desc="calibrating", unit="pair"),
    )
    profile.source["dataset_file"] = config.data or "shared slice"
    result = GroundProfileResult(profile)
    if config.out is not None:
        result.write(Path(config.out))
    return result
