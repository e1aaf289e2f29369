"""Attribution of one example vs a plain forward pass of the same sequence (ratio in one run).

Inputs are real attribution examples of the shared slices (QuoteSum: ~3 passages; VERI-GRAN:
~80 sentence chunks, ~2k tokens) with their annotated answers, on the embedded default model.
``Attributor.attribute`` followed by reading the attributed spans (tokenisation, one forward
pass with the capture, every statistic of every head and span, post-softmax baseline, eq. 10
with the chosen span score) is timed, for each ``--span-scores`` value, against
``model(ids, use_cache=False)``
of the same token ids (what a user runs) and ``logits_to_keep=1`` (no vocabulary logits).
The number of forward passes an ablation method needs for the same example is recorded from
its documented defaults: ContextCite (``ContextCiter(num_ablations=64)``, MadryLab/
context-cite) runs 64 ablated forward passes after generation; rcstat runs one.

    python -m benchmarks.bench_attribution --dataset verigran --n 5 --span-scores mean,sentence
    python -m benchmarks.bench_attribution --dataset verigran --n 5 --answer sentences
    python -m benchmarks.bench_attribution --model random --model-dir DIR --device cuda
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchmarks._common import device_label, forward_fns, interleaved, machine, write
from benchmarks.bench_heads import build
from rcstat.attribution import Attributor
from rcstat.attribution.spans import join_chunks, split_sentences
from rcstat.data import AttributionExample, load_dataset
from rcstat.segments import segment_chat

CONTEXTCITE_FORWARD_PASSES = 64  # ContextCiter's default num_ablations


def measure(
    attributors: dict[str, Attributor],
    example: AttributionExample,
    device: str,
    rounds: int,
    answer_kind: str = "full",
) -> dict[str, Any]:
    """Seconds of each attributor (by span score) and of the plain forward passes; the first
    span score is the row's ``attribute_s``. ``answer_kind``: ``"full"``, the annotated answer
    and its annotated units; ``"sentences"``, the annotated answer with its sentences as units
    (what ``Attributor.attribute`` does without ``units``); ``"sentence"``, the first annotated
    sentence alone (one unit, the whole answer, as for a short QA answer); ``"whole"``, the
    full answer as one unit."""
    first = next(iter(attributors.values()))
    model, tokenizer = first.model, first.tokenizer
    text, _ = join_chunks(list(example.chunks))
    answer = example.answer
    units: list[tuple[int, int]] | None = [(u.start, u.end) for u in example.units]
    if answer_kind == "sentence":
        unit = example.units[0]
        answer, units = example.answer[unit.start : unit.end], None
    elif answer_kind == "sentences":
        units = None
    elif answer_kind == "whole":
        units = [(0, len(answer))]
    ids = segment_chat(tokenizer, text, example.question, answer).input_ids.to(device)

    def attribute(attributor: Attributor) -> Any:
        return lambda: (
            (
                attributor.attribute(list(example.chunks), example.question, answer, units=units)
            ).attributed
        )

    timed = {f"attribute_{score}": attribute(a) for score, a in attributors.items()}
    names = list(timed)
    times = interleaved({**timed, **forward_fns(model, ids)}, device, rounds)
    times["attribute"] = times[names[0]]
    others = {f"{name}_vs_{names[0]}": times[name] / times[names[0]] for name in names[1:]}
    return {
        "example": example.id,
        "tokens": int(ids.shape[1]),
        "chunks": len(example.chunks),
        "units": len(split_sentences(answer, language=first.language))
        if units is None
        else len(units),
        "attribute_s": times["attribute"],
        "forward_s": times["forward"],
        "forward_last_s": times["forward_last"],
        "ratio_vs_forward": times["attribute"] / times["forward"],
        "ratio_vs_forward_last": times["attribute"] / times["forward_last"],
        "rcstat_forward_passes": 1,
        "contextcite_forward_passes": CONTEXTCITE_FORWARD_PASSES,
        **{f"{name}_s": times[name] for name in names},
        **others,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", choices=["default", "random", "llama-8b"])
    parser.add_argument("--model-dir", default=None, help="config + tokenizer for --model random")
    parser.add_argument("--dataset", default="verigran", choices=["quotesum", "verigran"])
    parser.add_argument("--data", default=None, help="upstream file (default: the shared slice)")
    parser.add_argument("--n", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--span-scores",
        default="mean",
        help="comma-separated span scores to time (first: the row's)",
    )
    parser.add_argument(
        "--answer",
        default="full",
        choices=["full", "sentences", "sentence", "whole"],
        help="the annotated answer and units, the answer with its sentences as units "
        "(Attributor's default), its first annotated sentence alone (one unit), or the whole "
        "answer as one unit",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    model, tokenizer = build(args.model, args.model_dir, args.device)
    attributors = {
        score: Attributor(model, tokenizer, span_score=score)
        for score in args.span_scores.split(",")
    }
    examples = [
        e
        for e in load_dataset(args.dataset, args.data, limit=args.n)
        if isinstance(e, AttributionExample) and e.units
    ]
    rows = []
    for example in examples:
        row = measure(attributors, example, args.device, args.rounds, args.answer)
        rows.append(row)
        others = ", ".join(f"{k} {v:.3f}×" for k, v in row.items() if "_vs_attribute_" in k)
        print(
            f"{row['example']}: {row['tokens']} tokens, {row['chunks']} chunks, "
            f"{row['units']} units: attribute {row['attribute_s']:.3f}s, forward "
            f"{row['forward_s']:.3f}s → {row['ratio_vs_forward']:.2f}× "
            f"({row['ratio_vs_forward_last']:.2f}× vs logits_to_keep=1)"
            + (f"; {others}" if others else "")
        )
    meta = machine(args.device) | {
        "dataset": args.dataset,
        "rounds": args.rounds,
        "answer": args.answer,
    }
    suffix = "" if args.answer == "full" else f"_{args.answer}"
    name = f"attribution_{args.dataset}_{args.model}_{device_label(args.device)}{suffix}"
    write(args.out, name, rows, meta)


if __name__ == "__main__":
    main()
