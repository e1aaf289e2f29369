"""rcstat.capture.probs against eager attention weights and hand-computed masks."""

from __future__ import annotations

import pytest
import torch

from rcstat.capture import SoftmaxParams, attention_probs, softmax_params
from tests._tiny_models import ARCHITECTURES, reference_scores, tiny_model


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_probs_of_generated_rows_equal_eager_attention(arch: str) -> None:
    model = tiny_model(arch, "eager")
    ids = torch.randint(0, 512, (1, 14), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        eager = model(ids, output_attentions=True).attentions
    params = softmax_params(model)
    assert sorted(params) == list(range(model.config.num_hidden_layers))
    rows = torch.arange(9, 14)
    for layer, scores in enumerate(reference_scores(model, ids)):
        probs = attention_probs(scores[0, :, 9:], rows, params[layer])  # [H, 5, 14]
        torch.testing.assert_close(probs, eager[layer][0, :, 9:], rtol=1e-4, atol=1e-5)


def test_gemma2_softcap_is_read_from_the_model() -> None:
    model = tiny_model("gemma2", "eager")
    params = softmax_params(model)
    assert params[0].softcap == model.config.attn_logit_softcapping == 50.0
    assert params[0].scaling == pytest.approx(model.config.query_pre_attn_scalar**-0.5)
    assert {p.sliding_window for p in params.values()} == {None, 128}  # alternating layers


def test_sliding_window_and_causal_mask_by_hand() -> None:
    scores = torch.zeros(1, 2, 4)  # rows at positions 2 and 3 over 4 keys, all logits equal
    probs = attention_probs(scores, torch.tensor([2, 3]), SoftmaxParams(1.0, None, 2))
    want = torch.tensor([[[0.0, 0.5, 0.5, 0.0], [0.0, 0.0, 0.5, 0.5]]])
    torch.testing.assert_close(probs, want)
    full = attention_probs(scores, torch.tensor([2, 3]), SoftmaxParams(1.0))
    torch.testing.assert_close(full[0, 0], torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0]))
