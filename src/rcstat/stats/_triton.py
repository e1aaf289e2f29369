"""Triton kernels for RC statistics of dense cross samples on CUDA (optional; see ``_gpu``).

Kernels reading the cross samples ``x`` in place through their strides (a
generation block's first ``m`` columns, a press window's transposed scores) so that no copy
of the big sample set is made:

- ``rank_sums``: every ``x`` is ranked within the sorted self samples ``y`` of its row by a
  binary search, ``c(x) = #{y < x}``, and contributes ``c(x)·x − S(c(x))`` with ``S`` the
  prefix sums of the sorted ``y``; the sum over a set is ``n·m·E`` (paper eq. 6). The same
  pass adds ``Σ x`` (the mean gap, and an exact finiteness check: a float64 sum of float32
  values is finite iff every value is) and, given a split point ``t``, ``Σ max(x − t, 0)``
  (the upper bound, below). Values are centred and accumulated in float64.
- ``bracket``: counts the ``x`` at or below a row's low value and appends those between its
  low and high values to a buffer (one atomic add a tile reserves the slots).
- ``prepare``: what a search needs of sorted self samples (centre, prefix sums, bucket
  records); ``center``, ``block_sums`` and ``prefix`` compute its running sums over blocks
  of samples in parallel, the same float64 operations in the same order.
- ``radix_histogram``: one digit of a radix selection. Floats map to unsigned keys that sort
  like the values; for the rows' current key prefix, the kernel counts the ``x`` of each
  next 8-bit digit (a histogram per program, added to the row's with atomics).

The upper bound ``A = ∫ min(F_y, 1 − F_x) dt`` (Theorem 3.6, eq. 4) equals
``min_t E(X − t)⁺ + E(t − Y)⁺``; the minimum is reached at the smallest sample value ``t*``
with ``F_x(t*) + F_y(t*) >= 1`` (the derivative ``F_x + F_y − 1`` changes sign there). Four
radix passes find ``t*`` exactly (a weighted selection over ``x`` and ``y``); for large sets
``bracket`` first collects the ``x`` between two values of a sample that bracket ``t*``, so
that the radix passes run only for rows the bracket misses. ``Σ (x − t*)⁺`` then rides on the
``rank_sums`` pass. ``x`` is never sorted.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _key(values):
    """Unsigned radix keys (as int32 bits) that sort like the float32 ``values``."""
    bits = values.to(tl.int32, bitcast=True)
    return (bits ^ ((bits >> 31) & 0x7FFFFFFF)) ^ (-2147483648)


@triton.jit
def _bucket(values, low, scale, buckets):
    """The bucket ``clamp(floor((v − low)·scale), −1, B) + 1`` in ``[0, B + 1]`` as int32.

    It never decreases as ``v`` grows, so a sample in a lower bucket is smaller and one in a
    higher bucket larger: a value is compared only with the samples of its own bucket. Any
    input, NaN included, lands in range (an infinite value over a zero scale goes to the end
    its sign says)."""
    above = values - low
    raw = tl.floor(above * scale)
    raw = tl.where(raw == raw, raw, tl.where(above > 0, buckets * 1.0, -1.0))  # NaN: ±inf·0
    raw = tl.minimum(tl.maximum(raw, -1.0), buckets * 1.0)
    return raw.to(tl.int32) + 1


@triton.jit
def rank_terms(
    x,
    mask,
    row,
    ys_ptr,
    ys_stride,
    table_ptr,
    table_stride,
    low_ptr,
    scale_ptr,
    buckets,
    count_ptr,
    prefix_ptr,
    prefix_stride,
    center_ptr,
    steps_all,
    TABLE: tl.constexpr,
):
    """``(c(x)·x − S(c(x)), x)`` float64 for a 2-D tile of float32 samples ``x`` of row
    ``row``, centred on the row's mean self sample, 0 where ``mask`` is off.

    ``c(x) = #{y < x}`` is a lower-bound binary search in the row's sorted self samples
    (:class:`~rcstat.stats._gpu.SelfSamples`), run with ``TABLE`` only among the ``y`` of
    ``x``'s value bucket (its record: the bucket's first and end index, first and last
    sample, 16 bytes read in one load): a few steps instead of ``log2 m``, none when the
    bucket's first and last samples settle ``x``. ``S`` are the prefix sums of the sorted,
    centred ``y``; the sum of the first value over a set is ``n·m·E`` (paper eq. 6).
    """
    ys_row = ys_ptr + row.to(tl.int64) * ys_stride
    if TABLE:  # the y of x's bucket lie in [start, end)
        bucket = _bucket(x, tl.load(low_ptr + row), tl.load(scale_ptr + row), buckets)
        record = (row.to(tl.int64) * table_stride + bucket) * 2  # [start | end, first | last]
        both = tl.load(table_ptr + record[:, :, None] + tl.arange(0, 2)[None, None, :],
                       mask=mask[:, :, None], other=0)  # fmt: skip
        ends, values = tl.split(both)
        start = ends.to(tl.int32)
        end = (ends >> 32).to(tl.int32)
        first = values.to(tl.int32).to(tl.float32, bitcast=True)
        last = (values >> 32).to(tl.int32).to(tl.float32, bitcast=True)
        # the bucket's ends settle x when it holds one value (often, and many times over,
        # with 16-bit scores): c(x) is then start or end, no search
        filled = mask & (start < end)
        above = filled & (x > last)  # c = end
        between = filled & (x > first) & (x <= last)  # c in (start, end - 1]
        lo = tl.where(above, end, tl.where(between, start + 1, start))
        hi = tl.where(filled & (x <= first), start, tl.where(between, end - 1, end))
        widest = tl.max(tl.max(hi - lo, axis=1), axis=0)
        steps = tl.ceil(tl.log2(widest.to(tl.float32) + 1.0)).to(tl.int32)
    else:  # a small set: search all of it
        lo = tl.zeros(x.shape, dtype=tl.int32)
        hi = lo + tl.load(count_ptr + row)
        steps = steps_all
    for _ in range(steps):  # lower bound: first index with y >= x
        active = lo < hi
        mid = (lo + hi) // 2
        y = tl.load(ys_row + mid, mask=mask & active, other=0.0)
        less = active & (y < x)
        lo = tl.where(less, mid + 1, lo)
        hi = tl.where(active & (y >= x), mid, hi)
    xc = x.to(tl.float64) - tl.load(center_ptr + row)
    below = tl.load(prefix_ptr + row.to(tl.int64) * prefix_stride + lo, mask=mask, other=0.0)
    return tl.where(mask, lo.to(tl.float64) * xc - below, 0.0), tl.where(mask, xc, 0.0)


#: The sizes of a set of sorted self samples: not specialised on alignment (see ``_SIZES``).
_PREPARED_SIZES = ("ys_stride", "width", "prefix_stride", "buckets", "table_stride", "steps")


@triton.jit(do_not_specialize_on_alignment=_PREPARED_SIZES, do_not_specialize=("steps",))
def prepare_kernel(
    ys_ptr,
    ys_stride,
    width,
    count_ptr,
    center_ptr,
    prefix_ptr,
    prefix_stride,
    low_ptr,
    scale_ptr,
    buckets,
    max_scale,
    table_ptr,
    table_stride,
    steps,
    BLOCK: tl.constexpr,
    TABLE: tl.constexpr,
    PREFIX: tl.constexpr = True,
):
    """What a search needs of one row of sorted self samples (``_gpu.prepared_self``).

    ``ys`` ``[R, width]`` ascending, ``count[r]`` valid. Program ``(r, 0)`` writes the
    centre ``c = Σ_{i<count} y_i / count`` (float64), the prefix sums
    ``prefix[r, k] = Σ_{i<min(k, count)} (y_i − c)`` and, with ``TABLE``, the buckets' origin
    ``low = y_0`` and scale ``B / (y_{count−1} − low)`` (0 for an empty span, at most
    ``max_scale``). Program ``(r, 1 + t)`` writes the records of buckets ``b`` of block
    ``t``, two int64 each: ``start | end << 32`` with ``start = #{i < count : s(y_i) < b}``
    (the first index whose bucket is at least ``b``, by binary search: ``s`` never
    decreases along sorted samples) and ``end`` the same for ``b + 1``; then the bits of
    ``y_start | y_{end−1} << 32``, the bucket's first and last sample (0 when it is empty).
    Without ``PREFIX`` program ``(r, 0)`` writes only the origin and scale: the centre and
    prefix sums come from ``center_kernel``, ``block_sums_kernel`` and ``prefix_kernel``.
    """
    row = tl.program_id(0)
    part = tl.program_id(1)
    count = tl.load(count_ptr + row)
    ys_row = ys_ptr + row.to(tl.int64) * ys_stride
    low = tl.load(ys_row)
    span = tl.maximum(tl.load(ys_row + tl.maximum(count - 1, 0)) - low, 0.0)  # NaN: 0
    per_unit = tl.math.div_rn(buckets * 1.0, tl.where(span > 0, span, 1.0))  # no 0 / 0
    scale = tl.minimum(tl.where(span > 0, per_unit, 0.0), max_scale)
    if part == 0 and not PREFIX:
        if TABLE:
            tl.store(low_ptr + row, low)
            tl.store(scale_ptr + row, scale)
    elif part == 0:
        total = tl.zeros([BLOCK], dtype=tl.float64)
        for start in range(0, width, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            total += tl.load(ys_row + offs, mask=offs < count, other=0.0).to(tl.float64)
        center = tl.sum(total, axis=0) / count
        tl.store(center_ptr + row, center)
        prefix_row = prefix_ptr + row.to(tl.int64) * prefix_stride
        carry = tl.sum(tl.zeros([BLOCK], dtype=tl.float64), axis=0)  # a float64 zero
        tl.store(prefix_row, carry)
        for start in range(0, width, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            y = tl.load(ys_row + offs, mask=offs < count, other=0.0).to(tl.float64)
            centred = tl.where(offs < count, y - center, 0.0)
            tl.store(prefix_row + 1 + offs, tl.cumsum(centred, axis=0) + carry, mask=offs < width)
            carry += tl.sum(centred, axis=0)
        if TABLE:
            tl.store(low_ptr + row, low)
            tl.store(scale_ptr + row, scale)
    elif TABLE:
        bs = (part - 1) * BLOCK + tl.arange(0, BLOCK)
        inside = bs < buckets + 2
        searched = bs < buckets + 3  # where bucket buckets + 1 ends too
        lo = tl.zeros([BLOCK], dtype=tl.int32)
        hi = lo + count
        after = part * BLOCK  # the next block's first bucket
        lo_after = tl.sum(tl.zeros([1], dtype=tl.int32), axis=0)  # an int32 zero
        hi_after = count
        for _ in range(steps):  # the first index whose bucket is >= b (and >= after)
            active = searched & (lo < hi)
            mid = (lo + hi) // 2
            s = _bucket(tl.load(ys_row + mid, mask=active, other=0.0), low, scale, buckets)
            lo = tl.where(active & (s < bs), mid + 1, lo)
            hi = tl.where(active & (s >= bs), mid, hi)
            going = lo_after < hi_after
            mid = (lo_after + hi_after) // 2
            s = _bucket(tl.load(ys_row + mid, mask=going, other=0.0), low, scale, buckets)
            lo_after = tl.where(going & (s < after), mid + 1, lo_after)
            hi_after = tl.where(going & (s >= after), mid, hi_after)
        # bucket b ends where b + 1 starts: the next lane's index, the next block's for the last
        lanes = tl.arange(0, BLOCK)
        lo_next = tl.gather(lo, tl.minimum(lanes + 1, BLOCK - 1), axis=0)
        lo_next = tl.where(lanes == BLOCK - 1, lo_after, lo_next)
        filled = inside & (lo < lo_next)
        first = tl.load(ys_row + lo, mask=filled, other=0.0).to(tl.int32, bitcast=True)
        last = tl.load(ys_row + lo_next - 1, mask=filled, other=0.0).to(tl.int32, bitcast=True)
        ends = lo.to(tl.int64) | (lo_next.to(tl.int64) << 32)
        values = (first.to(tl.int64) & 0xFFFFFFFF) | (last.to(tl.int64) << 32)
        record = (row.to(tl.int64) * table_stride + bs) * 2
        tl.store(table_ptr + record[:, None] + tl.arange(0, 2)[None, :],
                 tl.join(ends, values), mask=inside[:, None])  # fmt: skip


@triton.jit(do_not_specialize_on_alignment=("ys_stride", "width"))
def center_kernel(ys_ptr, ys_stride, width, count_ptr, center_ptr, BLOCK: tl.constexpr):
    """``prepare_kernel``'s centre of row ``r``, ``c = Σ_{i<count} y_i / count`` (float64),
    summed in its order: lane ``l`` adds ``y_{l + k·BLOCK}`` over ``k``, then the lanes."""
    row = tl.program_id(0)
    count = tl.load(count_ptr + row)
    ys_row = ys_ptr + row.to(tl.int64) * ys_stride
    total = tl.zeros([BLOCK], dtype=tl.float64)
    for start in range(0, width, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        total += tl.load(ys_row + offs, mask=offs < count, other=0.0).to(tl.float64)
    tl.store(center_ptr + row, tl.sum(total, axis=0) / count)


@triton.jit(do_not_specialize_on_alignment=("ys_stride", "blocks"))
def block_sums_kernel(
    ys_ptr, ys_stride, count_ptr, center_ptr, sums_ptr, blocks, BLOCK: tl.constexpr
):
    """``sums[r, t] = Σ_{i in block t, i < count} (y_i − c)`` (float64), the block's sum
    as ``prepare_kernel`` adds it to its running carry."""
    row = tl.program_id(0)
    block = tl.program_id(1)
    count = tl.load(count_ptr + row)
    center = tl.load(center_ptr + row)
    ys_row = ys_ptr + row.to(tl.int64) * ys_stride
    offs = block * BLOCK + tl.arange(0, BLOCK)
    y = tl.load(ys_row + offs, mask=offs < count, other=0.0).to(tl.float64)
    centred = tl.where(offs < count, y - center, 0.0)
    tl.store(sums_ptr + row.to(tl.int64) * blocks + block, tl.sum(centred, axis=0))


@triton.jit(do_not_specialize_on_alignment=("ys_stride", "width", "prefix_stride", "blocks"))
def prefix_kernel(
    ys_ptr,
    ys_stride,
    width,
    count_ptr,
    center_ptr,
    sums_ptr,
    blocks,
    prefix_ptr,
    prefix_stride,
    BLOCK: tl.constexpr,
):
    """Block ``t`` of ``prepare_kernel``'s prefix sums of row ``r``: the block's running
    sums plus the carry ``(((0 + s_0) + s_1) + …) + s_{t−1}`` of the earlier blocks' sums
    (``block_sums_kernel``), the same float64 operations in the same order, so the same
    bits; block 0 also writes ``prefix[r, 0] = 0``."""
    row = tl.program_id(0)
    block = tl.program_id(1)
    count = tl.load(count_ptr + row)
    center = tl.load(center_ptr + row)
    ys_row = ys_ptr + row.to(tl.int64) * ys_stride
    prefix_row = prefix_ptr + row.to(tl.int64) * prefix_stride
    carry = tl.sum(tl.zeros([BLOCK], dtype=tl.float64), axis=0)  # a float64 zero
    if block == 0:
        tl.store(prefix_row, carry)
    sums_row = sums_ptr + row.to(tl.int64) * blocks
    for earlier in range(0, block):
        carry += tl.load(sums_row + earlier)
    offs = block * BLOCK + tl.arange(0, BLOCK)
    y = tl.load(ys_row + offs, mask=offs < count, other=0.0).to(tl.float64)
    centred = tl.where(offs < count, y - center, 0.0)
    tl.store(prefix_row + 1 + offs, tl.cumsum(centred, axis=0) + carry, mask=offs < width)


#: Sizes and strides change with every input: not specialised on their alignment (a new
#: combination of multiples of 16 would compile the kernel again, ~0.1 s each; value 1 still
#: specialises, so contiguous axes stay contiguous).
_SIZES = (
    "stride_k",
    "stride_a",
    "stride_b",
    "groups",
    "width_b",
    "ys_stride",
    "table_stride",
    "buckets",
    "prefix_stride",
    "out_plane",
    "blocks",
    "steps_all",
)


@triton.jit(do_not_specialize_on_alignment=_SIZES, do_not_specialize=("steps_all",))
def rank_sums_kernel(
    x_ptr,
    row_base_ptr,
    row_len_ptr,
    stride_k,
    stride_a,
    stride_b,
    groups,
    width_b,
    ys_ptr,  # ys_ptr … steps_all: rcstat.stats._gpu.search_args, rank_terms' order
    ys_stride,
    table_ptr,
    table_stride,
    low_ptr,
    scale_ptr,
    buckets,
    count_ptr,
    prefix_ptr,
    prefix_stride,
    center_ptr,
    steps_all,
    split_ptr,
    out_ptr,
    out_plane,
    blocks,
    BLOCK_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT: tl.constexpr,
    TABLE: tl.constexpr,
):
    """Partial sums of one tile ``[BLOCK_K groups, BLOCK_N samples]`` of one row.

    Row ``r`` starts at element ``row_base[r]`` of ``x``; its group ``k`` holds the
    ``row_len[r]·width_b`` samples ``x[base + k·stride_k + a·stride_a + b·stride_b]``
    (``a < row_len[r]``, ``b < width_b``). The binary search runs only among the ``y`` of
    ``x``'s value bucket (``rank_terms``: the bucket's record gives where they start and end),
    a few steps instead of ``log2 m``. Writes ``out[0 | 1 | 2, r, k, block]`` =
    Σ (c·x − S(c)), Σ x, Σ (x − t)⁺ (centred values; ``t`` read as float32 from
    ``split_ptr``). The programs of one row run next to each other (its ``y`` stay cached).
    """
    sample_block = tl.program_id(0) % blocks
    group_block = tl.program_id(0) // blocks
    row = tl.program_id(1)
    base = tl.load(row_base_ptr + row)
    length = tl.load(row_len_ptr + row) * width_b
    ks = group_block * BLOCK_K + tl.arange(0, BLOCK_K)  # [BK]
    es = sample_block * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    a = es // width_b
    b = es - a * width_b
    mask = (ks[:, None] < groups) & (es[None, :] < length)  # [BK, BN]
    offsets = (
        base
        + ks[:, None].to(tl.int64) * stride_k
        + a[None, :].to(tl.int64) * stride_a
        + b[None, :].to(tl.int64) * stride_b
    )
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    term, xc = rank_terms(
        x, mask, row, ys_ptr, ys_stride, table_ptr, table_stride, low_ptr, scale_ptr, buckets,
        count_ptr, prefix_ptr, prefix_stride, center_ptr, steps_all, TABLE,
    )  # fmt: skip
    out_offsets = (row.to(tl.int64) * groups + ks) * blocks + sample_block  # [BK]
    keep = ks < groups
    tl.store(out_ptr + out_offsets, tl.sum(term, axis=1), mask=keep)
    tl.store(out_ptr + out_plane + out_offsets, tl.sum(xc, axis=1), mask=keep)
    if SPLIT:
        split = tl.load(split_ptr + row).to(tl.float64) - tl.load(center_ptr + row)
        excess = tl.where(mask, tl.maximum(xc - split, 0.0), 0.0)
        tl.store(out_ptr + 2 * out_plane + out_offsets, tl.sum(excess, axis=1), mask=keep)


@triton.jit
def _row_tile(
    x_ptr, row, tile, stride_r, stride_a, stride_b, width_b, count, BLOCK_N: tl.constexpr
):
    """``(x, mask)``: tile ``tile`` of the first ``count`` samples of row ``row`` (row-major
    over the ``a`` and ``b`` axes, ``width_b`` a row of ``a``, read through the strides) as
    float32, 0 past them."""
    es = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    a = es // width_b
    b = es - a * width_b
    mask = es < count
    offsets = row.to(tl.int64) * stride_r + a.to(tl.int64) * stride_a + b.to(tl.int64) * stride_b
    return tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32), mask


@triton.jit
def radix_histogram_kernel(
    x_ptr,
    stride_r,
    stride_a,
    stride_b,
    width_a,
    width_b,
    prefix_ptr,
    hist_ptr,
    shift,
    high_mask,
    done_ptr,
    held_ptr,
    BLOCK_N: tl.constexpr,
    CHUNKS: tl.constexpr,
    SKIP: tl.constexpr,
    HELD: tl.constexpr,
):
    """Add to ``hist[r, d]`` the ``x`` of row ``r`` whose key matches the row's prefix
    (``prefix_ptr``, int64) on the bits of ``high_mask`` and has digit
    ``d = (key >> shift) & 255``; each program counts ``CHUNKS`` tiles before one atomic
    add per digit. With ``SKIP``, rows whose ``done`` flag is set are left alone; with
    ``HELD``, only the first ``held[r]`` values of row ``r`` count (int32, may exceed the
    row: a buffer filled up to there), and programs past them return at once."""
    row = tl.program_id(0)
    if SKIP:
        if tl.load(done_ptr + row) != 0:
            return
    size = width_a * width_b  # the samples read
    if HELD:
        size = tl.minimum(size, tl.load(held_ptr + row))
        if tl.program_id(1) * CHUNKS * BLOCK_N >= size:
            return
    prefix = tl.load(prefix_ptr + row).to(tl.int32)  # the low 32 bits
    counts = tl.zeros([256], dtype=tl.int32)
    for chunk in tl.static_range(CHUNKS):
        tile = tl.program_id(1) * CHUNKS + chunk
        x, mask = _row_tile(x_ptr, row, tile, stride_r, stride_a, stride_b, width_b, size, BLOCK_N)
        key = _key(x)
        match = mask & (((key ^ prefix) & high_mask) == 0)
        counts += tl.histogram((key >> shift) & 255, 256, mask=match)  # [256]
    tl.atomic_add(hist_ptr + row * 256 + tl.arange(0, 256), counts, sem="relaxed")


@triton.jit
def radix_select_kernel(
    hist_ptr,
    ys_ptr,
    ys_stride,
    count_ptr,
    samples,
    prefix_ptr,
    below_ptr,
    split_ptr,
    shift,
    done_ptr,
    STEPS: tl.constexpr,
    LAST: tl.constexpr,
    SKIP: tl.constexpr,
):
    """Choose row ``r``'s next digit: the first whose weight ``m·#{x <= end} + n·#{y <= end}``
    reaches ``n·m`` (``end`` = the digit's last key); update the prefix and the count of
    ``x`` below it, clear the histogram; after the last digit write the value to ``split``
    (with ``SKIP``, not for rows whose ``done`` flag is set)."""
    row = tl.program_id(0)
    if SKIP:
        if tl.load(done_ptr + row) != 0:
            return
    digits = tl.arange(0, 256)
    hist = tl.load(hist_ptr + row * 256 + digits).to(tl.int64)
    prefix = tl.load(prefix_ptr + row)
    below = tl.load(below_ptr + row)
    count = tl.load(count_ptr + row)
    ends = prefix + ((digits + 1).to(tl.int64) << shift) - 1  # [256]
    lo = tl.zeros([256], dtype=tl.int32)
    hi = lo + count
    ys_row = ys_ptr + row.to(tl.int64) * ys_stride
    for _ in tl.static_range(STEPS):  # #{y <= end}
        active = lo < hi
        mid = (lo + hi) // 2
        y_key = _key(tl.load(ys_row + mid, mask=active, other=0.0)).to(tl.int64) & 0xFFFFFFFF
        inside = active & (y_key <= ends)
        lo = tl.where(inside, mid + 1, lo)
        hi = tl.where(active & (y_key > ends), mid, hi)
    weight = count.to(tl.int64) * (below + tl.cumsum(hist, 0)) + samples * lo.to(tl.int64)
    digit = tl.sum((weight < samples * count.to(tl.int64)).to(tl.int32), 0)
    prefix = prefix + (digit.to(tl.int64) << shift)
    tl.store(prefix_ptr + row, prefix)
    tl.store(below_ptr + row, below + tl.sum(tl.where(digits < digit, hist, 0), 0))
    tl.store(hist_ptr + row * 256 + digits, tl.zeros([256], dtype=tl.int32))
    if LAST:
        signed = (prefix - 2147483648).to(tl.int32)
        bits = signed ^ ((signed >> 31) & 0x7FFFFFFF)
        tl.store(split_ptr + row, bits.to(tl.float32, bitcast=True))


@triton.jit
def bracket_kernel(
    x_ptr,
    stride_r,
    stride_a,
    stride_b,
    width_a,
    width_b,
    low_ptr,
    high_ptr,
    below_ptr,
    total_ptr,
    out_ptr,
    capacity,
    BLOCK_N: tl.constexpr,
    GROUP: tl.constexpr,
):
    """One tile of row ``r``: count the ``x <= low[r]`` into ``below[r]`` and append the
    ``x`` in ``(low[r], high[r]]`` to ``out[r, :capacity]`` (slots reserved with one atomic
    add a tile on ``total[r]``, which counts every such ``x``, kept or not).

    A kept value's slot within the tile is a prefix sum in two levels: over the tile's groups
    of ``GROUP`` values (their counts), then within its group; a scan over the whole tile
    took most of the kernel's time."""
    row = tl.program_id(0)
    x, mask = _row_tile(
        x_ptr, row, tl.program_id(1), stride_r, stride_a, stride_b, width_b, width_a * width_b,
        BLOCK_N,
    )  # fmt: skip
    low = tl.load(low_ptr + row)
    inside = mask & (x > low) & (x <= tl.load(high_ptr + row))
    tl.atomic_add(below_ptr + row, tl.sum((mask & (x <= low)).to(tl.int32), 0), sem="relaxed")
    ones = tl.reshape(inside.to(tl.int32), [BLOCK_N // GROUP, GROUP])
    counts = tl.sum(ones, 1)  # [groups]
    start = tl.atomic_add(total_ptr + row, tl.sum(counts, 0), sem="relaxed")
    before = tl.cumsum(counts, 0) - counts  # [groups] kept values of the groups before
    slot = start + before[:, None] + tl.cumsum(ones, 1) - 1  # [groups, GROUP]
    keep = (ones != 0) & (slot < capacity)
    values = tl.reshape(x, [BLOCK_N // GROUP, GROUP])
    tl.store(out_ptr + row.to(tl.int64) * capacity + slot, values, mask=keep)
