"""RCStatPress (paper eq. 9) against a brute-force oracle on tiny random models."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch
from transformers import DynamicCache

import rcstat.press.rcstat_press as press_module
from rcstat.capture.graphs import GraphedCalls
from rcstat.press.rcstat_press import RCStatPress, relative_scores
from tests._reference import eq9_relative
from tests._tiny_models import reference_scores, tiny_model

pytestmark = pytest.mark.press  # needs the rcstat[press] extra (kvpress)


@pytest.mark.parametrize("score", ["expected", "upper"])
@pytest.mark.parametrize("window", [4, 8])
def test_relative_scores_equal_brute_force(window: int, score: str) -> None:
    gen = torch.Generator().manual_seed(window)
    scores = torch.randn(1, 3, window, 40, generator=gen, dtype=torch.float64) * 5
    got = relative_scores(scores, score)  # type: ignore[arg-type]
    for head in range(3):
        want = eq9_relative(scores[0, head].numpy(), window, score)
        np.testing.assert_allclose(got[0, head].numpy(), want, rtol=1e-9, atol=1e-12)


def _prefill(press: RCStatPress, arch: str = "llama", length: int = 48) -> tuple:
    model = tiny_model(arch)
    ids = torch.randint(0, 600, (1, length), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), press(model):
        model(ids, past_key_values=DynamicCache())
    return model, ids


@pytest.mark.parametrize("rule", ["max", "mean"])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_keep_masks_follow_eq9_with_the_gqa_rule(arch: str, rule: str) -> None:
    """Recompute eq. 9 from q·k of the layers' own projections: a KV head keeps token i iff
    some query head of its group has s_i / θ > c (``max``), or the group's mean s_i / θ > c
    (``mean``); the window is always kept."""
    press = RCStatPress(threshold=1.0, window_size=8, group=rule)  # type: ignore[arg-type]
    model, ids = _prefill(press, arch)
    blocks = reference_scores(model, ids)  # [1, heads, T, T] per layer
    length, window, group = ids.shape[1], 8, 2
    for layer, block in enumerate(blocks):
        rows = block[0, :, length - window :, :].numpy()  # [heads, w, T]
        normalized = np.stack([eq9_relative(rows[h], window) for h in range(4)])
        grouped = normalized.reshape(2, group, -1)  # [kv_heads, group, T - w]
        keep = (grouped > 1.0).any(axis=1) if rule == "max" else grouped.mean(axis=1) > 1.0
        np.testing.assert_array_equal(press.kept[layer][0].numpy(), keep.sum(-1) + window)


def test_the_mean_rule_keeps_no_more_than_the_max_rule() -> None:
    """A group's mean never exceeds its max: at one threshold ``mean`` evicts at least as much
    per KV head; at one target ratio both evict the same number of entries per layer."""
    by_rule = {}
    for rule in ("max", "mean"):
        press = RCStatPress(threshold=1.0, window_size=8, group=rule)  # type: ignore[arg-type]
        _prefill(press)
        by_rule[rule] = press.head_ratios()
    assert (by_rule["mean"] >= by_rule["max"]).all() and (by_rule["mean"] > by_rule["max"]).any()
    for rule in ("max", "mean"):
        press = RCStatPress(compression_ratio=0.5, window_size=8, group=rule, budget="layer")  # type: ignore[arg-type]
        _prefill(press)
        assert all(v == pytest.approx(0.5) for v in press.layer_ratios().values())


def test_threshold_zero_evicts_nothing_and_larger_c_evicts_more() -> None:
    ratios = []
    for c in (0.0, 0.5, 1.0, 1.5):
        press = RCStatPress(threshold=c)
        _prefill(press)
        ratios.append(press.realized_ratio())
    assert ratios[0] == 0.0
    assert ratios == sorted(ratios) and ratios[-1] > ratios[1]


@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.7])
def test_target_ratio_mode(ratio: float) -> None:
    press = RCStatPress(compression_ratio=ratio, window_size=8, budget="layer")
    _prefill(press, length=48)
    for value in press.layer_ratios().values():
        assert value == pytest.approx(round(ratio * 2 * 48) / (2 * 48))
    per_head = press.head_ratios()
    assert per_head.shape == (3, 1, 2)
    assert float(per_head.max()) <= 1 - 8 / 48
    assert press.realized_ratio() == pytest.approx(float(per_head.mean()))


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="compression_ratio"):
        RCStatPress(compression_ratio=1.0)
    with pytest.raises(ValueError, match="threshold"):
        RCStatPress(threshold=-1)
    with pytest.raises(ValueError, match="window_size"):
        RCStatPress(window_size=0)
    with pytest.raises(ValueError, match="window"):
        _prefill(RCStatPress(window_size=16), length=12)
    with pytest.raises(ValueError, match="outside the window"):
        _prefill(RCStatPress(compression_ratio=0.9, window_size=8), length=20)
    with pytest.raises(RuntimeError, match="no prefill"):
        RCStatPress().realized_ratio()
    with pytest.raises(ValueError, match="group must be one of max, mean"):
        RCStatPress(group="median")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="score must be one of expected, upper"):
        RCStatPress(score="lower")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="budget must be one of layer, pooled"):
        RCStatPress(budget="head")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="floor"):
        RCStatPress(compression_ratio=0.5, budget="pooled", floor=1.5)
    with pytest.raises(ValueError, match="outside the window, the sinks and the floor"):
        _prefill(RCStatPress(compression_ratio=0.7, budget="pooled", floor=1.0), length=48)


def _naive_layer_scores(
    model: torch.nn.Module, ids: torch.Tensor, window: int, score: str
) -> np.ndarray:
    """``[layers, kv_heads, T - w]``: the max over each group of s_i / θ, by loops."""
    out = []
    for block in reference_scores(model, ids):  # [1, heads, T, T]
        rows = block[0, :, ids.shape[1] - window :, :].numpy()
        normalized = np.stack([eq9_relative(r, window, score) for r in rows])
        out.append(normalized.reshape(2, 2, -1).max(axis=1))
    return np.stack(out)


def test_upper_bound_score_follows_the_oracle() -> None:
    """score="upper" ranks by A(X({i}, ĝ), Y(ĝ, ĝ)) / mean_i A: at a target ratio each layer
    evicts exactly its lowest entries by the brute-force scores."""
    press = RCStatPress(
        compression_ratio=0.5, window_size=8, score="upper", group="max", budget="layer"
    )
    model, ids = _prefill(press)
    naive = _naive_layer_scores(model, ids, 8, "upper")  # [L, Hkv, T - w]
    for layer in range(naive.shape[0]):
        order = np.sort(naive[layer].ravel())
        evict = round(0.5 * 2 * 48)
        kept_outside = press.kept[layer][0].numpy() - 8  # [Hkv]
        cut = order[evict - 1]  # the largest evicted score (no ties in random data)
        np.testing.assert_array_equal(kept_outside, (naive[layer] > cut).sum(-1))


@pytest.mark.parametrize("budget", ["layer", "pooled"])
def test_sinks_are_never_evicted(budget: str) -> None:
    """The first ``sinks`` tokens stay in every head; the rest is as without sinks, the
    evictions moving to the next-lowest entries (target ratio) or unchanged (threshold)."""
    window, length, sinks = 8, 48, 5
    press = RCStatPress(compression_ratio=0.6, budget=budget, floor=0.0, sinks=sinks, group="max")  # type: ignore[arg-type]
    model, ids = _prefill(press, length=length)
    naive = _naive_layer_scores(model, ids, window, "expected")  # [L, Hkv, T - w]
    naive[..., :sinks] = np.inf
    if budget == "layer":
        want = []
        for layer in naive:
            cut = np.sort(layer.ravel())[round(0.6 * 2 * length) - 1]
            want.append((layer > cut).sum(-1) + window)
    else:
        cut = np.sort(naive.ravel())[round(0.6 * naive.shape[0] * 2 * length) - 1]
        want = list((naive > cut).sum(-1) + window)
    got = [press.kept[layer][0].numpy() for layer in range(naive.shape[0])]
    np.testing.assert_array_equal(np.stack(got), np.stack(want))
    threshold = RCStatPress(threshold=1.0, sinks=sinks)
    _prefill(threshold, length=length)
    plain = RCStatPress(threshold=1.0)
    _prefill(plain, length=length)
    for layer in range(3):  # at most the sinks more per head
        extra = threshold.kept[layer] - plain.kept[layer]
        assert bool(((extra >= 0) & (extra <= sinks)).all())
    with pytest.raises(ValueError, match="sinks"):
        RCStatPress(sinks=-1)


@pytest.mark.parametrize("floor", [0.0, 0.2, 0.6])
def test_pooled_budget_evicts_the_models_lowest_entries_above_a_floor(floor: float) -> None:
    """budget="pooled": r of all layers' entries go, the lowest relative scores of the whole
    model except each head's protected best ⌈floor·(1 − r)·(T − w)⌉; layers then differ."""
    ratio, window, length = 0.6, 8, 48
    press = RCStatPress(
        compression_ratio=ratio, window_size=window, budget="pooled", floor=floor, group="max"
    )
    model, ids = _prefill(press, length=length)
    naive = _naive_layer_scores(model, ids, window, "expected")  # [L, Hkv, T - w]
    protect = int(np.ceil(floor * (1 - ratio) * (length - window)))
    candidates = naive.copy()
    if protect:
        best = np.argsort(-naive, axis=-1)[..., :protect]
        np.put_along_axis(candidates, best, np.inf, axis=-1)
    evict = round(ratio * naive.shape[0] * naive.shape[1] * length)
    cut = np.sort(candidates.ravel())[evict - 1]
    want = (candidates > cut).sum(-1) + window  # [L, Hkv] kept entries
    got = np.stack([press.kept[layer][0].numpy() for layer in range(naive.shape[0])])
    np.testing.assert_array_equal(got, want)
    assert press.realized_ratio() == pytest.approx(
        evict / (naive.size // (length - window) * length)
    )
    assert (got - window >= protect).all()
    if floor == 0.0:
        assert len(set(press.layer_ratios().values())) > 1  # layers differ


def test_pooled_budget_on_the_ragged_cache_frees_what_it_masks() -> None:
    """The pooled press applies every layer's evictions at the last layer: the ragged cache
    holds exactly the kept entries and the question's logits equal kvpress's masked mode."""
    from rcstat.press import RaggedCache, ragged_attention

    model = tiny_model("llama")
    context, question = _ids(40, 5), _ids(6, 6)
    with torch.no_grad():
        ragged = RCStatPress(compression_ratio=0.5, budget="pooled", floor=0.0)
        cache = RaggedCache()
        with ragged(model), ragged_attention(model):
            model(context, past_key_values=cache)
        with ragged_attention(model):
            got = model(question, past_key_values=cache).logits
        masked = RCStatPress(compression_ratio=0.5, budget="pooled", floor=0.0)
        dense = DynamicCache()
        with masked(model):
            model(context, past_key_values=dense)
            want = model(question, past_key_values=dense).logits
    for layer in range(3):
        assert torch.equal(ragged.kept[layer], masked.kept[layer])
        assert torch.equal(cache.kept_lengths(layer) - question.shape[1], ragged.kept[layer])
    assert ragged.realized_ratio() == pytest.approx(round(0.5 * 3 * 2 * 40) / (3 * 2 * 40))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4)


