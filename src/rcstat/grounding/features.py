"""Per-token, per-head grounding statistics from one layer's attention scores (docs/grounding.md).

The response ``r`` is teacher-forced after the prompt (chat template, context ``c``,
instruction). Response token ``j`` (absolute position ``a + j``) is *produced* by the query at
position ``a + j - 1``: the row that decides it. For that row ``q`` and every query head the
reducer computes

* ``rc``: the scale-free normalized RC ``E(X, Y) / (E(X, Y) + E(Y, X))`` (docs/definitions.md)
  with ``X`` = the raw scores of ``q`` against the context keys and ``Y`` = its raw scores
  against the response written so far, keys ``a - 1 .. q`` (the last template token opens the
  response, so ``Y`` is never empty): how strongly the query that writes the token reads the
  context rather than the response. ``Y`` is sorted once per row and every context score is
  searched in it (:func:`~rcstat.stats.normalized_rc_shared`), so the cost is one binary
  search per (row, context key), not a sort of the context;
* ``lookback``: the Lookback Lens ratio (Chuang et al., 2024)
  ``A_c / (A_c + A_r)`` with ``A_c`` the mean attention weight on the context keys and
  ``A_r`` the mean weight on the response keys ``a - 1 .. q``;
* ``attention_score``: ``log α_qq``, the log-diagonal of the attention map whose mean is the
  attention score of LLM-Check (Sriramanan et al., 2024);
* ``copy``: ``Σ_{k ∈ M_j} α_qk``, the attention weight of ``q`` on the context keys ``M_j``
  that hold the token being written (the same word, compared without case or leading space):
  how much the head copies the token from the context, as retrieval heads do (Wu et al., 2024).

In the same pass it attributes each response sentence ``g'`` to the context (paper eq. 10)
with a fixed set of support heads: the key-level expected RC ``t_h(g', i)`` of
:mod:`rcstat.attribution.reduce`, for the context keys only, summed over those heads. On
CUDA the support heads' scores of consecutive layers are gathered into one block and ranked
together (:class:`~rcstat.grounding.rows_gpu.SupportBatch`: samples gathered, sorted,
prepared and ranked once for many layers), on a side stream beside the rows' kernels, joined
before each layer's results are handed back; the sums come with the layer that ranks them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rcstat.capture import SoftmaxParams, attention_probs
from rcstat.capture.host import upload_many
from rcstat.grounding.rows_gpu import RowLayout, SupportBatch, fused_rows, fused_rows_serve
from rcstat.stats import UnitRows, normalized_rc_shared, units_key_expected
from rcstat.stats._gpu import available
from rcstat.stats._streams import fork, join, on

__all__ = [
    "HEAD_FEATURES",
    "PassExample",
    "ResponseRows",
    "grounding_reducer",
    "heads_by_layer",
    "query_positions",
]

#: The longest response (rows) whose RC the GPU kernel sums pair by pair; longer ones search
#: each context score in the row's sorted response scores.
PAIRWISE_ROWS = 64

#: The per-head statistics of every response token, in the order the reducer returns them.
HEAD_FEATURES = ("rc", "lookback", "attention_score")


@dataclass(frozen=True)
class ResponseRows:
    """Where the context and the response sit in the token sequence.

    Attributes
    ----------
    context
        ``[start, end)`` absolute token range of the context.
    response
        ``[start, end)`` absolute token range of the response; the captured query rows are
        ``start - 1 .. end - 1`` (``G + 1`` rows: the row before each token, and the last).
    """

    context: tuple[int, int]
    response: tuple[int, int]

    @property
    def first_row(self) -> int:
        """Absolute position of the first captured query row."""
        return self.response[0] - 1

    @property
    def num_rows(self) -> int:
        """``G + 1``."""
        return self.response[1] - self.response[0] + 1


def heads_by_layer(flat: np.ndarray, heads: int) -> dict[int, torch.Tensor]:
    """Flat head indices ``layer * heads + head`` grouped by layer (sorted head indices)."""
    grouped: dict[int, list[int]] = {}
    for index in sorted(int(i) for i in flat):
        grouped.setdefault(index // heads, []).append(index % heads)
    return {layer: torch.tensor(chosen) for layer, chosen in grouped.items()}


@dataclass(frozen=True)
class PassExample:
    """One sequence of a (batched) grounding pass.

    Attributes
    ----------
    rows
        Where its context and response sit.
    units
        Rows ``[a, b)`` of each response unit (sentence), relative to the response's start.
    matches
        ``[G, C]`` bool: context key ``k`` holds the token that row ``j`` writes (``copy``);
        none: ``copy`` is zero.
    """

    rows: ResponseRows
    units: tuple[tuple[int, int], ...] = ()
    matches: torch.Tensor | None = None

    @property
    def length(self) -> int:
        """Tokens of the sequence (the response is last)."""
        return self.rows.response[1]


def query_positions(examples: Sequence[PassExample]) -> torch.Tensor:
    """``[B, Gmax + 1]`` int64: the absolute positions of the rows a pass over ``examples``
    (right-padded to one length) captures. Row ``j`` of sequence ``b`` is its query at
    ``first_row + j``; rows past a sequence's last (``G + 1`` rows) repeat its last."""
    width = max(e.rows.num_rows for e in examples)
    ranks = torch.arange(width)
    return torch.stack([e.rows.first_row + ranks.clamp_max(e.rows.num_rows - 1) for e in examples])


