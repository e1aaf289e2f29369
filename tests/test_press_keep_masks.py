"""RCStatPress's keep masks, position by position, against brute-force eq. 9 (every mode).

The press's own counts (``press.kept``) cannot tell the right entries from the wrong ones
(reversing the kept positions keeps the counts). These tests read the masks the press applies —
``module.masked_key_indices`` for kvpress's attention patch (reference mode) and the positions
the ragged cache stores — and compare them, per layer, KV head and position, with
:func:`tests._reference.eq9_keep_masks`: the paper's eq. 9 by loops over the pre-softmax scores
recomputed from the layers' own projections (:func:`tests._tiny_models.reference_scores`).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import pytest
import torch
from transformers import DynamicCache

from rcstat.press.rcstat_press import RCStatPress
from tests._reference import eq9_keep_masks, eq9_relative_layers
from tests._tiny_models import reference_scores, tiny_model

pytestmark = pytest.mark.press  # needs the rcstat[press] extra (kvpress)

LENGTH, KV_HEADS = 48, 2  # the tiny models have 3 layers, 4 query heads and 2 KV heads


def _ids(length: int = LENGTH) -> torch.Tensor:
    return torch.randint(0, 600, (1, length), generator=torch.Generator().manual_seed(1))


@cache
def _relative(arch: str, window: int, score: str) -> np.ndarray:
    """``[layers, heads, T - w]``: brute-force ``s_i / θ`` of every query head."""
    blocks = reference_scores(tiny_model(arch), _ids())  # [1, heads, T, T] per layer
    return eq9_relative_layers([b[0].numpy() for b in blocks], window, score)


def _applied_masks(press: RCStatPress, arch: str) -> np.ndarray:
    """``[layers, kv_heads, T]``: the entries kvpress's attention patch does not mask after a
    prefill in reference mode (a ``DynamicCache``)."""
    model = tiny_model(arch)
    with torch.no_grad(), press(model):
        model(_ids(), past_key_values=DynamicCache())
    masks = []
    for layer in model.model.layers:
        keep = torch.ones(1, KV_HEADS, LENGTH, dtype=torch.bool)
        masked: Any = layer.self_attn.masked_key_indices
        if masked is not None:
            keep[masked] = False
        masks.append(keep[0])
    got = torch.stack(masks).numpy()
    counts = torch.stack([press.kept[i][0] for i in range(len(masks))]).numpy()
    np.testing.assert_array_equal(counts, got.sum(-1))  # the counts describe the masks
    return got


def _stored_masks(press: RCStatPress, arch: str) -> np.ndarray:
    """``[layers, kv_heads, T]``: the prompt positions the ragged cache still stores."""
    from rcstat.press import RaggedCache, ragged_attention

    model = tiny_model(arch)
    cache_ = RaggedCache()
    with torch.no_grad(), press(model), ragged_attention(model):
        model(_ids(), past_key_values=cache_)
    masks = np.zeros((len(model.model.layers), KV_HEADS, LENGTH), dtype=bool)
    for layer in range(masks.shape[0]):
        packed = cache_.layer(layer).packed
        starts = packed.seg_start
        for head in range(KV_HEADS):
            stored = packed.positions[int(starts[head]) : int(starts[head + 1])]
            stored = stored[(stored >= 0) & (stored < LENGTH)]
            masks[layer, head, stored.numpy()] = True
    return masks


def _assert_masks_equal(got: np.ndarray, want: np.ndarray) -> None:
    wrong = np.argwhere(got != want)
    assert wrong.size == 0, (
        f"{len(wrong)} entries differ from eq. 9 (layer, kv_head, position): {wrong[:8].tolist()}"
    )


@pytest.mark.parametrize(
    ("window", "sinks", "score"), [(8, 0, "expected"), (4, 3, "expected"), (8, 4, "upper")]
)
@pytest.mark.parametrize("group", ["max", "mean"])
@pytest.mark.parametrize("threshold", [0.0, 0.8, 1.0, 1.5])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_threshold_mode_keeps_the_eq9_entries(
    arch: str, threshold: float, group: str, window: int, sinks: int, score: str
) -> None:
    """Keep ``i`` iff its (group's) ``s_i / θ > c``; window and sinks always; ``c = 0`` all."""
    press = RCStatPress(
        threshold=threshold,
        window_size=window,
        group=group,
        score=score,
        sinks=sinks,  # type: ignore[arg-type]
    )
    want = eq9_keep_masks(
        _relative(arch, window, score),
        window,
        KV_HEADS,
        threshold=threshold,
        group=group,
        sinks=sinks,
    )
    if threshold >= 1:  # the case is not vacuous: something is evicted, something kept
        assert 0 < (~want[..., : LENGTH - window]).sum() < want[..., : LENGTH - window].size
    _assert_masks_equal(_applied_masks(press, arch), want)


#: target-ratio cases: (ratio, budget, floor, group, score, sinks, window)
RATIO_CASES = [
    (0.3, "layer", 0.0, "max", "expected", 0, 8),
    (0.6, "layer", 0.0, "mean", "expected", 0, 8),
    (0.5, "layer", 0.0, "max", "upper", 0, 8),
    (0.5, "layer", 0.0, "mean", "expected", 4, 4),
    (0.6, "pooled", 0.0, "max", "expected", 0, 8),
    (0.6, "pooled", 0.2, "mean", "expected", 0, 8),
    (0.6, "pooled", 0.6, "max", "expected", 0, 8),
    (0.5, "pooled", 0.2, "mean", "upper", 3, 8),
    (0.5, "pooled", 0.6, "mean", "expected", 5, 4),
    (0.5, "pooled", 0.2, "max", "expected", 12, 8),  # more sinks than the floor protects
]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize(
    ("ratio", "budget", "floor", "group", "score", "sinks", "window"), RATIO_CASES
)
def test_target_ratio_mode_evicts_the_eq9_lowest_entries(
    arch: str,
    ratio: float,
    budget: str,
    floor: float,
    group: str,
    score: str,
    sinks: int,
    window: int,
) -> None:
    """``c`` chosen as the quantile of the combined relative scores that evicts
    ``round(r · entries)`` per layer or over the model (above each head's floor)."""
    press = RCStatPress(
        compression_ratio=ratio,
        window_size=window,
        budget=budget,  # type: ignore[arg-type]
        floor=floor,
        group=group,  # type: ignore[arg-type]
        score=score,  # type: ignore[arg-type]
        sinks=sinks,
    )
    relative = _relative(arch, window, score)
    want = eq9_keep_masks(
        relative,
        window,
        KV_HEADS,
        ratio=ratio,
        group=group,
        budget=budget,
        floor=floor,
        sinks=sinks,
    )
    _assert_masks_equal(_applied_masks(press, arch), want)
    if budget == "pooled" and floor == 0.0:  # the pooled budget is not a per-layer one
        per_layer = eq9_keep_masks(
            relative, window, KV_HEADS, ratio=ratio, group=group, sinks=sinks
        )
        assert (per_layer != want).any()


def test_the_default_target_ratio_press_keeps_the_eq9_entries() -> None:
    """``RCStatPress(compression_ratio=r)``: the group's mean, pooled, a floor of 0.2, w = 8."""
    press = RCStatPress(compression_ratio=0.5)
    window = press.window_size
    want = eq9_keep_masks(
        _relative("llama", window, "expected"),
        window,
        KV_HEADS,
        ratio=0.5,
        group="mean",
        budget="pooled",
        floor=0.2,
    )
    _assert_masks_equal(_applied_masks(press, "llama"), want)


@pytest.mark.parametrize(
    "options",
    [
        {"threshold": 1.0, "sinks": 3},
        {"compression_ratio": 0.5, "budget": "layer", "group": "max"},
        {"compression_ratio": 0.6, "budget": "pooled", "floor": 0.2, "sinks": 4},
    ],
    ids=["threshold", "layer", "pooled"],
)
def test_the_ragged_cache_stores_exactly_the_eq9_entries(options: dict[str, Any]) -> None:
    """With a ``RaggedCache`` the evictions are real: the positions left in memory per KV head
    are the brute-force eq. 9 mask."""
    press = RCStatPress(window_size=8, **options)
    ratio = options.get("compression_ratio")
    want = eq9_keep_masks(
        _relative("llama", 8, "expected"),
        8,
        KV_HEADS,
        threshold=options.get("threshold", 1.0),
        ratio=ratio,
        group=press.group or "max",
        budget=options.get("budget", "layer"),
        floor=options.get("floor", 0.0),
        sinks=options.get("sinks", 0),
    )
    _assert_masks_equal(_stored_masks(press, "llama"), want)