# -- with the ragged cache: real eviction, checked against the masked dense reference --------


def _ids(length: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 600, (1, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_press_on_the_ragged_cache_equals_masked_reference(arch: str) -> None:
    from rcstat.press import RaggedCache, ragged_attention
    from tests.test_press_ragged import masked_reference

    model = tiny_model(arch)
    context, question = _ids(40, 5), _ids(6, 6)
    press = RCStatPress(threshold=1.0)
    cache = RaggedCache()
    with torch.no_grad():
        with press(model), ragged_attention(model):
            model(context, past_key_values=cache)
        assert 0 < press.realized_ratio() < 1
        with ragged_attention(model):
            got = model(question, past_key_values=cache).logits
        evicted = {}
        for layer in range(3):
            kept = cache.kept_lengths(layer)  # [1, kv_heads], the question appended to each
            assert torch.equal(kept - question.shape[1], press.kept[layer])
            positions = cache.layer(layer).packed.positions
            evicted[layer] = torch.ones(1, 2, 40, dtype=torch.bool)
            starts = cache.layer(layer).packed.seg_start
            for head in range(2):
                stored = positions[int(starts[head]) : int(starts[head + 1])]
                stored = stored[(stored >= 0) & (stored < 40)]
                evicted[layer][0, head, stored] = False
        dense = DynamicCache()
        model(context, past_key_values=dense)
        with masked_reference(model, evicted):
            want = model(question, past_key_values=dense).logits
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
    # the cache holds exactly the kept entries (plus the question's tokens in every head)
    per_entry = 2 * 16 * 4  # keys + values, head_dim 16, float32
    kept_entries = sum(int(cache.kept_lengths(layer).sum()) for layer in range(3))
    assert cache.physical_bytes() == kept_entries * per_entry
    assert cache.physical_bytes() < cache.dense_bytes()


def test_threshold_zero_generation_equals_no_press() -> None:
    """c = 0 evicts nothing: greedy generation equals the plain model token for token."""
    from rcstat.press import RaggedCache, ragged_attention

    model = tiny_model("llama")
    context = _ids(30, 8)
    with torch.no_grad():
        plain = model.generate(context, max_new_tokens=12, do_sample=False, pad_token_id=0)
        press = RCStatPress(threshold=0.0)
        with press(model), ragged_attention(model):
            pressed = model.generate(
                context,
                past_key_values=RaggedCache(),
                max_new_tokens=12,
                do_sample=False,
                pad_token_id=0,
            )
    assert press.realized_ratio() == 0.0
    assert torch.equal(pressed, plain)


def test_the_defaults_follow_the_mode() -> None:
    """Target-ratio mode: the group's mean and the pooled budget (chosen on the slices);
    threshold mode: the paper's any-head rule, and a budget has nothing to pool."""
    ratio = RCStatPress(compression_ratio=0.5)
    assert (ratio.group, ratio.budget) == ("mean", "pooled")
    threshold = RCStatPress(threshold=1.0)
    assert threshold.group == "max"
    _prefill(threshold)
    per_layer = RCStatPress(threshold=1.0, budget="layer")
    _prefill(per_layer)
    assert all(torch.equal(threshold.kept[i], per_layer.kept[i]) for i in range(3))


# -- padded batches: each row scored on its own tokens, as if alone -------------------------

PRESSES = {
    "threshold": {"threshold": 1.0},
    "off": {"threshold": 0.0},
    "layer": {"compression_ratio": 0.5, "budget": "layer"},
    "pooled": {"compression_ratio": 0.4, "budget": "pooled", "floor": 0.3, "sinks": 2},
    "upper": {"compression_ratio": 0.4, "budget": "layer", "score": "upper", "group": "max"},
}


def _stored(cache: object, layer: int, row: int, kv_head: int, pad: int) -> list[int]:
    """The positions (relative to the row's first real token) a segment stores."""
    packed = cache.layer(layer).packed  # type: ignore[attr-defined]
    segment = row * packed.kv_heads + kv_head
    start, count = int(packed.seg_start[segment]), int(packed.seg_len[segment])
    return (packed.positions[start : start + count] - pad).tolist()


@pytest.mark.parametrize("name", sorted(PRESSES))
def test_a_padded_batch_is_compressed_as_each_row_alone(name: str) -> None:
    """Rows of 40, 29 and 20 tokens, left-padded: each row keeps exactly the entries it keeps
    alone, no padding is stored, and the realized ratios are each row's own."""
    from rcstat.press import RaggedCache, ragged_attention

    model = tiny_model("qwen2")
    lengths = (40, 29, 20)
    rows = [_ids(n, seed=20 + n)[0] for n in lengths]
    ids = torch.zeros(3, 40, dtype=torch.long)
    mask = torch.zeros(3, 40, dtype=torch.long)
    for b, row in enumerate(rows):
        ids[b, 40 - row.numel() :], mask[b, 40 - row.numel() :] = row, 1
    positions = (mask.cumsum(1) - 1).clamp_min(0)
    batched, cache = RCStatPress(**PRESSES[name]), RaggedCache()  # type: ignore[arg-type]
    with torch.no_grad(), batched(model), ragged_attention(model):
        model(ids, attention_mask=mask, position_ids=positions, past_key_values=cache)
    ratios = batched.head_ratios()  # [L, B, Hkv]
    for b, row in enumerate(rows):
        alone, solo_cache = RCStatPress(**PRESSES[name]), RaggedCache()  # type: ignore[arg-type]
        with torch.no_grad(), alone(model), ragged_attention(model):
            model(row[None], past_key_values=solo_cache)
        for layer in range(3):
            for head in range(2):
                want = _stored(solo_cache, layer, 0, head, 0)
                assert _stored(cache, layer, b, head, 40 - row.numel()) == want, (b, layer, head)
        torch.testing.assert_close(ratios[:, b], alone.head_ratios()[:, 0], rtol=0, atol=1e-12)
    for layer in range(3):
        assert cache.layer(layer).packed.padding_free
    kept = sum(float(k.sum()) for k in batched.kept.values())
    assert batched.realized_ratio() == pytest.approx(1 - kept / (3 * 2 * sum(lengths)))


@pytest.mark.parametrize("budget", ["layer", "pooled"])
def test_generate_on_a_padded_batch_equals_each_row_alone(budget: str) -> None:
    """``model.generate`` with the press and a ragged cache on a left-padded batch: every row's
    greedy tokens are its own, alone."""
    from rcstat.generation import left_pad
    from rcstat.press import RaggedCache, ragged_attention

    model = tiny_model("llama")
    rows = [_ids(n, seed=30 + n)[0] for n in (30, 22, 17)]
    options = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0}

    def generate(ids: torch.Tensor, **kwargs: object) -> torch.Tensor:
        press = RCStatPress(compression_ratio=0.4, budget=budget)  # type: ignore[arg-type]
        with torch.no_grad(), press(model), ragged_attention(model):
            return model.generate(ids, past_key_values=RaggedCache(slack=2), **kwargs, **options)

    ids, mask = left_pad(rows)
    batched = generate(ids, attention_mask=mask)[:, ids.shape[1] :]
    for b, row in enumerate(rows):
        alone = generate(row[None])[0, row.numel() :]
        assert batched[b].tolist() == alone.tolist(), b


def test_left_padding_reads_every_mask_form() -> None:
    """None, 2D (flash), 4D boolean (sdpa) and 4D additive (eager) masks of one padding."""
    from rcstat.press.rcstat_press import left_padding

    real = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]], dtype=torch.bool)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    sdpa = causal[None, None] & real[:, None, None, :]  # [2, 1, 5, 5]
    eager = torch.where(sdpa, 0.0, torch.finfo(torch.float32).min)
    for mask in (real.long(), sdpa, eager):
        got, pads = left_padding(mask, 2, 5)
        assert torch.equal(got, real) and pads == [0, 2]
    got, pads = left_padding(None, 2, 5)
    assert bool(got.all()) and pads == [0, 0]
    holes = real.clone()
    holes[0, 2] = False
    with pytest.raises(ValueError, match="left padding"):
        left_padding(holes, 2, 5)
    with pytest.raises(ValueError, match="covers"):
        left_padding(real[:1], 2, 5)


