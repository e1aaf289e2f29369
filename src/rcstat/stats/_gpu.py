"""The CUDA path of the RC statistics: dense cross samples, Triton kernels, no host syncs.

Used by :mod:`rcstat.stats.rc` and :mod:`rcstat.stats.blocks` when the samples live on a
CUDA device, Triton is installed and the cross samples are dense (every sample valid); the
CPU kernel (``_kernel.rc_integrals``) stays the reference and serves every other case. What
differs from the CPU path (docs/benchmarks.md has the measurements):

- the big cross set ``x`` is read in place, never copied and never sorted: each sample is
  ranked within the sorted self samples ``y`` (:func:`rank_sums`; for large ``y`` a table of
  equal value buckets narrows each search), which gives ``E`` exactly (paper eq. 6);
- the upper bound ``A`` (eq. 4) comes from one crossing point per row (:func:`crossing`),
  plus a sum riding on the ranking pass: for large sets a sorted sample of ``x`` brackets
  the point and one pass collects the few ``x`` inside, among which it is found exactly;
  rows the bracket cannot settle, and small sets, take a four-pass radix selection;
- the lower bound ``a`` (eq. 5) needs the whole order of ``x`` and is left to the sorting
  kernel: callers ask for it explicitly;
- nothing waits for the device: no boolean-mask indexing, no ``.item()``; a NaN or inf
  sample makes the float64 sums non-finite, which callers check once at the end.

Set ``RCSTAT_TRITON=0`` to force the reference path on CUDA.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import os
from dataclasses import dataclass
from typing import Any

import torch

_ENV = "RCSTAT_TRITON"
_DIGITS = 256  # 8-bit radix digits
_TILE = 1024  # samples per program
_TABLE_FROM = 1024  # self sets at least this large get a bucket table
_PREPARE_BLOCK = 1024  # samples a step of prepare_kernel's running sums, or records a program
_SPLIT_FROM = 4096  # rows of at least this many self samples: running sums split over blocks
_SPLIT_ROWS = 2  # ... when there are at most this many rows per SM
_SAMPLED_FROM = 1 << 19  # cross sets at least this large bracket their crossing by a sample
_SAMPLES = 4096  # at most this many cross samples a row for the bracket
_SIGMAS = 4.0  # the bracket's half-width, in standard deviations of a sample count
# the bracket's samples a program and its groups of the slots' prefix sum (measured best on an
# H200: docs/benchmarks.md §6.37)
_BRACKET_TILE, _BRACKET_GROUP = 2048, 8
_MAX_SCALE = 1e30  # buckets per unit of value: (v − low)·scale stays finite for finite v


@functools.cache
def _triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def triton_available(device: torch.device | str) -> bool:
    """Whether statistics on ``device`` take the Triton path (CUDA, Triton installed, not
    switched off with ``RCSTAT_TRITON=0``)."""
    if os.environ.get(_ENV, "1") == "0" or torch.device(device).type != "cuda":
        return False
    return _triton_importable()


def kernels_serve(tensor: torch.Tensor) -> bool:
    """Whether rcstat's Triton kernels can run on ``tensor``: on CUDA with Triton (and
    ``RCSTAT_TRITON`` not 0), or on the CPU under Triton's interpreter
    (``TRITON_INTERPRET=1``, how the tests run them without a GPU)."""
    if tensor.is_cuda:
        return triton_available(tensor.device)
    return os.environ.get("TRITON_INTERPRET") == "1" and _triton_importable()


def available(*tensors: torch.Tensor) -> bool:
    """Whether the Triton path serves these tensors (one CUDA device, float32 or narrower)."""
    narrow = (torch.float32, torch.bfloat16, torch.float16)
    if not all(t.dtype in narrow and t.device == tensors[0].device for t in tensors):
        return False
    return triton_available(tensors[0].device)


#: While a CUDA graph is recorded (``rcstat.capture.graphs``), the list its recorder set here
#: receives every cached device constant handed out (:func:`causal_index`, the bracket's
#: sample index): a graph that outlives its call keeps them alive after they leave their cache.
graph_constants: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar(
    "rcstat_graph_constants", default=None
)


def _held(value: Any) -> Any:
    """``value`` (a cached device constant), added to the graph being recorded, if any."""
    recording = graph_constants.get()
    if recording is not None:
        recording.append(value)
    return value


def causal_index(gen_len: int, columns: int, offset: int, device: torch.device) -> torch.Tensor:
    """Flat indices of the causal self samples inside rows of ``[gen_len, columns]``.

    Query row ``j`` meets generated keys ``0..j`` at columns ``offset .. offset + j``; the
    index (query-major) is built once per shape and device, so gathering with it never
    synchronises the device the way boolean indexing does.
    """
    return _held(_causal_index(gen_len, columns, offset, device))


@functools.lru_cache(maxsize=64)  # shapes change with every example of a dataset
def _causal_index(gen_len: int, columns: int, offset: int, device: torch.device) -> torch.Tensor:
    """:func:`causal_index`, built (``[g(g+1)/2]`` int64 on ``device``)."""
    rows = torch.arange(gen_len)[:, None]
    keys = torch.arange(gen_len)[None, :]
    flat = (rows * columns + offset + keys).expand(gen_len, gen_len)
    return flat[keys <= rows].to(device)  # [g(g+1)/2]


def _tile(samples: int) -> int:
    """Samples per program: a power of two, at most 65535 programs per group."""
    tile = _TILE
    while -(-samples // tile) > 65535:
        tile *= 2
    return tile


@dataclass(frozen=True)
class SelfSamples:
    """The self samples of each row, sorted once (see :func:`prepared_self`)."""

    ys: torch.Tensor  # [R, M] float32 ascending, +inf after the valid ones
    count: torch.Tensor  # [R] int32 valid samples
    prefix: torch.Tensor  # [R, M + 1] float64 sums of the c smallest centred values
    center: torch.Tensor  # [R] float64 mean of the valid samples
    # [R, B + 2, 2] int64 a bucket's record: start | end << 32 (its samples' indices),
    # then the bits of its first and last sample (first | last << 32)
    table: torch.Tensor | None
    low: torch.Tensor  # [R] float32 smallest valid sample (the buckets' origin)
    scale: torch.Tensor  # [R] float32 buckets per unit of value
    buckets: int  # B

    def rows(self, part: slice) -> SelfSamples:
        """The samples of rows ``part`` only (views; ``buckets`` is shared)."""
        return SelfSamples(
            self.ys[part],
            self.count[part],
            self.prefix[part],
            self.center[part],
            None if self.table is None else self.table[part],
            self.low[part],
            self.scale[part],
            self.buckets,
        )


@torch.no_grad()
def prepared_self(y: torch.Tensor, y_valid: torch.Tensor | None, *, spread: int = 2) -> SelfSamples:
    """Sort the self samples of each row once and index them by value buckets.

    ``center`` is subtracted for precision. For sets of at least ``_TABLE_FROM`` samples,
    the range ``[low, high]`` of the valid samples is cut in ``B`` equal buckets
    ``s(v) = clamp(floor((v − low)·scale), −1, B) + 1`` (``_triton._bucket``; ``s`` never
    decreases as ``v`` grows) and ``table[r, b]`` is bucket ``b``'s record: the indices where
    its samples start and end (the samples in buckets below ``b`` and ``b + 1``) and its first
    and last sample, so that a cross sample is compared only with the few samples of its
    bucket, after one 16-byte load; smaller sets are searched whole.
    ``B = 2^(bits(M) + spread)`` (at most ``2^16``) for rows of ``M`` samples: a smaller
    ``spread`` builds a smaller table for a few more search steps (rows of many sizes padded
    to the longest). The sort is ``torch.sort`` (16-bit samples in their own type: the same
    order, half the radix passes); one kernel (``_triton.prepare_kernel``) computes the rest:
    the centres, prefix sums, origin, scale and records in one launch.
    """
    ys, count, _ = sorted_self(y, y_valid)
    return prepared_sorted(ys, count, spread=spread)


def sorted_self(
    y: torch.Tensor, y_valid: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(ys, count, order)``: each row of ``y`` ``[R, M]`` sorted ascending, float32 with
    ``+inf`` after its ``count`` (``[R]`` int32) valid samples, and ``order`` ``[R, M]`` int64,
    where each sorted sample was in ``y`` (``torch.sort``; 16-bit samples in their own type:
    the same order, half the radix passes)."""
    narrow = y if y.dtype in (torch.bfloat16, torch.float16) else y.float()
    rows, width = y.shape
    if y_valid is None:
        count = torch.full((rows,), width, dtype=torch.int32, device=y.device)
        ys, order = torch.sort(narrow, dim=-1)
    else:
        count = y_valid.sum(-1, dtype=torch.int32)
        ys, order = torch.sort(torch.where(y_valid, narrow, torch.inf), dim=-1)
    return ys.float(), count, order


