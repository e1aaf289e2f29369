"""Where the host is against the device, layer by layer, in one call on a GPU.

A call of ``analyze`` (random token ids, as ``bench_gpu``), attribution or grounding is as fast
as its forward pass only while the host queues each layer's work before the device needs it.
This script records, at the entry and the exit of every layer's attention call (the capture's
hook), the host's clock and a CUDA event, and prints per layer the host's time, the device's
time at the same point and the lag ``device − host`` (milliseconds from the call's start; the
median over ``--rounds`` calls). A lag that stays near 0 means the device waits for the host
there; a lag that grows means the host runs ahead and the pass is bound by the device. Also
printed: the host's time inside the attention call of each layer (the capture's and the
reducer's launches). Inputs and model as in ``bench_gpu`` (random weights, Llama-3.1-8B
shapes, bfloat16).

    python -m benchmarks.layer_lag --part grounding --prompt 2048 --tokenizer runs/tok
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks._common import TOUCH_GIB, llama_8b, touch_host_memory
from benchmarks.bench_gpu import analyze_call, attribution_call, grounding_call

CALLS = {
    "analyze": lambda model, _, prompt, gen: analyze_call(model, prompt, gen),
    "attribution": attribution_call,
    "grounding": grounding_call,
}


def layer_marks(run: Any, rounds: int) -> list[tuple[str, int, float, float]]:
    """``(entry or exit, layer, host ms, device ms)`` of each layer's attention call in one
    call of ``run``, the median over ``rounds`` calls (after one that is not kept)."""
    import rcstat.capture.scores as scores

    marks: list[tuple[str, int, float, torch.cuda.Event]] = []
    attention = scores._attention

    def mark(side: str, module: torch.nn.Module) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=sorted(CALLS), default="grounding")
    parser.add_argument("--prompt", type=int, default=2048)
    parser.add_argument("--gen", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokenizer", type=Path, default=Path("runs/tok"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("needs a CUDA device")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    model = llama_8b("cuda")
    touch_host_memory(TOUCH_GIB)
    run, _ = CALLS[args.part](model, tokenizer, args.prompt, args.gen)
    marks = layer_marks(run, args.rounds)
    print(f"{args.part} {args.prompt}/{args.gen} on {torch.cuda.get_device_name(0)}")
    print("layer  side  host_ms  device_ms  lag_ms  host_in_attention_ms")
    for i, (side, layer, host, device) in enumerate(marks):
        inside = f"{marks[i + 1][2] - host:.2f}" if side == "in" else ""
        print(f"{layer:5d}  {side:4s}  {host:7.2f}  {device:9.2f}  {device - host:6.2f}  {inside}")


if __name__ == "__main__":
    main()
