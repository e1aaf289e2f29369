"""rcstat.press.layout, cache and attention: the packed per-KV-head cache and its attention,
against a plain DynamicCache (nothing evicted) and a dense cache that masks the evicted entries."""

from __future__ import annotations

import copy
import gc
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AttentionInterface, DynamicCache, MistralForCausalLM
from transformers.masking_utils import AttentionMaskInterface

from rcstat.press import PackedKV, RaggedCache, packed_attention, ragged_attention
from rcstat.press.attention import _varlen_kernel
from tests._decode_oracles import decode_logits, greedy_options
from tests._tiny_models import one_thread, tiny_model

ATOL = 1e-4
_MASKED = "rcstat_test_masked"


_one_thread = pytest.fixture(autouse=True, scope="module")(one_thread)


# -- the oracle: dense cache, eager attention, evicted (kv head, key) entries masked out --------


def _masked_eager(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scaling: float,
    evicted: torch.Tensor | None,
) -> torch.Tensor:
    """Obvious attention: repeat KV heads, causal (bottom-right), ``-inf`` at evicted keys.

    ``evicted`` ``[batch, kv_heads, T0]`` covers the first ``T0`` keys (the compressed prompt).
    Returns ``[batch, q, heads, dim]``.
    """
    batch, heads, q_len, _ = query.shape
    kv_len = key.shape[2]
    group = heads // key.shape[1]
    key, value = key.repeat_interleave(group, 1), value.repeat_interleave(group, 1)
    scores = (query @ key.transpose(-1, -2)) * scaling  # [batch, head, q, k]
    allowed = torch.ones(q_len, kv_len, dtype=torch.bool).tril(kv_len - q_len)
    allowed = allowed.expand(batch, heads, q_len, kv_len).clone()
    if evicted is not None:
        allowed[..., : evicted.shape[-1]] &= ~evicted.repeat_interleave(group, 1)[:, :, None]
    probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    return (probs @ value).transpose(1, 2).contiguous()


@contextmanager
def masked_reference(model: Any, evicted: dict[int, torch.Tensor]) -> Iterator[None]:
    """Run ``model`` (with a DynamicCache) with eager attention masking ``evicted[layer]``."""

    def attention(module: Any, query: Any, key: Any, value: Any, mask: Any, **kwargs: Any) -> Any:
        scaling = kwargs.get("scaling") or module.scaling
        return _masked_eager(query, key, value, scaling, evicted.get(module.layer_idx)), None

    AttentionInterface.register(_MASKED, attention)
    AttentionMaskInterface.register(_MASKED, lambda *args, **kwargs: None)
    previous = model.config._attn_implementation
    model.set_attn_implementation(_MASKED)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)


def _random_keeps(
    model: Any, batch: int, length: int, seed: int, p: float = 0.5
) -> dict[int, torch.Tensor]:
    """``{layer: keep [batch, kv_heads, length]}`` with different counts per head, >= 1 each."""
    gen = torch.Generator().manual_seed(seed)
    kv_heads = model.config.num_key_value_heads
    keeps = {}
    for layer in range(model.config.num_hidden_layers):
        keep = torch.rand(batch, kv_heads, length, generator=gen) < p
        keep[..., -1] = True  # the last prompt token (in practice: the window) is always kept
        keeps[layer] = keep
    return keeps


def _prefill_ragged(
    model: Any, ids: torch.Tensor, keeps: dict[int, torch.Tensor], slack: int
) -> tuple[RaggedCache, torch.Tensor]:
    cache = RaggedCache(slack=slack)
    logits = model(ids, past_key_values=cache).logits
    for layer, keep in keeps.items():
        cache.compress_layer(layer, keep)
    return cache, logits


