"""``rcstat ground-profile``: measure which heads read the context, for any model (no labels).

The work is the library's (:mod:`rcstat.commands.ground_profile`): this module parses, builds a
:class:`~rcstat.commands.ground_profile.GroundProfileConfig`, calls ``run`` and prints the
result's lines.
"""

from __future__ import annotations

import argparse
from typing import Any

from rcstat.checks import split_list
from rcstat.cli._common import Devices, add_command, add_config_option, load_model_quietly, say
from rcstat.cli.options import (
    add_dataset_options,
    add_max_new_tokens_option,
    add_n_option,
    add_out_option,
)
from rcstat.commands.ground_profile import NAME, GroundProfileConfig


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
    # the defaults shown by --help are the config's (the one home of them)
    add_dataset_options(p, GroundProfileConfig.dataset, ("qa",))
    add_n_option(p)
    add_max_new_tokens_option(p, GroundProfileConfig.max_new_tokens, "length of each answer")
    add_config_option(p, GroundProfileConfig, "fraction", float, "share of heads the score uses")
    add_config_option(
        p,
        GroundProfileConfig,
        "threshold_quantile",
        float,
        "share of the copied calibration sentences flagged (the false-alarm rate)",
    )
    p.add_argument(
        "--calibrate-on",
        default="",
        metavar="NAME[:PATH],...",
        help="more datasets whose contexts (or chunks) give calibration pairs, beside "
        "--dataset's: a name reads its developer slice, NAME:PATH a file in its format",
    )
    add_out_option(p, NAME)


def from_namespace(ns: argparse.Namespace) -> GroundProfileConfig:
    """The checked config of ``rcstat ground-profile`` (``ValueError`` naming the flag)."""
    calibrate_on = tuple(split_list(ns.calibrate_on)) if ns.calibrate_on else None
    config = GroundProfileConfig.from_flags(ns, calibrate_on=calibrate_on)
    config.devices = Devices.from_namespace(ns)  # last: it may ask torch for the GPUs
    return config


def run(config: GroundProfileConfig) -> int:
    """Measure the profile (:func:`rcstat.commands.ground_profile.run`: profile.json and a
    heatmap profile.png in --out); print what it found and how to use it."""
    from rcstat.commands.ground_profile import run as run_profile

    for line in run_profile(config, loader=load_model_quietly).lines():
        say(line)
    return 0
