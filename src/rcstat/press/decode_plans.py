"""Decode split plans measured per card: which layout and how many programs per SM win where.

How the split-KV decode kernel should cut a step's rows depends on the card: on an H100 a work
list (every chunk of every segment in one 1-D grid, one program per SM) won at every context
of a batch-1 step, while on an H200 the same plan lost 11–16 % at 64k and 128k to a grid per
segment with four programs per SM. A card's measurements are a table of *points* — a step's
``segments`` (``batch · kv_heads``) and row bound (``max_len + room``), and the layout and
``waves`` that were fastest there — and a step takes the plan of the nearest point
(:func:`nearest`), in ``log2`` of both.

The table ships inside the package (``press/decode_plans.json``, made by
``python -m benchmarks.tune_decode_kernel --plans``); the file named by the environment
variable ``RCSTAT_DECODE_PLANS``, in the same format, adds cards or replaces theirs. A card
found in neither keeps the built-in rule of :func:`~rcstat.press.decode_kernel.split_plan`.
Cards are matched by the name CUDA gives them and their SM count.

The format (``"format": 1``)::

    {"format": 1,
     "cards": [{"name": "NVIDIA H200", "sms": 132, "source": "...",
                "points": [{"segments": 8, "rows": 8256, "work_list": true, "waves": 1}, ...]}]}
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "ENVIRONMENT",
    "FORMAT",
    "REMEMBERED",
    "CardPlans",
    "PlanPoint",
    "card_plans",
    "nearest",
    "read_table",
]

#: Step shapes whose nearest point a card remembers.
REMEMBERED = 4096
#: The environment variable naming a table of the user's own cards.
ENVIRONMENT = "RCSTAT_DECODE_PLANS"
FORMAT = 1


@dataclass(frozen=True)
class PlanPoint:
    """The fastest plan measured at one step shape.

    Attributes
    ----------
    segments
        ``batch · kv_heads`` of the step.
    rows
        The row bound of every segment, ``max_len + room``.
    work_list
        Whether a work list (``True``) or a grid per segment (``False``) was fastest.
    waves
        Programs per SM of that plan.
    """

    segments: int
    rows: int
    work_list: bool
    waves: int

    def distance(self, segments: int, rows: int) -> float:
        """``|log2(segments / self.segments)| + |log2(rows / self.rows)|`` (rows of 0 as 1)."""
        return abs(math.log2(segments / self.segments)) + abs(
            math.log2(max(rows, 1) / max(self.rows, 1))
        )


@dataclass(frozen=True)
class CardPlans:
    """The measured points of one card."""

    name: str
    sms: int
    points: tuple[PlanPoint, ...]
    source: str = ""
    # nearest point per step shape: a layout's row bound holds until its next repack, so a
    # decode step (every layer of it) finds its point here instead of searching again
    _chosen: dict[tuple[int, int], PlanPoint] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def point_at(self, segments: int, rows: int) -> PlanPoint:
        """:func:`nearest` of this card's points to a step of ``segments`` segments and
        ``rows`` rows, remembered (up to :data:`REMEMBERED` step shapes)."""
        found = self._chosen.get((segments, rows))
        if found is None:
            if len(self._chosen) >= REMEMBERED:
                self._chosen.clear()
            found = self._chosen[segments, rows] = nearest(self.points, segments, rows)
        return found

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "sms": self.sms,
            "source": self.source,
            "points": [
                {"segments": p.segments, "rows": p.rows, "work_list": p.work_list, "waves": p.waves}
                for p in self.points
            ],
        }


def nearest(points: tuple[PlanPoint, ...], segments: int, rows: int) -> PlanPoint:
    """The point nearest to a step of ``segments`` segments and ``rows`` rows (the first of
    equals).

    Examples
    --------
    >>> points = (PlanPoint(8, 8_256, True, 1), PlanPoint(8, 65_600, False, 4))
    >>> nearest(points, 8, 4_000).work_list, nearest(points, 8, 40_000).work_list
    (True, False)
    """
    if not points:
        raise ValueError("a card's table has no points")
    return min(points, key=lambda point: point.distance(segments, rows))


def _whole(value: Any, name: str, where: str, least: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"{where}: {name} must be an integer >= {least}, got {value!r}")
    return value


def _card(entry: Any, where: str) -> CardPlans:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise ValueError(f"{where}: each card is an object with a 'name' (text)")
    where = f"{where}: card {entry['name']!r}"
    points = entry.get("points")
    if not isinstance(points, list) or not points:
        raise ValueError(f"{where}: 'points' must be a non-empty list")
    parsed = []
    for point in points:
        if not isinstance(point, dict) or not isinstance(point.get("work_list"), bool):
            raise ValueError(
                f"{where}: each point has segments, rows, work_list (true/false) and waves"
            )
        parsed.append(
            PlanPoint(
                segments=_whole(point.get("segments"), "segments", where, 1),
                rows=_whole(point.get("rows"), "rows", where, 0),
                work_list=point["work_list"],
                waves=_whole(point.get("waves"), "waves", where, 1),
            )
        )
    return CardPlans(
        name=entry["name"],
        sms=_whole(entry.get("sms"), "sms", where, 1),
        points=tuple(parsed),
        source=str(entry.get("source", "")),
    )


def read_table(path: Path) -> tuple[CardPlans, ...]:
    """The cards of a table file, checked (a clear ``ValueError`` naming the file)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error.msg}, line {error.lineno})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a decode-plan table of format {FORMAT}")
    cards = data.get("cards")
    if not isinstance(cards, list):
        raise ValueError(f"{path}: 'cards' must be a list")
    return tuple(_card(entry, str(path)) for entry in cards)


@functools.cache
def _tables(user: str | None) -> dict[tuple[str, int], CardPlans]:
    shipped = resources.files("rcstat.press").joinpath("decode_plans.json")
    with resources.as_file(shipped) as path:
        found = {(c.name, c.sms): c for c in read_table(path)}
    if user:
        found |= {(c.name, c.sms): c for c in read_table(Path(user))}
    return found


def card_plans(name: str, sms: int) -> CardPlans | None:
    """The measured plans of the card CUDA calls ``name`` with ``sms`` SMs (the file of
    ``RCSTAT_DECODE_PLANS`` first, then the package's), or None when it was never measured."""
    return _tables(os.environ.get(ENVIRONMENT) or None).get((name, sms))
