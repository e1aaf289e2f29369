"""HostStack: per-layer results gathered into one preallocated host tensor."""

from __future__ import annotations

import pytest
import torch

from rcstat.capture.host import HostStack


def test_layers_land_in_their_slices_in_any_order() -> None:
    stack = HostStack([3, 5, 7], (2, 4), torch.float64, pinned=False)
    values = {layer: torch.full((2, 4), float(layer)) for layer in (7, 3, 5)}
    for layer, value in values.items():
        stack.put(layer, value)
    result = stack.result()
    assert result.shape == (3, 2, 4) and result.dtype == torch.float64
    torch.testing.assert_close(result[:, 0, 0], torch.tensor([3.0, 5.0, 7.0], dtype=torch.float64))


def test_a_missing_layer_is_an_error() -> None:
    stack = HostStack([0, 1], (3,), torch.float32, pinned=False)
    stack.put(0, torch.zeros(3))
    with pytest.raises(RuntimeError, match=r"layers \[1\] were never reduced"):
        stack.result()


def test_a_wrong_shape_is_an_error() -> None:
    stack = HostStack([0], (3,), torch.float32, pinned=False)
    with pytest.raises(RuntimeError):
        stack.put(0, torch.zeros(4))
