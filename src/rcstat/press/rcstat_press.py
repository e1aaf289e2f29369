"""RCStatPress: adaptive head-wise KV-cache eviction by relative contextualization (paper §4.1,
eq. 9), as a kvpress press (the ``rcstat[press]`` extra).

At prefill, for each layer and query head, the last ``w`` prompt tokens form the window ``ĝ``.
Every other prompt token ``i`` is scored by ``s_i = E(X({i}, ĝ), Y(ĝ, ĝ))`` — its scores from
the window's queries against the window's own causal self scores — and compared with
``θ = E(X(p ∖ ĝ, ĝ), Y(ĝ, ĝ)) = mean_i s_i``. Token ``i`` is evicted from a head when
``s_i <= c·θ``; in threshold mode a KV head keeps ``i`` when any query head of its group keeps
it (``max_h s_i^h / θ^h > c``, the paper's rule; ``group="mean"`` averages the group's relative
scores instead); the window is never evicted. The number of evicted tokens therefore differs
per KV head and per layer. In target-ratio mode the group's mean relative score ranks the
entries and ``c`` is chosen once for the whole model so that a fraction ``r`` of all KV
entries is evicted (``budget="pooled"``: layers differ too, each KV head keeping at least a
``floor`` share of its budget), or per layer (``budget="layer"``, the paper's); these defaults
were chosen on the benchmark slices by the rule of docs/benchmarks.md §3.6.1 (see §3.6.2).
``score="upper"`` ranks by the upper bound ``A`` (eq. 4) of each token's RC instead of ``E``,
relative to the mean of ``A`` over the prompt.

Where the evictions go: with an ``rcstat.press.RaggedCache`` as ``past_key_values`` the
entries are removed from memory (packed per KV head); with any other cache the press records
``module.masked_key_indices`` and kvpress's attention patch masks them (the reference mode,
which keeps the memory).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from rcstat.capture import grouped_scores
from rcstat.capture.graphs import GraphedCalls
from rcstat.capture.host import stack_on_host
from rcstat.checks import check_count, check_number
from rcstat.press.extra import require_kvpress
from rcstat.press.options import KNOBS, RCStatOptions, TokenScore, check_knob
from rcstat.stats import expected_rc_shared, rc_statistics, self_samples

require_kvpress()
from kvpress import BasePress  # noqa: E402
from kvpress.utils import extract_keys_and_values, get_prerope_query_states  # noqa: E402


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


def relative_scores(
    scores: torch.Tensor, score: TokenScore = "expected", *, check_finite: bool = True
) -> torch.Tensor:
    """RC of every non-window prompt token relative to the mean, ``s_i / θ`` (paper eq. 9).

    Parameters
    ----------
    scores
        ``[batch, heads, w, T]`` raw scores of the window's queries (the last ``w`` of ``T``
        prompt positions) against every prompt key.
    score
        ``"expected"``: ``s_i = E(X({i}, ĝ), Y(ĝ, ĝ))``, whose mean over ``i`` is
        ``θ = E(X(p ∖ ĝ, ĝ), Y(ĝ, ĝ))``; ``"upper"``: ``s_i = A(X({i}, ĝ), Y(ĝ, ĝ))``, the
        overlap-area upper bound (eq. 4), and ``θ`` its mean over ``i``.
    check_finite
        Raise on NaN / inf scores (one synchronisation). Unchecked, the caller checks them.

    Returns
    -------
    torch.Tensor
        ``[batch, heads, T - w]`` float64: ``s_i / θ`` (0 where ``θ = 0``).
    """
    window, length = scores.shape[-2], scores.shape[-1]
    y = self_samples(scores, length - window)  # [B, H, w(w+1)/2]: Y(ĝ, ĝ), key <= query
    x = scores[..., : length - window].transpose(-1, -2)  # [B, H, T - w, w]: X({i}, ĝ)
    if score == "expected":
        s = expected_rc_shared(x, y, check_finite=check_finite)  # [B, H, T - w]
    else:
        shared = y.unsqueeze(-2).expand(*x.shape[:-1], y.shape[-1])  # [B, H, T - w, w(w+1)/2]
        s = rc_statistics(x, shared, lower=False, check_finite=check_finite).upper
    theta = s.mean(-1, keepdim=True)  # [B, H, 1]
    return torch.where(theta > 0, s / theta.clamp_min(torch.finfo(s.dtype).tiny), 0.0)


@dataclass
class RCStatPress(BasePress, RCStatOptions):
    """Adaptive head-wise KV-cache eviction by relative contextualization (eq. 9).

    Parameters
    ----------
    threshold
        ``c``: evict token ``i`` from a head when ``s_i <= c·θ`` (default 1). ``c = 0``
        evicts nothing (the press is off, like a compression ratio of 0).
    window_size
        ``w``, the number of last prompt tokens whose queries score the rest (8; 16 works).
    compression_ratio
        Target-ratio mode when set: the entries with the lowest relative scores (the
        group's combined ``s_i^h / θ^h``, see ``group``) are evicted (window excluded) so
        that the ratio is ``r``,
        per layer or over the model (``budget``). ``None`` (default): threshold mode.
    group
        How the query heads of a GQA group decide for their KV head: ``"max"`` (the paper's
        rule: an entry stays when any query head keeps it) or ``"mean"`` (the group's mean
        relative score ``mean_h s_i^h / θ^h`` is compared with ``c``). Default (None):
        ``"mean"`` in target-ratio mode (chosen on the slices, docs/benchmarks.md §3.6.2),
        ``"max"`` in threshold mode (where the mean rule was not measured).
    score
        ``"expected"`` (default): ``s_i`` is the exact expected RC; ``"upper"``: its upper
        bound ``A`` (eq. 4), relative to the mean of ``A`` over the prompt.
    budget
        Target-ratio mode only (ignored in threshold mode). ``"pooled"`` (default): ``r`` of
        all layers' entries are evicted together, the lowest relative scores of the whole
        model first, so layers differ as heads do; the layers' evictions are applied when the
        last layer has been scored (prefill is not affected: each layer attends to its full
        prompt before its cache is compressed). ``"layer"``: each layer evicts ``r`` of its
        entries (the paper's target-ratio mode).
    floor
        With ``budget="pooled"``: every KV head of every layer keeps at least
        ``⌈floor · (1 − r) · (T − w)⌉`` of its best non-window entries (a share of the budget
        it would have with a uniform ratio, as AdaKV's safeguard); 0 pools without a floor.
    sinks
        The first ``sinks`` prompt tokens are never evicted, like the window (StreamingLLM's
        attention sinks; a chat template's opening tokens); 0 (default) protects none.

    Notes
    -----
    After each prefill, :attr:`kept` holds the number of kept entries per layer and KV head
    (on the layer's device until a ratio is read, then on the CPU) and the realized ratios
    are available from :meth:`realized_ratio`, :meth:`layer_ratios`
    and :meth:`head_ratios`. The options' types and defaults live in
    :class:`~rcstat.press.options.RCStatOptions` (their one home).
    """

    kept: dict[int, torch.Tensor] = field(default_factory=dict, init=False, repr=False)  # [B, Hkv]
    real_lengths: list[int] = field(default_factory=list, init=False, repr=False)  # per row
    # the current prefill's (mask, (batch, length, device), real positions, left padding)
    _padding_read: tuple[Any, tuple[Any, ...], torch.Tensor, list[int]] | None = field(
        default=None, init=False, repr=False
    )
    # the current forward pass's cache positions (by weak reference), their version, the
    # query length and whether the pass is the prefill: read from the device once a pass
    _prefill_read: tuple[Any, int, int, bool] | None = field(default=None, init=False, repr=False)
    # per scored layer of the current prefill, "its window's scores are finite" on the device:
    # read once, when the last layer has been scored
    _finite: list[tuple[int, torch.Tensor]] = field(default_factory=list, init=False, repr=False)
    # a prefill's scoring graphs (CUDA), freed after its last layer
    _graphs: GraphedCalls = field(
        default_factory=GraphedCalls, init=False, repr=False, compare=False
    )
    # pooled budget: each scored layer's (module, cache, relative scores) until the last one
    _pending: dict[int, tuple[nn.Module, Any, torch.Tensor]] = field(
        default_factory=dict, init=False, repr=False
    )

    def __post_init__(self) -> None:
        self.threshold = check_number("threshold", self.threshold, low=0)
        self.window_size = check_count("window_size", self.window_size)
        if self.compression_ratio is not None:
            self.compression_ratio = check_number(
                "compression_ratio", self.compression_ratio, low=0, high=1, high_open=True
            )
        if self.group is None:  # the default of the mode (see the docstring)
            self.group = "max" if self.compression_ratio is None else "mean"
        for name in KNOBS:
            setattr(self, name, check_knob(name, getattr(self, name)))

    def relative(
        self,
        module: nn.Module,
        hidden_states: torch.Tensor,
        keys: torch.Tensor,
        kwargs: dict,
        pads: Sequence[int] | None = None,
        finite: list[tuple[int, torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """``[batch, kv_heads, T - w]`` float64: each KV head's relative score of every
        non-window prompt token, its group's query heads combined by :attr:`group`.

        ``pads`` gives each batch row's left padding: a row is scored on its own tokens only
        (``θ`` is its own mean), exactly as if it were alone, and its padded positions score
        ``−∞``. NaN or inf scores raise ``ValueError``; with a ``finite`` list the check is
        left to the caller instead: ``(layer, flag)`` is appended, ``flag`` a boolean tensor
        on the device (no synchronisation)."""
        batch, kv_heads, length, _ = keys.shape
        pads = [0] * batch if pads is None else list(pads)
        window = self.window_size
        if length - max(pads) <= window:
            raise ValueError(
                f"the prompt has {length - max(pads)} tokens but the window is {window}: nothing "
                "to compress (use a smaller window_size or a longer context)"
            )
        query = window_queries(module, hidden_states, window, kwargs)  # [B, Hq, w, D]
        layer = int(cast(Any, module).layer_idx)
        if finite is not None and keys.is_cuda and not any(pads):
            # a prefill's layers share shapes: the scoring replays as one CUDA graph
            key = ("relative", self.score)
            relative, ok = self._graphs(key, self._window_relative, query, keys)
        else:
            relative, ok = self._window_relative(query, keys, pads)
        if finite is None:
            _raise_if_not_finite([(layer, ok)])
        else:
            finite.append((layer, ok))
        grouped = relative.view(batch, kv_heads, -1, length - window)
        per_kv = grouped.amax(2) if self.group == "max" else grouped.mean(2)
        for b, pad in enumerate(pads if self.sinks else []):  # the sinks are kept by every rule
            per_kv[b, :, pad : pad + self.sinks] = torch.inf
        return per_kv

    def _window_relative(
        self, query: torch.Tensor, keys: torch.Tensor, pads: Sequence[int] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``relative_scores`` of the window's queries ``[B, Hq, w, D]`` against ``keys``
        ``[B, Hkv, T, D]``, each row on its own tokens (``−∞`` at its ``pads`` padded
        positions), and whether every real score is finite (a boolean tensor; nothing here
        waits for the device)."""
        batch, length, window = keys.shape[0], keys.shape[2], query.shape[2]
        pads = [0] * batch if pads is None else list(pads)
        scores = grouped_scores(query, keys)  # [B, Hq, w, T]
        ok = torch.stack([torch.isfinite(scores[b, ..., pad:]).all() for b, pad in enumerate(pads)])
        if not any(pads):
            return relative_scores(scores, self.score, check_finite=False), ok.all()
        relative = torch.full(
            (batch, query.shape[1], length - window),
            -torch.inf,
            dtype=torch.float64,
            device=keys.device,
        )  # [B, Hq, T - w]
        for b, pad in enumerate(pads):  # each row on its own tokens
            row = scores[b : b + 1, ..., pad:]
            relative[b, :, pad:] = relative_scores(row, self.score, check_finite=False)[0]
        return relative, ok.all()

    def _lowest(
        self,
        scores: torch.Tensor,
        evict: Sequence[int],
        protect: int | Sequence[int] = 0,
        pads: Sequence[int] | None = None,
    ) -> torch.Tensor:
        """``scores``' shape ``[batch, ..., C]``, bool: per batch row ``b``, False at its
        ``pads[b]`` padded candidates and at the ``evict[b]`` lowest of the rest, never at the
        ``protect[b]`` highest of a head (last axis)."""
        batch = scores.shape[0]
        pads = [0] * batch if pads is None else list(pads)
        protects = [protect] * batch if isinstance(protect, int) else list(protect)
        rows = []
        for b in range(batch):
            real = self._lowest_real(scores[b, ..., pads[b] :], evict[b], protects[b])
            if pads[b]:
                real = torch.cat([real.new_zeros(*real.shape[:-1], pads[b]), real], -1)
            rows.append(real)
        return torch.stack(rows)

    def _lowest_real(self, scores: torch.Tensor, evict: int, protect: int) -> torch.Tensor:
        """One row's unpadded candidates ``[..., C]``: False at the ``evict`` lowest, never at
        the ``protect`` highest of a head (last axis)."""
        flat = scores
        if protect > 0:
            best = scores.topk(protect, dim=-1).indices
            flat = scores.scatter(-1, best, torch.inf)
        flat = flat.reshape(-1)
        heads = scores.numel() // scores.shape[-1]
        available = heads * max(scores.shape[-1] - max(protect, self.sinks), 0)
        if evict > available:
            raise ValueError(
                f"compression_ratio {self.compression_ratio} needs {evict} evictions but only "
                f"{available} entries lie outside the window, the sinks and the floor"
            )
        keep = torch.ones_like(flat, dtype=torch.bool)
        if evict > 0:
            keep.scatter_(-1, flat.topk(evict, dim=-1, largest=False).indices, False)
        return keep.view(scores.shape)

    def _full_keep(self, per_kv: torch.Tensor, decided: torch.Tensor | None) -> torch.Tensor:
        """``[B, Hkv, T]``: the window kept, the rest as ``decided`` (all kept when None)."""
        batch, kv_heads, candidates = per_kv.shape
        keep = torch.ones(
            batch, kv_heads, candidates + self.window_size, dtype=torch.bool, device=per_kv.device
        )
        if decided is not None:
            keep[..., :candidates] = decided
        return keep

    def keep_mask(self, per_kv: torch.Tensor, pads: Sequence[int] | None = None) -> torch.Tensor:
        """``[batch, kv_heads, T]`` boolean: which prompt entries each KV head keeps (per
        layer: threshold mode or ``budget="layer"``), from the layer's relative scores
        ``per_kv`` ``[batch, kv_heads, T - w]`` (:meth:`relative`); padded positions (``pads``:
        each row's left padding) are never kept."""
        pads = [0] * per_kv.shape[0] if pads is None else list(pads)
        if self.compression_ratio is None:
            if self.threshold > 0:
                return self._full_keep(per_kv, per_kv > self.threshold)
            return self._full_keep(per_kv, per_kv > -torch.inf if any(pads) else None)
        kv_heads, length = per_kv.shape[1], per_kv.shape[2] + self.window_size
        evict = [round(self.compression_ratio * kv_heads * (length - pad)) for pad in pads]
        return self._full_keep(per_kv, self._lowest(per_kv, evict, pads=pads))

    def _pooled_keeps(self, pads: Sequence[int]) -> dict[int, torch.Tensor]:
        """Per pending layer, ``[B, Hkv, T]``: the pooled budget's evictions."""
        layers = sorted(self._pending)
        scores = torch.stack([self._pending[i][2] for i in layers], 1)  # [B, L, Hkv, T - w]
        length = scores.shape[-1] + self.window_size
        ratio = cast(float, self.compression_ratio)
        entries = scores.shape[1] * scores.shape[2]  # per position of a row: L · Hkv
        evict = [round(ratio * entries * (length - pad)) for pad in pads]
        candidates = [scores.shape[-1] - pad for pad in pads]
        protect = [min(c, math.ceil(self.floor * (1 - ratio) * c)) for c in candidates]
        decided = self._lowest(scores, evict, protect, pads)  # [B, L, Hkv, T - w]
        return {
            layer: self._full_keep(scores[:, j], decided[:, j]) for j, layer in enumerate(layers)
        }

    def _apply(
        self, keeps: dict[int, tuple[nn.Module, Any, torch.Tensor]], real: torch.Tensor
    ) -> None:
        """Record each layer's ``keep`` ``[B, Hkv, T]`` (``keeps[layer] = (module, cache,
        keep)``) and evict through its cache; ``real`` ``[B, T]`` marks the unpadded positions.

        With a ragged cache the entries are freed. Otherwise kvpress's attention patch masks
        ``module.masked_key_indices`` at decoding time: the evicted indices of all the layers
        are found together: two host reads for the whole call, not two per layer."""
        masked: list[int] = []
        for layer, (module, cache, keep) in keeps.items():
            self.kept[layer] = keep.sum(-1)  # on the device: read back once, when asked
            cast(Any, module).masked_key_indices = None  # read by kvpress's attention patch
            compress_layer = getattr(cache, "compress_layer", None)
            if compress_layer is not None:  # ragged cache: evicted entries are freed
                compress_layer(layer, keep, attention_mask=real)
            else:
                masked.append(layer)
        if not masked:
            return
        evicted = torch.stack([~keeps[layer][2] for layer in masked])  # [L, B, Hkv, T]
        found = evicted.nonzero()  # [N, 4]: layer, batch, head, position
        counts = torch.bincount(found[:, 0], minlength=len(masked)).tolist()
        for layer, indices, count in zip(masked, found.split(counts), counts, strict=True):
            if count:
                cast(Any, keeps[layer][0]).masked_key_indices = tuple(indices[:, 1:].unbind(1))

    def compress(
        self,
        module: nn.Module,
        hidden_states: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        attentions: torch.Tensor,
        kwargs: dict,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        layer: int = cast(Any, module).layer_idx
        last = layer == int(cast(Any, module).config.num_hidden_layers) - 1
        real, pads = self._padding(kwargs.get("attention_mask"), keys)
        if layer == 0:  # a new prefill: forget the previous one's statistics
            self.kept.clear()
            self._pending.clear()
            self._finite.clear()
            self._graphs.close()
            self.real_lengths = [keys.shape[2] - pad for pad in pads]
        if last:
            self._padding_read = None  # let the prefill's mask go
        cache = kwargs["past_key_values"]
        per_kv = self.relative(module, hidden_states, keys, kwargs, pads, self._finite)
        if self.budget == "layer" or self.compression_ratio is None:
            self._apply({layer: (module, cache, self.keep_mask(per_kv, pads))}, real)
            if last:
                self._scored_all()
            return keys, values
        self._pending[layer] = (module, cache, per_kv)
        if last:  # every layer scored: check the scores, then evict
            self._scored_all()
            keeps = self._pooled_keeps(pads)
            self._apply({i: (*self._pending[i][:2], keep) for i, keep in keeps.items()}, real)
            self._pending.clear()
        return keys, values

    def _scored_all(self) -> None:
        """The prefill's last layer is scored: free the scoring graphs (their outputs were
        copied) and raise if a layer had NaN / inf scores (one read for all layers)."""
        self._graphs.close()
        flags, self._finite = self._finite, []
        if flags:
            _raise_if_not_finite(flags)

    def _padding(
        self, mask: torch.Tensor | None, keys: torch.Tensor
    ) -> tuple[torch.Tensor, list[int]]:
        """:func:`left_padding` of the layer's mask, the real positions on the keys' device:
        read once a prefill (every layer gets the same mask object), not once a layer."""
        shape = (keys.shape[0], keys.shape[2], keys.device)
        read = self._padding_read
        if read is not None and read[0] is mask and read[1] == shape:
            return read[2], read[3]
        real, pads = left_padding(mask, keys.shape[0], keys.shape[2], device=keys.device)
        self._padding_read = (mask, shape, real, pads)
        return real, pads

    def _prefilling(self, kwargs: dict, last: bool) -> bool:
        """Whether this forward pass is the prefill (kvpress's rule: its cache positions end at
        its own length). Every layer of a pass gets the same positions tensor, so the device
        is read once a pass, not once a layer: the verdict is kept from the first layer to the
        ``last`` and reused only for the same tensor, unchanged since (its version)."""
        position = kwargs["cache_position"]
        length = int(kwargs["hidden_states"].shape[1])
        version = _version(position)
        read = self._prefill_read
        if last:
            self._prefill_read = None  # the next pass reads its own
        if read is not None and read[0]() is position and read[1:3] == (version, length):
            return bool(read[3])
        prefilling = _ends_at(position, length)
        if not last:
            self._prefill_read = (weakref.ref(position), version, length, prefilling)
        return prefilling

    def forward_hook(self, module: nn.Module, input: Any, kwargs: dict, output: Any) -> Any:
        """kvpress's hook, except that the prefill is recognised once a forward pass and the
        cache is not written back: :meth:`compress` evicts through a ragged cache or records
        the indices kvpress's attention patch masks, and leaves the stored keys as they are."""
        layer = int(cast(Any, module).layer_idx)
        last = layer == int(cast(Any, module).config.num_hidden_layers) - 1
        if not self._prefilling(kwargs, last):
            return output
        cache = kwargs["past_key_values"]
        if getattr(cache, "compress_layer", None) is None:
            keys, values = extract_keys_and_values(cache, layer)
        else:
            keys, values = cache.layers[layer].keys, cache.layers[layer].values
        self.compress(module, kwargs["hidden_states"], keys, values, output[1], kwargs)
        return output

    def _check_compressed(self, row: int | None = None) -> tuple[list[int], slice]:
        """The compressed layers, and the batch rows asked for (one, or all when None)."""
        if not self.kept:
            raise RuntimeError("no prefill has been compressed yet")
        layers = sorted(self.kept)
        if any(kept.device.type != "cpu" for kept in self.kept.values()):  # once a prefill
            counts = stack_on_host([self.kept[i] for i in layers])  # one copy per device
            self.kept = dict(zip(layers, counts, strict=True))
        rows = len(self.real_lengths)
        if row is None:
            return sorted(self.kept), slice(None)
        if isinstance(row, bool) or not isinstance(row, int) or not 0 <= row < rows:
            raise ValueError(f"row must be an int in [0, {rows}), got {row!r}")
        return sorted(self.kept), slice(row, row + 1)

    def _row_lengths(self, rows: slice) -> torch.Tensor:
        """``[batch, 1]`` float64: each selected row's unpadded prompt length."""
        return torch.tensor(self.real_lengths[rows], dtype=torch.float64).unsqueeze(1)

    def realized_ratio(self, row: int | None = None) -> float:
        """Evicted / all KV entries of the compressed prompt over all layers and KV heads,
        after the last prefill: of batch row ``row``, or of every row (padding excluded)."""
        layers, rows = self._check_compressed(row)
        kept = sum(float(self.kept[i][rows].sum()) for i in layers)
        total = sum(self.kept[i].shape[1] * sum(self.real_lengths[rows]) for i in layers)
        return 1.0 - kept / total

    def layer_ratios(self, row: int | None = None) -> dict[int, float]:
        """Realized ratio per layer (of batch row ``row``, or over every row and KV head)."""
        layers, rows = self._check_compressed(row)
        total = self._row_lengths(rows).sum()
        return {
            i: float(1 - self.kept[i][rows].double().sum() / (total * self.kept[i].shape[1]))
            for i in layers
        }

    def head_ratios(self) -> torch.Tensor:
        """Realized ratio per layer and KV head, ``[layers, batch, kv_heads]`` float64."""
        layers, rows = self._check_compressed()
        lengths = self._row_lengths(rows)
        return torch.stack([1 - self.kept[i].double() / lengths for i in layers])


def _ends_at(position: torch.Tensor, length: int) -> bool:
    """Whether the cache positions of a pass end at its own length (a read of the device)."""
    return int(position[-1]) + 1 == length


def _version(tensor: torch.Tensor) -> int:
    """``tensor``'s version counter (bumped by every in-place change); -1 for an inference
    tensor, which has none (one pass's layers still share the verdict, see ``_prefilling``)."""
    try:
        return int(tensor._version)
    except RuntimeError:
        return -1


def _raise_if_not_finite(flags: Sequence[tuple[int, torch.Tensor]]) -> None:
    """Raise ``ValueError`` naming the first layer whose flag (a boolean tensor) is False."""
    ok = stack_on_host([flag for _, flag in flags])
    if not bool(ok.all()):
        layer = flags[int((~ok).nonzero()[0])][0]
        raise ValueError(
            f"layer {layer}: the window's attention scores contain NaN or inf; the model's "
            "activations overflowed (try float32 or a shorter input)"
        )


def left_padding(
    mask: torch.Tensor | None, batch: int, length: int, *, device: torch.device | None = None
) -> tuple[torch.Tensor, list[int]]:
    """The real (unpadded) positions ``[batch, length]`` bool (on ``device``, by default the
    mask's) and each row's left padding.

    ``mask`` is the attention mask a layer receives: None (no padding), 2D ``[batch, ≥
    length]`` (1 = real, flash-attention's form), or 4D ``[batch, 1, q, ≥ length]``, boolean
    (True = attend, sdpa's) or additive float (0 = attend, eager's); its last query row shows
    the padded columns. Padding must be on the left (``tokenizer.padding_side = "left"``).
    """
    if mask is None:
        return torch.ones(batch, length, dtype=torch.bool, device=device), [0] * batch
    if mask.dim() == 2:
        real = mask[:, -length:].bool()
    elif mask.dim() == 4:
        last = mask[:, 0, -1, -length:]
        real = last if last.dtype == torch.bool else last == 0
    else:
        raise ValueError(f"attention masks are 2D or 4D, got {tuple(mask.shape)}")
    if tuple(real.shape) != (batch, length):
        raise ValueError(
            f"the attention mask covers {tuple(real.shape)}, expected {(batch, length)}"
        )
    pads = (~real).sum(1)  # [B]
    left = torch.arange(length, device=real.device) >= pads.unsqueeze(1)  # [B, T]
    pads_list = pads.tolist()
    if not bool((left == real).all()):
        raise ValueError(
            "RCStatPress needs left padding (tokenizer.padding_side = 'left'): the attention "
            "mask hides positions after real tokens"
        )
    return real.to(device or real.device), pads_list
