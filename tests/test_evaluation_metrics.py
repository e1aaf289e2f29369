"""Metrics: VER formula by hand, head-output capture against the model's own o_proj input,
ROUGE on hand-computed cases."""

from __future__ import annotations

import pytest
import torch

from rcstat.evaluation.metrics import head_outputs, rouge_f1, summarize_ver, value_errors
from tests._tiny_models import tiny_model


def test_value_errors_by_hand() -> None:
    ref = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]])  # [1, 2, 2]
    got = value_errors(ref, torch.tensor([[[1.0, 1.0], [0.0, 0.0]]]))
    torch.testing.assert_close(got, torch.tensor([[1.0, 1.0]], dtype=torch.float64))
    assert float(value_errors(ref, ref).max()) == 0.0
    ver = summarize_ver([torch.tensor([0.0, 1.0]), torch.tensor([0.5])])
    assert ver.mean == pytest.approx(0.5) and ver.count == 3
    assert ver.std == pytest.approx(0.5)
    with pytest.raises(ValueError, match="same shape"):
        value_errors(ref, ref[..., :1])
    with pytest.raises(ValueError, match="zero"):
        value_errors(torch.zeros(1, 2), torch.ones(1, 2))


def test_head_outputs_are_the_attention_output_per_head() -> None:
    model = tiny_model("llama")
    ids = torch.randint(0, 600, (1, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), head_outputs(model) as recorded:
        model(ids)
    (out,) = recorded
    assert out.shape == (1, 10, 4, 16)
    # o_proj of the concatenated heads reproduces the layer's attention output
    attention = model.model.layers[-1].self_attn
    captured: list[torch.Tensor] = []
    handle = attention.register_forward_hook(lambda m, a, o: captured.append(o[0]))
    with torch.no_grad():
        model(ids)
    handle.remove()
    torch.testing.assert_close(attention.o_proj(out.reshape(1, 10, -1)), captured[0])


def test_rouge() -> None:
    same = rouge_f1("the cat sat on the mat", ["the cat sat on the mat"])
    assert same == {"rouge1": 1.0, "rougeL": 1.0}
    half = rouge_f1("the cat", ["the cat sat on the mat", "a dog"])
    assert half["rouge1"] == pytest.approx(2 * (1.0 * (2 / 6)) / (1.0 + 2 / 6))
    with pytest.raises(ValueError, match="reference"):
        rouge_f1("x", [])
