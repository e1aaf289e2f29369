"""RCStatPress's options, named once: their types, allowed values and defaults (paper eq. 9).

:class:`RCStatOptions` is the one home of the press's knobs. :class:`~rcstat.press.rcstat_press.
RCStatPress` inherits its fields; the command line's flags (``rcstat compress``, ``rcstat bench
kv``), the benchmark's setting key and the run manifest read them from here. This module imports
neither torch nor kvpress, so ``--help`` can show the values without loading either.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from typing import Any, Literal, get_args, get_origin, get_type_hints

from rcstat.checks import check_count, check_number
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
    "check_knob",
    "knob_choices",
    "knob_default",
    "knob_field",
    "knob_help",
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


def _help(text: str, **bounds: float) -> dict[str, Any]:
    """A knob field's metadata: the ``--help`` text of its flag and, for a number, its
    ``low``/``high`` bounds (both included)."""
    return {"help": text, **bounds}


@dataclass
class RCStatOptions:
    """The knobs of :class:`~rcstat.press.rcstat_press.RCStatPress` with their defaults (see its
    docstring for what each one does); each knob's field also holds the help of its flag and
    its bounds, which :func:`check_knob` applies."""

    threshold: float = 1.0
    window_size: int = DEFAULT_WINDOW
    compression_ratio: float | None = None
    group: GroupRule | None = field(
        default=None,
        metadata=_help(
            "how a GQA group's query heads decide for their KV head: mean (the group's mean "
            "relative score) or max (any head keeps an entry, the paper's rule); the press's "
            "default: mean with a target ratio, max with a threshold"
        ),
    )
    score: TokenScore = field(
        default="expected",
        metadata=_help("token score: the exact expected RC or its upper bound A"),
    )
    budget: Budget = field(
        default="pooled",
        metadata=_help(
            "target-ratio mode: r of the whole model, layers differing (pooled), or r per "
            "layer (layer, the paper's)"
        ),
    )
    floor: float = field(
        default=0.2,
        metadata=_help(
            "pooled budget: every KV head keeps at least this share of a uniform budget",
            low=0,
            high=1,
        ),
    )
    sinks: int = field(
        default=0,
        metadata=_help(
            "the first N prompt tokens are never evicted (attention sinks, the chat template)",
            low=0,
        ),
    )


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


def knob_field(name: str) -> Field[Any]:
    """The field of the press's knob ``name`` (``KeyError`` for another name)."""
    if name not in KNOBS:
        raise KeyError(f"RCStatPress has no option {name!r} (its knobs: {', '.join(KNOBS)})")
    return next(item for item in fields(RCStatOptions) if item.name == name)


def knob_help(name: str) -> str:
    """The ``--help`` text of the knob ``name``'s flag."""
    return str(knob_field(name).metadata["help"])


def check_knob(name: str, value: Any, *, flags: bool = False) -> Any:
    """``value`` if the press's knob ``name`` takes it: one of its named values (None where
    the default is None: the mode's), or a number of its type within its bounds; a
    ``ValueError`` naming ``--name`` with ``flags``, else ``name``.

    >>> check_knob("floor", 1.5, flags=True)
    Traceback (most recent call last):
    ...
    ValueError: --floor must be in [0, 1], got 1.5
    >>> check_knob("group", None), check_knob("sinks", 4)
    (None, 4)
    """
    shown = f"--{name}" if flags else name
    kind, meta = knob_type(name), knob_field(name).metadata
    if kind is str:
        allowed = knob_choices(name)
        if value is None and knob_default(name) is None:
            return None
        if value not in allowed:
            raise ValueError(f"{shown} must be one of {', '.join(allowed)}, got {value!r}")
        return value
    if kind is int:
        return check_count(shown, value, low=int(meta.get("low", 0)))
    return check_number(shown, value, low=meta.get("low"), high=meta.get("high"))
