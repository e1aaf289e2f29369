"""rcstat.grounding.calibrate: the threshold and its record, on scores given by hand.

:func:`~rcstat.grounding.calibrate.calibrate_threshold` reads a grounder through its
``ground(context, response).score`` only; a stand-in returns the scores written here, so the
threshold (a lower quantile of the copies' scores), the false alarms, the swaps caught and the
share of pairs where the copy scores above its swap are checked against values computed by
hand. (``tests/test_grounding.py`` builds a whole profile on the tiny model.)
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from rcstat.grounding.calibrate import calibrate_threshold
from rcstat.grounding.swaps import SwapPair

# (copy score, swap score) of each pair
SCORES = [(0.2, 0.1), (0.4, 0.5), (0.6, 0.3), (0.8, 0.7), (1.0, 1.0)]


class _Scores:
    """A grounder that scores each text as written in :data:`SCORES`."""

    def __init__(self, pairs: list[SwapPair], scores: list[tuple[float, float]]) -> None:
        self.scores: dict[tuple[str, str], float] = {}
        for pair, (copy, swap) in zip(pairs, scores, strict=True):
            self.scores[pair.context, pair.copy] = copy
            self.scores[pair.context, pair.edit] = swap

    def ground(self, context: str, response: str) -> Any:
        return SimpleNamespace(score=self.scores[context, response])


def _pairs(n: int) -> list[SwapPair]:
    return [
        SwapPair(
            context=f"Context {i}: it was built in {1900 + i}.",
            copy=f"It was built in {1900 + i}.",
            edit=f"It was built in {1800 + i}.",
            kind="number",
            original=str(1900 + i),
            replacement=str(1800 + i),
            start=16,
            end=20,
            source=i,
        )
        for i in range(n)
    ]


def _calibrate(scores: list[tuple[float, float]], quantile: float) -> Any:
    pairs = _pairs(len(scores))
    grounder: Any = _Scores(pairs, scores)
    return calibrate_threshold(grounder, pairs, quantile=quantile)


@pytest.mark.parametrize(
    ("quantile", "threshold", "false_alarms", "caught"),
    [
        # copies 0.2 0.4 0.6 0.8 1.0: the q quantile lies at position 4q (linear in between)
        (0.25, 0.4, 1 / 5, 2 / 5),  # flags the copy 0.2; the swaps 0.1, 0.3
        (0.1, 0.28, 1 / 5, 1 / 5),  # 0.2 + 0.4 · (0.4 − 0.2)
        (0.75, 0.8, 3 / 5, 4 / 5),
        (0.5, 0.6, 2 / 5, 3 / 5),
    ],
)
def test_the_threshold_is_the_lower_quantile_of_the_copies(
    quantile: float, threshold: float, false_alarms: float, caught: float
) -> None:
    calibration = _calibrate(SCORES, quantile)
    assert calibration.threshold == pytest.approx(threshold, rel=1e-12)
    assert calibration.pairs == len(SCORES)
    assert calibration.false_alarms == pytest.approx(false_alarms, rel=1e-12)
    assert calibration.caught == pytest.approx(caught, rel=1e-12)


def test_ranked_is_the_share_of_pairs_whose_copy_scores_above_its_swap() -> None:
    # the copy above its swap in pairs 0, 2 and 3, below in 1, tied in 4 (counts half)
    assert _calibrate(SCORES, 0.25).ranked == pytest.approx(3.5 / 5, rel=1e-12)
    every_copy_above = [(0.9, 0.1), (0.8, 0.2), (0.7, 0.3)]
    assert _calibrate(every_copy_above, 0.25).ranked == 1.0
    every_swap_above = [(b, a) for a, b in every_copy_above]
    assert _calibrate(every_swap_above, 0.25).ranked == 0.0
    assert _calibrate([(0.5, 0.5), (0.4, 0.6)], 0.5).ranked == pytest.approx(0.25, rel=1e-12)


def test_the_record_names_every_field() -> None:
    calibration = _calibrate(SCORES, 0.25)
    assert calibration.to_dict() == {
        "threshold": calibration.threshold,
        "pairs": 5,
        "false_alarms": calibration.false_alarms,
        "caught": calibration.caught,
        "ranked": calibration.ranked,
    }


@pytest.mark.parametrize("quantile", [0.0, 1.0, -0.1, 1.5])
def test_a_quantile_outside_the_open_interval_is_refused(quantile: float) -> None:
    with pytest.raises(ValueError, match="threshold_quantile must be in"):
        _calibrate(SCORES, quantile)


def test_no_pair_is_refused() -> None:
    with pytest.raises(ValueError, match="no calibration pair"):
        grounder: Any = _Scores([], [])
        calibrate_threshold(grounder, [], quantile=0.25)
