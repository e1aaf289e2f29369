"""The caches ``benchmarks/bench_generate.py`` builds (CPU, tiny model, no timing): the full
cache moved into a ``StaticCache`` continues as the ``DynamicCache`` it came from."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
import torch
from transformers import DynamicCache, StaticCache

from benchmarks import bench_generate as bench
from rcstat.press import graphed_generate
from tests._tiny_models import one_thread, tiny_model

_one_thread = pytest.fixture(autouse=True, scope="module")(one_thread)


def test_static_cache_holds_the_prefill_and_continues_like_a_dynamic_cache() -> None:
    model = tiny_model("llama")
    ids = torch.randint(1, 600, (2, 30), generator=torch.Generator().manual_seed(0))
    static = bench.static_cache(model, ids[:, :-1], 40)
    assert int(static.get_seq_length()) == 29 and static.layers[0].keys.shape[2] == 40
    dynamic = DynamicCache()
    bench.prefill(model, ids[:, :-1], dynamic)
    for index, layer in enumerate(dynamic.layers):
        torch.testing.assert_close(static.layers[index].keys[:, :, :29], layer.keys)
        assert not static.layers[index].keys[:, :, 29:].any()
    ours = graphed_generate(model, static, ids[:, -1:], max_new_tokens=8)
    theirs = graphed_generate(model, dynamic, ids[:, -1:], max_new_tokens=8)
    assert torch.equal(ours.tokens, theirs.tokens)


def test_static_cache_is_prefilled_directly_where_the_copy_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tiny_model("llama")
    ids = torch.randint(1, 600, (1, 12), generator=torch.Generator().manual_seed(3))
    original, calls = StaticCache.update, []

    def refuse_first(self: StaticCache, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise TypeError("no such argument")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(StaticCache, "update", refuse_first)
    static = bench.static_cache(model, ids, 20)
    assert "copy refused (no such argument); prefilling it directly" in capsys.readouterr().err
    dynamic = DynamicCache()
    bench.prefill(model, ids, dynamic)
    for index, layer in enumerate(dynamic.layers):
        torch.testing.assert_close(static.layers[index].keys[:, :, :12], layer.keys)


def test_the_full_cache_at_ratio_zero_keeps_every_entry() -> None:
    """The ``full, kernel`` baseline is a RaggedCache keeping everything, not a lighter one."""
    generator = torch.Generator().manual_seed(0)
    assert bool(bench.kept_masks(3, 50, 0.0, generator).all())
    assert not bool(bench.kept_masks(3, 50, 0.1, generator).all())


def test_ratios_are_over_the_fastest_full_cache() -> None:
    static = {
        "cache": "static",
        "ratio": None,
        "tokens_per_s": 10.0,
        "kv_gib": 2.0,
        "peak_gib": 4.0,
    }
    kernel = {"cache": "ragged", "ratio": 0.0, "tokens_per_s": 80.0, "kv_gib": 2.0, "peak_gib": 4.0}
    half = {"cache": "ragged", "ratio": 0.5, "tokens_per_s": 96.0, "kv_gib": 1.0, "peak_gib": 3.0}
    row = bench.with_ratios(half, bench.fastest([static, kernel]))
    assert row["baseline"] == "ragged 0.0"
    assert row["speed_ratio"] == pytest.approx(1.2)
    assert row["kv_ratio"] == 0.5 and row["peak_ratio"] == 0.75


@pytest.mark.parametrize(("static", "timed"), [(True, [None, 0.0]), (False, [0.0])])
def test_no_static_leaves_out_only_the_static_cache(
    monkeypatch: pytest.MonkeyPatch, static: bool, timed: list[float | None]
) -> None:
    """``--no-static``: the full cache is the RaggedCache keeping every entry, alone."""
    seen: list[float | None] = []

    def row(model: Any, ids: Any, ratio: float | None, *rest: Any) -> dict[str, Any]:
        seen.append(ratio)
        return {"ratio": ratio}

    monkeypatch.setattr(bench, "graphed_row", row)
    args = argparse.Namespace(graphs=True, static=static, new_tokens=2, rounds=1)
    rows = bench.full_rows(None, torch.zeros(1, 4), args, torch.Generator())  # type: ignore[arg-type]
    assert seen == timed and [r["ratio"] for r in rows] == timed


def test_no_static_needs_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["bench_generate", "--no-static"])
    with pytest.raises(SystemExit) as exit_info:
        bench.main()
    assert exit_info.value.code == 2