@pytest.mark.parametrize("budget", ["layer", "pooled"])
def test_masked_indices_are_the_ragged_caches_evictions(budget: str) -> None:
    """kvpress's masking mode masks exactly the entries the ragged cache drops, layer by layer
    (the indices of all layers are read back together); a later ragged prefill leaves no
    indices behind."""
    from rcstat.press import RaggedCache, ragged_attention

    model = tiny_model("llama")
    ids = _ids(40, 11).repeat(2, 1)
    ids[1] = _ids(40, 12)[0]
    masked = RCStatPress(compression_ratio=0.5, budget=budget)  # type: ignore[arg-type]
    with torch.no_grad(), masked(model):
        model(ids, past_key_values=DynamicCache())
    indices = [layer.self_attn.masked_key_indices for layer in model.model.layers]
    ragged, cache = RCStatPress(compression_ratio=0.5, budget=budget), RaggedCache()  # type: ignore[arg-type]
    with torch.no_grad(), ragged(model), ragged_attention(model):
        model(ids, past_key_values=cache)
    for layer, found in enumerate(indices):
        evicted = {tuple(map(int, entry)) for entry in zip(*found, strict=True)}
        stored = {
            (b, h, t) for b in range(2) for h in range(2) for t in _stored(cache, layer, b, h, 0)
        }
        everything = {(b, h, t) for b in range(2) for h in range(2) for t in range(40)}
        assert evicted == everything - stored, layer
        assert model.model.layers[layer].self_attn.masked_key_indices is None


