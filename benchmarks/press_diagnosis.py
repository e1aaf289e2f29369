"""Press investigation: where each press loses what the full-cache answer needed.

For every example of a QA dataset and every press (RCStatPress with its GQA rule, kvpress
baselines), :func:`rcstat.evaluation.kv_diagnosis.diagnose` gives per layer and KV head the
realized ratio, the full-cache answer's attention weight on the evicted entries ("lost
attention"), the VER of every layer's head outputs and the last layer's VER with only that
layer compressed. Written to ``--out`` (a new folder):

- ``layers.csv``: example, press, layer, ratio, lost_attention, ver_by_layer, ver_alone;
- ``heads.csv``: example, press, layer, kv_head, ratio, lost_attention;
- ``examples.csv``: example, press, ver, the sum of the layers' ``ver_alone``, mean lost
  attention, the text of the last ``--window`` context tokens (what RCStat's window holds),
  the full-cache answer;
- ``needed.csv``: per example the ``--top`` context tokens the full-cache answer attended to
  most (mean over layers and heads) with, per press, the share of (layer, KV head) pairs
  that evicted each;
- ``summary.csv`` / ``summary.md``: per press the means over examples, the share of the
  most-attended tokens evicted and Spearman correlations over layers (lost attention vs VER
  alone) and over (layer, KV head) (realized ratio vs lost attention);
  ``summary_layers.csv``: per press and layer;
- ``layers.png``: per press and layer, the mean realized ratio, lost attention and VER alone.

    PYTHONPATH=src:. python -m benchmarks.press_diagnosis --dataset qmsum --context relevant \\
        --max-tokens 2048 --ratio 0.7 --presses rcstat,rcstat:max:layer,tova \\
        --max-new-tokens 24 --out runs/diag/qmsum_07
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from rcstat.data import QAExample, load_dataset
from rcstat.evaluation.kv_diagnosis import Diagnosis, diagnose
from rcstat.models import load_model
from rcstat.press.answer import split_context_question
from rcstat.press.registry import PRESS_NAMES, make_press
from rcstat.progress import progress
from rcstat.report.plots import save_figure


def press_spec(spec: str, ratio: float, window: int) -> tuple[str, Any]:
    """``name`` or ``rcstat:<group rule>[:<budget>]`` → (label, press at ``ratio``); the
    press's defaults where a part is left out."""
    name, _, knobs = spec.partition(":")
    rule, _, budget = knobs.partition(":")
    if name not in PRESS_NAMES or (knobs and name != "rcstat"):
        raise ValueError(
            f"unknown press {spec!r}: {', '.join(PRESS_NAMES)} or rcstat:<rule>[:<budget>]"
        )
    if name == "rcstat":
        options = {"group": rule or None, **({"budget": budget} if budget else {})}
        return spec, make_press("rcstat", ratio=ratio, window=window, **options)
    return spec, make_press(name, ratio=ratio)


def rows_of(example: QAExample, diag: Diagnosis, tokenizer: Any, window: int, top: int) -> dict:
    """The CSV rows of one example."""
    context = diag.reference.context_ids[0].cpu()
    tail = tokenizer.decode(context[-window:])
    layers, heads, examples, needed = [], [], [], []
    for name, press in diag.presses.items():
        ratios = press.head_ratios  # [L, Hkv]
        for layer in range(ratios.shape[0]):
            layers.append(
                {
                    "example": example.id,
                    "press": name,
                    "layer": layer,
                    "ratio": float(ratios[layer].mean()),
                    "lost_attention": float(press.lost_attention[layer].mean()),
                    "ver_by_layer": float(press.ver_by_layer[layer]),
                    "ver_alone": float(press.ver_alone[layer]),
                }
            )
            for head in range(ratios.shape[1]):
                heads.append(
                    {
                        "example": example.id,
                        "press": name,
                        "layer": layer,
                        "kv_head": head,
                        "ratio": float(ratios[layer, head]),
                        "lost_attention": float(press.lost_attention[layer, head]),
                    }
                )
        examples.append(
            {
                "example": example.id,
                "press": name,
                "ver": press.ver,
                "ver_alone_sum": float(press.ver_alone.sum()),
                "lost_attention": float(press.lost_attention.mean()),
                "window_text": tail,
                "answer": diag.reference.answer,
            }
        )
    weight = diag.attention.mean((0, 1))  # [m]
    best = weight.topk(min(top, weight.numel())).indices
    for rank, position in enumerate(best.tolist()):
        left, right = max(0, position - 4), position + 4
        row = {
            "example": example.id,
            "rank": rank,
            "position": position,
            "from_end": int(context.numel()) - position,
            "token": tokenizer.decode(context[position : position + 1]),
            "around": tokenizer.decode(context[left:right]),
            "attention": float(weight[position]),
        }
        for name, press in diag.presses.items():
            row[f"evicted_{name}"] = float((~press.keep[:, :, position]).double().mean())
        needed.append(row)
    return {"layers": layers, "heads": heads, "examples": examples, "needed": needed}


