"""Checks of user-given numbers and files, shared by the Python API and the command line.

Every option that is a number (thresholds, τ, ratios, counts, window sizes) goes through one of
these functions, so the API and the CLI refuse the same values with the same message: NaN,
±inf, booleans passed as numbers and values outside the documented range never pass silently.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Sequence
from numbers import Integral, Real
from pathlib import Path
from typing import Any

__all__ = [
    "check_count",
    "check_file",
    "check_language",
    "check_number",
    "check_tau",
    "float_list",
    "int_list",
    "is_hub_id",
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


def check_tau(name: str, value: object) -> float:
    """``value`` as a head-count threshold τ: a finite number ``>= 0``. The statistics it is
    compared with (expected RC and its bounds, paper eq. 6 and Theorem 3.6) are never
    negative, so a negative τ would count every head; ``ValueError`` naming ``name``.

    >>> check_tau("--tau", -1)
    Traceback (most recent call last):
    ...
    ValueError: --tau must be in [0, ∞), got -1.0
    """
    return check_number(name, value, low=0)


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
    """``[low, high]`` as a person reads it: an integer bound in full (``4294967295``, not
    ``4.29497e+09``), others in ``g`` format.

    >>> _interval(0, 2**32 - 1, False, False), _interval(0.0, 1.0, True, True)
    ('[0, 4294967295]', '(0, 1)')
    """
    left = "(-∞" if low is None else ("(" if low_open else "[") + _bound(low)
    right = "∞)" if high is None else _bound(high) + (")" if high_open else "]")
    return f"{left}, {right}"


def _bound(value: float) -> str:
    return str(value) if isinstance(value, Integral) else f"{value:g}"


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


# ISO 639-1 codes (and the deprecated sh, mo, iw, in, ji still in use); three-letter primary
# subtags (ISO 639-2/3) are accepted by shape.
_ISO_639_1 = frozenset(
    """aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu
    cv cy da de dv dz ee el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho
    hr ht hu hy hz ia id ie ig ii ik in io is it iu iw ja ji jv ka kg ki kj kk kl km kn ko kr
    ks ku kv kw ky la lb lg li ln lo lt lu lv mg mh mi mk ml mn mo mr ms mt my na nb nd ne ng
    nl nn no nr nv ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg sh si sk
    sl sm sn so sq sr ss st su sv sw ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve
    vi vo wa wo xh yi yo za zh zu""".split()
)
_LANGUAGE_TAG = re.compile(r"([a-z]{2,3})(?:[-_][a-z0-9]{2,8})*")


#: A Hugging Face hub id: ``name`` or ``organization/name`` (letters, digits, ``._-``).
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


def is_hub_id(name: str) -> bool:
    """Whether ``name`` has the form of a hub id (``name`` or ``organization/name``: no leading
    dot or slash, no ``..`` part, so never an absolute or relative path)."""
    return _HUB_ID.fullmatch(name) is not None


def check_language(code: str, name: str = "--language") -> str:
    """``code`` if it is a language tag (``en``, ``pt-br``, ``zh-hant``, ``yue``); a
    ``ValueError`` naming ``name`` otherwise (the segmenter would fall back to English
    rules without a word)."""
    tag = code.strip().lower()
    match = _LANGUAGE_TAG.fullmatch(tag)
    if match is None or (len(match[1]) == 2 and match[1] not in _ISO_639_1):
        raise ValueError(
            f"{name} {code!r} is not a language code (ISO 639, e.g. en, de, ja, zh-hant)"
        )
    return code.strip()
