"""Grounding of one response vs a plain forward pass of the same sequence (ratio in one run).

Inputs are RAGTruth slice responses (``--dataset ragtruth``: QA passages, news, business data
with their task's instruction; ~400–1,200 tokens) or FaithBench slice samples (news article +
summary; ~600–1,300 tokens) on the embedded default model. ``Grounder.ground`` at its defaults
(tokenisation, one forward pass with the capture: lookback ratio, attention diagonal and copy
weight of every head, sentence attribution; NLL, entropy and rank; the shipped detector or the
zero-shot score) is timed against ``model(ids, use_cache=False)`` of the same token ids (what a
user runs to read the response's likelihood) and with ``logits_to_keep = G + 1`` (only the
response's vocabulary logits, what grounding itself needs). Calls are interleaved.

    python -m benchmarks.bench_ground --dataset ragtruth --n 6
    python -m benchmarks.bench_ground --dataset ragtruth --n 6 --top-k 0   # no eq. (10)
    python -m benchmarks.bench_ground --model random --model-dir DIR --device cuda
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from benchmarks._common import device_label, interleaved, machine, write
from benchmarks.bench_heads import build
from rcstat.data import GroundingExample, load_dataset
from rcstat.evaluation.grounding_items import SUMMARY_INSTRUCTION
from rcstat.grounding import Grounder, HeadProfile, shipped_profile
from rcstat.segments import segment_chat


def measure(
    grounder: Grounder, example: GroundingExample, device: str, rounds: int
) -> dict[str, Any]:
    model, tokenizer = grounder.measurer.model, grounder.measurer.tokenizer
    question = str(example.meta.get("question", SUMMARY_INSTRUCTION))
    segmented = segment_chat(tokenizer, example.context, question, example.response)
    ids = segmented.input_ids.to(device)
    keep = segmented.gen_len + 1

    def ground() -> None:
        grounder.ground(example.context, example.response, question)

    def forward() -> None:
        with torch.no_grad():
            model(ids, use_cache=False)

    def forward_response() -> None:
        with torch.no_grad():
            model(ids, use_cache=False, logits_to_keep=keep)

    times = interleaved(
        {"ground": ground, "forward": forward, "forward_response": forward_response},
        device,
        rounds,
    )
    return {
        "example": example.id,
        "tokens": int(ids.shape[1]),
        "response_tokens": segmented.gen_len,
        "ground_s": times["ground"],
        "forward_s": times["forward"],
        "forward_response_s": times["forward_response"],
        "ratio_vs_forward": times["ground"] / times["forward"],
        "ratio_vs_forward_response": times["ground"] / times["forward_response"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", choices=["default", "random", "llama-8b"])
    parser.add_argument("--model-dir", default=None, help="config + tokenizer for --model random")
    parser.add_argument("--dataset", default="ragtruth", choices=["ragtruth", "faithbench"])
    parser.add_argument("--data", default=None, help="the dataset's files (default: the slice)")
    parser.add_argument("--n", type=int, default=6)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--top-k", type=int, default=None, help="the grounder's top_k (0: no eq. 10 evidence)"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    model, tokenizer = build(args.model, args.model_dir, args.device)
    profile = shipped_profile("SmolLM2-135M-Instruct")
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    if profile is None or profile.shape != (layers, heads):  # random shapes: any profile
        generator = torch.Generator().manual_seed(0)
        values, copy = (torch.rand(layers, heads, generator=generator).numpy() for _ in "vc")
        profile = HeadProfile("random", values, threshold=0.5, quantile=0.1, copy_values=copy)
    grounder = Grounder(model, tokenizer, profile=profile, top_k=args.top_k)
    examples = load_dataset(args.dataset, args.data)
    step = max(1, len(examples) // args.n)  # spread over the slice's sources
    rows = []
    for example in examples[::step][: args.n]:
        row = measure(grounder, example, args.device, args.rounds)  # type: ignore[arg-type]
        rows.append(row)
        print(
            f"{row['example']}: {row['tokens']} tokens ({row['response_tokens']} response): "
            f"ground {row['ground_s']:.3f}s, forward {row['forward_s']:.3f}s → "
            f"{row['ratio_vs_forward']:.2f}× ({row['ratio_vs_forward_response']:.2f}× vs "
            "response logits only)"
        )
    total = {k: sum(r[k] for r in rows) for k in ("ground_s", "forward_s", "forward_response_s")}
    print(
        f"all {len(rows)}: ground / forward = {total['ground_s'] / total['forward_s']:.2f}×, "
        f"ground / forward (response logits) = "
        f"{total['ground_s'] / total['forward_response_s']:.2f}×"
    )
    meta = machine(args.device) | {
        "dataset": args.dataset,
        "rounds": args.rounds,
        "method": grounder.method["score"],
        "top_k": grounder.top_k,
    }
    name = f"ground_{args.dataset}_{args.model}_{device_label(args.device)}"
    write(args.out, name if args.top_k is None else f"{name}_top{args.top_k}", rows, meta)


if __name__ == "__main__":
    main()
