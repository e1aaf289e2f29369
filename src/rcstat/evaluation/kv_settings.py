"""The settings of ``rcstat bench kv``: a method, its mode and window, and RCStatPress's knobs.

A :class:`Setting` names every knob of :data:`~rcstat.press.options.KNOBS` (the press's own
defaults, :class:`~rcstat.press.options.RCStatOptions`), in its key, in its rows and in the press
it builds, by reading that tuple: a knob added to the press is swept, keyed and recorded with
no change here.

>>> Setting.rcstat(ratio=0.5, window=8).key
'rcstat|r=0.5|c=None|w=8|group=mean,score=expected,budget=pooled,floor=0.2,sinks=0'
>>> Setting("knorm", ratio=0.3).key
'knorm|r=0.3'
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rcstat.defaults import DEFAULT_WINDOW, QUESTION_WINDOW
from rcstat.press.options import KNOBS, RATIO_ONLY_KNOBS, knob_default
from rcstat.press.registry import make_press as build_press

__all__ = ["KNOB_DEFAULTS", "Setting", "cache_for", "make_press", "mode_group", "settings_grid"]

#: RCStatPress's knobs besides ratio, threshold and window, at the press's defaults.
KNOB_DEFAULTS: dict[str, Any] = {name: knob_default(name) for name in KNOBS}


def mode_group(ratio: float | None) -> str:
    """The press's GQA rule where none is given: the group's mean with a target ratio, any
    head (the paper's rule) with a threshold (:class:`~rcstat.press.rcstat_press.RCStatPress`)."""
    return "max" if ratio is None else "mean"


@dataclass(frozen=True)
class Setting:
    """One compression configuration: a method, its target ``ratio`` (baselines, RCStat's
    target-ratio mode) or ``threshold`` (RCStat's threshold mode, c of eq. 9), RCStat's
    ``window`` (tokens, or :data:`~rcstat.defaults.QUESTION_WINDOW`) and its ``knobs``
    (``(name, value)`` for every name of :data:`~rcstat.press.options.KNOBS`, in that order;
    build one with :meth:`rcstat`)."""

    method: str  # "rcstat" or a baseline name
    ratio: float | None = None
    threshold: float | None = None
    window: int | str = DEFAULT_WINDOW
    knobs: tuple[tuple[str, Any], ...] = field(default=tuple(KNOB_DEFAULTS.items()))

    @classmethod
    def rcstat(
        cls,
        *,
        ratio: float | None = None,
        threshold: float | None = None,
        window: int | str = DEFAULT_WINDOW,
        **knobs: Any,
    ) -> Setting:
        """RCStat's setting with ``knobs`` (the others at the press's defaults; no ``group``:
        :func:`mode_group` of the mode)."""
        unknown = sorted(set(knobs) - set(KNOBS))
        if unknown:
            raise ValueError(f"RCStatPress has no option {unknown[0]!r}")
        values = {**KNOB_DEFAULTS, **knobs}
        if values["group"] is None:
            values["group"] = mode_group(ratio)
        ordered = tuple((name, values[name]) for name in KNOBS)
        return cls("rcstat", ratio=ratio, threshold=threshold, window=window, knobs=ordered)

    def knob(self, name: str) -> Any:
        """The value of knob ``name``."""
        return dict(self.knobs)[name]

    @property
    def key(self) -> str:
        """The setting's name in the rows and the manifest: a baseline's method and ratio;
        RCStat's mode, window and every knob."""
        if self.method != "rcstat":
            return f"{self.method}|r={self.ratio}"
        knobs = ",".join(f"{name}={value}" for name, value in self.knobs)
        return f"rcstat|r={self.ratio}|c={self.threshold}|w={self.window}|{knobs}"

    def to_row(self) -> dict[str, Any]:
        """The setting's columns of a row: method, ratio, threshold, window and each knob."""
        return {
            "method": self.method,
            "ratio": self.ratio,
            "threshold": self.threshold,
            "window": self.window,
            **dict(self.knobs),
        }


def make_press(setting: Setting, question_tokens: int = 0) -> Any:
    """The press of a setting (:func:`rcstat.press.registry.make_press`); a
    :data:`~rcstat.defaults.QUESTION_WINDOW` window is the ``question_tokens`` ending the
    compressed prompt."""
    if setting.method != "rcstat":
        return build_press(setting.method, ratio=setting.ratio)
    window = setting.window
    if window == QUESTION_WINDOW:
        if question_tokens <= 0:
            raise ValueError(
                "a question window needs the question inside the compressed prompt "
                "(--press-scope question)"
            )
        window = question_tokens
    return build_press(
        "rcstat",
        ratio=setting.ratio,
        threshold=setting.threshold,
        window=int(window),
        **dict(setting.knobs),
    )


def cache_for(setting: Setting) -> Any:
    """A fresh cache for a setting: RCStat evicts for real into a :class:`RaggedCache`;
    kvpress's presses truncate (or, for AdaKV, mask) a :class:`DynamicCache`."""
    from transformers import DynamicCache

    from rcstat.press.cache import RaggedCache

    return RaggedCache() if setting.method == "rcstat" else DynamicCache()


def _products(knobs: Mapping[str, Sequence[Any]], names: Sequence[str]) -> list[dict[str, Any]]:
    """Every combination of the values of the knobs ``names`` (a knob not in ``knobs``: the
    press's default alone)."""
    lists = [knobs.get(name, [KNOB_DEFAULTS[name]]) for name in names]
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*lists)]


def settings_grid(
    presses: Sequence[str],
    ratios: Sequence[float],
    thresholds: Sequence[float],
    windows: Sequence[int | str],
    knobs: Mapping[str, Sequence[Any]] | None = None,
) -> list[Setting]:
    """Every baseline at every ratio; RCStat, for every combination of the ``knobs``' values
    (each knob's list; missing: the press's default) and every window, at every ratio (target
    mode) and every threshold (threshold mode, where the knobs of
    :data:`~rcstat.press.options.RATIO_ONLY_KNOBS` are left out). A ``group`` of None is the
    press's default of each mode (:func:`mode_group`)."""
    knobs = dict(knobs or {})
    unknown = sorted(set(knobs) - set(KNOBS))
    if unknown:
        raise ValueError(f"RCStatPress has no option {unknown[0]!r}")
    shared = [name for name in KNOBS if name not in RATIO_ONLY_KNOBS]
    grid: list[Setting] = []
    for method in presses:
        if method != "rcstat":
            grid += [Setting(method, ratio=r) for r in ratios]
            continue
        for common in _products(knobs, shared):
            for own in _products(knobs, RATIO_ONLY_KNOBS):
                grid += [
                    Setting.rcstat(ratio=r, window=w, **common, **own)
                    for w in windows
                    for r in ratios
                ]
            grid += [
                Setting.rcstat(threshold=c, window=w, **common) for w in windows for c in thresholds
            ]
    return grid
