"""RCStatPress's options on the command line (``rcstat compress`` and ``rcstat bench kv``):
``--window``, one flag per knob of the press (``--group``, ``--score``, ``--budget``,
``--floor``, ``--sinks``: every name of :data:`~rcstat.press.options.KNOBS`, its help, values
and default read from :class:`~rcstat.press.options.RCStatOptions`) and ``--press-scope``, one
value each or comma-separated lists for a sweep. A knob added to the press has its flag here
with no change to this module; the configs check the values
(:func:`~rcstat.press.options.check_knob`).
"""

from __future__ import annotations

import argparse
from typing import Any

from rcstat.checks import float_list, int_list, split_list
from rcstat.defaults import DEFAULT_WINDOW, QUESTION_WINDOW
from rcstat.press.options import KNOBS, knob_choices, knob_default, knob_field, knob_help, knob_type

__all__ = ["add_press_options", "knob_lists", "knob_values", "window_list"]


def _shown_default(name: str) -> str:
    """The knob's default as ``--help`` states it (None: the mode's)."""
    default = knob_default(name)
    return "the mode's" if default is None else str(default)


def add_press_options(
    parser: argparse.ArgumentParser, *, sweep: bool, windows: str = str(DEFAULT_WINDOW)
) -> None:
    """RCStatPress's ``--window``, a flag for each of its knobs and ``--press-scope`` (what the
    press compresses: the context alone or with the question; ``rcstat analyze``'s
    ``--question-placement`` is where the question sits in the prompt). Every knob flag
    defaults to None (the press's own default, which ``--help`` states); with ``sweep`` each
    takes a comma-separated list, and ``--window`` too (default ``windows``)."""
    parser.add_argument(
        "--window",
        default=None if sweep else windows,
        help=("RCStat window sizes (default: " + windows + ")" if sweep else "window size w")
        + f"; '{QUESTION_WINDOW}' (with --press-scope question): the question's tokens",
    )
    for name in KNOBS:
        meaning = f"{knob_help(name)} (default: {_shown_default(name)})"
        if sweep:
            parser.add_argument(f"--{name}", help=f"comma-separated; {meaning}")
        elif knob_type(name) is str:
            parser.add_argument(f"--{name}", choices=list(knob_choices(name)), help=meaning)
        else:
            parser.add_argument(f"--{name}", type=knob_type(name), help=meaning)
    parser.add_argument(
        "--press-scope",
        dest="question_placement",
        choices=["context", "question"],
        default="context",
        help="what the press compresses. context: the context alone, then the question is read "
        "(question-agnostic, kvpress's pipeline); question: the context with the question "
        "(query-aware" + ("; reported apart)" if sweep else ")"),
    )


def knob_values(ns: argparse.Namespace) -> dict[str, Any]:
    """The knob flags given, one value each (``rcstat compress``): ``{name: value}``."""
    return {name: getattr(ns, name) for name in KNOBS if getattr(ns, name) is not None}


def knob_lists(ns: argparse.Namespace) -> dict[str, list[Any]]:
    """The comma-separated values of every knob flag given (``rcstat bench kv``), each parsed
    as the knob's type (a named value, a number or an integer); the config checks them."""
    knobs: dict[str, list[Any]] = {}
    for name, text in knob_values(ns).items():
        values = split_list(str(text))
        kind = knob_type(name)
        if kind is float:
            knobs[name] = float_list(f"--{name}", values)
        elif kind is int:
            knobs[name] = int_list(
                f"--{name}", values, low=int(knob_field(name).metadata.get("low", 0))
            )
        else:
            knobs[name] = values
    return knobs


def window_list(values: list[str]) -> list[int | str]:
    """``--window``: token counts and ``question`` (which needs ``--press-scope question``, a
    check the config makes), none twice."""
    if len(set(values)) != len(values):
        raise ValueError(f"--window lists a value twice: {','.join(values)}")
    sizes = [v for v in values if v != QUESTION_WINDOW]
    checked = iter(int_list("--window", sizes) if sizes else [])
    return [v if v == QUESTION_WINDOW else next(checked) for v in values]