# -- (a) nothing evicted: identical to a DynamicCache -------------------------------------------


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_full_keep_decoding_equals_dynamic_cache(arch: str) -> None:
    model = tiny_model(arch)
    ids = torch.randint(0, 600, (1, 24), generator=torch.Generator().manual_seed(0))
    keeps = {layer: torch.ones(1, 2, 24, dtype=torch.bool) for layer in range(3)}
    with torch.no_grad():
        dense = DynamicCache()
        want = [model(ids, past_key_values=dense).logits]
        ragged, first = _prefill_ragged(model, ids, keeps, slack=4)  # 10 steps: repacks too
        got = [first]
        assert all(ragged.is_packed(layer) for layer in range(3))
        token = want[0][:, -1:].argmax(-1)
        for _ in range(10):
            want.append(model(token, past_key_values=dense).logits)
            with ragged_attention(model):
                got.append(model(token, past_key_values=ragged).logits)
            token = want[-1][:, -1:].argmax(-1)
    for step, (a, b) in enumerate(zip(want, got, strict=True)):
        torch.testing.assert_close(b, a, rtol=0, atol=ATOL, msg=f"step {step}")
    assert ragged.get_seq_length() == dense.get_seq_length() == 34
    assert model.config._attn_implementation == "sdpa"  # restored


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_full_keep_generate_equals_dynamic_cache(arch: str) -> None:
    model = tiny_model(arch)
    ids = torch.randint(0, 600, (1, 20), generator=torch.Generator().manual_seed(1))
    options: dict[str, Any] = greedy_options(10)
    keeps = {layer: torch.ones(1, 2, 19, dtype=torch.bool) for layer in range(3)}
    with torch.no_grad():
        want = model.generate(ids, past_key_values=DynamicCache(), **options)
        # kvpress's convention: prefill and compress the context, then generate from there
        ragged, _ = _prefill_ragged(model, ids[:, :-1], keeps, slack=3)
        with ragged_attention(model):
            got = model.generate(ids, past_key_values=ragged, **options)
    assert torch.equal(got.sequences, want.sequences)
    for a, b in zip(want.logits, got.logits, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=ATOL)
    assert ragged.get_seq_length() == 29  # logical: 20 prompt + 10 new - the last, not cached


# -- (b) random evictions: identical to the masked dense reference ------------------------------


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("batch", [1, 2])
def test_random_keep_equals_masked_reference(arch: str, batch: int) -> None:
    model = tiny_model(arch)
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 600, (batch, 24), generator=gen)
    question = torch.randint(0, 600, (batch, 5), generator=gen)  # multi-token continuation
    keeps = _random_keeps(model, batch, 24, seed=3)
    with torch.no_grad():
        ragged, _ = _prefill_ragged(model, ids, keeps, slack=64)
        lengths = torch.stack([ragged.kept_lengths(layer) for layer in range(3)])
        assert lengths.unique().numel() > 1  # heads (and samples) keep different counts
        with ragged_attention(model):
            got = [model(question, past_key_values=ragged).logits]
            tokens = []
            for _ in range(10):
                tokens.append(got[-1][:, -1:].argmax(-1))
                got.append(model(tokens[-1], past_key_values=ragged).logits)
        dense = DynamicCache()
        model(ids, past_key_values=dense)
        evicted = {layer: ~keep for layer, keep in keeps.items()}
        with masked_reference(model, evicted):
            want = [model(question, past_key_values=dense).logits]
            want += [model(token, past_key_values=dense).logits for token in tokens]
        plain = DynamicCache()
        model(ids, past_key_values=plain)
        model(question, past_key_values=plain)
        unmasked = [model(token, past_key_values=plain).logits for token in tokens][-1]
    for step, (a, b) in enumerate(zip(want, got, strict=True)):
        torch.testing.assert_close(b, a, rtol=0, atol=ATOL, msg=f"step {step}")
    # the oracle can fail: the evictions do change the output
    assert (unmasked - got[-1]).abs().max() > 1e-2
    assert torch.equal(
        ragged.kept_lengths(0), keeps[0].sum(-1) + 15
    )  # every new token in every head