def grounding_reducer(
    examples: Sequence[PassExample],
    softmax: dict[int, SoftmaxParams],
    *,
    rc_heads: dict[int, torch.Tensor] | None = None,
    support_heads: dict[int, torch.Tensor] | None = None,
    device: torch.device | None = None,
    heads: int | None = None,
) -> Callable[[int, torch.Tensor], dict[str, torch.Tensor]]:
    """A capture reducer returning the statistics of the module doc for one layer, for every
    sequence of a batch at once.

    Parameters
    ----------
    examples
        The sequences of the pass, right-padded to one length (the padding comes after every
        real token, so causal attention keeps it out of their rows); the capture takes the
        rows of :func:`query_positions`.
    softmax
        Per layer, what the model applies before its softmax.
    rc_heads
        Per layer, the heads whose ``rc`` is computed (default: every head); the others get
        NaN. ``lookback`` and ``attention_score`` come for every head.
    support_heads
        Per layer, the heads that attribute each unit to the context (paper eq. 10).
    device, heads
        Where the pass starts and the model's query heads: the indices and masks every layer
        needs are copied there now, before the pass (a copy inside the pass must go through
        pinned memory, which costs host time while the device waits); without them, with
        the first layer.

    Returns
    -------
    callable
        ``reducer(layer, scores [B, H, Gmax + 1, T]) -> dict`` on the layer's device, with
        ``Gmax`` the longest response and the keys ``[k0, k1)`` from the first context's
        start to the last context's end: ``features`` ``[3, B, H, Gmax]`` float32 (``rc``,
        ``lookback``, ``attention_score`` of the rows that produce each sequence's response
        tokens; rows past a response are meaningless), ``copy`` ``[B, H, Gmax]`` float32,
        and for the ``U`` units of all sequences in order, ``copied`` ``[U, k1 - k0]`` (float64,
        or float32 from the GPU kernels), the ``copy`` weight of every unit's rows on each
        key, summed over the rows and the layer's heads, and in the layers with support heads
        ``support`` ``[U, k1 - k0]`` float64, the key-level expected RC ``t_h(g', i)`` of
        every unit for every key, summed over those heads (keys outside a sequence's own
        context are meaningless).
    """
    count = len(examples)
    gens = [e.rows.num_rows - 1 for e in examples]  # G per sequence
    width = max(gens)
    length = max(e.length for e in examples)  # T
    k0 = min(e.rows.context[0] for e in examples)
    k1 = max(e.rows.context[1] for e in examples)
    # built with numpy: torch's CPU kernels cost far more host time on these small arrays
    first = np.array([e.rows.first_row for e in examples])  # [B]
    positions = query_positions(examples)[:, :width]  # [B, Gmax]
    keys = np.arange(length)
    spans = np.array([e.rows.context for e in examples])  # [B, 2]
    inside = (keys >= spans[:, :1]) & (keys < spans[:, 1:])  # [B, T]
    on_context = torch.from_numpy(inside / inside.sum(-1, keepdims=True)).float()  # the mean
    written = torch.from_numpy(keys[None, :] >= first[:, None]).float()  # [B, T]: keys a-1 ..
    seen = torch.arange(1, width + 1, dtype=torch.float32)  # [Gmax]: response keys per row
    units = [u for e in examples for u in e.units]
    # row-to-unit sums of every sequence: [B, Umax, Gmax]; its units in order
    most = max(1, max(len(e.units) for e in examples))
    unit_sum = np.zeros((count, most, width))
    for b, e in enumerate(examples):
        for u, (a, z) in enumerate(e.units):
            unit_sum[b, u, a:z] = 1.0
    unit_at = torch.tensor(
        [b * most + u for b, e in enumerate(examples) for u in range(len(e.units))],
        dtype=torch.long,
    )
    if count == 1 and examples[0].matches is not None:  # its context is [k0, k1): as it is
        match = examples[0].matches.numpy()[None]  # [1, G, K]
    else:
        match = np.zeros((count, width, k1 - k0), dtype=bool)  # [B, Gmax, K]
        for b, e in enumerate(examples):
            if e.matches is not None:
                c0, c1 = e.rows.context
                match[b, : gens[b], c0 - k0 : c1 - k0] = e.matches.numpy()
    triangle = torch.from_numpy(np.tri(width, dtype=bool))  # [Gmax, Gmax]: key <= row
    pairs = unit_pairs(examples) if units else None  # [U] each: the units' rows, built later
    meta = torch.tensor(
        [[*e.rows.context, e.rows.first_row, g] for e, g in zip(examples, gens, strict=True)]
    )  # [B, 4]: what the fused kernels need of each sequence
    has_match = any(e.matches is not None for e in examples)
    unit_table = torch.tensor(
        [[b, a, z] for b, e in enumerate(examples) for a, z in e.units], dtype=torch.long
    ).view(-1, 3)  # [U, 3]: sequence and rows [a, z) of each unit
    on_device: dict[torch.device, dict[str, Any]] = {}

    def on_host(heads: int) -> dict[str, torch.Tensor]:
        """Every index and mask the layers need, to be uploaded at once."""
        flags = torch.zeros(max(softmax) + 1, heads, dtype=torch.int32)  # [L, H]
        if rc_heads is None:
            flags.fill_(1)
        for layer, chosen in (rc_heads or {}).items():
            flags[layer, chosen] = 1
        tensors = {
            "positions": positions.contiguous(),
            "meta": meta,
            "units": unit_table,
            "flags": flags,
            "context": on_context,
            "written": written,
            "seen": seen,
            "unit_sum": torch.from_numpy(unit_sum),
            "unit_at": unit_at,
            "match": torch.from_numpy(match),
            "triangle": triangle,
        }
        for name, chosen_heads in (("rc_heads", rc_heads), ("support_heads", support_heads)):
            for layer, chosen in (chosen_heads or {}).items():
                tensors[f"{name}_{layer}"] = chosen
        if pairs is not None:
            tensors |= {f"pairs_{name}": torch.from_numpy(v) for name, v in pairs.items()}
        return tensors

    def placed(device: torch.device, heads: int, idle: bool = False) -> dict[str, Any]:
        """The tensors of :func:`on_host` on ``device`` (copied before the pass when
        ``idle``, else with the first layer on the device)."""
        if device not in on_device:
            moved = upload_many(on_host(heads), device, idle=idle)
            matched = moved["match"].view(torch.uint8) if has_match else None  # same bytes
            layout = RowLayout(moved["positions"], moved["meta"], matched, k0, moved["units"])
            rows = None if pairs is None else support_unit_rows(moved, length, pairs)
            on_device[device] = moved | {"layout": layout, "support_rows": rows, "shared": {}}
        return on_device[device]

    if device is not None and heads is not None:
        placed(device, heads, idle=True)

    def support_at(device: torch.device) -> tuple[UnitRows, dict[Hashable, torch.Tensor]]:
        at = on_device[device]  # placed by the layer whose heads are gathered there
        return at["support_rows"], at["shared"]

    # the support layers' heads ranked together (GPU): the sums come with the layer that ranks
    gathered = SupportBatch(
        (k0, k1),
        max(support_heads or [0]),
        sum(len(chosen) for chosen in (support_heads or {}).values()),
        support_at,
    )

    def rc_of(scores: torch.Tensor, b: int, heads: torch.Tensor | None) -> torch.Tensor:
        """``[h, G]`` normalized RC of sequence ``b``'s rows for ``heads`` (None: all)."""
        e, g = examples[b], gens[b]
        picked = scores[b, :, :g] if heads is None else scores[b, heads, :g]  # [h, G, T]
        c0, c1 = e.rows.context
        start = e.rows.first_row
        own = picked[..., start : start + g]  # [h, G, G]: keys a-1 .. a+G-2
        valid = placed(scores.device, scores.shape[1])["triangle"][:g, :g]
        return normalized_rc_shared(
            picked[..., c0:c1][:, :, None, :], own, y_valid=valid.expand_as(own), check_finite=False
        )[..., 0].float()

    def fill_rc(layer: int, block: torch.Tensor, rc: torch.Tensor) -> None:
        """``rc[b, h, :G]`` of the layer's RC heads, each row's context scores searched in its
        sorted response scores (:func:`~rcstat.stats.normalized_rc_shared`)."""
        chosen = None if rc_heads is None else rc_heads.get(layer)
        if rc_heads is None or chosen is not None:
            at = placed(block.device, block.shape[1])
            index = None if chosen is None else at[f"rc_heads_{layer}"]
            for b, g in enumerate(gens):
                if index is None:
                    rc[b, :, :g] = rc_of(block, b, None)
                else:
                    rc[b, index, :g] = rc_of(block, b, index)

    def rows_fused(layer: int, block: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``features``, ``copy`` and ``copied`` by the kernels of
        :mod:`rcstat.grounding.rows_gpu`; the RC of long responses by :func:`fill_rc` (the
        kernel's pairwise sums cost ``|X|·|Y|`` a row against a search's ``|X|·log |Y|``)."""
        at = placed(block.device, block.shape[1])
        pairwise = width <= PAIRWISE_ROWS
        wanted = rc_heads is None or layer in rc_heads
        flags = at["flags"][layer] if pairwise and wanted else None
        features, copy, copied = fused_rows(block, at["layout"], flags, softmax[layer])
        if not pairwise:
            fill_rc(layer, block, features[0])
        if copied is None:
            copied = torch.zeros(len(units), k1 - k0, dtype=torch.float32, device=block.device)
        return features, copy, copied

    def rows_eager(layer: int, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The same by tensor operations (any device and dtype)."""
        device = scores.device
        at = placed(device, scores.shape[1])
        block = scores[:, :, :width]  # [B, H, Gmax, T]
        rc = torch.full(block.shape[:3], float("nan"), dtype=torch.float32, device=device)
        fill_rc(layer, block, rc)
        probs = attention_probs(block, at["positions"][:, None], softmax[layer])  # [B,H,G,T]
        context = probs @ at["context"][:, None, :, None]  # [B, H, Gmax, 1]
        response = (probs @ at["written"][:, None, :, None])[..., 0] / at["seen"]
        lookback = context[..., 0] / (context[..., 0] + response).clamp_min(1e-30)
        diagonal = probs.gather(
            -1, at["positions"][:, None, :, None].expand(-1, probs.shape[1], -1, 1)
        )
        features = torch.stack([rc, lookback, diagonal[..., 0].clamp_min(1e-30).log()])
        on_match = probs[..., k0:k1] * at["match"][:, None]  # [B, H, Gmax, K]
        copy = on_match.sum(-1).float()  # [B, H, Gmax]
        per_row = on_match.sum(1).double()  # [B, Gmax, K] over the heads
        copied = (at["unit_sum"] @ per_row).flatten(0, 1)[at["unit_at"]]  # [U, K]
        return features, copy, copied

    def reduce(layer: int, scores: torch.Tensor) -> dict[str, torch.Tensor]:
        device = scores.device
        at = placed(device, scores.shape[1])
        support = at["support_rows"] is not None and f"support_heads_{layer}" in at
        fast = support and available(scores)  # the same sums, fewer launches
        side = fork(device, 1) if fast else None  # a branch beside the rows' kernels
        sums = None
        if fast:
            with on(side):
                sums = gathered.add(layer, scores, at[f"support_heads_{layer}"])
        if fused_rows_serve(scores):
            features, copy, copied = rows_fused(layer, scores[:, :, :width])
        else:
            features, copy, copied = rows_eager(layer, scores)
        join(device, side)
        out = {"features": features, "copy": copy, "copied": copied}
        if sums is not None:
            out["support"] = sums
        elif support and not fast:
            picked = scores[:, at[f"support_heads_{layer}"]]  # [B, h, Gmax + 1, T]
            per_key = units_key_expected(picked, at["support_rows"], (k0, k1), check_finite=False)
            out["support"] = per_key.sum(1)  # [U, K] summed over the support heads
            left = gathered.rank()  # heads gathered on a device before this one
            if left is not None:
                out["support"] = out["support"] + left.to(device)
        return out

    return reduce


def unit_pairs(examples: Sequence[PassExample]) -> dict[str, np.ndarray]:
    """``[U]`` int64 per response unit of a pass, all sequences' units in order: its sequence
    (``batch``), its rows ``[a, z)`` from the response's start (``a``, ``z``), the first key
    of the response (``prompt``), the causal pairs ``(row, key <= row)`` of the rows before
    ``a`` (``first``) and its own (``count``). :func:`support_unit_rows` builds the units'
    :class:`~rcstat.stats.UnitRows` from them on the device."""
    found = []
    for b, e in enumerate(examples):
        for a, z in e.units:
            if not 0 <= a < z:
                raise ValueError(f"unit rows [{a}, {z}) are empty or negative")
            found.append((b, a, z, e.rows.response[0]))
    batch, a, z, prompt = np.array(found, dtype=np.int64).reshape(-1, 4).T  # [U] each
    first = a * (a + 1) // 2
    count = z * (z + 1) // 2 - first
    return {"batch": batch, "a": a, "z": z, "prompt": prompt, "first": first, "count": count}


def support_unit_rows(
    at: dict[str, torch.Tensor], length: int, pairs: dict[str, np.ndarray]
) -> UnitRows:
    """The units' :class:`~rcstat.stats.UnitRows` in the pass's blocks ``[B, H, Gmax + 1, T]``
    (``T = length`` keys; the blocks start at the row before the first response token, so a
    unit's rows are one further down), equal to :func:`~rcstat.stats.stacked_unit_rows` of
    each sequence's :func:`~rcstat.stats.unit_rows` with ``row_offset=1`` (but for the index's
    padding, never read: 0 here), built where the
    ``pairs_*`` tensors (:func:`unit_pairs` ``pairs``, moved) are: only ``[U]`` values cross
    from the host, and nothing is read back.

    Pair ``first + s`` of the query-major causal pairs lies in the row ``r`` with
    ``r(r + 1)/2 <= first + s < (r + 1)(r + 2)/2`` (a search among the triangular numbers),
    at key ``first + s - r(r + 1)/2``.
    """
    batch, a, z, prompt = at["pairs_batch"], at["pairs_a"], at["pairs_z"], at["pairs_prompt"]
    first, count = at["pairs_first"], at["pairs_count"]
    device = first.device
    most, last = int(pairs["count"].max()), int(pairs["z"].max())
    step = torch.arange(most, device=device)  # [Y]
    pair = first[:, None] + step  # [U, Y]
    rows = torch.arange(last + 1, device=device)
    triangular = rows * (rows + 1) // 2  # [zmax + 1]
    row = torch.searchsorted(triangular, pair, right=True) - 1  # [U, Y]
    valid = step < count[:, None]  # [U, Y]
    key = pair - triangular[row.clamp_max(last)]
    index = torch.where(valid, (row + 1) * length + prompt[:, None] + key, 0)  # [U, Y]
    lengths = (z - a).to(torch.int32)
    return UnitRows(a + 1, lengths, index, valid, int((pairs["z"] - pairs["a"]).max()), batch)
