"""RCStatPress's options on the command line (``rcstat compress`` and ``rcstat bench kv``):
``--window``, ``--group``, ``--score``, ``--budget``, ``--floor``, ``--sinks`` and
``--press-scope``, one value each or comma-separated lists for a sweep, with their
checks. The values and defaults are the press's own (:mod:`rcstat.press.options`).
"""

from __future__ import annotations

import argparse
from typing import Any

from rcstat.checks import float_list, int_list, split_list
from rcstat.defaults import DEFAULT_WINDOW, QUESTION_WINDOW
from rcstat.press.options import KNOBS, knob_choices, knob_default, knob_type

__all__ = [
    "PRESS_CHOICES",
    "add_press_options",
    "check_groups",
    "check_named",
    "check_windows",
    "knob_lists",
    "window_list",
]


def _default_first(name: str, default: str | None = None) -> tuple[str, ...]:
    """The values of RCStatPress's option ``name``, its default (or ``default``) first."""
    values, first = knob_choices(name), default or knob_default(name)
    return (first, *(v for v in values if v != first))


#: RCStatPress's named options on the command line: (flag, values with the default first,
#: what each value means); the values and defaults come from
#: :class:`~rcstat.press.options.RCStatOptions`.
PRESS_CHOICES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "--group",
        _default_first("group", "mean"),  # the default of the target-ratio mode first
        "how a GQA group's query heads decide for their KV head: mean (the group's mean "
        "relative score) or max (any head keeps an entry, the paper's rule); the press's "
        "default: mean with a target ratio, max with a threshold",
    ),
    (
        "--score",
        _default_first("score"),
        "token score: the exact expected RC or its upper bound A",
    ),
    (
        "--budget",
        _default_first("budget"),
        "target-ratio mode: r of the whole model, layers differing (pooled), or r per layer "
        "(layer, the paper's)",
    ),
)


def add_press_options(
    parser: argparse.ArgumentParser, *, sweep: bool, windows: str = str(DEFAULT_WINDOW)
) -> None:
    """RCStatPress's ``--window`` and its knobs (``--group``, ``--score``, ``--budget``,
    ``--floor``, ``--sinks``) and ``--press-scope`` (what the press compresses: the context alone
    or with the question; ``rcstat analyze``'s ``--question-placement`` is where the question
    sits in the prompt). With ``sweep`` each takes a comma-separated list and defaults to None
    (the config holds the default: the press's own, and ``windows`` for ``--window``)."""
    parser.add_argument(
        "--window",
        default=None if sweep else windows,
        help=("RCStat window sizes (default: " + windows + ")" if sweep else "window size w")
        + f"; '{QUESTION_WINDOW}' (with --press-scope question): the question's tokens",
    )
    for flag, values, meaning in PRESS_CHOICES:
        press_default = knob_default(flag.removeprefix("--"))
        if sweep:  # --group's default: the press's, which depends on the mode
            shown = "the mode's" if press_default is None else press_default
            parser.add_argument(flag, help=f"comma-separated; {meaning} (default: {shown})")
        else:  # None (--group, --budget): the press's own default, which depends on the mode
            default = press_default if flag == "--score" else None
            parser.add_argument(flag, choices=list(values), default=default, help=meaning)
    parser.add_argument(
        "--floor",
        type=str if sweep else float,
        default=None if sweep else knob_default("floor"),
        help=("comma-separated; " if sweep else "")
        + "pooled budget: every KV head keeps at least this share of a uniform budget"
        + (f" (default: {knob_default('floor')})" if sweep else ""),
    )
    parser.add_argument(
        "--sinks",
        default=None if sweep else str(knob_default("sinks")),
        help=("comma-separated; " if sweep else "")
        + "the first N prompt tokens are never evicted (attention sinks, the chat template)"
        + (f" (default: {knob_default('sinks')})" if sweep else ""),
    )
    parser.add_argument(
        "--press-scope",
        dest="question_placement",
        choices=["context", "question"],
        default="context",
        help="what the press compresses. context: the context alone, then the question is read "
        "(question-agnostic, kvpress's pipeline); question: the context with the question "
        "(query-aware" + ("; reported apart)" if sweep else ")"),
    )


def knob_lists(ns: argparse.Namespace) -> dict[str, list[Any]]:
    """The comma-separated values of every knob flag given (``--group`` … ``--sinks``, one
    flag per name of :data:`~rcstat.press.options.KNOBS`), each parsed as the knob's type
    (a named value, a number or an integer); the config checks them."""
    knobs: dict[str, list[Any]] = {}
    for name in KNOBS:
        text = getattr(ns, name)
        if text is None:
            continue
        values = split_list(str(text))
        kind = knob_type(name)
        if kind is str:
            knobs[name] = check_named(f"--{name}", values)
        elif kind is float:
            knobs[name] = float_list(f"--{name}", values, low=0, high=1)
        else:
            knobs[name] = int_list(f"--{name}", values, low=0)
    return knobs


def window_list(values: list[str]) -> list[int | str]:
    """``--window``: token counts and ``question`` (which needs ``--press-scope question``, a
    check the config makes), none twice."""
    if len(set(values)) != len(values):
        raise ValueError(f"--window lists a value twice: {','.join(values)}")
    sizes = [v for v in values if v != QUESTION_WINDOW]
    checked = iter(int_list("--window", sizes) if sizes else [])
    return [v if v == QUESTION_WINDOW else next(checked) for v in values]


def check_named(option: str, names: list[str]) -> list[str]:
    """Comma-separated names of ``option``, each one it allows (:data:`PRESS_CHOICES`), none
    twice (checked here, where no torch is imported)."""
    allowed = next(values for flag, values, _ in PRESS_CHOICES if flag == option)
    unknown = [n for n in names if n not in allowed]
    if not names or unknown:
        raise ValueError(
            f"{option} takes {' and/or '.join(allowed)}, got {','.join(names) or '(none)'}"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"{option} lists a value twice: {','.join(names)}")
    return list(names)


def check_groups(value: str | None) -> list[str | None]:
    """``--group``: the rules named, or the press's default of each mode (None)."""
    return [None] if value is None else [*check_named("--group", split_list(value))]


def check_windows(values: list[str], placement: str) -> list[int | str]:
    """``--window``: token counts, and ``question`` where the question is compressed too."""
    if QUESTION_WINDOW in values and placement != "question":
        raise ValueError(f"--window {QUESTION_WINDOW} needs --press-scope question")
    return window_list(values)
