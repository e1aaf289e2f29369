"""RCStatPress's options, named once: their types, allowed values and defaults (paper eq. 9).

:class:`RCStatOptions` is the one home of the press's knobs. :class:`~rcstat.press.rcstat_press.
RCStatPress` inherits its fields; the command line's flags (``rcstat compress``, ``rcstat bench
kv``), the benchmark's setting key and the run manifest read them from here. This module imports
neither torch nor kvpress, so ``--help`` can show the values without loading either.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal, get_args, get_origin, get_type_hints

from rcstat.defaults import DEFAULT_WINDOW

__all__ = [
    "BUDGETS",
    "GROUP_RULES",
    "KNOBS",
    "RATIO_ONLY_KNOBS",
    "SCORES",
    "Budget",
    "GroupRule",
    "RCStatOptions",
    "TokenScore",
    "knob_choices",
    "knob_default",
    "knob_type",
]

#: How a GQA group's query heads combine their relative scores.
GroupRule = Literal["max", "mean"]
#: The statistic that scores each token.
TokenScore = Literal["expected", "upper"]
#: Where the target ratio holds.
Budget = Literal["layer", "pooled"]

GROUP_RULES: tuple[str, ...] = get_args(GroupRule)
SCORES: tuple[str, ...] = get_args(TokenScore)
BUDGETS: tuple[str, ...] = get_args(Budget)


@dataclass
class RCStatOptions:
    """The knobs of :class:`~rcstat.press.rcstat_press.RCStatPress` with their defaults (see its
    docstring for what each one does)."""

    threshold: float = 1.0
    window_size: int = DEFAULT_WINDOW
    compression_ratio: float | None = None
    group: GroupRule | None = None
    score: TokenScore = "expected"
    budget: Budget = "pooled"
    floor: float = 0.2
    sinks: int = 0


#: The knobs besides the mode (threshold or target ratio) and the window: every field of
#: :class:`RCStatOptions` after ``compression_ratio``. The benchmark sweeps each, names it in
#: its setting key and rows, and builds the press with it, reading this tuple: a new field of
#: :class:`RCStatOptions` is a new knob everywhere.
KNOBS: tuple[str, ...] = tuple(f.name for f in fields(RCStatOptions))[3:]

#: The knobs only the target-ratio mode reads (the threshold mode has no budget to share).
RATIO_ONLY_KNOBS: tuple[str, ...] = ("budget", "floor")


def knob_default(name: str) -> Any:
    """The default of the press's option ``name``.

    >>> knob_default("floor"), knob_default("budget")
    (0.2, 'pooled')
    """
    for item in fields(RCStatOptions):
        if item.name == name:
            return item.default
    raise KeyError(f"RCStatPress has no option {name!r}")


def knob_type(name: str) -> type:
    """The type of the press's option ``name``: ``str`` for named values, else ``float`` or
    ``int``.

    >>> knob_type("group"), knob_type("floor"), knob_type("sinks")
    (<class 'str'>, <class 'float'>, <class 'int'>)
    """
    hint = get_type_hints(RCStatOptions)[name]
    if get_origin(hint) is Literal or any(get_origin(a) is Literal for a in get_args(hint)):
        return str
    kinds = [a for a in (get_args(hint) or (hint,)) if a is not type(None)]
    found: type = kinds[0]
    return found


def knob_choices(name: str) -> tuple[str, ...]:
    """The values the press's option ``name`` allows (from its ``Literal`` type).

    >>> knob_choices("group"), knob_choices("score")
    (('max', 'mean'), ('expected', 'upper'))
    """
    hint = get_type_hints(RCStatOptions)[name]
    values = [v for arg in get_args(hint) or (hint,) for v in (get_args(arg) or (arg,))]
    choices = tuple(v for v in values if isinstance(v, str))
    if not choices:
        raise KeyError(f"RCStatPress's option {name!r} takes no named values")
    return choices
