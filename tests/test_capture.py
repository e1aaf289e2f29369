"""rcstat.capture against independent references on tiny random models of several
architectures: q·k recomputed from each layer's own projections and rotary embedding, and
eager attention probabilities."""

from __future__ import annotations

import pytest
import torch

from rcstat.capture import UnsupportedModelError, attention_layout, capture_scores, grouped_scores
from tests._tiny_models import ARCHITECTURES, reference_scores, tiny_model


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_scores_match_projection_reference(arch: str, implementation: str) -> None:
    model = tiny_model(arch, implementation)
    ids = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))
    want = reference_scores(model, ids)
    with torch.no_grad():
        plain = model(ids).logits
        with capture_scores(model, lambda layer, s: s.double(), query_start=10) as result:
            out = model(ids).logits
    got = result.ordered()
    assert len(got) == model.config.num_hidden_layers
    for layer, block in enumerate(got):
        assert block.shape == (2, 4, 6, 16)  # [batch, head, query rows 10..15, key]
        torch.testing.assert_close(block, want[layer][:, :, 10:], rtol=1e-5, atol=1e-4)
    # the model's own output is unchanged by the capture, and the switch is undone
    torch.testing.assert_close(out, plain, rtol=0, atol=1e-5)
    assert model.config._attn_implementation == implementation


@pytest.mark.parametrize("arch", ["llama", "gemma2"])
def test_softmax_of_scaled_scores_equals_eager_attention(arch: str) -> None:
    model = tiny_model(arch, "eager")
    ids = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        eager = model(ids, output_attentions=True).attentions
        with capture_scores(model, lambda layer, s: s, scaled=True) as result:
            model(ids)
    causal = torch.ones(12, 12, dtype=torch.bool).tril()
    for layer, scores in enumerate(result.ordered()):
        if arch == "gemma2":  # eager applies tanh softcapping to the scaled scores
            cap = model.config.attn_logit_softcapping
            scores = torch.tanh(scores / cap) * cap
        probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        torch.testing.assert_close(probs, eager[layer], rtol=1e-4, atol=1e-5)


def test_grouped_scores_equal_repeated_keys() -> None:
    gen = torch.Generator().manual_seed(2)
    q, k = torch.randn(2, 6, 5, 8, generator=gen), torch.randn(2, 3, 7, 8, generator=gen)
    want = q @ k.repeat_interleave(2, dim=1).transpose(-1, -2)
    torch.testing.assert_close(grouped_scores(q, k), want)


def test_chosen_layers_and_cache_aware_rows() -> None:
    model = tiny_model("llama")
    ids = torch.randint(0, 512, (1, 10), generator=torch.Generator().manual_seed(3))
    full = reference_scores(model, ids)
    with torch.no_grad(), capture_scores(model, lambda layer, s: s, layers=[2], query_start=8) as r:
        out = model(ids[:, :7], use_cache=True)
        model(ids[:, 7:], past_key_values=out.past_key_values, use_cache=True)
    (block,) = r.ordered()
    assert r.layers == (2,)
    assert block.shape == (1, 4, 2, 10)  # rows 8, 9 of the second (cached) call
    torch.testing.assert_close(block.double(), full[2][:, :, 8:], rtol=1e-5, atol=1e-4)


def test_left_padded_batch_keeps_outputs() -> None:
    """The mask function is registered with the name: padding is respected."""
    model = tiny_model("llama")
    ids = torch.randint(1, 512, (2, 9), generator=torch.Generator().manual_seed(4))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, :3] = 0
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        with capture_scores(model, lambda layer, s: None):
            got = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(got[0, 3:], want[0, 3:], rtol=0, atol=1e-5)
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=1e-5)


