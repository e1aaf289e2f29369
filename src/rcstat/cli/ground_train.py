"""``rcstat ground-train``: train a grounding detector on labelled responses, for any model."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rcstat.checks import split_list
from rcstat.cli._common import Devices, add_command, load_model_quietly, say
from rcstat.cli.options import add_n_option, add_out_option

if TYPE_CHECKING:
    from rcstat.evaluation.ground_train import GroundTrainConfig

NAME = "ground-train"


def register(sub: Any) -> None:
    """Add ``ground-train`` to the sub-command parsers ``sub``."""
    p = add_command(
        sub,
        NAME,
        "train a grounding detector on labelled responses (for `rcstat ground --detector`)",
        "Measure every labelled response in one pass of the model, fit the detector's token "
        "and response models (grouped cross-validation, thresholds that keep the share of "
        "faithful responses flagged at most --max-false-alarms in every dataset), and report "
        "how it does out of fold. Writes detector.json, report.json, predictions.csv and "
        "errors.csv into --out; the measured features stay in --out/samples so a rerun with "
        "other options measures nothing again.",
    )
    p.add_argument(
        "--dataset",
        default="ragtruth",
        metavar="NAME[:PATH],...",
        help="labelled datasets: ragtruth, faithbench, summedits (a name reads its "
        "developer slice, NAME:PATH a file or folder in its upstream format) or "
        'jsonl:PATH, your pairs {"id", "context", "response", "question"?, "label": 0|1, '
        '"spans"?: [[start, end], ...], "group"?} (spans optional)',
    )
    p.add_argument(
        "--swaps-from",
        default="",
        metavar="NAME[:PATH],...",
        help="also train on sentences copied from the documents of these datasets and the same "
        "sentences with a number or name changed (dataset 'swaps'; no label needed)",
    )
    p.add_argument(
        "--weight",
        action="append",
        default=[],
        metavar="NAME=W",
        help="relative weight of a dataset (default 1 each, whatever its size); repeatable",
    )
    add_n_option(p)
    p.add_argument("--folds", type=int, default=None, help="grouped folds (default 5)")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the fold assignment (default 0); out-of-fold figures move between seeds, "
        "so compare designs over several",
    )
    p.add_argument(
        "--max-false-alarms",
        type=float,
        default=None,
        help="largest share of faithful responses of any dataset flagged (default 0.2)",
    )
    p.add_argument(
        "--max-copy-false-alarms",
        type=float,
        default=None,
        help="the same for responses that quote their context (default 0.05)",
    )
    p.add_argument(
        "--head-penalty",
        type=float,
        default=None,
        help="L2 penalty on each head's own token features, as a multiple of the others' "
        "(default 1; 10 ranks RAGTruth a little worse and unseen summaries a little better)",
    )
    p.add_argument(
        "--no-cross-validation",
        action="store_true",
        help="skip the out-of-fold report (the detector is the same)",
    )
    add_out_option(p, NAME)


def from_namespace(ns: argparse.Namespace) -> GroundTrainConfig:
    """The checked config (every option checked before the model loads)."""
    from rcstat.evaluation.ground_train import GroundTrainConfig

    weights = {}
    for entry in ns.weight:
        name, sep, value = entry.partition("=")
        if not sep:
            raise ValueError(f"--weight {entry}: expected NAME=W")
        try:
            weights[name.strip()] = float(value)
        except ValueError:
            raise ValueError(f"--weight {entry}: {value!r} is not a number") from None
    given = {
        "folds": ns.folds,
        "seed": ns.seed,
        "max_false_alarms": ns.max_false_alarms,
        "max_copy_false_alarms": ns.max_copy_false_alarms,
        "head_penalty": ns.head_penalty,
    }
    return GroundTrainConfig.from_dict(
        {
            "model": ns.model,
            "devices": Devices.from_namespace(ns),
            "datasets": split_list(ns.dataset),
            "swaps_from": split_list(ns.swaps_from),
            "n": ns.n,
            "weights": weights,
            "out": ns.out,
            "cross_validate": not ns.no_cross_validation,
            **{k: v for k, v in given.items() if v is not None},
        }
    )


def run(config: GroundTrainConfig) -> int:
    """Train; print where the detector is and how it did."""
    from rcstat.evaluation.ground_train import run as train

    result = train(config, loader=load_model_quietly)
    for line in result.lines():
        say(line)
    return 0
