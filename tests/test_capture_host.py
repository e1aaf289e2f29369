"""HostStack, stack_on_host, sum_on_host, download_many and flat_bytes: per-layer results
gathered on the host."""

from __future__ import annotations

import pytest
import torch

from rcstat.capture.host import (
    HostStack,
    download_many,
    flat_bytes,
    stack_on_host,
    sum_on_host,
)


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


def test_stack_on_host_equals_stacking_each_value() -> None:
    values = [torch.arange(6, dtype=torch.float64).view(2, 3) * k for k in range(4)]
    got = stack_on_host(values)
    assert got.device.type == "cpu" and got.shape == (4, 2, 3)
    torch.testing.assert_close(got, torch.stack([v.clone() for v in values]))


def test_stack_on_host_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="values is empty"):
        stack_on_host([])


def test_sum_on_host_equals_summing_the_stack() -> None:
    gen = torch.Generator().manual_seed(0)
    values = [torch.randn(3, 50, generator=gen) for _ in range(32)]
    got = sum_on_host(values)
    assert got.device.type == "cpu" and got.shape == (3, 50)
    assert torch.equal(got, torch.stack(values).sum(0))
    with pytest.raises(ValueError, match="values is empty"):
        sum_on_host([])


def test_download_many_keeps_host_values_as_they_are() -> None:
    values = {"a": torch.arange(5), "b": torch.ones(2, 3, dtype=torch.float64)}
    got = download_many(values)
    assert list(got) == list(values) and all(got[k] is values[k] for k in values)


@pytest.mark.parametrize(
    "value",
    [
        torch.arange(8).view(2, 4)[:1, 1],  # one element, stride 4: contiguous by torch's rule
        torch.arange(8).view(2, 4)[:0, 1],  # none, stride 4
        torch.arange(12, dtype=torch.int32).view(3, 4).t(),  # transposed
        torch.tensor([[1.5, -0.0], [float("nan"), 2.0]], dtype=torch.bfloat16),
        torch.tensor([True, False, True]),
        torch.tensor(7, dtype=torch.int16),  # no dimension
    ],
)
def test_flat_bytes_are_the_row_major_bytes(value: torch.Tensor) -> None:
    """Oracle: numpy's C-order bytes of the values (bfloat16 through its int16 bits)."""
    raw = flat_bytes(value)
    assert raw.dtype == torch.uint8 and raw.shape == (value.numel() * value.element_size(),)
    same = value.view(torch.int16) if value.dtype == torch.bfloat16 else value
    assert raw.numpy().tobytes() == same.numpy().tobytes()