def test_nan_scores_raise_and_restore_state() -> None:
    model = tiny_model("qwen2")
    ids = torch.randint(0, 512, (1, 6))
    layer = model.model.layers[1].self_attn
    saved = layer.q_proj.weight.detach().clone()
    try:
        with torch.no_grad():
            layer.q_proj.weight[0, 0] = float("nan")
        with pytest.raises(FloatingPointError, match="layer 1"), torch.no_grad():
            with capture_scores(model, lambda layer, s: None):
                model(ids)
    finally:
        with torch.no_grad():
            layer.q_proj.weight.copy_(saved)
    assert model.config._attn_implementation == "sdpa"


def test_bad_arguments_and_unsupported_models() -> None:
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="out of range"):
        with capture_scores(model, lambda layer, s: None, layers=[5]):
            pass
    with pytest.raises(ValueError, match="invalid query rows"):
        with capture_scores(model, lambda layer, s: None, query_start=4, query_end=4):
            pass
    with pytest.raises(UnsupportedModelError, match="config"):
        attention_layout(torch.nn.Linear(2, 2))
    with pytest.raises(UnsupportedModelError, match="never called"):
        with capture_scores(model, lambda layer, s: None) as result:
            pass  # no forward pass
        result.ordered()


def test_layout_of_gqa_model() -> None:
    layout = attention_layout(tiny_model("llama"))
    assert (layout.num_layers, layout.num_heads, layout.num_kv_heads) == (3, 4, 2)
    assert layout.group_size == 2 and layout.head_dim == 16


def test_capture_survives_kvpress_wrapping_the_registered_function() -> None:
    """kvpress wraps every registered attention function at import (instance-local entries)
    and passes ``dropout`` positionally; the capture must still work through that wrapper."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from rcstat.capture.scores import IMPLEMENTATION, _attention

    kvpress_patch = pytest.importorskip("kvpress.attention_patch")
    model = tiny_model("llama")
    ids = torch.randint(0, 512, (1, 8))
    local = ALL_ATTENTION_FUNCTIONS._local_mapping
    saved = local.get(IMPLEMENTATION)
    local[IMPLEMENTATION] = kvpress_patch.attention_patch(_attention)
    try:
        with torch.no_grad(), capture_scores(model, lambda layer, s: s.shape) as result:
            plain = model(ids)
        assert result.ordered()[0] == (1, 4, 8, 8)
    finally:
        if saved is None:
            local.pop(IMPLEMENTATION, None)
        else:
            local[IMPLEMENTATION] = saved
    assert plain.logits.isfinite().all()


def test_sink_receives_each_layer_and_graph_keys_are_ignored_on_cpu() -> None:
    """``sink(layer, output)`` replaces what is kept; on CPU a graph key changes nothing."""
    model = tiny_model("llama")
    ids = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(4))
    seen: list[int] = []

    def sink(layer: int, output: torch.Tensor) -> torch.Tensor:
        seen.append(layer)
        return output.sum(-1)  # [batch, head, q]

    with torch.no_grad(), capture_scores(model, lambda layer, s: s, query_start=8) as plain:
        model(ids)
    with (
        torch.no_grad(),
        capture_scores(
            model, lambda layer, s: s, query_start=8, graph_key=lambda layer: "all", sink=sink
        ) as sunk,
    ):
        model(ids)
    assert seen == list(range(len(plain.layers)))
    for full, summed in zip(plain.ordered(), sunk.ordered(), strict=True):
        torch.testing.assert_close(summed, full.sum(-1))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), None])
def test_the_finiteness_flag_of_a_block_from_its_extremes(bad: float | None) -> None:
    """One non-finite score anywhere clears the flag; the largest finite values do not."""
    from rcstat.capture.scores import all_finite

    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        scores = torch.randn(2, 3, 5, 7).to(dtype)
        scores[0, 1, 2, 3] = torch.finfo(dtype).max
        scores[1, 0, 4, 6] = torch.finfo(dtype).min
        if bad is not None:
            scores[1, 2, 0, 5] = bad
        flag = all_finite(scores)
        assert flag.dtype == torch.bool and flag.dim() == 0
        assert bool(flag) == (bad is None), dtype
