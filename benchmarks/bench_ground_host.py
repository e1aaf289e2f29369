"""The host's share of one grounding: each stage of ``Grounder.ground`` outside the forward pass.

On a GPU the host work before the pass (tokenising, the copy feature's word matches), the text
work that runs while the pass does, and the scoring after it (``Grounder._combine``) add to
the pass's time; ``bench_gpu`` measures their sum. This script times each stage on the host
alone (median of ``--rounds`` interleaved rounds, after a warm-up), for the inputs of
``bench_gpu``'s grounding rows (its sentences, a ``--gen``-token response) with a random-weight
model of Llama-3.1-8B's 32 layers × 32 heads (whose head summaries and copy weights the
scoring reads) and small widths (the pass itself is not timed). To compare two trees, run it
with each on ``PYTHONPATH``, one after the other, on an idle machine.

    python -m benchmarks.bench_ground_host --prompt 2048,8192 --tokenizer runs/tok
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from benchmarks._common import interleaved, ints, llama_8b, machine, write
from benchmarks.bench_gpu import random_grounder, text_of

QUESTION = "Summarize the report."


def _grounder(tokenizer: Any) -> Any:
    return random_grounder(llama_8b("cpu", hidden_size=64, intermediate_size=64), tokenizer)


def stages(grounder: Any, prompt: int, gen: int, rounds: int) -> dict[str, Any]:
    """The median time (ms) of each host stage of one grounding of a ``prompt``-token context
    and a ``gen``-token response."""
    from rcstat.grounding.texts import scoring_texts
    from rcstat.grounding.windows import Window

    tokenizer = grounder.measurer.tokenizer
    context = " ".join(text_of(tokenizer, prompt, seed=3))
    response = " ".join(text_of(tokenizer, gen, seed=4))
    planned = grounder._prepare(context, response, QUESTION)
    checked = planned.example.part_text("answer")
    whole = planned.example.part_text("context")
    measured = grounder.measurer.measure_batch([planned])[0]

    def texts() -> Any:
        return scoring_texts(
            checked,
            planned.token_spans(),
            planned.units,
            whole,
            lexicon=grounder.detector is not None,
            overlaps=True,
        )

    def during_pass() -> Any:
        """What ``Grounder.ground`` does while the device runs the pass: the scoring texts
        and the context's sentences (made afresh: a copy holds none yet)."""
        dataclasses.replace(planned).span_keys  # noqa: B018
        return texts()

    ready = texts()
    medians = interleaved(
        {
            "tokenize": lambda: grounder.measurer.tokenize(context, response),
            "prepare": lambda: grounder._prepare(context, response, QUESTION),
            "texts_during_pass": during_pass,
            "combine": lambda: grounder._combine([measured], [Window(0, len(whole))], texts=ready),
        },
        "cpu",
        rounds,
    )
    return {
        "prompt": prompt,
        "gen": gen,
        "tokens": planned.example.seq_len,
        **{f"{name}_ms": round(seconds * 1e3, 3) for name, seconds in medians.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=ints, default=[2048, 8192])
    parser.add_argument("--gen", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--tokenizer", type=Path, default=Path("runs/tok"))
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    if args.rounds < 1 or args.gen < 1 or min(args.prompt) < 1:
        parser.error("--rounds, --gen and every --prompt must be positive")
    from transformers import AutoTokenizer

    grounder = _grounder(AutoTokenizer.from_pretrained(args.tokenizer))
    rows = []
    for prompt in args.prompt:
        rows.append(stages(grounder, prompt, args.gen, args.rounds))
        print(rows[-1], flush=True)
    write(args.out, "ground_host", rows, machine("cpu"))


if __name__ == "__main__":
    main()
