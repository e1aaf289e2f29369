"""What a graph replay hands out: copies of its output buffers in the outputs' own shape."""

from __future__ import annotations

from typing import NamedTuple

import torch

from rcstat.capture.graphs import _cloned


class _Pair(NamedTuple):
    first: torch.Tensor
    second: int


def test_every_tensor_is_copied_and_the_containers_kept() -> None:
    a, b, c = torch.ones(3), torch.zeros(2), torch.arange(4)
    outputs = ({"a": a, "pair": _Pair(b, 7)}, [c, "label"], 2.5)
    got = _cloned(outputs)
    assert isinstance(got, tuple) and isinstance(got[1], list) and isinstance(got[0]["pair"], _Pair)
    assert got[0]["pair"].second == 7 and got[1][1] == "label" and got[2] == 2.5
    for old, new in ((a, got[0]["a"]), (b, got[0]["pair"].first), (c, got[1][0])):
        assert torch.equal(old, new) and new.data_ptr() != old.data_ptr()
    a += 1  # the buffers are refilled by the next replay: the copies keep their values
    assert torch.equal(got[0]["a"], torch.ones(3))