def test_right_padding_is_refused() -> None:
    model = tiny_model("llama")
    mask = torch.ones(2, 24, dtype=torch.long)
    mask[1, -4:] = 0
    with torch.no_grad(), RCStatPress(compression_ratio=0.5)(model):
        with pytest.raises(ValueError, match="left padding"):
            model(_ids(24, 3).repeat(2, 1), attention_mask=mask, past_key_values=DynamicCache())


@pytest.mark.parametrize(
    "options",
    [{"threshold": 1.0}, {"compression_ratio": 0.5, "budget": "layer"}, {"compression_ratio": 0.5}],
)
def test_non_finite_scores_are_an_error_naming_the_layer(options: dict) -> None:
    """A layer whose queries overflow raises (the check is read once, after the last layer);
    the pooled budget evicts nothing then. Called on its own, ``relative`` raises at once."""
    model = copy.deepcopy(tiny_model("llama"))
    with torch.no_grad():
        model.model.layers[1].self_attn.q_proj.weight[0, 0] = float("nan")
    press = RCStatPress(window_size=8, **options)
    with torch.no_grad(), press(model), pytest.raises(ValueError, match=r"layer 1: .* NaN or inf"):
        model(_ids(40, 2), past_key_values=DynamicCache())
    if options.get("budget") != "layer" and "compression_ratio" in options:
        assert all(layer.self_attn.masked_key_indices is None for layer in model.model.layers)
        assert not press.kept


