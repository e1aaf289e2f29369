"""The fused attribution kernel under Triton's interpreter (numpy on the CPU); the cases are
in ``tests/attribution_fused_cases.py``."""

from __future__ import annotations

import numpy as np

from rcstat.attribution.fused import row_segments
from tests._interpreter import run_cases


def test_fused_attribution_under_the_interpreter_matches_the_reference() -> None:
    out = run_cases("tests/attribution_fused_cases.py")
    assert "skipped" not in out, out[-2000:]


def test_row_segments_count_every_row_once_for_the_ranking() -> None:
    segments = row_segments([(6, 9), (0, 2)], 12)
    assert segments.tolist() == [[0, 2, 1, 1], [2, 6, -1, 1], [6, 9, 0, 1], [9, 12, -1, 1]]
    overlapping = row_segments([(0, 5), (3, 7)], 8)
    assert overlapping.tolist() == [[0, 5, 0, 0], [3, 7, 1, 0], [0, 8, -1, 1]]
    for segments in (row_segments([(2, 4)], 4), row_segments([(0, 4)], 4)):
        counted = np.zeros(4, dtype=int)
        for a, b, _, ranked in segments:
            counted[a:b] += ranked
        assert (counted == 1).all()
