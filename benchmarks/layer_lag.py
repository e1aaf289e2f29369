"""Where the host is against the device, layer by layer, in one call on a GPU.

A call of ``analyze`` (random token ids, as ``bench_gpu``), attribution or grounding is as fast
as its forward pass only while the host queues each layer's work before the device needs it.
This script records, at the entry and the exit of every layer's attention call (the capture's
hook), the host's clock and a CUDA event, and prints per layer the host's time, the device's
time at the same point and the lag ``device − host`` (milliseconds from the call's start; the
median over ``--rounds`` calls). A lag that stays near 0 means the device waits for the host
there; a lag that grows means the host runs ahead and the pass is bound by the device. Also
printed: the host's time inside the attention call of each layer (the capture's and the
reducer's launches), and first a line that splits the call against a plain forward pass of the
same ids (median of as many rounds) into the host's work before the pass, the pass on the
device and what follows it. Inputs and model as in ``bench_gpu`` (random weights,
Llama-3.1-8B shapes, bfloat16).

    python -m benchmarks.layer_lag --part grounding --prompt 2048 --gen 16,64,256 \\
        --tokenizer runs/tok
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks._common import (
    TOUCH_GIB,
    forward_fns,
    interleaved,
    ints,
    llama_8b,
    touch_host_memory,
)
from benchmarks.bench_gpu import analyze_call, attribution_call, grounding_call

CALLS = {
    "analyze": lambda model, _, prompt, gen: analyze_call(model, prompt, gen),
    "attribution": attribution_call,
    "grounding": grounding_call,
}


def layer_marks(run: Any, rounds: int) -> list[tuple[str, int, float, float]]:
    """``(entry or exit, layer, host ms, device ms)`` of each layer's attention call in one
    call of ``run``, then ``("end", -1, …)`` where the call returned (the device's time: when
    the work queued by then was done), the median over ``rounds`` calls (after one that is not
    kept). The host's time at layer 0's entry is its work before the pass; the end's minus
    the last layer's exit on the device, its work after the pass."""
    import rcstat.capture.scores as scores

    marks: list[tuple[str, int, float, torch.cuda.Event]] = []
    attention = scores._attention

    def mark(side: str, module: torch.nn.Module | None) -> None:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        marks.append((side, int(getattr(module, "layer_idx", -1)), time.perf_counter(), event))

    def timed(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        mark("in", module)
        out = attention(module, *args, **kwargs)
        mark("out", module)
        return out

    scores._attention = timed
    try:
        run()
        calls = []
        for _ in range(rounds):
            marks.clear()
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            began = time.perf_counter()
            start.record()
            run()
            mark("end", None)  # the call has returned: the host's work after the pass is done
            torch.cuda.synchronize()
            calls.append(
                [(s, layer, (t - began) * 1e3, start.elapsed_time(e)) for s, layer, t, e in marks]
            )
    finally:
        scores._attention = attention
    return [
        (
            side,
            layer,
            statistics.median(c[i][2] for c in calls),
            statistics.median(c[i][3] for c in calls),
        )
        for i, (side, layer, _, _) in enumerate(calls[0])
    ]


def summary(marks: list[tuple[str, int, float, float]], forward_ms: float) -> str:
    """One line: the call against the forward pass of the same ids, split into the host's work
    before the pass (layer 0's entry on the host), the pass on the device (layer 0's entry to
    the last layer's exit) and what follows it (the end minus the last layer's exit)."""
    first, last, end = marks[0], marks[-2], marks[-1]
    before, during, after = first[2], last[3] - first[3], end[3] - last[3]
    return (
        f"call {end[3]:.2f} ms = {end[3] / forward_ms:.2f} x the forward pass ({forward_ms:.2f}"
        f" ms): host before the pass {before:.2f}, the pass on the device {during:.2f},"
        f" after it {after:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=sorted(CALLS), default="grounding")
    parser.add_argument("--prompt", type=int, default=2048)
    parser.add_argument("--gen", type=ints, default=[256], help="answer lengths, e.g. 16,64,256")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokenizer", type=Path, default=Path("runs/tok"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("needs a CUDA device")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    model = llama_8b("cuda")
    touch_host_memory(TOUCH_GIB)
    for gen in args.gen:
        run, ids = CALLS[args.part](model, tokenizer, args.prompt, gen)
        marks = layer_marks(run, args.rounds)
        forward = interleaved(forward_fns(model, ids), "cuda", args.rounds)["forward"] * 1e3
        print(f"{args.part} {args.prompt}/{gen} on {torch.cuda.get_device_name(0)}")
        print(summary(marks, forward))
        print("layer  side  host_ms  device_ms  lag_ms  host_in_attention_ms")
        for i, (side, layer, host, device) in enumerate(marks):
            inside = f"{marks[i + 1][2] - host:.2f}" if side == "in" else ""
            print(
                f"{layer:5d}  {side:4s}  {host:7.2f}  {device:9.2f}  {device - host:6.2f}  {inside}"
            )


if __name__ == "__main__":
    main()
