"""``rcstat ground-profile``: measure which heads read the context, for any model (no labels)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape

from rcstat.checks import check_count, check_number
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
from rcstat.data.registry import canonical_name, dataset_names
from rcstat.defaults import DEFAULT_GROUNDING_FRACTION

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
        "ones `rcstat ground` averages over; the threshold flags the given share of these "
        "context-based answers. No hallucination label is used.",
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
        default=0.1,
        help="share of the model's own answers below the threshold",
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
        )


def run(args: GroundProfileArgs) -> int:
    """Measure the profile; write profile.json and a heatmap profile.png."""
    from rcstat.data import load_dataset
    from rcstat.grounding.calibrate import build_profile
    from rcstat.progress import progress

    check_output_folder(args.out, NAME)
    examples = load_dataset(args.dataset, args.data, limit=args.n)
    if not examples:
        raise ValueError(f"no examples in {args.dataset} ({args.data or 'default slice'})")
    model, tokenizer = load_model_quietly(args.model, args.devices)
    profile = build_profile(
        model,
        tokenizer,
        progress(examples, desc="answering and measuring", unit="example"),  # type: ignore[arg-type]
        max_new_tokens=args.max_new_tokens,
        fraction=args.fraction,
        threshold_quantile=args.threshold_quantile,
    )
    profile.source["dataset_file"] = args.data or "shared slice"
    with staged_output(args.out, NAME) as stage:
        profile.save(stage / "profile.json")
        _heatmap(profile.values, stage / "profile.png", profile.model)
    heads = profile.heads()
    per_layer = profile.values.shape[1]
    top = ", ".join(f"L{h // per_layer}H{h % per_layer}" for h in heads[:8])
    console.print(
        f"{len(heads)} contextual heads (top: {escape(top)}); threshold "
        f"{profile.threshold:.4f} ({profile.source['answers']} answers)"
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
