"""RCStatPress: adaptive head-wise KV-cache eviction by relative contextualization (paper §4.1,
eq. 9), as a kvpress press (the ``rcstat[press]`` extra).

At prefill, for each layer and query head, the last ``w`` prompt tokens form the window ``ĝ``.
Every other prompt token ``i`` is scored by ``s_i = E(X({i}, ĝ), Y(ĝ, ĝ))`` — its scores from
the window's queries against the window's own causal self scores — and compared with
``θ = E(X(p ∖ ĝ, ĝ), Y(ĝ, ĝ)) = mean_i s_i``. Token ``i`` is evicted from a head when
``s_i <= c·θ``; a KV head keeps ``i`` when any query head of its group keeps it
(``max_h s_i^h / θ^h > c``; ``group="mean"`` averages the group's relative scores instead);
the window is never evicted. The number of evicted tokens
therefore differs per KV head and per layer. In target-ratio mode ``c`` is chosen per layer
so that a fraction ``r`` of the layer's KV entries is evicted.

Where the evictions go: with an ``rcstat.press.RaggedCache`` as ``past_key_values`` the
entries are removed from memory (packed per KV head); with any other cache the press records
``module.masked_key_indices`` and kvpress's attention patch masks them (the reference mode,
which keeps the memory).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, cast

import torch
from torch import nn

from rcstat.capture import grouped_scores
from rcstat.checks import check_count, check_number
from rcstat.defaults import DEFAULT_WINDOW
from rcstat.press.extra import require_kvpress
from rcstat.stats import expected_rc_shared, self_samples

require_kvpress()
from kvpress import BasePress  # noqa: E402
from kvpress.utils import get_prerope_query_states  # noqa: E402


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def window_queries(
    module: nn.Module, hidden_states: torch.Tensor, window: int, kwargs: dict[str, Any]
) -> torch.Tensor:
    """Post-RoPE queries of the last ``window`` positions, ``[batch, heads, window, dim]``."""
    query = get_prerope_query_states(module, hidden_states[:, -window:])
    cos, sin = kwargs["position_embeddings"]
    cos, sin = cos[:, -window:].unsqueeze(1), sin[:, -window:].unsqueeze(1)
    return query * cos + _rotate_half(query) * sin


def relative_scores(scores: torch.Tensor) -> torch.Tensor:
    """RC of every non-window prompt token relative to the mean, ``s_i / θ`` (paper eq. 9).

    Parameters
    ----------
    scores
        ``[batch, heads, w, T]`` raw scores of the window's queries (the last ``w`` of ``T``
        prompt positions) against every prompt key.

    Returns
    -------
    torch.Tensor
        ``[batch, heads, T - w]`` float64: ``s_i / θ`` with ``s_i = E(X({i}, ĝ), Y(ĝ, ĝ))``
        and ``θ = mean_i s_i`` (0 where ``θ = 0``).
    """
    window, length = scores.shape[-2], scores.shape[-1]
    y = self_samples(scores, length - window)  # [B, H, w(w+1)/2]: Y(ĝ, ĝ), key <= query
    x = scores[..., : length - window].transpose(-1, -2)  # [B, H, T - w, w]: X({i}, ĝ)
    s = expected_rc_shared(x, y)  # [B, H, T - w]
    theta = s.mean(-1, keepdim=True)  # [B, H, 1] = E(X(p \\ ĝ, ĝ), Y(ĝ, ĝ))
    return torch.where(theta > 0, s / theta.clamp_min(torch.finfo(s.dtype).tiny), 0.0)


#: How a GQA group's query heads combine their relative scores (:class:`RCStatPress`).
GROUP_RULES = ("max", "mean")


@dataclass
class RCStatPress(BasePress):
    """Adaptive head-wise KV-cache eviction by relative contextualization (eq. 9).

    Parameters
    ----------
    threshold
        ``c``: evict token ``i`` from a head when ``s_i <= c·θ`` (default 1). ``c = 0``
        evicts nothing (the press is off, like a compression ratio of 0).
    window_size
        ``w``, the number of last prompt tokens whose queries score the rest (8; 16 works).
    compression_ratio
        Target-ratio mode when set: per layer, the ``r·(KV heads × T)`` entries with the
        lowest relative scores ``max_h s_i^h / θ^h`` are evicted (window excluded), so
        heads still differ but the layer's ratio is ``r``. ``None`` (default): threshold mode.
    group
        How the query heads of a GQA group decide for their KV head: ``"max"`` (default,
        the paper's rule: an entry stays when any query head keeps it) or ``"mean"`` (the
        group's mean relative score ``mean_h s_i^h / θ^h`` is compared with ``c``).

    After each prefill, :attr:`kept` holds the number of kept entries per layer and KV head
    and the realized ratios are available from :meth:`realized_ratio`, :meth:`layer_ratios`
    and :meth:`head_ratios`.
    """

    threshold: float = 1.0
    window_size: int = DEFAULT_WINDOW
    compression_ratio: float | None = None
    group: Literal["max", "mean"] = "max"
    kept: dict[int, torch.Tensor] = field(default_factory=dict, init=False, repr=False)  # [B, Hkv]
    lengths: dict[int, int] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.threshold = check_number("threshold", self.threshold, low=0)
        self.window_size = check_count("window_size", self.window_size)
        if self.compression_ratio is not None:
            self.compression_ratio = check_number(
                "compression_ratio", self.compression_ratio, low=0, high=1, high_open=True
            )
        if self.group not in GROUP_RULES:
            raise ValueError(f"group must be one of {', '.join(GROUP_RULES)}, got {self.group!r}")

    def keep_mask(
        self, module: nn.Module, hidden_states: torch.Tensor, keys: torch.Tensor, kwargs: dict
    ) -> torch.Tensor:
        """``[batch, kv_heads, T]`` boolean: which prompt entries each KV head keeps."""
        batch, kv_heads, length, _ = keys.shape
        window = self.window_size
        if length <= window:
            raise ValueError(
                f"the prompt has {length} tokens but the window is {window}: nothing to "
                "compress (use a smaller window_size or a longer context)"
            )
        query = window_queries(module, hidden_states, window, kwargs)  # [B, Hq, w, D]
        relative = relative_scores(grouped_scores(query, keys))  # [B, Hq, T - w]
        group = relative.shape[1] // kv_heads
        grouped = relative.view(batch, kv_heads, group, length - window)
        per_kv = grouped.amax(2) if self.group == "max" else grouped.mean(2)  # [B, Hkv, T - w]
        keep = torch.ones(batch, kv_heads, length, dtype=torch.bool, device=keys.device)
        if self.compression_ratio is None:
            if self.threshold > 0:
                keep[..., : length - window] = per_kv > self.threshold
            return keep
        evict = round(self.compression_ratio * kv_heads * length)
        if evict > kv_heads * (length - window):
            raise ValueError(
                f"compression_ratio {self.compression_ratio} needs {evict} evictions but only "
                f"{kv_heads * (length - window)} entries lie outside the window"
            )
        if evict > 0:
            flat = per_kv.reshape(batch, -1)  # [B, Hkv·(T - w)]
            lowest = flat.topk(evict, dim=-1, largest=False).indices
            candidates = torch.ones_like(flat, dtype=torch.bool).scatter_(-1, lowest, False)
            keep[..., : length - window] = candidates.view(batch, kv_heads, length - window)
        return keep

    def compress(
        self,
        module: nn.Module,
        hidden_states: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        attentions: torch.Tensor,
        kwargs: dict,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if keys.shape[0] != 1:
            raise ValueError(
                f"RCStatPress compresses one sequence at a time (batch {keys.shape[0]}): "
                "padded batches would score padding tokens"
            )
        layer: int = cast(Any, module).layer_idx
        if layer == 0:  # a new prefill: forget the previous one's statistics
            self.kept.clear()
            self.lengths.clear()
        keep = self.keep_mask(module, hidden_states, keys, kwargs)  # [B, Hkv, T]
        self.kept[layer] = keep.sum(-1).cpu()
        self.lengths[layer] = keys.shape[2]
        cache = kwargs["past_key_values"]
        compress_layer = getattr(cache, "compress_layer", None)
        masked: tuple[torch.Tensor, ...] | None = None
        if compress_layer is not None:  # ragged cache: evicted entries are freed
            compress_layer(layer, keep)
        elif bool((~keep).any()):  # reference mode: kvpress masks them at decoding time
            masked = tuple((~keep).nonzero(as_tuple=True))
        cast(Any, module).masked_key_indices = masked  # read by kvpress's attention patch
        return keys, values

    def forward_hook(self, module: nn.Module, input: Any, kwargs: dict, output: Any) -> Any:
        """kvpress's hook, except that the (ragged) cache is updated by :meth:`compress`."""
        cache = kwargs["past_key_values"]
        if getattr(cache, "compress_layer", None) is None:
            return super().forward_hook(module, input, kwargs, output)
        hidden_states = kwargs["hidden_states"]
        position = kwargs["cache_position"]
        if int(position[-1]) + 1 != hidden_states.shape[1]:  # not the prefill
            return output
        keys, values = cache.layers[module.layer_idx].keys, cache.layers[module.layer_idx].values
        self.compress(module, hidden_states, keys, values, output[1], kwargs)
        return output

    def _check_compressed(self) -> list[int]:
        if not self.kept:
            raise RuntimeError("no prefill has been compressed yet")
        return sorted(self.kept)

    def realized_ratio(self) -> float:
        """Evicted / all KV entries of the compressed prompt over all layers and KV heads,
        after the last prefill."""
        layers = self._check_compressed()
        kept = sum(float(self.kept[i].sum()) for i in layers)
        total = sum(self.kept[i].numel() * self.lengths[i] for i in layers)
        return 1.0 - kept / total

    def layer_ratios(self) -> dict[int, float]:
        """Realized ratio per layer."""
        layers = self._check_compressed()
        return {i: float(1 - self.kept[i].double().mean() / self.lengths[i]) for i in layers}

    def head_ratios(self) -> torch.Tensor:
        """Realized ratio per layer and KV head, ``[layers, batch, kv_heads]`` float64."""
        layers = self._check_compressed()
        return torch.stack([1 - self.kept[i].double() / self.lengths[i] for i in layers])