@given(data=st.data())
@settings(max_examples=40, deadline=None)
def test_packed_attention_equals_masked_eager(data: st.DataObject) -> None:
    batch = data.draw(st.integers(1, 2))
    kv_heads = data.draw(st.integers(1, 3))
    group = data.draw(st.integers(1, 3))
    length = data.draw(st.integers(1, 10))
    q_len = data.draw(st.integers(1, 4))
    slack = data.draw(st.integers(0, 3))
    bits = data.draw(st.lists(st.booleans(), min_size=batch * kv_heads * length, max_size=400))
    keep = torch.tensor(bits[: batch * kv_heads * length]).view(batch, kv_heads, length)
    keep[..., 0] |= ~keep.any(-1)  # at least one entry per segment
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31)))
    dim = 8
    keys, values = (torch.randn(batch, kv_heads, length + q_len, dim, generator=gen) for _ in "kv")
    query = torch.randn(batch, kv_heads * group, q_len, dim, generator=gen)

    cache = RaggedCache(slack=slack)
    cache.update(keys[:, :, :length], values[:, :, :length], 0)
    cache.compress_layer(0, keep)
    layer = cache.layer(0)
    layer.update(keys[:, :, length:], values[:, :, length:])  # the append (repacks if needed)
    packed = layer.packed
    assert packed is not None

    got = packed_attention(query, packed, scaling=0.3)
    want = _masked_eager(query, keys, values, 0.3, ~keep)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # an explicit causal mask over logical positions gives the same result
    causal = torch.ones(q_len, length + q_len, dtype=torch.bool).tril(length)[None, None]
    torch.testing.assert_close(packed_attention(query, packed, scaling=0.3, mask=causal), got)
    # layout: each segment holds its kept rows in order, then the appended ones
    total = length + q_len
    appended = torch.ones(batch, kv_heads, q_len, dtype=torch.bool)
    stored = torch.cat([keep, appended], -1)
    for s in range(batch * kv_heads):
        b, h = divmod(s, kv_heads)
        start, end = int(packed.seg_start[s]), int(packed.seg_start[s + 1])
        n = int(packed.seg_len[s])
        assert end - start - n == packed.room >= 0
        want_positions = torch.arange(total)[stored[b, h]]
        assert torch.equal(packed.positions[start : start + n], want_positions)
        assert torch.equal(packed.keys[start : start + n], keys[b, h, want_positions])
        assert torch.equal(packed.values[start : start + n], values[b, h, want_positions])


# -- (c) memory: the evicted entries are freed ---------------------------------------------------


def test_evicted_entries_are_freed_not_masked() -> None:
    model = tiny_model("llama")
    ids = torch.randint(0, 600, (1, 40), generator=torch.Generator().manual_seed(4))
    keeps = _random_keeps(model, 1, 40, seed=5, p=0.3)
    dim, itemsize, slack = 16, 4, 8
    row = 2 * dim * itemsize  # one key + value entry
    with torch.no_grad():
        cache = RaggedCache(slack=slack)
        model(ids, past_key_values=cache)
    dense_bytes = 3 * 2 * 40 * row  # layers × kv heads × tokens
    assert cache.physical_bytes() == cache.allocated_bytes() == cache.dense_bytes() == dense_bytes
    originals = [cache.layer(i).keys.clone() for i in range(3)]
    dense_refs = [
        weakref.ref(t) for i in range(3) for t in (cache.layer(i).keys, cache.layer(i).values)
    ]
    for layer, keep in keeps.items():
        cache.compress_layer(layer, keep)
    gc.collect()
    assert all(ref() is None for ref in dense_refs)  # the dense tensors no longer exist

    kept = sum(int(keep.sum()) for keep in keeps.values())
    assert cache.physical_bytes() == kept * row
    segments = 3 * 2
    assert cache.allocated_bytes() == (kept + segments * slack) * row
    storage = sum(
        cache.layer(i).keys.untyped_storage().nbytes()
        + cache.layer(i).values.untyped_storage().nbytes()
        for i in range(3)
    )
    assert storage <= cache.physical_bytes() + segments * slack * row
    assert storage < dense_bytes
    assert cache.dense_bytes() == dense_bytes  # logical length unchanged
    for layer in range(3):
        packed = cache.layer(layer).packed
        assert packed is not None
        for head in range(2):
            start, n = int(packed.seg_start[head]), int(packed.seg_len[head])
            assert torch.equal(
                packed.keys[start : start + n], originals[layer][0, head, keeps[layer][0, head]]
            )


# -- (d) appends past the room repack -------------------------------------------------------------