@torch.no_grad()
def prepared_sorted(
    ys: torch.Tensor, count: torch.Tensor, *, spread: int = 2, split: bool | None = None
) -> SelfSamples:
    """:func:`prepared_self` of samples sorted already: ``ys`` ``[R, M]`` float32 ascending
    with ``+inf`` after each row's ``count`` (``[R]`` int32) valid ones (a row's stride may
    differ from ``M``; its samples are contiguous).

    With ``split`` the running sums ``prefix[r, k] = Σ_{i<min(k, count)} (y_i − c)`` are
    split over blocks of ``_PREPARE_BLOCK`` samples (``center_kernel``, ``block_sums_kernel``,
    ``prefix_kernel``: the float64 operations of ``prepare_kernel``'s one program a row, in
    the same order, so every field has the same bits); by default for rows of at least
    ``_SPLIT_FROM`` samples when there are few rows (at most ``_SPLIT_ROWS`` per SM), where
    the row's walk, twice over its samples, sets the launch's time.
    """
    from rcstat.stats._triton import (
        block_sums_kernel,
        center_kernel,
        prefix_kernel,
        prepare_kernel,
    )

    rows, width = ys.shape
    device = ys.device
    buckets = 1 << min(width.bit_length() + spread, 16) if width >= _TABLE_FROM else 0
    if split is None:
        split = width >= _SPLIT_FROM and rows <= _SPLIT_ROWS * sm_count(device)
    center = torch.empty(rows, dtype=torch.float64, device=device)
    prefix = torch.empty(rows, width + 1, dtype=torch.float64, device=device)
    low = torch.zeros(rows, dtype=torch.float32, device=device)
    scale = torch.zeros(rows, dtype=torch.float32, device=device)
    table = torch.empty(rows, buckets + 2, 2, dtype=torch.int64, device=device) if buckets else None
    parts = 1 + (-(-(buckets + 2) // _PREPARE_BLOCK) if buckets else 0)
    stride = ys.stride(0)
    with on_device(device):
        if table is not None or not split:  # split without a table: nothing left for it
            prepare_kernel[(rows, parts)](
                ys, stride, width, count, center, prefix, prefix.stride(0), low, scale,
                buckets, _MAX_SCALE, ys if table is None else table,
                0 if table is None else table.stride(0) // 2,  # records a row
                width.bit_length(), BLOCK=_PREPARE_BLOCK, TABLE=table is not None,
                PREFIX=not split,
            )  # fmt: skip
        if split:
            blocks = -(-width // _PREPARE_BLOCK)
            sums = torch.empty(rows, blocks, dtype=torch.float64, device=device)  # [R, blocks]
            center_kernel[(rows,)](ys, stride, width, count, center, BLOCK=_PREPARE_BLOCK)
            block_sums_kernel[(rows, blocks)](
                ys, stride, count, center, sums, blocks, BLOCK=_PREPARE_BLOCK
            )
            prefix_kernel[(rows, blocks)](
                ys, stride, width, count, center, sums, blocks, prefix, prefix.stride(0),
                BLOCK=_PREPARE_BLOCK,
            )  # fmt: skip
    return SelfSamples(ys, count, prefix, center, table, low, scale, buckets)


def search_args(samples: SelfSamples) -> tuple[Any, ...]:
    """The arguments a kernel's ``rank_terms`` search takes for ``samples``, in its order
    (``ys`` … ``center``, then the search steps over a whole row without a table)."""
    table = samples.ys if samples.table is None else samples.table
    return (
        samples.ys,
        samples.ys.stride(0),
        table,
        0 if samples.table is None else samples.table.stride(0) // 2,  # records a row
        samples.low,
        samples.scale,
        samples.buckets,
        samples.count,
        samples.prefix,
        samples.prefix.stride(0),
        samples.center,
        samples.ys.shape[-1].bit_length(),
    )


_MAX_ROWS = 65535  # CUDA's limit on the second grid axis


def rank_sums(
    x: torch.Tensor, samples: SelfSamples, split: torch.Tensor | None = None
) -> torch.Tensor:
    """``[3, R, K]`` float64: per group, ``Σ (c(x)·x − S(c(x)))``, ``Σ x`` and ``Σ (x − t)⁺``.

    ``x`` is a (strided) view ``[R, K, A, B]``: group ``k`` of row ``r`` holds its ``A·B``
    samples; values are centred on ``samples.center``; ``split`` is ``t`` (``[R]`` float32,
    not centred). The third plane is zero without ``split``.
    """
    rows, groups, width_a, width_b = x.shape
    base = torch.arange(rows, device=x.device) * x.stride(0)  # [R] element offsets
    lengths = torch.full((rows,), width_a, dtype=torch.int32, device=x.device)
    shape, strides = (groups, width_a, width_b), (x.stride(1), x.stride(2), x.stride(3))
    return ragged_rank_sums(x, base, lengths, shape, strides, samples, split)


def ragged_rank_sums(
    storage: torch.Tensor,
    row_base: torch.Tensor,
    row_len: torch.Tensor,
    shape: tuple[int, int, int],
    strides: tuple[int, int, int],
    samples: SelfSamples,
    split: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`rank_sums` for rows of different lengths at any offsets of one tensor.

    Row ``r`` starts at element ``row_base[r]`` of ``storage`` and holds ``K`` groups of
    ``row_len[r]·B`` samples (``shape = (K, A, B)`` with ``A >= row_len``, element strides
    ``strides`` of the ``K``, ``A`` and ``B`` axes).
    """
    from rcstat.stats._triton import rank_sums_kernel

    rows = row_base.shape[0]
    groups, width_a, width_b = shape
    size = width_a * width_b
    tile_n = min(_tile(size), _next_pow2(size))
    tile_k = max(1, _TILE // tile_n)
    blocks = -(-size // tile_n)
    out = torch.zeros(3, rows, groups, blocks, dtype=torch.float64, device=storage.device)
    for first in range(0, rows, _MAX_ROWS):
        part = slice(first, first + _MAX_ROWS)
        count = min(rows - first, _MAX_ROWS)
        launch = rank_sums_kernel[(blocks * -(-groups // tile_k), count)]
        with on_device(storage.device):
            launch(
                storage,
                row_base[part],
                row_len[part],
                *strides,
                groups,
                width_b,
                *search_args(samples.rows(part)),
                (samples.center if split is None else split)[part],
                out[:, part],
                out.stride(0),
                blocks,
                BLOCK_K=tile_k,
                BLOCK_N=tile_n,
                SPLIT=split is not None,
                TABLE=samples.table is not None,
            )
    return out.sum(-1)


@functools.cache
def sm_count(device: torch.device) -> int:
    """SMs of a CUDA device (read once); 4 under the interpreter (a few splits to exercise)."""
    if device.type != "cuda":
        return 4
    return int(torch.cuda.get_device_properties(device).multi_processor_count)


def on_device(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """Make ``device`` the current CUDA device: Triton launches on the current device, and a
    model split across GPUs hands each layer's block over on the layer's own (nothing to do
    for the CPU tensors of the interpreter)."""
    if device.type != "cuda" or device.index == torch.cuda.current_device():
        return contextlib.nullcontext()  # already current: no switch (host time a launch)
    return torch.cuda.device(device)


def _next_pow2(value: int) -> int:
    """The smallest power of two >= ``value``."""
    return 1 << max(0, value - 1).bit_length()


def _int32(value: int) -> int:
    """A 32-bit pattern as the signed int Triton passes as ``i32``."""
    return value - (1 << 32) if value >= 1 << 31 else value


def crossing(x: torch.Tensor, ys: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Per row the smallest sample value ``t`` with ``F_x(t) + F_y(t) >= 1``, ``[R]`` float32.

    ``x`` is a dense (strided) view ``[R, A, B]``; ``ys [R, M]`` the sorted self samples with
    ``count`` valid ones. Large cross sets take :func:`_bracketed`: a sorted sample of ``x``
    brackets ``t``, one pass collects the few ``x`` inside, and ``t`` is found among them
    exactly. Rows it cannot settle, and small sets, take :func:`_radix_crossing`.
    """
    rows = x.shape[0]
    if x.shape[1] * x.shape[2] < _SAMPLED_FROM:
        split = torch.empty(rows, dtype=torch.float32, device=x.device)
        return _radix_crossing(x, ys, count, split, None)
    split, done = _bracketed(x, ys, count)
    return _radix_crossing(x, ys, count, split, done)


def _radix_crossing(
    x: torch.Tensor,
    ys: torch.Tensor,
    count: torch.Tensor,
    split: torch.Tensor,
    done: torch.Tensor | None,
    below: torch.Tensor | None = None,
    size: int | None = None,
    filled: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`crossing` by a radix selection over the keys of ``x`` and ``y`` weighted by the
    other set's size (``m·#{x <= t} + n·#{y <= t} >= n·m``), 8 bits per pass, two kernels per
    pass and no work on the host. Writes ``split`` where ``done`` (int8 ``[R]``) is 0.

    ``x`` may be part of a set of ``size`` values of which ``below`` (int64 ``[R]``) lie
    under every value of ``x`` (the bracket's collected values), of which only the first
    ``filled`` (int32 ``[R]``; past the row's width, all of it) were written.
    """
    from rcstat.stats._triton import radix_histogram_kernel, radix_select_kernel

    rows, width_a, width_b = x.shape
    n = width_a * width_b if size is None else size
    prefix = torch.zeros(rows, dtype=torch.long, device=x.device)  # [R] key bits chosen
    if below is None:  # #{x < prefix range}
        below = torch.zeros(rows, dtype=torch.long, device=x.device)
    hist = torch.zeros(rows, _DIGITS, dtype=torch.int32, device=x.device)
    held = width_a * width_b  # values of x
    tile = _tile(held)
    chunks = 1 << min(4, max(0, (held // (tile * 32)).bit_length() - 1))  # >= 32 programs a row
    steps = max(1, ys.shape[-1].bit_length())
    skip = done if done is not None else split  # not read without SKIP
    with on_device(x.device):
        for shift in (24, 16, 8, 0):
            high_mask = (1 << 32) - (1 << (shift + 8)) if shift < 24 else 0
            radix_histogram_kernel[(rows, -(-held // (tile * chunks)))](
                x,
                *x.stride(),
                width_a,
                width_b,
                prefix,
                hist,
                shift,
                _int32(high_mask),
                skip,
                skip if filled is None else filled,  # not read without HELD
                BLOCK_N=tile,
                CHUNKS=chunks,
                SKIP=done is not None,
                HELD=filled is not None,
            )
            radix_select_kernel[(rows,)](
                hist,
                ys,
                ys.stride(0),
                count,
                n,
                prefix,
                below,
                split,
                shift,
                skip,
                STEPS=steps,
                LAST=shift == 0,
                SKIP=done is not None,
            )
    return split


def _sample_step(size: int) -> int:
    """An odd step that samples at most ``_SAMPLES`` of ``size`` values (a sort of at most
    4096 values a row runs in shared memory)."""
    return (size // _SAMPLES + 1) | 1


def _sample_index(size: int, width_b: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """``(a, b)`` of every ``step``-th of ``size`` samples laid out ``[A, width_b]``, with an odd
    ``step`` so that the sample meets every column (the keys of a block) alike."""
    return _held(_built_sample_index(size, width_b, device))


@functools.lru_cache(maxsize=64)
def _built_sample_index(
    size: int, width_b: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_sample_index`, built: ``[k]`` int64 each, on ``device``."""
    flat = torch.arange(0, size, _sample_step(size))
    return (flat // width_b).to(device), (flat % width_b).to(device)


def _bracketed(
    x: torch.Tensor, ys: torch.Tensor, count: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(t, done)``: the crossing of the rows it settles (``done`` int8 ``[R]`` set), exactly.

    1. A sample of ``k`` values of ``x`` is sorted; where its empirical weight first reaches
       ``n·m`` gives an index ``i``; the bracket is ``(low, high]`` = the sample values
       ``_SIGMAS`` standard deviations of a count (``√k / 2``) either side.
    2. One pass counts the ``x <= low`` and collects the ``x`` inside the bracket.
    3. The radix selection runs over the collected ``x`` (and every ``y``), starting from the
       count below ``low``: inside the bracket its weights are exact.

    A row is settled when the weight at ``low`` falls short of ``n·m``, every ``x`` of the
    bracket was kept and the selected value is at most ``high``: then it is ``t``. The others
    (a sample far from the whole, heavy ties) are left to the radix selection over all ``x``.
    """
    from rcstat.stats._triton import bracket_kernel

    rows, width_a, width_b = x.shape
    n = width_a * width_b
    index_a, index_b = _sample_index(n, width_b, x.device)
    k = index_a.shape[0]
    sample = torch.sort(x[:, index_a, index_b].float(), dim=-1).values  # [R, k]
    m = count.long()  # [R]
    y_le = torch.searchsorted(ys, sample, right=True).clamp_max(m[:, None])  # #{y <= v}
    ranks = torch.arange(1, k + 1, device=x.device)  # sample values <= the i-th
    first = ((ranks * m[:, None] + k * y_le) < k * m[:, None]).sum(-1)  # [R]
    half = int(_SIGMAS * math.sqrt(k) / 2) + 2
    ends = torch.stack([first - half, first + half], -1)  # [R, 2]
    edge = sample.gather(1, ends.clamp(0, k - 1))
    low = torch.where(ends[:, 0] >= 0, edge[:, 0], -torch.inf).contiguous()
    high = torch.where(ends[:, 1] < k, edge[:, 1], torch.inf).contiguous()
    step = _sample_step(n)
    capacity = min(n, (2 * half + 8 + int(6 * math.sqrt(2 * half))) * step)
    below = torch.zeros(rows, dtype=torch.int32, device=x.device)
    total = torch.zeros(rows, dtype=torch.int32, device=x.device)
    inside = torch.full((rows, capacity), torch.inf, device=x.device)  # +inf: never selected
    tile = max(_tile(n), _BRACKET_TILE)
    with on_device(x.device):
        bracket_kernel[(rows, -(-n // tile))](
            x,
            *x.stride(),
            width_a,
            width_b,
            low,
            high,
            below,
            total,
            inside,
            capacity,
            BLOCK_N=tile,
            GROUP=_BRACKET_GROUP,
        )
    split = torch.empty(rows, dtype=torch.float32, device=x.device)
    found = _radix_crossing(inside[:, None], ys, count, split, None, below.long(), n, total)
    at_low = torch.searchsorted(ys, low[:, None], right=True)[:, 0].clamp_max(m)
    done = (found <= high) & (total <= capacity) & (m * below.long() + n * at_low < n * m)
    return found, done.to(torch.int8)


def self_sums(
    ys: torch.Tensor, count: torch.Tensor, center: torch.Tensor, split: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Σ y, Σ (t − y)⁺)`` over each row's valid self samples, centred, float64 ``[R]``."""
    inside = torch.arange(ys.shape[-1], device=ys.device) < count[:, None]
    centred = torch.where(inside, ys.double() - center[:, None], 0.0)
    short = torch.where(inside, (split[:, None] - centred).clamp_min(0.0), 0.0)
    return centred.sum(-1), short.sum(-1)


def dense_statistics(
    x: torch.Tensor, y: torch.Tensor, y_valid: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(E, A, mean(x) − mean(y))`` float64 ``[R]`` for dense ``x`` ``[R, A, B]`` (a view).

    Non-finite samples make ``E`` and the gap non-finite (checked by the caller).
    """
    samples = prepared_self(y, y_valid)
    n = x.shape[1] * x.shape[2]
    m = samples.count.double()
    t = crossing(x, samples.ys, samples.count)  # [R] float32 split point
    sums = rank_sums(x[:, None], samples, t)[:, :, 0]  # [3, R]
    y_sum, y_short = self_sums(
        samples.ys, samples.count, samples.center, t.double() - samples.center
    )
    expected = sums[0] / (n * m)
    upper = sums[2] / n + y_short / m
    gap = sums[1] / n - y_sum / m
    return expected, upper, gap


def shared_expected(x: torch.Tensor, y: torch.Tensor, y_valid: torch.Tensor | None) -> torch.Tensor:
    """``E(x_k, y)`` float64 ``[R, K]`` for groups ``x [R, K, A, B]`` (a view) sharing ``y``."""
    samples = prepared_self(y, y_valid)
    size = x.shape[2] * x.shape[3]
    return rank_sums(x, samples)[0] / (size * samples.count.double()[:, None])
