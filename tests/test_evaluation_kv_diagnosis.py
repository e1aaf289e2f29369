"""The press diagnosis on a tiny model, against the benchmark's own VER and brute force."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from kvpress import AdaKVPress, KnormPress, SnapKVPress, StreamingLLMPress, TOVAPress

from rcstat.evaluation.kv import evaluate_example, full_reference
from rcstat.evaluation.kv_diagnosis import answer_attention, diagnose
from rcstat.press import RaggedCache
from rcstat.press.rcstat_press import RCStatPress
from tests._tiny_models import reference_scores, tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer
from tests.test_data import _squad_doc, _write_json

pytestmark = pytest.mark.press  # needs the rcstat[press] extra (kvpress)

CONTEXT = "The cat sat on the warm mat near the door while the dog slept in the garden. " * 3
QUESTION = "Where did the cat sit?"


def _presses() -> dict[str, object]:
    return {
        "rcstat": RCStatPress(compression_ratio=0.5, budget="layer", group="max"),
        "rcstat_pooled": RCStatPress(compression_ratio=0.5, budget="pooled", floor=0.0),
        "tova": TOVAPress(0.5),
        "snapkv": SnapKVPress(0.5, window_size=8),
        "adakv": AdaKVPress(SnapKVPress(0.5, window_size=8)),
        "streaming": StreamingLLMPress(0.5, n_sink=4),
    }


@pytest.fixture(scope="module")
def diagnosis():  # type: ignore[no-untyped-def]
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    return model, tok, diagnose(model, tok, CONTEXT, QUESTION, _presses(), max_new_tokens=6)


def test_the_last_layers_ver_is_the_benchmarks(diagnosis) -> None:  # type: ignore[no-untyped-def]
    """Leaving out what each press evicted gives the benchmark's VER, whether the press frees
    entries (ragged cache) or truncates the cache (kvpress)."""
    model, tok, found = diagnosis
    for name, press in _presses().items():
        if name == "adakv":  # kvpress's fake-key search fails at head_dim 16 (the tiny model)
            continue
        factory = RaggedCache if isinstance(press, RCStatPress) else None
        kwargs = {"cache_factory": factory} if factory else {}
        want = evaluate_example(
            model, tok, CONTEXT, QUESTION, [], press, max_new_tokens=6, **kwargs
        ).ver
        assert found.presses[name].ver == pytest.approx(want, rel=1e-5, abs=1e-9), name
        assert found.presses[name].ver > 0


def test_kept_entries_of_a_truncating_press_by_hand(diagnosis) -> None:  # type: ignore[no-untyped-def]
    """StreamingLLM keeps the 4 sink tokens and the most recent ones, every head alike."""
    _, _, found = diagnosis
    keep = found.presses["streaming"].keep  # [L, Hkv, m]
    m = keep.shape[-1]
    kept = int(m * 0.5)
    want = torch.zeros(m, dtype=torch.bool)
    want[:4] = True
    want[m - (kept - 4) :] = True
    assert torch.equal(keep, want.expand_as(keep))
    for name in ("rcstat", "tova", "snapkv"):  # per layer, half the entries go
        ratios = found.presses[name].head_ratios.mean(-1)
        assert torch.allclose(ratios, ratios.new_full(ratios.shape, 1 - kept / m), atol=1 / m)


def test_lost_attention_is_the_brute_force_attention_on_evicted_entries(diagnosis) -> None:  # type: ignore[no-untyped-def]
    model, _, found = diagnosis
    ref = found.reference
    tokens = torch.cat([ref.context_ids, ref.question_ids, torch.tensor([ref.answer_ids])], dim=1)
    m, start = ref.context_ids.shape[1], ref.context_ids.shape[1] + ref.question_ids.shape[1]
    scaling = model.model.layers[0].self_attn.scaling
    for layer, scores in enumerate(reference_scores(model, tokens)):  # [1, H, T, T]
        logits = scores[0] * scaling
        causal = torch.ones(logits.shape[-2:], dtype=torch.bool).tril()
        probs = logits.masked_fill(~causal, float("-inf")).softmax(-1)[:, start:, :m]
        want = probs.mean(1).view(2, 2, m).mean(1)  # [Hkv, m]
        np.testing.assert_allclose(found.attention[layer].numpy(), want.numpy(), atol=1e-6)
        for press in found.presses.values():
            lost = (want * (~press.keep[layer]).double()).sum(-1)
            np.testing.assert_allclose(press.lost_attention[layer].numpy(), lost.numpy(), atol=1e-6)
    assert torch.equal(answer_attention(model, ref), found.attention)


def test_nothing_evicted_means_nothing_lost() -> None:
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    found = diagnose(model, tok, CONTEXT, QUESTION, {"none": KnormPress(0.0)}, max_new_tokens=4)
    press = found.presses["none"]
    assert bool(press.keep.all())
    assert float(press.lost_attention.abs().max()) == 0.0
    assert float(press.ver_by_layer.abs().max()) == 0.0 and float(press.ver_alone.max()) == 0.0
    with pytest.raises(ValueError, match="at least one press"):
        diagnose(model, tok, CONTEXT, QUESTION, {})


def test_ver_alone_isolates_a_layer(diagnosis) -> None:  # type: ignore[no-untyped-def]
    """Compressing only the last layer is what every layer compressed does at that layer when
    the earlier layers' errors are removed: its VER alone is positive and, like every layer's,
    finite; the pooled budget's layers differ in ratio."""
    _, _, found = diagnosis
    for press in found.presses.values():
        assert torch.isfinite(press.ver_alone).all() and (press.ver_alone >= 0).all()
        assert float(press.ver_alone[-1]) > 0
    pooled = found.presses["rcstat_pooled"].head_ratios.mean(-1)
    assert float(pooled.max() - pooled.min()) > 0