def summarize(tables: dict[str, pd.DataFrame], out: Path) -> pd.DataFrame:
    """``summary.csv`` / ``.md`` and ``layers.png``; returns the per-press summary."""
    import matplotlib.pyplot as plt

    examples, layers, needed = tables["examples"], tables["layers"], tables["needed"]
    summary = examples.groupby("press", sort=False)[
        ["ver", "ver_alone_sum", "lost_attention"]
    ].mean()
    evicted = [c for c in needed.columns if c.startswith("evicted_")]
    top_evicted = needed[evicted].mean().rename(lambda c: c.removeprefix("evicted_"))
    summary["top_tokens_evicted"] = top_evicted
    per_layer = layers.groupby(["press", "layer"], sort=False)[
        ["ratio", "lost_attention", "ver_by_layer", "ver_alone"]
    ].mean()
    summary["spearman_lost_attention_vs_ver_alone"] = pd.Series(
        {  # over layers: does a layer that loses more of the answer's reading cause more error?
            name: float(group["lost_attention"].corr(group["ver_alone"], method="spearman"))
            for name, group in per_layer.reset_index().groupby("press", sort=False)
        }
    )
    by_head = (
        tables["heads"]
        .groupby(["press", "layer", "kv_head"], sort=False)[["ratio", "lost_attention"]]
        .mean()
    )
    summary["spearman_head_ratio_vs_lost_attention"] = pd.Series(
        {  # over (layer, KV head): does a head that evicts more lose more of the answer's reading?
            name: float(group["ratio"].corr(group["lost_attention"], method="spearman"))
            for name, group in by_head.reset_index().groupby("press", sort=False)
            if group["ratio"].nunique() > 1
        }
    )
    summary.to_csv(out / "summary.csv")
    per_layer.to_csv(out / "summary_layers.csv")
    (out / "summary.md").write_text(f"```\n{summary.to_string(float_format='%.4f')}\n```\n")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for name, group in per_layer.reset_index().groupby("press", sort=False):
        for ax, column in zip(axes, ("ratio", "lost_attention", "ver_alone"), strict=True):
            ax.plot(group["layer"], group[column], marker=".", label=name)
            ax.set_xlabel("layer")
            ax.set_title(column.replace("_", " "))
    axes[0].legend()
    save_figure(fig, out / "layers.png")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="default: the embedded model")
    parser.add_argument("--dataset", default="squad_v2")
    parser.add_argument("--context", choices=("full", "relevant"), default=None)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--ratio", type=float, default=0.5)
    parser.add_argument("--presses", default="rcstat,tova")
    parser.add_argument("--window", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--n", type=int, default=None)
    parser.add_argument("--out", type=Path, required=True)
    ns = parser.parse_args(argv)
    presses = dict(press_spec(s, ns.ratio, ns.window) for s in ns.presses.split(","))
    if ns.out.exists() and any(ns.out.iterdir()):
        raise SystemExit(f"{ns.out} is not empty: give a new folder")
    options = {} if ns.context is None else {"context": ns.context}
    loaded = load_dataset(ns.dataset, None, limit=ns.n, **options)
    model, tokenizer = load_model(ns.model)
    examples = []
    for e in loaded:
        context, question = split_context_question(tokenizer, e.context, e.question)
        if context.shape[1] + question.shape[1] + ns.max_new_tokens <= ns.max_tokens:
            examples.append(e)
    print(f"{len(examples)} of {len(loaded)} examples fit {ns.max_tokens} tokens", file=sys.stderr)
    ns.out.mkdir(parents=True, exist_ok=True)
    collected: dict[str, list[dict]] = {"layers": [], "heads": [], "examples": [], "needed": []}
    for example in progress(examples, desc="diagnosing", unit="example"):
        diag = diagnose(
            model,
            tokenizer,
            example.context,
            example.question,
            presses,
            max_new_tokens=ns.max_new_tokens,
        )
        for key, rows in rows_of(example, diag, tokenizer, ns.window, ns.top).items():
            collected[key] += rows
        tables = {key: pd.DataFrame(rows) for key, rows in collected.items()}
        for key, frame in tables.items():
            frame.to_csv(ns.out / f"{key}.csv", index=False)
    print(summarize(tables, ns.out).to_string())
    return 0


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    raise SystemExit(main())