def test_appends_past_the_slack_repack() -> None:
    model = tiny_model("llama")
    gen = torch.Generator().manual_seed(6)
    ids = torch.randint(0, 600, (1, 20), generator=gen)
    keeps = _random_keeps(model, 1, 20, seed=7)
    with torch.no_grad():
        ragged, logits = _prefill_ragged(model, ids, keeps, slack=1)
        buffers = {ragged.layer(0).keys.data_ptr()}
        got, tokens = [], []
        with ragged_attention(model):
            for _ in range(12):
                tokens.append(logits[:, -1:].argmax(-1))
                logits = model(tokens[-1], past_key_values=ragged).logits
                got.append(logits)
                buffers.add(ragged.layer(0).keys.data_ptr())
                packed = ragged.layer(0).packed
                assert packed is not None
                assert packed.capacity == packed.live + 2 * packed.room
        dense = DynamicCache()
        model(ids, past_key_values=dense)
        with masked_reference(model, {layer: ~keep for layer, keep in keeps.items()}):
            want = [model(token, past_key_values=dense).logits for token in tokens]
    for a, b in zip(want, got, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=ATOL)
    # room 1, then 1 + max(1, appended): repacks before the 2nd, 4th and 8th appended token
    assert len(buffers) == 4
    assert packed.room == 3 and packed.appended == 12
    assert torch.equal(ragged.kept_lengths(0)[0], keeps[0][0].sum(-1) + 12)
    for head in range(2):
        start, n = int(packed.seg_start[head]), int(packed.seg_len[head])
        assert torch.equal(packed.positions[start + n - 12 : start + n], torch.arange(20, 32))


# -- masks: padding and dense layers inside the context ------------------------------------------


def test_dense_layers_inside_the_context_equal_sdpa() -> None:
    model = tiny_model("llama")
    gen = torch.Generator().manual_seed(8)
    ids, more = (
        torch.randint(0, 600, (2, 12), generator=gen),
        torch.randint(0, 600, (2, 5), generator=gen),
    )
    with torch.no_grad():
        plain = DynamicCache()
        want = [model(ids, past_key_values=plain).logits, model(more, past_key_values=plain).logits]
        ragged = RaggedCache()
        with ragged_attention(model):  # nothing compressed: every layer stays dense
            got = [
                model(ids, past_key_values=ragged).logits,
                model(more, past_key_values=ragged).logits,
            ]
    for a, b in zip(want, got, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=ATOL)


@pytest.mark.parametrize("evict_padding", [True, False])
def test_left_padded_batch_equals_sdpa(evict_padding: bool) -> None:
    """Padding evicted from the packed cache, or kept and masked through the gathered mask,
    gives sdpa's padding-masked output."""
    model = tiny_model("qwen2")
    gen = torch.Generator().manual_seed(9)
    ids = torch.randint(3, 600, (2, 16), generator=gen)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, :5] = 0  # the second prompt is 11 tokens, left-padded
    question = torch.randint(3, 600, (2, 3), generator=gen)
    keep = mask.bool()[:, None, :].expand(2, 2, 16).clone() | (not evict_padding)
    with torch.no_grad():
        plain = DynamicCache()
        want = [model(ids, attention_mask=mask, past_key_values=plain).logits]
        ragged = RaggedCache()
        with ragged_attention(model):
            got = [model(ids, attention_mask=mask, past_key_values=ragged).logits]
            for layer in range(3):
                ragged.compress_layer(layer, keep)
            full = torch.cat([mask, torch.ones(2, 3, dtype=torch.long)], 1)
            got.append(model(question, attention_mask=full, past_key_values=ragged).logits)
            token = got[-1][:, -1:].argmax(-1)
            full = torch.cat([full, torch.ones(2, 1, dtype=torch.long)], 1)
            got.append(model(token, attention_mask=full, past_key_values=ragged).logits)
        want.append(model(question, attention_mask=full[:, :-1], past_key_values=plain).logits)
        want.append(model(token, attention_mask=full, past_key_values=plain).logits)
    torch.testing.assert_close(got[0][1, 5:], want[0][1, 5:], rtol=0, atol=ATOL)
    torch.testing.assert_close(got[0][0], want[0][0], rtol=0, atol=ATOL)
    for a, b in zip(want[1:], got[1:], strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=ATOL)


