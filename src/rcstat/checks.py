"""Checks of user-given numbers and files, shared by the Python API and the command line.

Every option that is a number (thresholds, τ, ratios, counts, window sizes) goes through one of
these functions, so the API and the CLI refuse the same values with the same message: NaN,
±inf, booleans passed as numbers and values outside the documented range never pass silently.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from numbers import Integral, Real
from pathlib import Path
from typing import Any

__all__ = [
    "check_count",
    "check_file",
    "check_number",
    "float_list",
    "int_list",
    "optional_count",
    "split_list",
]


def check_number(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a finite float within ``[low, high]`` (ends open when asked).

    Raises ``ValueError`` naming ``name``, the value and the allowed range.

    >>> check_number("tau", 1.5, low=0)
    1.5
    >>> check_number("ratio", float("nan"), low=0, high=1, high_open=True)
    Traceback (most recent call last):
    ...
    ValueError: ratio must be a finite number, got nan
    """
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {number!r}")
    too_low = low is not None and (number <= low if low_open else number < low)
    too_high = high is not None and (number >= high if high_open else number > high)
    if too_low or too_high:
        raise ValueError(
            f"{name} must be in {_interval(low, high, low_open, high_open)}, got {number!r}"
        )
    return number


def check_count(name: str, value: object, *, low: int = 1, high: int | None = None) -> int:
    """``value`` as an int within ``[low, high]``; ``ValueError`` naming ``name`` otherwise.

    >>> check_count("top", 3)
    3
    >>> check_count("top", -5)
    Traceback (most recent call last):
    ...
    ValueError: top must be an integer in [1, ∞), got -5
    """
    ok = isinstance(value, Integral) and not isinstance(value, bool)
    if ok:
        count = int(value)  # type: ignore[call-overload]
        if count >= low and (high is None or count <= high):
            return count
    raise ValueError(
        f"{name} must be an integer in {_interval(low, high, False, False)}, got {value!r}"
    )


def optional_count(option: str, value: int | None, *, low: int = 1) -> int | None:
    """``None`` or a checked count."""
    return None if value is None else check_count(option, value, low=low)


def split_list(text: str) -> list[str]:
    """``"a,b,,c"`` → ``["a", "b", "c"]`` (comma-separated list options).

    >>> split_list(" a,b,,c ")
    ['a', 'b', 'c']
    """
    return [v.strip() for v in text.split(",") if v.strip()]


def float_list(option: str, values: Sequence[str], **bounds: Any) -> list[float]:
    """Comma-separated numbers of ``option``, each checked; an empty list is an error."""
    return _checked_list(
        option, values, float, "a number", lambda v: check_number(option, v, **bounds)
    )


def int_list(option: str, values: Sequence[str], *, low: int = 1) -> list[int]:
    """Comma-separated integers of ``option``, each ``>= low``."""
    return _checked_list(
        option, values, int, "an integer", lambda v: check_count(option, v, low=low)
    )


def _checked_list(
    option: str,
    values: Sequence[str],
    parse: Callable[[str], Any],
    what: str,
    check: Callable[[Any], Any],
) -> list[Any]:
    if not values:
        raise ValueError(f"{option} needs at least one value")
    out = []
    for value in values:
        try:
            parsed = parse(value)
        except ValueError as err:
            raise ValueError(f"{option}: {value!r} is not {what}") from err
        out.append(check(parsed))
    return out


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    left = "(-∞" if low is None else ("(" if low_open else "[") + f"{low:g}"
    right = "∞)" if high is None else f"{high:g}" + (")" if high_open else "]")
    return f"{left}, {right}"


def check_file(option: str, path: str | os.PathLike[str]) -> Path:
    """``path`` as a :class:`~pathlib.Path` when it is a file; a ``ValueError`` naming
    ``option`` and saying what is there instead otherwise.

    >>> check_file("--pairs", "/")
    Traceback (most recent call last):
    ...
    ValueError: --pairs /: a folder, not a file
    """
    found = Path(path)
    if found.is_dir():
        raise ValueError(f"{option} {path}: a folder, not a file")
    if not found.is_file():
        raise ValueError(f"{option} {path}: no such file")
    return found
