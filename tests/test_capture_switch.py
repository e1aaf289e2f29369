"""rcstat.capture.switch: every switch leaves each config of the model as transformers'
``set_attn_implementation`` would, whether it goes through it (the first time, or after the
user changed the implementation) or replays the record of an earlier switch."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import (
    CLIPVisionConfig,
    LlamaConfig,
    LlamaForCausalLM,
    LlavaConfig,
    LlavaForConditionalGeneration,
    PreTrainedModel,
)
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from rcstat.capture.switch import switched_attention

_TEXT = dict(
    vocab_size=64,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
)


def _llama() -> PreTrainedModel:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**_TEXT, attn_implementation="sdpa")).eval()


def _llava() -> PreTrainedModel:
    """A model whose vision and text parts have configs of their own (sub-configs)."""
    vision = CLIPVisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=28,
        patch_size=14,
        projection_dim=16,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=LlamaConfig(**_TEXT),
        image_token_index=63,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return LlavaForConditionalGeneration(config).eval()


def _configs(model: PreTrainedModel) -> list[Any]:
    subs = [getattr(model.config, key) for key in model.config.sub_configs]
    return [model.config, *subs]


def _counting(model: PreTrainedModel, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names the model's ``set_attn_implementation`` is called with from now on."""
    calls: list[str] = []
    through = model.set_attn_implementation

    def counted(name: str) -> None:
        calls.append(name)
        through(name)

    monkeypatch.setattr(model, "set_attn_implementation", counted)
    return calls


@pytest.mark.parametrize("build", [_llama, _llava], ids=["llama", "llava"])
def test_later_switches_replay_the_first(build: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    model = build()
    calls = _counting(model, monkeypatch)
    seen: list[int] = []

    def attention(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        seen.append(int(module.layer_idx))
        return sdpa_attention_forward(module, *args, **kwargs)

    ids = torch.randint(0, 60, (1, 5), generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        seen.clear()
        with switched_attention(model, "rcstat_test", attention, sdpa_mask) as previous:
            assert previous == "sdpa"
            assert [c._attn_implementation for c in _configs(model)] == ["rcstat_test"] * len(
                _configs(model)
            )
            with torch.no_grad():
                model(input_ids=ids)
        assert sorted(seen) == list(range(_TEXT["num_hidden_layers"]))  # every layer switched
        assert all(c._attn_implementation == "sdpa" for c in _configs(model))
    assert calls == ["rcstat_test", "sdpa"]  # only the first switch and its undoing


def test_a_change_by_the_user_goes_through_transformers_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = _llava()
    calls = _counting(model, monkeypatch)
    with switched_attention(model, "rcstat_test", sdpa_attention_forward, sdpa_mask):
        pass
    model.set_attn_implementation("eager")  # the user's own change, between two calls
    with switched_attention(model, "rcstat_test", sdpa_attention_forward, sdpa_mask) as previous:
        assert previous == "eager"
        assert all(c._attn_implementation == "rcstat_test" for c in _configs(model))
    assert all(c._attn_implementation == "eager" for c in _configs(model))
    assert calls == ["rcstat_test", "sdpa", "eager", "rcstat_test", "eager"]
    # the text part alone changed by the user: not the recorded state, so through again; the
    # undoing finds the state it recorded and leaves every config as transformers would
    model.config.text_config._attn_implementation = "sdpa"
    with switched_attention(model, "rcstat_test", sdpa_attention_forward, sdpa_mask):
        assert all(c._attn_implementation == "rcstat_test" for c in _configs(model))
    assert calls[5:] == ["rcstat_test"]
    assert all(c._attn_implementation == "eager" for c in _configs(model))


def test_each_model_has_its_own_record(monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = _llama(), _llama()
    with switched_attention(first, "rcstat_test", sdpa_attention_forward, sdpa_mask):
        pass
    calls = _counting(second, monkeypatch)
    with switched_attention(second, "rcstat_test", sdpa_attention_forward, sdpa_mask):
        assert second.config._attn_implementation == "rcstat_test"
        assert first.config._attn_implementation == "sdpa"
    assert calls == ["rcstat_test", "sdpa"]


def test_a_switch_whose_change_is_not_seen_is_never_replayed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where no config shows the change (a release of transformers that keeps the value
    elsewhere), every switch goes through transformers."""
    import rcstat.capture.switch as switch

    model = _llama()
    calls = _counting(model, monkeypatch)
    monkeypatch.setattr(switch, "_value", lambda config: None)
    for _ in range(2):
        with switched_attention(model, "rcstat_test", sdpa_attention_forward, sdpa_mask):
            assert model.config._attn_implementation == "rcstat_test"
        assert model.config._attn_implementation == "sdpa"
    assert calls == ["rcstat_test", "sdpa"] * 2