# -- (e) compressing twice, errors -------------------------------------------------------------


def test_compressing_twice_composes() -> None:
    gen = torch.Generator().manual_seed(10)
    keys, values = torch.randn(2, 2, 9, 4, generator=gen), torch.randn(2, 2, 9, 4, generator=gen)
    first = torch.rand(2, 2, 8, generator=gen) < 0.7
    second = torch.rand(2, 2, 9, generator=gen) < 0.7
    first[..., -1] = second[..., -1] = True
    cache = RaggedCache(slack=2)
    cache.update(keys[:, :, :8], values[:, :, :8], 0)
    cache.compress_layer(0, first)
    cache.layer(0).update(keys[:, :, 8:], values[:, :, 8:])  # position 8, in every head
    cache.compress_layer(0, second)  # indexed by logical position, appended token included
    both = torch.cat([first, torch.ones(2, 2, 1, dtype=torch.bool)], -1) & second
    assert torch.equal(cache.kept_lengths(0), both.sum(-1))
    packed = cache.layer(0).packed
    assert packed is not None and packed.length == 9 and packed.room == 2
    for s in range(4):
        b, h = divmod(s, 2)
        start, n = int(packed.seg_start[s]), int(packed.seg_len[s])
        assert torch.equal(packed.keys[start : start + n], keys[b, h, both[b, h]])


def _filled_cache(slack: int = 4) -> RaggedCache:
    cache = RaggedCache(slack=slack)
    kv = torch.randn(1, 2, 6, 4, generator=torch.Generator().manual_seed(11))
    cache.update(kv, kv.clone(), 0)
    return cache


def test_invalid_keeps_are_refused() -> None:
    cache = _filled_cache()
    keep = torch.ones(1, 2, 6, dtype=torch.bool)
    empty = keep.clone()
    empty[0, 1] = False
    with pytest.raises(ValueError, match=r"no entry for \(batch, kv_head\) \[\(0, 1\)\]"):
        cache.compress_layer(0, empty)
    with pytest.raises(ValueError, match="shape"):
        cache.compress_layer(0, torch.ones(1, 2, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="bool"):
        cache.compress_layer(0, keep.to(torch.uint8))
    with pytest.raises(ValueError, match="meta"):
        cache.compress_layer(0, keep.to("meta"))
    with pytest.raises(IndexError, match="layer 3"):
        cache.compress_layer(3, keep)
    with pytest.raises(ValueError, match="slack"):
        cache.compress_layer(0, keep, slack=-1)
    with pytest.raises(ValueError, match="slack"):
        RaggedCache(slack=-2)
    kv = torch.zeros(1, 2, 3, 4)
    with pytest.raises(ValueError, match=r"must be \[batch, kv_heads, q, dim\], got \(2, 3, 4\)"):
        cache.update(kv[0], kv[0], 0)
    with pytest.raises(ValueError, match=r"\(1, 2, 3, 4\)/\(1, 2, 2, 4\) differ"):
        cache.update(kv, kv[:, :, :2], 0)
    assert cache.get_seq_length(0) == 6  # nothing was changed by the refused calls
    assert not cache.is_packed(0)
    cache.compress_layer(0, keep)
    with pytest.raises(ValueError, match="do not match"):
        cache.layer(0).update(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))
    with pytest.raises(NotImplementedError, match="crop"):
        cache.crop(3)


def test_packed_layers_need_the_context() -> None:
    model = tiny_model("llama")
    ids = torch.randint(0, 600, (1, 8), generator=torch.Generator().manual_seed(12))
    with torch.no_grad():
        cache, _ = _prefill_ragged(model, ids, _random_keeps(model, 1, 8, seed=13), slack=4)
        with pytest.raises(RuntimeError, match="ragged_attention"):
            model(ids[:, :1], past_key_values=cache)
        assert cache.get_seq_length() == 8  # refused before appending
        with ragged_attention(model), pytest.raises(RuntimeError, match="nested"):
            with ragged_attention(model):
                pass
        with pytest.raises(ValueError, match="backend"), ragged_attention(model, backend="fast"):  # type: ignore[arg-type]
            pass
        with ragged_attention(model, backend="varlen"), pytest.raises(RuntimeError, match="varlen"):
            model(ids[:, :1], past_key_values=cache)  # CPU float32: varlen cannot serve
    assert model.config._attn_implementation == "sdpa"


