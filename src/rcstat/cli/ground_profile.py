"""``rcstat ground-profile``: measure which heads read the context, for any model (no labels)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape

from rcstat.checks import check_count, check_number, split_list
from rcstat.cli._common import (
    Devices,
    add_command,
    check_output_folder,
    console,
    load_model_quietly,
    optional_count,
    staged_output,
)
from rcstat.cli.options import (
    add_data_option,
    add_dataset_option,
    add_max_new_tokens_option,
    add_n_option,
    add_out_option,
)
from rcstat.data.registry import DATASETS, canonical_name, dataset_names
from rcstat.defaults import DEFAULT_GROUNDING_FRACTION, DEFAULT_THRESHOLD_QUANTILE

NAME = "ground-profile"
QA_DATASETS = dataset_names(("qa",))


def register(sub: Any) -> None:
    """Add ``ground-profile`` to the sub-command parsers ``sub``."""
    p = add_command(
        sub,
        NAME,
        "head profile for `rcstat ground` (contextual heads, threshold; no labels)",
        "The model answers each question of a QA dataset greedily from its context; every "
        "head's token-level normalized RC is averaged over those answers. The top heads are the "
        "ones `rcstat ground` reads; the copy heads are those whose attention lands on the "
        "context words the answers copy. The threshold is calibrated on sentences copied from "
        "the contexts and the same sentences with a number or name swapped (built by the tool): "
        "it flags the given share of the copies. No hallucination label is used.",
    )
    add_dataset_option(p, "squad_v2", ("qa",))
    add_data_option(p)
    add_n_option(p)
    add_max_new_tokens_option(p, 48, "length of each answer")
    p.add_argument(
        "--fraction",
        type=float,
        default=DEFAULT_GROUNDING_FRACTION,
        help="share of heads the score uses",
    )
    p.add_argument(
        "--threshold-quantile",
        type=float,
        default=DEFAULT_THRESHOLD_QUANTILE,
        help="share of the copied calibration sentences flagged (the false-alarm rate)",
    )
    p.add_argument(
        "--calibrate-on",
        default="",
        metavar="NAME[:PATH],...",
        help="more datasets whose contexts (or chunks) give calibration pairs, beside "
        "--dataset's: a name reads its developer slice, NAME:PATH a file in its format",
    )
    add_out_option(p, NAME)


@dataclass
class GroundProfileArgs:
    """Arguments of ``rcstat ground-profile`` (checked)."""

    model: str | None
    devices: Devices
    dataset: str
    data: str | None
    n: int | None
    max_new_tokens: int
    fraction: float
    threshold_quantile: float
    out: Path
    calibrate_on: tuple[tuple[str, str | None], ...] = ()

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> GroundProfileArgs:
        dataset = canonical_name(ns.dataset)
        if dataset not in QA_DATASETS:
            raise ValueError(
                f"ground-profile needs questions with contexts; --dataset must be one of "
                f"{', '.join(QA_DATASETS)}, got {ns.dataset!r}"
            )
        return cls(
            model=ns.model,
            devices=Devices.from_namespace(ns),
            dataset=dataset,
            data=ns.data,
            n=optional_count("--n", ns.n),
            max_new_tokens=check_count("--max-new-tokens", ns.max_new_tokens),
            fraction=check_number("--fraction", ns.fraction, low=0.0, high=1.0, low_open=True),
            threshold_quantile=check_number(
                "--threshold-quantile",
                ns.threshold_quantile,
                low=0.0,
                high=1.0,
                low_open=True,
                high_open=True,
            ),
            out=Path(ns.out),
            calibrate_on=tuple(_dataset_spec(item) for item in split_list(ns.calibrate_on)),
        )


def _dataset_spec(item: str) -> tuple[str, str | None]:
    """``NAME`` or ``NAME:PATH`` of ``--calibrate-on``, the name checked."""
    name, _, path = item.partition(":")
    try:
        name = canonical_name(name)
    except ValueError:
        raise ValueError(
            f"--calibrate-on: unknown dataset {name!r}; choose from {', '.join(DATASETS)}"
        ) from None
    if path and not Path(path).exists():
        raise ValueError(f"--calibrate-on {item}: no such file or folder")
    return name, path or None


def run(args: GroundProfileArgs) -> int:
    """Measure the profile; write profile.json and a heatmap profile.png."""
    from rcstat.data import load_dataset
    from rcstat.grounding.calibrate import build_profile, document_texts
    from rcstat.progress import progress

    check_output_folder(args.out, NAME)
    examples = load_dataset(args.dataset, args.data, limit=args.n)
    if not examples:
        raise ValueError(f"no examples in {args.dataset} ({args.data or 'default slice'})")
    extra = [
        text
        for name, path in args.calibrate_on
        for text in document_texts(load_dataset(name, path))
    ]
    model, tokenizer = load_model_quietly(args.model, args.devices)
    profile = build_profile(
        model,
        tokenizer,
        progress(examples, desc="answering and measuring", unit="example"),  # type: ignore[arg-type]
        max_new_tokens=args.max_new_tokens,
        fraction=args.fraction,
        threshold_quantile=args.threshold_quantile,
        calibration_contexts=extra,
        progress=lambda pairs: progress(pairs, desc="calibrating", unit="pair"),
    )
    profile.source["dataset_file"] = args.data or "shared slice"
    with staged_output(args.out, NAME) as stage:
        profile.save(stage / "profile.json")
        _heatmap(profile.values, stage / "profile.png", profile.model)
    heads = profile.heads()
    per_layer = profile.values.shape[1]
    top = ", ".join(f"L{h // per_layer}H{h % per_layer}" for h in heads[:8])
    calibration = profile.source["calibration"]
    console.print(
        f"{len(heads)} contextual heads (top: {escape(top)}); threshold "
        f"{profile.threshold:.4f} from {calibration['pairs']} copied/swapped sentence pairs: "
        f"{calibration['false_alarms']:.1%} of copies flagged, {calibration['caught']:.1%} "
        f"of swaps caught ({profile.source['answers']} answers)"
    )
    console.print(
        f"profile written to {escape(str(args.out))}/profile.json — use it with "
        f"`rcstat ground --profile {escape(str(args.out))}/profile.json`"
    )
    return 0


def _heatmap(values: Any, path: Path, model: str) -> None:
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


#: The checked arguments of ``rcstat ground-profile``.
from_namespace = GroundProfileArgs.from_namespace
