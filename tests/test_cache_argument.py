"""rcstat.models.cache_argument: the KV cache passed by the name the model's forward declares
(``past_key_values`` in transformers 5.2, ``cache`` in later releases)."""

from __future__ import annotations

import warnings
from types import SimpleNamespace
from typing import Any

import torch
from transformers import DynamicCache

from rcstat.models.cache_argument import cache_keyword, returned_cache, with_cache
from tests._tiny_models import tiny_model


class _Old(torch.nn.Module):
    def forward(self, input_ids: Any, past_key_values: Any = None) -> Any:
        return past_key_values


class _New(torch.nn.Module):
    def forward(self, input_ids: Any, cache: Any = None, **kwargs: Any) -> Any:
        return cache


def test_the_keyword_is_the_one_forward_declares() -> None:
    old, new = _Old(), _New()
    assert cache_keyword(old) == "past_key_values" and cache_keyword(new) == "cache"
    marker = object()
    assert old(None, **with_cache(old, marker)) is marker
    assert new(None, **with_cache(new, marker)) is marker
    new.forward = lambda *args, **kwargs: None  # type: ignore[method-assign]  # a hook's wrapper
    assert cache_keyword(new) == "cache"


def test_the_returned_cache_under_either_name() -> None:
    marker = object()
    assert returned_cache(SimpleNamespace(cache=marker)) is marker
    assert returned_cache(SimpleNamespace(past_key_values=marker)) is marker
    assert returned_cache(SimpleNamespace(cache=None, past_key_values=marker)) is marker


def test_the_installed_transformers_takes_and_returns_the_cache_without_a_deprecation() -> None:
    model = tiny_model("llama")
    ids = torch.randint(1, 600, (1, 6), generator=torch.Generator().manual_seed(0))
    cache = DynamicCache()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", FutureWarning)
        out = model(ids, **with_cache(model, cache), use_cache=True)
        assert returned_cache(out) is cache and cache.get_seq_length() == 6
        model(ids[:, :2], **with_cache(model, cache), use_cache=True)
    assert cache.get_seq_length() == 8
