"""The presses rcstat knows by name: RCStatPress and kvpress's baselines (paper §5.2).

Names are plain data, so the CLI can validate ``--presses`` before anything heavy is imported;
:func:`make_press` imports kvpress (the ``rcstat[press]`` extra) only when a press is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rcstat.checks import check_count, check_number
from rcstat.defaults import DEFAULT_WINDOW
from rcstat.press.extra import require_kvpress
from rcstat.press.options import KNOBS, RATIO_ONLY_KNOBS

__all__ = ["BASELINES", "PRESS_NAMES", "check_press_names", "make_press"]

#: kvpress's presses compared with RCStatPress, in the order reports list them.
BASELINES: tuple[str, ...] = ("knorm", "snapkv", "streaming_llm", "tova", "adakv_snapkv")
#: Every name :func:`make_press` accepts.
PRESS_NAMES: tuple[str, ...] = ("rcstat", *BASELINES)


def check_press_names(names: list[str]) -> list[str]:
    """``names`` if every one is known and none repeats; ``ValueError`` naming the culprit."""
    if not names:
        raise ValueError(f"give at least one press; choose from {', '.join(PRESS_NAMES)}")
    unknown = [n for n in names if n not in PRESS_NAMES]
    if unknown:
        raise ValueError(f"unknown press {unknown[0]!r}; choose from {', '.join(PRESS_NAMES)}")
    if len(set(names)) != len(names):
        raise ValueError(f"a press is listed twice: {', '.join(names)}")
    return names


def make_press(
    name: str,
    *,
    ratio: float | None = None,
    threshold: float | None = None,
    window: int = DEFAULT_WINDOW,
    **knobs: Any,
) -> Any:
    """Build the press ``name``: RCStatPress in threshold mode (``threshold``) or target-ratio
    mode (``ratio``) with its ``window`` and ``knobs`` (any of
    :data:`~rcstat.press.options.KNOBS`; the others at the press's defaults,
    :class:`~rcstat.press.options.RCStatOptions`), or a kvpress baseline at compression ratio
    ``ratio``."""
    check_press_names([name])
    unknown = sorted(set(knobs) - set(KNOBS))
    if unknown:
        known = ", ".join(KNOBS)
        raise ValueError(f"RCStatPress has no option {unknown[0]!r} (its knobs: {known})")
    require_kvpress()
    from kvpress import AdaKVPress, KnormPress, SnapKVPress, StreamingLLMPress, TOVAPress

    from rcstat.press.rcstat_press import RCStatPress

    if name == "rcstat":
        window = check_count("window", window)
        if threshold is not None:
            kept = {k: v for k, v in knobs.items() if k not in RATIO_ONLY_KNOBS}
            return RCStatPress(threshold=threshold, window_size=window, **kept)
        return RCStatPress(compression_ratio=ratio, window_size=window, **knobs)
    r = check_number("ratio", 0.0 if ratio is None else ratio, low=0, high=1, high_open=True)
    factories: dict[str, Callable[[], Any]] = {
        "knorm": lambda: KnormPress(compression_ratio=r),
        "snapkv": lambda: SnapKVPress(compression_ratio=r),
        "streaming_llm": lambda: StreamingLLMPress(compression_ratio=r),
        "tova": lambda: TOVAPress(compression_ratio=r),
        "adakv_snapkv": lambda: AdaKVPress(SnapKVPress(compression_ratio=r)),
    }
    return factories[name]()