def test_the_prefill_is_recognised_once_a_forward_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """kvpress reads the cache positions from the device at every layer; the press reads them
    once a pass (prefill and each decoding step), compresses the prefill only, and reads again
    when the same positions tensor was changed in place."""
    reads: list[int] = []
    ends_at = press_module._ends_at

    def counted(position: torch.Tensor, length: int) -> bool:
        reads.append(length)
        return ends_at(position, length)

    monkeypatch.setattr(press_module, "_ends_at", counted)
    model = tiny_model("llama")
    press = RCStatPress(compression_ratio=0.5, window_size=8)
    cache = DynamicCache()
    with torch.no_grad(), press(model):
        model(_ids(40, 2), past_key_values=cache)
        kept = {i: k.clone() for i, k in press.kept.items()}
        for step in range(3):  # decoding: one read a step, nothing compressed
            model(_ids(1, 10 + step), past_key_values=cache)
    assert reads == [40, 1, 1, 1]
    assert all(torch.equal(press.kept[i], kept[i]) for i in kept)
    position = torch.arange(4)
    hidden = torch.zeros(1, 4, 8)
    assert press._prefilling({"cache_position": position, "hidden_states": hidden}, False)
    position += 10  # in place: a later pass reusing the tensor is read again
    assert not press._prefilling({"cache_position": position, "hidden_states": hidden}, False)
    assert len(reads) == 6


