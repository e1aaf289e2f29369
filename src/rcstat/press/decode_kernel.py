"""Split-KV ("flash-decoding") attention of one new token over a packed ragged layer (Triton).

The decode step of a compressed layer reads each kept key/value row once; what limits it is
how many streaming multiprocessors read at the same time, and whether they read about as much.
torch's varlen flash attention gives each (batch, KV head) segment one program, so a batch-1
step of an 8-KV-head model keeps 8 of ~132 SMs busy. Here the live rows are cut into chunks:

1. :func:`_split_kernel` gives each program one chunk of one segment's live rows. It streams
   the chunk in tiles of ``BLOCK_N``, each tile loaded once for all ``group`` query heads of
   the segment's KV head (GQA), and keeps the online-softmax state in fp32 (running max ``m``,
   sum ``l``, unnormalised accumulator ``acc``); it writes partials ``[items, group]``
   (``m``, ``l``) and ``[items, group, dim]`` (``acc``). The chunks are laid out one of two ways
   (:class:`SplitPlan`):

   - *per segment* (many segments): grid ``(segments, splits)``, chunk ``i`` of every segment
     is rows ``[i·chunk, (i + 1)·chunk)``, the item ``segment · splits + i``; chunks past a
     segment's end return at once;
   - *a work list* (few segments, e.g. batch 1): the chunks of every segment, segment after
     segment, are the items of a 1-D grid; a program finds its segment from a running sum of
     ``ceil(len / chunk)``. Segments of unequal length (the head-wise budget) then give every
     program about the same rows, where a per-segment grid would leave SMs idle beside the
     longest segment's chunks;
2. :func:`_combine_kernel`, grid ``(segments, group)``: merges the chunks of a head,
   ``out = Σ_i 2^(m_i − M) acc_i / Σ_i 2^(m_i − M) l_i`` with ``M = max_i m_i``, into the
   output in the query's dtype (zeros for an empty segment).

On cards with programmatic dependent launch (compute capability 9+), the two kernels are
launched with it: each split program waits for the previous kernel (``griddepcontrol.wait``)
before its first read, then lets the merge be scheduled; the merge reads the live lengths
(written before that wait) while the split kernel runs, and waits for it on the device before
reading its partials. The gap between two launches is hidden, and the results are those of a
plain launch.

The split plan (:func:`split_plan`) is made from host integers only: the number of segments,
the row bound ``max_len + room`` of every segment and the capacity of the layout (every live
row lies below these, and they do not change while tokens are appended in place: ``max_len``
grows by one as ``room`` shrinks by one, see ``cache.py``), the head dim and the SM count (read
once per device). The kernels read the live lengths ``seg_len`` on the device, so a step
neither waits for the device nor changes shape between repacks, and a CUDA graph recorded after
a repack replays every later step until the next one. See ``docs/press.md``.

The launch knobs (rows per tile, warps, software-pipeline stages, how ``p·v`` is multiplied,
programs per SM) are a :class:`KernelConfig`; :func:`kernel_config` gives the default of a head
dim, and ``benchmarks/tune_decode_kernel.py`` times others.

This module imports Triton: :mod:`rcstat.press.attention` imports it only for a CUDA query or
under Triton's interpreter (``TRITON_INTERPRET=1``, CPU tensors; the tests run it there).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Literal, get_args

import torch
import triton
import triton.language as tl

from rcstat.press.decode_plans import CardPlans, card_plans
from rcstat.press.layout import PackedKV
from rcstat.stats._gpu import sm_count

_LOG2E = 1.4426950408889634
_NEG = tl.constexpr(-1.0e30)  # finite "minus infinity": NEG − NEG = 0, never NaN
_SPLIT_TILE = 32  # splits merged per iteration of the combine kernel
_WAVES = 4  # programs per SM of a per-segment plan (measured best on H200: docs/benchmarks.md)
_LIST_WAVES = 1  # programs per SM of a work list (measured best on H100: docs/benchmarks.md)
_LIST_SEGMENTS = 4  # a work list when segments · this <= SMs
_CHUNK_ROWS = 16  # a work list's chunks are a multiple of this many rows
_MAX_SPLITS = 512
_STAGES = 3  # Triton's default software-pipeline depth on CUDA

PV = Literal["auto", "half2", "tf32x3", "tf32", "half", "fma"]


@dataclass(frozen=True)
class KernelConfig:
    """The launch knobs of the split kernel (none changes the result beyond rounding).

    Attributes
    ----------
    block_n
        Rows per tile (a power of two >= 16; the loads of a tile are one contiguous row of
        ``dim`` elements each, read once for every head of the GQA group).
    num_warps, num_stages
        Triton's warps per program and software-pipeline depth of the tile loop (loads of the
        next ``num_stages − 1`` tiles are in flight while one is multiplied).
    pv
        How ``Σ_n p_{g,n} v_{n,:}`` is multiplied for fp16/bf16 inputs (fp32 inputs are always
        exact, ``"ieee"``): ``"auto"`` (the default) is ``"half2"``: ``p = p_hi + p_lo``, each
        rounded to the values' dtype, in two fp16/bf16 MMAs with fp32 accumulation (``p`` kept to
        ~16 mantissa bits at the cost of one extra half MMA, which the memory-bound step hides);
        ``"tf32x3"`` fp32 ``p`` against the values widened to fp32 on tensor cores in three tf32
        passes (``p ≈ p_hi + p_lo``; ~fp32 products, but it spills registers at 4 warps);
        ``"tf32"`` one tf32 pass (``p`` rounded to 10 mantissa bits); ``"half"`` ``p`` rounded to
        the values' dtype, one fp16/bf16 MMA with fp32 accumulation (as FlashAttention does);
        ``"fma"`` no tensor cores: ``q·k`` and ``p·v`` as fp32 broadcast products and sums, the
        group padded to a power of two only (tensor-core tiles pad it to 16 rows).
    waves
        Programs per SM the split plan aims at; ``None`` (the default): as measured on the card
        (:mod:`rcstat.press.decode_plans`), else 4 for a per-segment plan, 1 for a work list.
    work_list
        Cut the rows as a work list (``True``) or per segment (``False``); ``None`` (the
        default): as measured on the card, else a work list when the segments fill at most a
        quarter of the SMs.
    pdl
        Launch with programmatic dependent launch where the card has it (compute capability
        9+; elsewhere, and under Triton's interpreter, a plain launch).
    """

    block_n: int
    num_warps: int = 4
    num_stages: int = _STAGES
    pv: PV = "auto"
    waves: int | None = None
    work_list: bool | None = None
    pdl: bool = True

    def for_dtype(self, dtype: torch.dtype) -> KernelConfig:
        """This config with ``pv="auto"`` resolved for values of ``dtype``."""
        return self if self.pv != "auto" else replace(self, pv="half2")

    def __post_init__(self) -> None:
        if self.block_n < 16 or self.block_n & (self.block_n - 1):
            raise ValueError(f"block_n must be a power of two >= 16, got {self.block_n}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"num_warps must be 1, 2, 4, 8 or 16, got {self.num_warps}")
        if self.num_stages < 1 or (self.waves is not None and self.waves < 1):
            raise ValueError(f"num_stages and waves must be >= 1, got {self}")
        if self.pv not in get_args(PV):
            raise ValueError(f"pv must be one of {get_args(PV)}, got {self.pv!r}")


@dataclass(frozen=True)
class SplitPlan:
    """How the live rows are cut: chunks of ``chunk`` rows, read in tiles of ``block_n`` rows.

    Per segment (``work_list=False``): ``splits`` chunks per segment, ``splits · chunk``
    covering the row bound of every segment. A work list: ``splits`` programs, at least the
    number of chunks of all segments together, ``ceil(capacity / chunk) + segments``."""

    splits: int
    chunk: int
    block_n: int
    work_list: bool = False


def _tile_rows(dim: int) -> int:
    """Rows per tile: about 16 KiB of fp16/bf16 keys per tile whatever the head dim."""
    return max(16, min(128, 8192 // max(dim, 16)))


def kernel_config(dim: int) -> KernelConfig:
    """The default launch knobs for head dim ``dim``: tiles of about 16 KiB of fp16/bf16 keys
    (128 rows at dim 64, 64 at 128, 32 at 256), 4 warps, 3 stages, ``p·v`` by dtype
    (``"auto"``), the plan's layout and programs per SM by the number of segments (a work list
    at one program per SM for few segments, the best on an H100; per segment at 4 programs per
    SM otherwise, the best of a sweep on an H200; docs/benchmarks.md), programmatic dependent
    launch where the card has it.

    Examples
    --------
    >>> config = kernel_config(128)
    >>> config.block_n, config.num_warps, config.num_stages, config.pv
    (64, 4, 3, 'auto')
    >>> config.waves, config.work_list, config.pdl  # chosen with the plan, on the card
    (None, None, True)
    """
    return KernelConfig(block_n=_tile_rows(dim))


def list_bound(segments: int, capacity: int, chunk: int) -> int:
    """The most chunks of ``chunk`` rows that ``segments`` segments holding at most
    ``capacity`` rows together can have: ``Σ ceil(len_s / chunk) <= ceil(Σ len_s / chunk) +
    segments − 1`` (each segment's last chunk may be short)."""
    return max(1, -(-capacity // chunk) + segments - 1)


def split_plan(
    segments: int,
    rows: int,
    capacity: int,
    dim: int,
    sms: int,
    *,
    config: KernelConfig | None = None,
    tuned: CardPlans | None = None,
) -> SplitPlan:
    """The split plan of a decode step, from host integers only (no tensor, no device read).

    Parameters
    ----------
    segments
        ``batch · kv_heads``.
    rows
        A bound on every segment's live length that holds until the next repack:
        ``packed.max_len + packed.room``.
    capacity
        A bound on the live rows of all segments together that holds until the next repack:
        ``packed.capacity``.
    dim
        Head dim.
    sms
        Streaming multiprocessors of the device.
    config
        Launch knobs (``block_n``, ``waves``, ``work_list``); :func:`kernel_config` of ``dim``
        by default.
    tuned
        The card's measured plans (:func:`~rcstat.press.decode_plans.card_plans`): where
        ``config`` leaves both ``work_list`` and ``waves`` open, the layout and ``waves`` of
        the measured point nearest to this step; without it (a card never measured), a work
        list when the segments fill at most a quarter of the SMs.

    Returns
    -------
    SplitPlan
        Per segment: ``splits`` such that ``segments · splits`` is about ``waves · sms``
        programs (at most :data:`_MAX_SPLITS`, and no chunk shorter than one tile), ``chunk`` a
        multiple of the tile that covers ``rows`` in ``splits`` chunks. A work list: ``chunk``
        the capacity cut into ``waves · sms`` parts (a multiple of 16 rows), ``splits`` the
        bound :func:`list_bound` on the chunks.

    Examples
    --------
    >>> split_plan(8, 12_000, 65_600, 128, 132)  # batch 1, 8 KV heads, 64k kept rows, an H100
    SplitPlan(splits=136, chunk=512, block_n=64, work_list=True)
    >>> split_plan(64, 12_000, 524_800, 128, 132)  # batch 8: per segment, fewer splits
    SplitPlan(splits=9, chunk=1344, block_n=64, work_list=False)
    """
    for name, value in (
        ("segments", segments),
        ("rows", rows),
        ("capacity", capacity),
        ("dim", dim),
        ("sms", sms),
    ):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be a host int, got {type(value).__name__}")
        least = 0 if name in ("rows", "capacity") else 1
        if value < least:
            raise ValueError(f"{name} must be >= {least}, got {value}")
    config = kernel_config(dim) if config is None else config
    block_n = config.block_n
    work_list, waves = config.work_list, config.waves
    if tuned is not None and work_list is None and waves is None:
        point = tuned.point_at(segments, rows)
        work_list, waves = point.work_list, point.waves
    listed = segments * _LIST_SEGMENTS <= sms if work_list is None else work_list
    if listed:
        slots = (_LIST_WAVES if waves is None else waves) * sms
        chunk = max(1, -(-capacity // (slots * _CHUNK_ROWS))) * _CHUNK_ROWS
        return SplitPlan(list_bound(segments, capacity, chunk), chunk, block_n, work_list=True)
    waves = _WAVES if waves is None else waves
    tiles = max(1, -(-rows // block_n))  # tiles of the longest segment
    wanted = max(1, min(_MAX_SPLITS, -(-waves * sms // segments), tiles))
    chunk = -(-tiles // wanted) * block_n
    splits = max(1, -(-rows // chunk))
    return SplitPlan(splits=splits, chunk=chunk, block_n=block_n)


def _covers(plan: SplitPlan, segments: int, rows: int, capacity: int) -> bool:
    """Whether ``plan`` reads every live row of a layout with these bounds."""
    if plan.chunk < 1:
        return False
    if plan.work_list:
        return plan.splits >= list_bound(segments, capacity, plan.chunk)
    return plan.splits * plan.chunk >= rows


@functools.cache
def _has_pdl(device: torch.device) -> bool:
    """Programmatic dependent launch: CUDA compute capability 9+ (read once)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


@functools.cache
def _tuned(device: torch.device) -> CardPlans | None:
    """The measured plans of a CUDA device's card (read once per device); None elsewhere."""
    if device.type != "cuda":
        return None
    return card_plans(torch.cuda.get_device_name(device), sm_count(device))


def split_decode_attention(
    query: torch.Tensor,
    packed: PackedKV,
    scaling: float,
    plan: SplitPlan | None = None,
    *,
    config: KernelConfig | None = None,
) -> torch.Tensor:
    """Decode attention of ``query`` ``[batch, heads, 1, dim]`` over ``packed`` (causal: the new
    token is already appended, so every live row is visible); ``[batch, 1, heads, dim]``.

    ``plan`` defaults to :func:`split_plan` of the layout and ``config``; ``config`` to
    :func:`kernel_config` of the head dim with the plan's ``block_n``. Tests and
    ``benchmarks/tune_decode_kernel.py`` pass others.
    """
    batch, heads, q_len, dim = query.shape
    segments = batch * packed.kv_heads
    group = heads // packed.kv_heads
    if q_len != 1:
        raise ValueError(f"the split-KV kernel decodes one query per head, got q = {q_len}")
    if query.dtype != packed.keys.dtype or query.device != packed.keys.device:
        raise ValueError(
            f"the query is {query.dtype} on {query.device}, the packed layer "
            f"{packed.keys.dtype} on {packed.keys.device}"
        )
    if packed.keys.stride(1) != 1 or packed.values.stride(1) != 1:
        raise ValueError("the packed keys/values must be row-major [capacity, dim]")
    rows = packed.max_len + packed.room
    capacity = packed.capacity
    if plan is None:
        device = packed.keys.device
        sms = sm_count(device)
        plan = split_plan(segments, rows, capacity, dim, sms, config=config, tuned=_tuned(device))
    elif not _covers(plan, segments, rows, capacity):
        raise ValueError(
            f"{plan} does not cover the layout's {rows} rows per segment, {capacity} in all "
            f"({segments} segments)"
        )
    if config is None:
        config = replace(kernel_config(dim), block_n=plan.block_n)
    elif config.block_n != plan.block_n:
        raise ValueError(f"{config} and {plan} disagree on block_n")
    config = config.for_dtype(query.dtype)
    device = query.device
    items = plan.splits if plan.work_list else segments * plan.splits
    part_max = torch.empty(items, group, device=device, dtype=torch.float32)
    part_sum = torch.empty_like(part_max)  # [items, G]
    part_acc = torch.empty(items, group, dim, device=device, dtype=torch.float32)
    out = torch.empty(batch, 1, heads, dim, device=device, dtype=query.dtype)  # [B, 1, H, D]
    block_d = max(16, triton.next_power_of_2(dim))
    # fp32 inputs: exact products whatever config.pv; half inputs: q·k on fp16/bf16 tensor
    # cores (the precision of a dot applies to fp32 operands only), p·v as config.pv says
    exact = query.dtype == torch.float32
    pv_precision = "ieee" if exact or config.pv in ("half", "half2", "fma") else config.pv
    tensor_cores = config.pv != "fma"  # tl.dot needs >= 16 rows: the group is padded to 16
    pdl = config.pdl and _has_pdl(device)
    block_s = triton.next_power_of_2(segments) if plan.work_list else 1  # unused per segment
    grid = (plan.splits,) if plan.work_list else (segments, plan.splits)
    _split_kernel[grid](
        query,
        packed.keys,
        packed.values,
        packed.seg_start,
        packed.seg_len,
        part_max,
        part_sum,
        part_acc,
        scaling * _LOG2E,
        packed.kv_heads,
        query.stride(0),
        query.stride(1),
        query.stride(3),
        packed.keys.stride(0),
        packed.values.stride(0),
        plan.chunk,
        plan.splits,
        segments,
        GROUP=group,
        BLOCK_G=max(16 if tensor_cores else 1, triton.next_power_of_2(group)),
        DIM=dim,
        BLOCK_D=block_d,
        BLOCK_N=plan.block_n,
        QK_PRECISION="ieee" if exact else "tf32x3",
        PV_PRECISION=pv_precision,
        PV=config.pv,
        WORK_LIST=plan.work_list,
        BLOCK_S=block_s,
        PDL=pdl,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        launch_pdl=pdl,
    )
    _combine_kernel[(segments, group)](
        part_max,
        part_sum,
        part_acc,
        packed.seg_len,
        out,
        plan.chunk,
        plan.splits,
        segments,
        GROUP=group,
        DIM=dim,
        BLOCK_D=block_d,
        SPLIT_TILE=_SPLIT_TILE,
        WORK_LIST=plan.work_list,
        BLOCK_S=block_s,
        PDL=pdl,
        num_warps=4,
        launch_pdl=pdl,
    )
    return out


@triton.jit
def _list_items(seg_len_ptr, segments, chunk, BLOCK_S: tl.constexpr):
    """A work list's live lengths, chunks of each segment, ``ceil(len / chunk)``, and the first
    item of each (an exclusive running sum): three ``[BLOCK_S]`` int32 (0 past the last
    segment)."""
    s = tl.arange(0, BLOCK_S)
    lengths = tl.load(seg_len_ptr + s, mask=s < segments, other=0).to(tl.int32)
    chunks = (lengths + chunk - 1) // chunk
    return lengths, chunks, tl.cumsum(chunks, 0) - chunks


@triton.jit
def _pick(values, index, BLOCK_S: tl.constexpr):
    """``values[index]`` of a ``[BLOCK_S]`` vector, as a scalar."""
    return tl.sum(tl.where(tl.arange(0, BLOCK_S) == index, values, 0), 0)


@triton.jit
def _split_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    seg_start_ptr,
    seg_len_ptr,
    max_ptr,
    sum_ptr,
    acc_ptr,
    qk_scale,
    kv_heads,
    stride_qb,
    stride_qh,
    stride_qd,
    stride_k,
    stride_v,
    chunk,
    splits,
    segments,
    GROUP: tl.constexpr,
    BLOCK_G: tl.constexpr,
    DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    QK_PRECISION: tl.constexpr,
    PV_PRECISION: tl.constexpr,
    PV: tl.constexpr,
    WORK_LIST: tl.constexpr,
    BLOCK_S: tl.constexpr,
    PDL: tl.constexpr,
):
    """Online softmax of one chunk of one segment, for the ``GROUP`` heads reading it.

    Scores are kept in base 2: ``qk_scale = scaling · log2(e)``, so ``2^(x·qk_scale) =
    e^(x·scaling)``. ``PV`` is :attr:`KernelConfig.pv`; ``WORK_LIST`` the plan's layout (a 1-D
    grid of work items, or ``(segments, splits)``)."""
    if PDL:  # read nothing before the previous kernel is done; then the merge may be scheduled
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    if WORK_LIST:  # every segment's first row and length in one round trip, then pick
        item = tl.program_id(0)
        s = tl.arange(0, BLOCK_S)
        starts = tl.load(seg_start_ptr + s, mask=s < segments, other=0)  # [BLOCK_S] int64
        lengths, chunks, firsts = _list_items(seg_len_ptr, segments, chunk, BLOCK_S)
        segment = tl.sum((firsts + chunks <= item).to(tl.int32), 0)  # the first reaching past
        if segment >= segments:  # past the last chunk of this step
            return
        lo = (item - _pick(firsts, segment, BLOCK_S)) * chunk
        start = _pick(starts, segment, BLOCK_S)
        length = _pick(lengths, segment, BLOCK_S)
    else:
        segment = tl.program_id(0)
        item = segment * splits + tl.program_id(1)
        lo = tl.program_id(1) * chunk
        start = tl.load(seg_start_ptr + segment)  # int64 first row of the segment
        length = tl.load(seg_len_ptr + segment).to(tl.int32)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    g_ok = g < GROUP
    d_ok = d < DIM
    batch = segment // kv_heads
    head = (segment % kv_heads) * GROUP + g  # [BLOCK_G] query heads of this KV head
    q = tl.load(
        q_ptr + batch * stride_qb + head[:, None] * stride_qh + d[None, :] * stride_qd,
        mask=g_ok[:, None] & d_ok[None, :],
        other=0.0,
    )  # [BLOCK_G, BLOCK_D]
    if PV == "fma":
        q = q.to(tl.float32)
    hi = tl.minimum(lo + chunk, length)
    m = tl.full([BLOCK_G], _NEG, tl.float32)
    total = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    n = tl.arange(0, BLOCK_N)
    for first in range(lo, hi, BLOCK_N):
        rank = first + n  # [BLOCK_N] index in the segment
        n_ok = rank < hi
        rows = start + rank
        tile_ok = n_ok[:, None] & d_ok[None, :]
        k = tl.load(k_ptr + rows[:, None] * stride_k + d[None, :], mask=tile_ok, other=0.0)
        if PV == "fma":  # [G, 1, D] · [1, N, D] summed over D
            scores = tl.sum(q[:, None, :] * k.to(tl.float32)[None, :, :], 2)
        else:
            scores = tl.dot(q, tl.trans(k), input_precision=QK_PRECISION)
        scores = scores * qk_scale  # [G, N]
        scores = tl.where(n_ok[None, :], scores, _NEG)
        m_new = tl.maximum(m, tl.max(scores, 1))
        alpha = tl.exp2(m - m_new)
        p = tl.where(n_ok[None, :], tl.exp2(scores - m_new[:, None]), 0.0)  # [G, N] fp32
        v = tl.load(v_ptr + rows[:, None] * stride_v + d[None, :], mask=tile_ok, other=0.0)
        if PV == "fma":  # [G, N, 1] · [1, N, D] summed over N
            pv = tl.sum(p[:, :, None] * v.to(tl.float32)[None, :, :], 1)
        elif PV == "half":  # p rounded to the values' dtype
            pv = tl.dot(p.to(v.dtype), v, input_precision=PV_PRECISION)
        elif PV == "half2":  # p = p_hi + p_lo, each in the values' dtype: two half MMAs
            p_hi = p.to(v.dtype)
            p_lo = (p - p_hi.to(tl.float32)).to(v.dtype)
            pv = tl.dot(p_hi, v, input_precision=PV_PRECISION)
            pv += tl.dot(p_lo, v, input_precision=PV_PRECISION)
        else:
            pv = tl.dot(p, v.to(tl.float32), input_precision=PV_PRECISION)
        acc = acc * alpha[:, None] + pv  # [G, D]
        total = total * alpha + tl.sum(p, 1)
        m = m_new
    part = item * GROUP + g  # [BLOCK_G] index into [items, G]
    tl.store(max_ptr + part, m, mask=g_ok)
    tl.store(sum_ptr + part, total, mask=g_ok)
    tl.store(acc_ptr + part[:, None] * DIM + d[None, :], acc, mask=g_ok[:, None] & d_ok[None, :])


@triton.jit
def _combine_kernel(
    max_ptr,
    sum_ptr,
    acc_ptr,
    seg_len_ptr,
    out_ptr,
    chunk,
    splits,
    segments,
    GROUP: tl.constexpr,
    DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SPLIT_TILE: tl.constexpr,
    WORK_LIST: tl.constexpr,
    BLOCK_S: tl.constexpr,
    PDL: tl.constexpr,
):
    """Merge the chunks of one (segment, group head) and write its output row."""
    segment = tl.program_id(0)
    g = tl.program_id(1)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < DIM
    if WORK_LIST:  # the segment's chunks are items first .. first + live − 1
        _, chunks, firsts = _list_items(seg_len_ptr, segments, chunk, BLOCK_S)
        live = _pick(chunks, segment, BLOCK_S)
        base = _pick(firsts, segment, BLOCK_S)
    else:  # chunks that saw at least one row
        live = (tl.load(seg_len_ptr + segment).to(tl.int32) + chunk - 1) // chunk
        base = segment * splits
    if PDL:  # the split kernel's partials are complete and visible after this (the lengths,
        # read above, were written before every split program waited and let this kernel start)
        tl.extra.cuda.gdc_wait()
    m = tl.max(tl.full([SPLIT_TILE], _NEG, tl.float32), 0)  # fp32 scalar
    total = tl.sum(tl.zeros([SPLIT_TILE], tl.float32), 0)
    acc = tl.zeros([BLOCK_D], tl.float32)
    i = tl.arange(0, SPLIT_TILE)
    for first in range(0, live, SPLIT_TILE):
        split = first + i
        ok = split < live
        part = (base + split) * GROUP + g  # [SPLIT_TILE]
        m_i = tl.load(max_ptr + part, mask=ok, other=_NEG)
        l_i = tl.load(sum_ptr + part, mask=ok, other=0.0)
        a_i = tl.load(
            acc_ptr + part[:, None] * DIM + d[None, :], mask=ok[:, None] & d_ok[None, :], other=0.0
        )
        m_new = tl.maximum(m, tl.max(m_i, 0))
        alpha = tl.exp2(m - m_new)
        w = tl.where(ok, tl.exp2(m_i - m_new), 0.0)  # [SPLIT_TILE]
        total = total * alpha + tl.sum(l_i * w, 0)
        acc = acc * alpha + tl.sum(a_i * w[:, None], 0)
        m = m_new
    out = tl.where(total > 0, acc / tl.maximum(total, 1e-30), 0.0)
    tl.store(out_ptr + (segment * GROUP + g) * DIM + d, out.to(out_ptr.dtype.element_ty), mask=d_ok)