def test_the_diagnosis_script_writes_its_tables(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The script on a small SQuAD v2 file written here (it reads the named dataset from
    ``../shared/data``, absent where the repository stands alone)."""
    from benchmarks import press_diagnosis
    from benchmarks.press_diagnosis import main

    squad = _write_json(tmp_path / "dev-v2.0.json", _squad_doc())
    real = press_diagnosis.load_dataset

    def from_the_fixture(name: str, path: Any, **options: Any) -> Any:
        assert (name, path) == ("squad_v2", None)  # what the script asks for
        return real(name, squad, **options)

    monkeypatch.setattr(press_diagnosis, "load_dataset", from_the_fixture)
    out = tmp_path / "diag"
    argv = ["--model", str(model_dir), "--dataset", "squad_v2", "--n", "2", "--ratio", "0.5"]
    assert main([*argv, "--presses", "rcstat,rcstat:mean,tova", "--out", str(out)]) == 0
    layers = pd.read_csv(out / "layers.csv")
    assert set(layers["press"]) == {"rcstat", "rcstat:mean", "tova"}
    assert len(layers) == 2 * 3 * 3  # examples × presses × layers
    summary = pd.read_csv(out / "summary.csv", index_col=0)
    assert summary.loc["tova", "ver"] == pytest.approx(
        pd.read_csv(out / "examples.csv").query("press == 'tova'")["ver"].mean()
    )
    assert (out / "layers.png").stat().st_size > 5000
    with pytest.raises(SystemExit, match="not empty"):
        main([*argv, "--out", str(out)])


def test_a_question_placed_reference_answers_like_the_plain_one() -> None:
    """Cutting the prompt after the question changes what is compressed, not the model's
    full-cache answer."""
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    plain = full_reference(model, tok, CONTEXT, QUESTION, max_new_tokens=6)
    aware = full_reference(model, tok, CONTEXT, QUESTION, max_new_tokens=6, placement="question")
    assert aware.answer_ids == plain.answer_ids and plain.question_tokens == 0
    q = aware.question_tokens
    assert tok.decode(aware.context_ids[0, -q:]).strip() == QUESTION
    torch.testing.assert_close(aware.outputs, plain.outputs, rtol=1e-4, atol=1e-5)
