"""The CUDA path: statistics, capture and analysis agree with the CPU path (skipped without a
GPU; run on the lent H100/H200 with ``pytest -m gpu``)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from rcstat.analysis import analyze
from rcstat.capture import capture_scores
from rcstat.stats import rc_statistics
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
    gpu = analyze(copy.deepcopy(tiny_model("llama")).cuda(), tok, **kwargs)
    for field in ("expected", "upper", "lower", "normalized"):
        np.testing.assert_allclose(getattr(gpu, field), getattr(cpu, field), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("statistic", ["expected", "upper"])
def test_attribution_on_cuda_equals_cpu(statistic: str) -> None:
    from rcstat.attribution import Attributor

    tok = make_tiny_tokenizer()
    args = (
        ["The cat sat on the mat by the door.", "The dog slept in the garden all day."],
        "Where did the dog sleep?",
        "The dog slept in the garden. The cat sat on the mat.",
    )
    options = dict(top_k=5, statistic=statistic, rank_post_softmax=True)
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
    profile = HeadProfile("tiny", np.random.default_rng(0).random((3, 4)), 0.5, 0.1)
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