def test_sliding_window_layers_are_refused() -> None:
    config = copy.deepcopy(tiny_model("mistral").config)
    config.sliding_window = 8
    model = MistralForCausalLM(config).eval()
    with (
        torch.no_grad(),
        ragged_attention(model),
        pytest.raises(NotImplementedError, match="sliding"),
    ):
        model(torch.zeros(1, 4, dtype=torch.long), past_key_values=RaggedCache())


# -- CUDA: varlen_attn against the reference -----------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("q_len", [1, 5])
@pytest.mark.parametrize("slack", [0, 3])
def test_varlen_equals_reference_on_cuda(q_len: int, slack: int) -> None:
    if _varlen_kernel() is None:
        pytest.skip("this torch has no usable torch.nn.attention.varlen.varlen_attn")
    gen = torch.Generator().manual_seed(14)
    batch, kv_heads, group, length, dim = 2, 4, 3, 300, 64
    keys, values = (torch.randn(batch, kv_heads, length + q_len, dim, generator=gen) for _ in "kv")
    keep = torch.rand(batch, kv_heads, length, generator=gen) < 0.4
    keep[..., -1] = True
    query = torch.randn(batch, kv_heads * group, q_len, dim, generator=gen)
    cache = RaggedCache(slack=slack)  # 0: after the append, segments have no room left
    cache.update(keys[:, :, :length].cuda().bfloat16(), values[:, :, :length].cuda().bfloat16(), 0)
    cache.compress_layer(0, keep.cuda())
    cache.layer(0).update(
        keys[:, :, length:].cuda().bfloat16(), values[:, :, length:].cuda().bfloat16()
    )
    packed: PackedKV | None = cache.layer(0).packed
    assert packed is not None
    q = query.cuda().bfloat16()
    fast = packed_attention(q, packed, scaling=dim**-0.5, backend="varlen")
    slow = packed_attention(q, packed, scaling=dim**-0.5, backend="reference")
    want = _masked_eager(query.double(), keys.double(), values.double(), dim**-0.5, ~keep)
    torch.testing.assert_close(fast.double().cpu(), want, rtol=0, atol=2e-2)
    torch.testing.assert_close(fast, slow, rtol=0, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_model_on_cuda_uses_varlen_and_matches_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    if _varlen_kernel() is None:
        pytest.skip("this torch has no usable torch.nn.attention.varlen.varlen_attn")
    import rcstat.press.attention as ragged

    calls = []
    original = ragged._varlen_attention

    def spy(*args: Any) -> torch.Tensor:
        calls.append(args[1].shape)
        return original(*args)

    monkeypatch.setattr(ragged, "_varlen_attention", spy)
    model = copy.deepcopy(tiny_model("llama")).to("cuda", torch.bfloat16)
    gen = torch.Generator().manual_seed(15)
    ids = torch.randint(0, 600, (2, 64), generator=gen).cuda()
    question = torch.randint(0, 600, (2, 5), generator=gen).cuda()
    keeps = {layer: keep.cuda() for layer, keep in _random_keeps(model, 2, 64, seed=16).items()}

    def run(backend: Any, tokens: list[torch.Tensor]) -> torch.Tensor:
        """Question, then 4 decoding steps (greedy when ``tokens`` is empty, else forced)."""
        cache, _ = _prefill_ragged(model, ids, keeps, slack=2)
        with ragged_attention(model, backend=backend):
            return decode_logits(model, cache, question, tokens, 4)

    tokens: list[torch.Tensor] = []
    with torch.no_grad():
        fast = run("auto", tokens)
        assert len(calls) == 3 * 5  # every packed layer at every step went through varlen_attn
        slow = run("reference", tokens)
    assert len(calls) == 3 * 5
    torch.testing.assert_close(fast, slow, rtol=0, atol=5e-2)
