"""The CUDA path: statistics, capture and analysis agree with the CPU path (skipped without a
GPU; run on the lent H100/H200 with ``pytest -m gpu``)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from rcstat.analysis import analyze
from rcstat.capture import capture_scores
from rcstat.capture.scores import grouped_scores
from rcstat.stats import (
    block_statistics,
    expected_rc_shared,
    normalized_rc_shared,
    rc_statistics,
    self_samples,
    triton_available,
)
from tests._reference import naive_expected_rc
from tests._tiny_models import reference_scores, tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_statistics_on_cuda_equal_cpu(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(6, 5000, generator=gen) * 40).to(dtype)
    y = (torch.randn(6, 700, generator=gen) * 40 + 3).to(dtype)
    y_valid = torch.rand(6, 700, generator=gen) > 0.3
    cpu = rc_statistics(x, y, y_valid=y_valid)
    gpu = rc_statistics(x.cuda(), y.cuda(), y_valid=y_valid.cuda())
    for field in ("expected", "upper", "lower", "mean_gap"):
        torch.testing.assert_close(
            getattr(gpu, field).cpu(), getattr(cpu, field), rtol=1e-9, atol=1e-9
        )
    want = naive_expected_rc(x[0].double().numpy(), y[0][y_valid[0]].double().numpy())
    assert float(gpu.expected[0]) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 0.1)])
def test_capture_on_cuda_matches_reference(dtype: torch.dtype, tol: float) -> None:
    model = copy.deepcopy(tiny_model("llama")).to("cuda", dtype)
    ids = torch.randint(0, 512, (1, 24), generator=torch.Generator().manual_seed(1)).cuda()
    want = reference_scores(model, ids)
    with torch.no_grad(), capture_scores(model, lambda layer, s: s, query_start=16) as result:
        model(ids)
    for layer, block in enumerate(result.ordered()):
        assert block.device.type == "cuda" and block.dtype == torch.float32
        torch.testing.assert_close(block.double(), want[layer][:, :, 16:], rtol=tol, atol=tol)


def test_analyze_on_cuda_equals_cpu() -> None:
    tok = make_tiny_tokenizer()
    kwargs = dict(
        context="The cat sat on the mat by the door.",
        question="Where is the cat?",
        answer="On the mat.",
    )
    cpu = analyze(tiny_model("llama"), tok, **kwargs)
    model = copy.deepcopy(tiny_model("llama")).cuda()
    gpu = analyze(model, tok, **kwargs)
    assert (gpu.lower is None) == triton_available("cuda")  # the lower bound costs on Triton
    for field in ("expected", "upper", "normalized"):
        np.testing.assert_allclose(getattr(gpu, field), getattr(cpu, field), rtol=1e-4, atol=1e-5)
    with_lower = analyze(model, tok, **kwargs, lower_bound=True)
    np.testing.assert_allclose(with_lower.lower, cpu.lower, rtol=1e-4, atol=1e-5)


needs_triton = pytest.mark.skipif(not triton_available("cuda"), reason="needs Triton")


def _scores(heads: int, gen: int, prompt: int, kind: str, seed: int = 0) -> torch.Tensor:
    """A generation block of raw scores ``[H, g, m + g]`` on the GPU: random with the spread of
    real heads, integer-valued (many ties) or rounded to bfloat16."""
    gen_ = torch.Generator().manual_seed(prompt + gen + 7919 * seed)
    scale = torch.rand(heads, 1, 1, generator=gen_) * 60 + 1
    block = torch.randn(heads, gen, prompt + gen, generator=gen_) * scale
    block[:, :, :7] += 200.0  # attention-sink-like keys
    if kind == "ties":
        block = block.round()
    elif kind == "bf16":
        block = block.bfloat16().float()
    return block.cuda()


@needs_triton
@pytest.mark.parametrize("prompt,gen", [(2048, 64), (8192, 16), (512, 256), (2048, 256)])
@pytest.mark.parametrize("kind", ["random", "ties", "bf16"])
def test_triton_statistics_equal_the_cpu_float64_reference(
    prompt: int, gen: int, kind: str
) -> None:
    """E and A of the Triton path (x read in place, never sorted) vs the CPU kernel, 1e-9."""
    block = _scores(32, gen, prompt, kind)
    fast = block_statistics(block, prompt, lower=False)
    reference = block_statistics(block.cpu(), prompt)
    assert fast.lower is None and fast.expected.device.type == "cuda"
    for field in ("expected", "upper", "mean_gap"):
        torch.testing.assert_close(
            getattr(fast, field).cpu(), getattr(reference, field), rtol=1e-9, atol=1e-12
        )
    torch.testing.assert_close(fast.normalized.cpu(), reference.normalized, rtol=1e-9, atol=1e-12)


@needs_triton
@pytest.mark.parametrize("kind", ["random", "bf16"])
def test_the_sampled_bracket_settles_the_crossing_of_every_head(kind: str) -> None:
    """On blocks like the scores (sink keys, bf16 values) a sample's bracket holds every
    head's crossing: the radix selection over the whole block is not needed. (Scores rounded
    to integers tie so heavily that a few heads fall back to it; the reference test above
    checks that their values stay exact.)"""
    from rcstat.stats import _gpu
    from rcstat.stats.blocks import self_samples

    block = _scores(32, 64, 2048, kind)
    samples = _gpu.prepared_self(self_samples(block, 2048), None)
    _, done = _gpu._bracketed(block[..., :2048], samples.ys, samples.count)
    assert bool(done.all())


@needs_triton
@pytest.mark.parametrize("kind", ["random", "ties", "bf16"])
def test_split_running_sums_equal_one_programs_on_the_gpu(kind: str) -> None:
    """``prepared_sorted`` with its running sums split over blocks (the default for a
    layer's 32 heads at |g| = 256, what analyze and attribution prepare) equals its one
    program a row on the card, every field bit for bit; a row short of its width too."""
    from rcstat.stats import _gpu
    from rcstat.stats.blocks import self_samples

    ys, count, _ = _gpu.sorted_self(self_samples(_scores(32, 256, 64, kind), 64), None)
    assert 32 <= _gpu._SPLIT_ROWS * _gpu.sm_count(ys.device)  # split by default
    count[5] -= 3000  # [32, 32896]: row 5 padded with +inf
    ys[5, int(count[5]) :] = torch.inf
    got = _gpu.prepared_sorted(ys, count)
    want = _gpu.prepared_sorted(ys, count, split=False)
    for name in ("prefix", "center", "table", "low", "scale"):
        a, b = getattr(got, name), getattr(want, name)
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), name


@needs_triton
@pytest.mark.parametrize("kind", ["random", "ties"])
def test_triton_shared_statistics_equal_the_cpu_reference(kind: str) -> None:
    """Per-key E of a unit (attribution, press: a transposed view of the block) and the
    normalized RC with ragged self samples (grounding)."""
    prompt, gen = 3000, 40
    block = _scores(32, gen, prompt, kind)
    cross = block[:, 10:25, :prompt].transpose(1, 2)  # [H, m, |g'|], strided
    y = self_samples(block, prompt)
    valid = torch.rand(y.shape, generator=torch.Generator().manual_seed(1)) < 0.7
    valid[:, 0] = True
    fast = expected_rc_shared(cross, y, y_valid=valid.cuda(), check_finite=False)
    want = expected_rc_shared(cross.cpu(), y.cpu(), y_valid=valid)
    torch.testing.assert_close(fast.cpu(), want, rtol=1e-9, atol=1e-12)
    fast_n = normalized_rc_shared(cross, y, y_valid=valid.cuda())
    want_n = normalized_rc_shared(cross.cpu(), y.cpu(), y_valid=valid)
    torch.testing.assert_close(fast_n.cpu(), want_n, rtol=1e-9, atol=1e-12)


@needs_triton
def test_triton_path_never_waits_for_the_device() -> None:
    block = _scores(32, 64, 2048, "random")
    cross = block[:, :8, :2048].transpose(1, 2)
    y = self_samples(block, 2048)
    large = _scores(8, 256, 2048, "random")  # 2^19 cross samples a head: the bracket

    def run() -> None:
        block_statistics(block, 2048, check_finite=False, lower=False)
        block_statistics(large, 2048, check_finite=False, lower=False)
        expected_rc_shared(cross, y, check_finite=False)

    run()  # compiles the kernels and caches the gather index
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        run()
    finally:
        torch.cuda.set_sync_debug_mode(0)


@needs_triton
def test_triton_path_rejects_non_finite_scores() -> None:
    for bad in (float("nan"), float("inf"), float("-inf")):
        block = _scores(4, 8, 100, "random")
        block[2, 3, 50] = bad
        with pytest.raises(ValueError, match="non-finite"):
            block_statistics(block, 100, lower=False)
        stats = block_statistics(block, 100, lower=False, check_finite=False)
        assert not bool(torch.isfinite(stats.mean_gap[2])) and bool(
            torch.isfinite(stats.mean_gap[0])
        )


def test_half_precision_scores_on_tensor_cores_match_float64() -> None:
    gen = torch.Generator().manual_seed(3)
    query = torch.randn(1, 32, 40, 128, generator=gen).bfloat16().cuda()
    key = torch.randn(1, 8, 300, 128, generator=gen).bfloat16().cuda()
    scores = grouped_scores(query, key)
    assert scores.dtype == torch.float32 and scores.shape == (1, 32, 40, 300)
    want = grouped_scores(query.double(), key.double())
    torch.testing.assert_close(scores.double(), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    ("statistic", "post_softmax"), [("expected", False), ("expected", True), ("upper", True)]
)
def test_attribution_on_cuda_equals_cpu(statistic: str, post_softmax: bool) -> None:
    """The whole call through the capture (its layers replayed as CUDA graphs): with the
    default options the fused kernel's path, otherwise the tensor path."""
    from rcstat.attribution import Attributor

    tok = make_tiny_tokenizer()
    args = (
        ["The cat sat on the mat by the door.", "The dog slept in the garden all day."],
        "Where did the dog sleep?",
        "The dog slept in the garden. The cat sat on the mat.",
    )
    options = dict(top_k=5, statistic=statistic, rank_post_softmax=post_softmax)
    cpu = Attributor(tiny_model("llama"), tok, **options).attribute(*args)  # type: ignore[arg-type]
    model = copy.deepcopy(tiny_model("llama")).cuda()
    gpu = Attributor(model, tok, **options).attribute(*args)  # type: ignore[arg-type]
    for field in ("per_head", "ranking", "token_scores", "attention"):
        np.testing.assert_allclose(getattr(gpu, field), getattr(cpu, field), rtol=1e-4, atol=1e-5)
    assert gpu.attributed == cpu.attributed


def test_grounding_on_cuda_equals_cpu() -> None:
    """Every statistic of the grounding pass, the scores and the supporting spans (checked on
    an H100: token scores within 2e-8 of the CPU's)."""
    from rcstat.grounding import Grounder, HeadProfile

    cpu_model, tok = tiny_model("llama"), make_tiny_tokenizer()
    gpu_model = copy.deepcopy(cpu_model).cuda()
    rng = np.random.default_rng(0)
    profile = HeadProfile("tiny", rng.random((3, 4)), 0.5, 0.1, copy_values=rng.random((3, 4)))
    context = "The cat sat on the warm mat near the door. The dog slept in the garden all day."
    response = "The dog slept in the garden. The cat sat on the mat by the window."
    cpu, gpu = (
        Grounder(model, tok, profile=profile, top_k=5, all_heads=True).ground(
            context, response, "Where?"
        )
        for model in (cpu_model, gpu_model)
    )
    np.testing.assert_allclose(gpu.token_scores, cpu.token_scores, rtol=1e-5, atol=1e-6)
    for name, values in cpu.head_features.items():
        np.testing.assert_allclose(gpu.head_features[name], values, rtol=1e-4, atol=1e-5)
    assert [s.support for s in gpu.sentences] == [s.support for s in cpu.sentences]
    assert gpu.baselines == pytest.approx(cpu.baselines, rel=1e-5)


def test_a_grounding_batch_on_cuda_equals_each_pair_on_cpu() -> None:
    """The batched pass on CUDA (Triton ranks every unit of every sequence in one kernel)
    gives each pair the measurement of its own pass on the CPU."""
    from rcstat.grounding import Measurer
    from tests.test_grounding_batch import PAIRS

    cpu_model, tok = tiny_model("llama"), make_tiny_tokenizer()
    gpu_model = copy.deepcopy(cpu_model).cuda()
    heads = np.array([0, 3, 5, 9, 11])
    cpu = Measurer(cpu_model, tok, support_heads=heads, prior=True)
    gpu = Measurer(gpu_model, tok, support_heads=heads, prior=True)
    batch = gpu.measure_many([gpu.prepare(*pair) for pair in PAIRS], batch_tokens=10_000)
    for pair, got in zip(PAIRS, batch, strict=True):
        want = cpu.measure(*pair)
        for name in ("features", "nll", "entropy", "rank", "copy", "copied", "support"):
            np.testing.assert_allclose(
                getattr(got, name), getattr(want, name), rtol=1e-4, atol=1e-5, err_msg=name
            )
        np.testing.assert_allclose(got.prior_nll, want.prior_nll, rtol=1e-4, atol=1e-5)


def test_layer_lag_marks_every_layer_of_a_grounding_in_order() -> None:
    """``benchmarks/layer_lag.py`` marks the entry and exit of every layer's attention call
    of one grounding pass, in order, then the call's return, at host times that grow, with
    the device's times."""
    from benchmarks.layer_lag import layer_marks
    from rcstat.grounding import Measurer
    from tests.test_grounding_batch import PAIRS

    model = copy.deepcopy(tiny_model("llama")).cuda()
    measurer = Measurer(model, make_tiny_tokenizer(), support_heads=np.array([0, 3, 5]))
    marks = layer_marks(lambda: measurer.measure(*PAIRS[0]), rounds=2)
    layers = model.config.num_hidden_layers
    want = [(s, i) for i in range(layers) for s in ("in", "out")]
    assert [m[:2] for m in marks] == [*want, ("end", -1)]  # the call's return last
    hosts = [m[2] for m in marks]
    assert hosts == sorted(hosts) and hosts[0] >= 0
    assert all(m[3] >= 0 for m in marks)


@pytest.mark.parametrize("longest", [40, 200])  # RC pair by pair, and searched
@pytest.mark.parametrize("window", [None, 300])
def test_fused_grounding_rows_on_cuda_equal_the_cpu_operations(
    window: int | None, longest: int
) -> None:
    """The compiled grounding kernels on inputs of real sizes (contexts over several key
    tiles, a few hundred response rows, sparse matches) against the tensor operations on
    the CPU (the interpreter cases in tests/grounding_rows_cases.py use small ones)."""
    from rcstat.capture import SoftmaxParams
    from rcstat.grounding.features import PassExample, ResponseRows, grounding_reducer

    gen = torch.Generator().manual_seed(0)
    examples = []
    for before, context, response in ((5, 3000, longest), (2, 1200, longest // 2)):
        start = before + context + 3  # template tokens between the context and the response
        rows = ResponseRows((before, before + context), (start, start + response))
        matches = torch.rand(response, context, generator=gen) < 0.01
        examples.append(PassExample(rows, ((0, response // 3), (response // 3, response)), matches))
    width = max(e.rows.num_rows for e in examples)
    scores = torch.randn(2, 8, width, max(e.length for e in examples), generator=gen) * 6
    softmax = {0: SoftmaxParams(0.088, sliding_window=window)}
    options = {"rc_heads": {0: torch.tensor([1, 6])}, "support_heads": {0: torch.tensor([2])}}
    cpu = grounding_reducer(examples, softmax, **options)(0, scores)
    gpu = grounding_reducer(examples, softmax, **options)(0, scores.cuda())
    assert gpu.keys() == cpu.keys()
    for key, want in cpu.items():
        got = gpu[key].cpu().to(want.dtype)  # copied: float32 from the kernels
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6, equal_nan=True, msg=key)


def test_grounding_support_sums_equal_units_key_expected_bit_for_bit() -> None:
    """The support heads' sums read in place (``rows_gpu.support_sums``) equal
    ``units_key_expected`` of the heads' rows copied out, summed over the heads, bit for bit
    (the same kernels on the same values), for layers of one and three heads sharing what
    the first left in ``shared``."""
    from rcstat.grounding.features import PassExample, ResponseRows, support_unit_rows, unit_pairs
    from rcstat.grounding.rows_gpu import support_sums
    from rcstat.stats import units_key_expected

    gen = torch.Generator().manual_seed(3)
    examples = [
        PassExample(ResponseRows((5, 2005), (2008, 2208)), ((0, 70), (70, 130), (130, 200))),
        PassExample(ResponseRows((2, 900), (903, 1003)), ((0, 100),)),
    ]
    width = max(e.rows.num_rows for e in examples)
    length = max(e.length for e in examples)
    scores = (torch.randn(2, 8, width, length, generator=gen) * 6).cuda()
    pairs = unit_pairs(examples)
    moved = {f"pairs_{k}": torch.from_numpy(v).cuda() for k, v in pairs.items()}
    rows = support_unit_rows(moved, length, pairs)
    shared: dict = {}
    for heads in ([6], [7, 2, 0], [4]):
        chosen = torch.tensor(heads).cuda()
        got = support_sums(scores, chosen, rows, (2, 2005), shared)
        want = units_key_expected(scores[:, chosen], rows, (2, 2005)).sum(1)
        assert torch.equal(got, want), heads


@pytest.mark.parametrize(
    "units", [[(0, 9), (9, 60), (64, 130), (130, 197)], [(0, 200)]], ids=["units", "whole"]
)
@pytest.mark.parametrize("softcap", [None, 30.0])
@pytest.mark.parametrize("window", [None, 700])
def test_fused_attribution_on_cuda_equals_the_cpu_operations(
    window: int | None, softcap: float | None, units: list[tuple[int, int]]
) -> None:
    """The compiled attribution kernel on a layer of real size (2,000 prompt keys, 200
    generated rows, bucket tables for the heads and the long units, rows of no unit; or one
    unit of every row, without the heads' search) against the tensor operations on the CPU
    (the interpreter cases in tests/attribution_fused_cases.py use small ones)."""
    from rcstat.attribution.reduce import attribution_reducer
    from rcstat.capture import SoftmaxParams

    prompt, gen_len = 2000, 200
    block = torch.randn(1, 8, gen_len, prompt + gen_len, generator=torch.Generator().manual_seed(0))
    spans = [(a, a + 40) for a in range(30, 1990, 40)]
    softmax = {0: SoftmaxParams(0.088, softcap=softcap, sliding_window=window)}
    args = (prompt, units, spans, (30, 1990), softmax)
    cpu = attribution_reducer(*args, upper=False, post_softmax=False)(0, block * 6)
    gpu = attribution_reducer(*args, upper=False, post_softmax=False)(0, block.cuda() * 6)
    assert gpu.keys() == cpu.keys()
    for key, want in cpu.items():
        got = gpu[key].cpu()
        assert got.dtype == want.dtype, key
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7, equal_nan=True, msg=key)


def test_graphed_calls_replay_what_eager_computes() -> None:
    from rcstat.capture.graphs import GraphedCalls

    calls = GraphedCalls()

    def fn(a: torch.Tensor, b: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"sum": (a @ b).sum(-1), "max": a.amax(-1)}

    gen = torch.Generator().manual_seed(0)
    for round_ in range(4):  # eager, captured, replayed, replayed
        a, b = (torch.randn(64, 64, generator=gen).cuda() for _ in range(2))
        got, want = calls("k", fn, a, b), fn(a, b)
        for name in want:
            torch.testing.assert_close(got[name], want[name], msg=f"round {round_}")
    assert len(calls._graphs) == 1 and calls._graphs[next(iter(calls._graphs))] is not None

    def syncs(a: torch.Tensor) -> torch.Tensor:
        return a * float(a.sum())  # reads a value on the host: cannot be captured

    x = torch.ones(3).cuda()
    for _ in range(3):  # the failed capture falls back to eager calls
        torch.testing.assert_close(calls("s", syncs, x), x * 3)
    calls.close()
    assert not calls._graphs


@needs_triton
def test_statistics_with_the_bracket_replay_as_a_graph() -> None:
    """The crossing point's bracket (sort, collection, selection) is captured, not left to
    eager calls, and its replays give the eager values."""
    from rcstat.capture.graphs import GraphedCalls

    calls = GraphedCalls()

    def stats(block: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = block_statistics(block, 2048, check_finite=False, lower=False)
        return out.expected, out.upper

    for seed in range(3):  # eager, captured, replayed
        block = _scores(8, 256, 2048, "random", seed=seed)
        got, want = calls("stats", stats, block), stats(block)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=0, atol=0)
    assert all(graph is not None for graph in calls._graphs.values()) and calls._graphs
    calls.close()


def test_analysis_with_graphs_equals_eager_layers() -> None:
    """Graph replays (layers 2+) give what eager layers give (keep_samples forces eager)."""
    tok = make_tiny_tokenizer()
    model = copy.deepcopy(tiny_model("llama")).cuda()
    kwargs = dict(context="The cat sat on the mat.", question="Where?", answer="On the mat.")
    graphed = analyze(model, tok, **kwargs)
    layers = graphed.shape[0]
    eager = analyze(model, tok, **kwargs, keep_samples=[(i, 0) for i in range(layers)])
    for field in ("expected", "upper", "normalized"):
        np.testing.assert_array_equal(getattr(graphed, field), getattr(eager, field))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), None])
def test_the_finiteness_flag_of_a_cuda_block_from_its_extremes(bad: float | None) -> None:
    """The capture's flag on the card: one non-finite score of a large block (a reduction
    over many programs) clears it; the largest finite values do not."""
    from rcstat.capture.scores import all_finite

    for dtype in (torch.float32, torch.bfloat16):
        scores = torch.randn(32, 256, 2100, device="cuda").to(dtype)
        scores[3, 100, 7] = torch.finfo(dtype).max
        scores[30, 2, 2000] = torch.finfo(dtype).min
        if bad is not None:
            scores[17, 255, 1234] = bad
        assert bool(all_finite(scores)) == (bad is None), dtype


def test_upload_many_moves_every_tensor_with_one_copy_per_dtype() -> None:
    from rcstat.capture.host import upload_many

    values = {
        "index": torch.arange(7).view(7, 1),
        "mask": torch.tensor([[True, False], [False, True]]),
        "weights": torch.randn(3, 4),
        "more": torch.arange(3) * 5,
        "empty": torch.zeros(0, dtype=torch.int64),
        "half": torch.randn(5, dtype=torch.bfloat16),
        "strided": torch.randn(3, 4).t(),
        "one_strided": torch.arange(8).view(2, 4)[:1, 1],  # one element, stride 4
    }
    with torch.cuda.device(0):
        torch.cuda.set_sync_debug_mode("error")  # no copy may wait for the device
        try:
            moved = upload_many(values, torch.device("cuda"))
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert list(moved) == list(values)
    for name, value in values.items():
        assert moved[name].is_cuda and moved[name].dtype == value.dtype
        assert torch.equal(moved[name].cpu(), value), name


def test_download_many_reads_every_tensor_bit_for_bit_in_one_copy() -> None:
    """Device tensors of every size and dtype (odd byte counts, empty, strided, NaN payloads)
    come back equal bit for bit, in their order and shapes, with one wait for the device;
    a host tensor stays as it is."""
    import warnings

    from rcstat.capture.host import download_many

    gen = torch.Generator().manual_seed(2)
    nan = torch.tensor([float("nan"), -0.0, float("inf")])
    values = {
        "float64": torch.randn(3, 5, generator=gen, dtype=torch.float64).cuda(),
        "odd": torch.arange(7, dtype=torch.uint8).cuda(),
        "mask": torch.tensor([[True, False, True]]).cuda(),
        "host": torch.arange(4),
        "empty": torch.zeros(0, 3).cuda(),
        "half": torch.randn(5, generator=gen).to(torch.bfloat16).cuda(),
        "strided": torch.randn(4, 3, generator=gen).cuda().t(),
        "special": nan.cuda(),
        "one_strided": torch.arange(8, device="cuda").view(2, 4)[:1, 1],  # stride 4
    }
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            got = download_many(values)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert len([w for w in caught if "synchroniz" in str(w.message)]) == 1
    assert list(got) == list(values) and got["host"] is values["host"]
    for name, value in values.items():
        assert got[name].device.type == "cpu" and got[name].dtype == value.dtype, name
        assert got[name].shape == value.shape, name
        host = value.cpu()
        if host.dtype.is_floating_point:  # bits, NaN payloads and signed zeros included
            bits = {8: torch.int64, 4: torch.int32, 2: torch.int16}[host.element_size()]
            assert torch.equal(got[name].view(bits), host.contiguous().view(bits)), name
        else:
            assert torch.equal(got[name], host), name


def test_host_stack_copies_from_cuda_asynchronously() -> None:
    from rcstat.capture.host import HostStack

    stack = HostStack([0, 1], (1000,), torch.float32, pinned=True)
    for layer in (0, 1):
        value = torch.arange(1000, device="cuda", dtype=torch.float32) + layer
        stack.put(layer, value)
        del value  # the stream record keeps the memory until the copy is done
    result = stack.result()
    assert result.is_pinned()
    torch.testing.assert_close(result[1] - result[0], torch.ones(1000))


def test_stack_on_host_keeps_the_order_across_devices() -> None:
    """Values on two devices (the host and a GPU, as a model split across cards gives them)
    come back in their own order, each device copied once."""
    from rcstat.capture.host import stack_on_host

    values = [torch.full((3,), float(k), device="cuda" if k % 2 else "cpu") for k in range(5)]
    got = stack_on_host(values)
    assert got.device.type == "cpu"
    torch.testing.assert_close(got[:, 0], torch.arange(5, dtype=torch.float32))


def test_sum_on_host_adds_each_devices_sum() -> None:
    """Values on two devices (the host and a GPU) are summed where they are, then added: the
    sum over all of them, up to float32 rounding, returned on the host."""
    from rcstat.capture.host import sum_on_host

    gen = torch.Generator().manual_seed(1)
    values = [torch.randn(4, 300, generator=gen) for _ in range(7)]
    moved = [v.cuda() if k % 3 else v for k, v in enumerate(values)]
    got = sum_on_host(moved)
    assert got.device.type == "cpu"
    torch.testing.assert_close(got, torch.stack(values).sum(0), rtol=1e-6, atol=1e-6)


@needs_triton
def test_units_key_expected_on_cuda_equals_cpu() -> None:
    from rcstat.stats import unit_rows, units_key_expected

    block = _scores(32, 40, 1500, "random")
    rows = unit_rows([(0, 3), (3, 17), (17, 40)], 1540, 1500)
    fast = units_key_expected(block, rows.map(lambda t: t.cuda()), (0, 1500))
    want = units_key_expected(block.cpu(), rows, (0, 1500))
    torch.testing.assert_close(fast.cpu(), want, rtol=1e-9, atol=1e-12)


_SPLIT = {"model.embed_tokens": 0, "model.rotary_emb": 0, "model.layers.0": 0}
_SPLIT |= {"model.layers.1": 1, "model.layers.2": 1, "model.norm": 1, "lm_head": 1}


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
def test_a_model_split_across_two_gpus_gives_the_results_of_one() -> None:
    """accelerate's dispatch over cuda:0 and cuda:1 (while cuda:0 is current): each layer is
    reduced on its own GPU — Triton kernels, CUDA graphs and host copies included — and every
    result equals the one-GPU run."""
    from accelerate import dispatch_model

    from rcstat.attribution import Attributor
    from rcstat.grounding import Grounder, HeadProfile

    tok = make_tiny_tokenizer()
    one = copy.deepcopy(tiny_model("llama")).to("cuda:0")
    split = dispatch_model(copy.deepcopy(tiny_model("llama")), device_map=_SPLIT)
    assert split.model.layers[2].self_attn.q_proj.weight.device == torch.device("cuda:1")
    torch.cuda.set_device(0)
    texts = dict(context="The cat sat on the warm mat. " * 6, question="Where?", answer="On it.")
    a, b = (analyze(m, tok, **texts, lower_bound=True) for m in (one, split))  # type: ignore[arg-type]
    for name in ("expected", "upper", "lower"):
        np.testing.assert_allclose(getattr(b, name), getattr(a, name), rtol=1e-6, atol=1e-7)
    chunks = ["The cat sat on the mat by the door.", "The dog slept in the garden all day."]
    answer = "The dog slept in the garden. The cat sat on the mat."
    a, b = (
        Attributor(m, tok, top_k=5, rank_post_softmax=True).attribute(chunks, "Where?", answer)
        for m in (one, split)
    )
    for field in ("per_head", "ranking", "token_scores", "attention"):
        np.testing.assert_allclose(getattr(b, field), getattr(a, field), rtol=1e-5, atol=1e-6)
    rng = np.random.default_rng(0)
    profile = HeadProfile("tiny", rng.random((3, 4)), 0.5, 0.1, copy_values=rng.random((3, 4)))
    a, b = (
        Grounder(m, tok, profile=profile, top_k=5, all_heads=True).ground(
            " ".join(chunks), answer, "Where?"
        )
        for m in (one, split)
    )
    np.testing.assert_allclose(b.token_scores, a.token_scores, rtol=1e-5, atol=1e-6)
    # support heads on both GPUs (layers 0 and 2): the heads gathered on cuda:0 are ranked
    # when the scores move to cuda:1; every sentence's eq. (10) sums as on one GPU
    from rcstat.grounding import Measurer

    heads = np.array([0, 3, 8, 10, 11])
    a, b = (
        Measurer(m, tok, support_heads=heads).measure(" ".join(chunks), answer, "Where?")
        for m in (one, split)
    )
    assert a.support.shape == (2, 2) and np.isfinite(a.support).all() and a.support.sum() > 0
    np.testing.assert_allclose(b.support, a.support, rtol=1e-6, atol=1e-9)
