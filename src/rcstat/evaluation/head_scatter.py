"""Per-head compression ratio of RCStatPress vs the head's RC score (the paper's Fig. 4a).

For each example the context is the prompt and question + answer the generation (§5.1): the
analysis gives every query head's expected RC; RCStatPress (threshold mode) compresses the
same context and gives every KV head's realized ratio. A KV head's RC is the mean over its
query-head group. The paper reports a clear anti-correlation: heads with higher RC are
evicted less.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from rcstat.analysis import analyze
from rcstat.data import QAExample
from rcstat.defaults import DEFAULT_WINDOW
from rcstat.generation import input_device
from rcstat.press.answer import prefill, split_context_question
from rcstat.press.rcstat_press import RCStatPress
from rcstat.report.plots import save_figure


def head_scatter(
    model: Any,
    tokenizer: Any,
    examples: Sequence[QAExample],
    *,
    threshold: float = 1.0,
    window: int = DEFAULT_WINDOW,
) -> pd.DataFrame:
    """Mean per-KV-head realized ratio and RC over ``examples``.

    Returns a frame with ``layer``, ``kv_head``, ``ratio`` and ``rc`` (and ``rc_normalized``),
    and ``spearman_rho`` / ``spearman_p`` in ``frame.attrs``.
    """
    from transformers import DynamicCache

    ratios, scores, normalized = [], [], []
    device = input_device(model)
    for example in examples:
        answer = example.answers[0] if example.answers else None
        result = analyze(
            model,
            tokenizer,
            context=example.context,
            question=example.question,
            answer=answer,
            question_placement="generation",
        )
        press = RCStatPress(threshold=threshold, window_size=window)
        context_ids, _ = split_context_question(tokenizer, example.context, example.question)
        prefill(model, context_ids.to(device), press, DynamicCache())
        per_head = press.head_ratios()[:, 0].numpy()  # [layers, kv_heads]
        kv_heads = per_head.shape[1]
        group = result.expected.shape[1] // kv_heads
        ratios.append(per_head)
        scores.append(result.expected.reshape(-1, kv_heads, group).mean(-1))
        normalized.append(result.normalized.reshape(-1, kv_heads, group).mean(-1))
    ratio, rc, rc_norm = (np.mean(v, axis=0) for v in (ratios, scores, normalized))
    layers, kv_heads = ratio.shape
    frame = pd.DataFrame(
        {
            "layer": np.repeat(np.arange(layers), kv_heads),
            "kv_head": np.tile(np.arange(kv_heads), layers),
            "ratio": ratio.reshape(-1),
            "rc": rc.reshape(-1),
            "rc_normalized": rc_norm.reshape(-1),
        }
    )
    return with_spearman(frame, len(examples))


def with_spearman(frame: pd.DataFrame, examples: int) -> pd.DataFrame:
    """``frame`` (a head scatter, e.g. read back from its CSV) with the Spearman correlation
    of RC and ratio and the number of ``examples`` in ``frame.attrs``."""
    rho, p_value = spearmanr(frame["rc"], frame["ratio"])
    frame.attrs.update(spearman_rho=float(rho), spearman_p=float(p_value), examples=examples)
    return frame


def plot_head_scatter(frame: pd.DataFrame, path: str | Path) -> None:
    """Scatter of per-head compression ratio vs RC, written as PNG."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    points = ax.scatter(frame["rc"], frame["ratio"], c=frame["layer"], cmap="viridis", s=14)
    fig.colorbar(points, ax=ax, label="layer")
    ax.set_xlabel("head RC (expected, mean over its query heads)")
    ax.set_ylabel("realized compression ratio of the KV head")
    ax.set_title(f"Spearman ρ = {frame.attrs.get('spearman_rho', float('nan')):.2f}")
    save_figure(fig, path)