def test_inference_mode_prefills_like_no_grad() -> None:
    """Inference tensors have no version counter: the press still compresses the same."""
    model = tiny_model("llama")
    runs = []
    for mode in (torch.no_grad, torch.inference_mode):
        press = RCStatPress(compression_ratio=0.5, window_size=8)
        with mode(), press(model):
            model(_ids(40, 2), past_key_values=DynamicCache())
        runs.append(press.kept)
    assert all(torch.equal(runs[0][i], runs[1][i]) for i in runs[0])


class _EagerCalls(GraphedCalls):
    """GraphedCalls that never records a graph."""

    def __call__(self, key: Any, fn: Any, *inputs: torch.Tensor) -> Any:
        return fn(*inputs)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("budget", ["layer", "pooled"])
def test_the_scoring_graph_replays_the_eager_scores(
    budget: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a GPU the layers' scoring replays as a CUDA graph (recorded at the second layer):
    the kept entries equal those of an eager scoring, bit for bit."""
    model = copy.deepcopy(tiny_model("llama")).cuda()
    ids = _ids(60, 5).cuda()
    replays: list[int] = []
    replay = torch.cuda.CUDAGraph.replay

    def counted(graph: torch.cuda.CUDAGraph) -> None:
        replays.append(1)
        replay(graph)

    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", counted)
    graphed = RCStatPress(compression_ratio=0.5, budget=budget)  # type: ignore[arg-type]
    eager = RCStatPress(compression_ratio=0.5, budget=budget)  # type: ignore[arg-type]
    monkeypatch.setattr(eager, "_graphs", _EagerCalls())
    for press in (graphed, eager):
        with torch.no_grad(), press(model):
            model(ids, past_key_values=DynamicCache())
    layers = model.config.num_hidden_layers
    assert len(replays) == layers - 1  # layer 0 eager, the others from the graph
    assert all(torch.equal(graphed.kept[i], eager.kept[i]) for i in range(layers))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("budget", ["layer", "pooled"])
def test_the_press_on_cuda_frees_what_kvpress_masks(budget: str) -> None:
    """On a GPU in float32 (the ragged cache's reference attention, not varlen): the press
    keeps on the device what it keeps on the CPU and the question's logits equal the masked
    dense reference."""
    from rcstat.press import RaggedCache, ragged_attention

    model = copy.deepcopy(tiny_model("llama")).cuda()  # the cached CPU model stays on the CPU
    context, question = _ids(60, 5).cuda(), _ids(6, 6).cuda()
    with torch.no_grad():
        ragged = RCStatPress(compression_ratio=0.5, budget=budget)  # type: ignore[arg-type]
        cache = RaggedCache()
        with ragged(model), ragged_attention(model):
            model(context, past_key_values=cache)
        with ragged_attention(model):
            got = model(question, past_key_values=cache).logits
        masked = RCStatPress(compression_ratio=0.5, budget=budget)  # type: ignore[arg-type]
        dense = DynamicCache()
        with masked(model):
            model(context, past_key_values=dense)
            want = model(question, past_key_values=dense).logits
    assert ragged.realized_ratio() == pytest.approx(masked.realized_ratio())
    assert all(torch.equal(ragged.kept[i], masked.kept[i]) for i in range(3))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
