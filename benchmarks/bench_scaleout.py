"""Scale-out of rcstat over several GPUs of one host, in four sub-commands.

- ``make``: a random-weight ``LlamaForCausalLM`` of a named shape (``llama-8b``, ``tiny``),
  saved with ``save_pretrained`` into ``--out`` with the tokenizer of ``--tokenizer`` and
  ``examples.jsonl``: ``--examples`` synthetic ``{"id", "context", "question", "answer"}``
  records of about ``--prompt-tokens`` context and ``--answer-tokens`` answer tokens.
- ``throughput``: ``rcstat heads`` on those examples as one process (``--device``, into
  ``OUT/one``) and data-parallel, ``--nproc`` processes under ``torch.distributed.run`` (into
  ``OUT/dp``; each rank writes ``OUT/dp/parts/<i>-of-<N>/``, the last one merges). Per run:
  the command's wall time and its collect time (the sum of ``seconds`` in ``examples.csv``;
  data-parallel: the largest per-part sum), examples per second both ways and dp / one (target:
  1.8 with 2 processes). The merged ``heads.csv`` must hold the single run's (example, layer,
  head) rows in the same order; the largest differences of E and A are reported. Options after
  ``--`` go to both ``rcstat heads`` commands (e.g. ``-- --dtype bfloat16``).
- ``split``: ``rcstat.analyze`` of the first ``--n`` examples with the model (float32) on
  cuda:0 and split by ``device_map="auto"``: the map's devices, the largest absolute and
  relative differences of E and A between the two, seconds per example (after one warm-up
  example) and peak memory per GPU of each.
- ``too-big``: a model that does not fit one GPU (``llama-70b-56l``: 56 layers of Llama-3-70B,
  ≈ 50 B parameters, ≈ 100 GB in bfloat16) built on the meta device, placed by accelerate over
  the GPUs within ``--max-memory`` each, materialised there with random weights and analysed on
  one example (``--prompt-tokens`` context and ``--answer-tokens`` answer tokens, 2048 and 64
  by default): parameter bytes vs one GPU's memory, seconds of a first and a second call,
  peak memory per GPU, finiteness of E and A.

Results: ``throughput``, ``split`` and ``too_big`` ``.json`` (rows + metadata with the machine),
``.csv`` and ``.md`` in ``--out``; ``make`` writes ``make.json`` / ``make.csv`` (token counts
of each example) next to the model. Without a GPU every sub-command runs on the CPU with the
``tiny`` shape as a check of the script, not a measurement: ``make --device cpu``,
``throughput --device cpu`` (every rank on the CPU), ``split`` compares ``device=None`` with
``device_map="auto"`` (both the CPU there), ``too-big --max-memory cpu`` (no fits-check).

    export PYTHONPATH=src:runs/sx:.
    python -m benchmarks.bench_scaleout make --shape llama-8b --tokenizer runs/tok \\
        --examples 64 --prompt-tokens 2048 --answer-tokens 64 --out runs/scaleout/llama-8b
    python -m benchmarks.bench_scaleout throughput --model runs/scaleout/llama-8b \\
        --data runs/scaleout/llama-8b/examples.jsonl --nproc 2 --out runs/scaleout/tp \\
        -- --dtype bfloat16
    python -m benchmarks.bench_scaleout split --model runs/scaleout/llama-8b \\
        --data runs/scaleout/llama-8b/examples.jsonl --n 4 --out runs/scaleout
    python -m benchmarks.bench_scaleout too-big --tokenizer runs/tok --out runs/scaleout
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks._common import machine, write
from benchmarks.bench_gpu import WORDS, text_of

QUESTION = "What does the report say about the {}?"
QK_WEIGHTS = ("q_proj.weight", "k_proj.weight")
STD = 0.02  # the initializer_range of Llama configs: weights ~ N(0, 0.02²), norms 1


@dataclass(frozen=True)
class Shape:
    """A Llama shape; ``vocab`` None takes the tokenizer's size.

    ``qk_scale`` multiplies the q_proj and k_proj weights so that scores spread like a trained
    model's. After the RMSNorm a hidden state has unit-RMS entries, so with weights of std
    ``STD · s`` a query or key entry has std ``STD · s · √hidden`` and the attention logit
    ``q·k / √head_dim`` has std ``(STD · s)² · hidden``. ``s`` is chosen so that this is ≈ 10
    for the Llama shapes (8b: 0.02² · 2.5² · 4096 ≈ 10; 70b: 0.02² · 1.75² · 8192 ≈ 10); tiny
    keeps the ×8 of tests/_tiny_models.py (raw ``q·k`` of magnitude ≈ 10 there)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int | None
    max_positions: int
    rope_theta: float
    qk_scale: float

    def config(self, tokenizer: Any) -> Any:
        from transformers import LlamaConfig

        config = LlamaConfig(
            hidden_size=self.hidden,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            intermediate_size=self.intermediate,
            vocab_size=self.vocab or len(tokenizer),
            max_position_embeddings=self.max_positions,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
            initializer_range=STD,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        config._attn_implementation = "sdpa"
        return config


SHAPES = {
    "tiny": Shape(64, 2, 4, 2, 128, None, 4096, 10000.0, 8.0),
    "llama-8b": Shape(4096, 32, 32, 8, 14336, 128256, 131072, 500000.0, 2.5),
    "llama-70b-56l": Shape(8192, 56, 64, 8, 28672, 128256, 131072, 500000.0, 1.75),
}


# ---------------------------------------------------------------------------------------------
# Shared helpers


def cuda() -> bool:
    return torch.cuda.is_available()


def gpus() -> range:
    return range(torch.cuda.device_count() if cuda() else 0)


def sync_all() -> None:
    for i in gpus():
        torch.cuda.synchronize(i)


def reset_peaks() -> None:
    for i in gpus():
        torch.empty(0, device=f"cuda:{i}")  # the allocator of a device starts with its first use
        torch.cuda.reset_peak_memory_stats(i)


def peaks_mib() -> dict[str, float]:
    """Peak allocated memory of every GPU since :func:`reset_peaks`."""
    return {f"cuda:{i}": torch.cuda.max_memory_allocated(i) / 2**20 for i in gpus()}


def scale_qk(model: Any, factor: float) -> None:
    """Multiply the q_proj and k_proj weights by ``factor`` (see :class:`Shape`)."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(QK_WEIGHTS):
                param.mul_(factor)


def tokenizer_of(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def fmt(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {fmt(v)}" for k, v in value.items())
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def report(
    out: Path, name: str, rows: list[dict[str, Any]], summary: dict[str, Any], device: str
) -> None:
    """Write ``name.json`` / ``.csv`` (:func:`write`) and ``name.md`` into ``out``; print it."""
    write(out, name, rows, machine(device) | {"gpus": len(gpus())} | summary)
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(row[c]) for c in columns) + " |" for row in rows]
    lines += ["", *(f"- {key}: {fmt(value)}" for key, value in summary.items())]
    text = "\n".join(lines) + "\n"
    (out / f"{name}.md").write_text(text, encoding="utf-8")
    print(text, flush=True)


# ---------------------------------------------------------------------------------------------
# make


def build(shape: Shape, tokenizer: Any, dtype: torch.dtype, device: str) -> Any:
    """Random weights (the model's own init, then :func:`scale_qk`) built on ``device``."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(shape.config(tokenizer))
    finally:
        torch.set_default_dtype(previous)
    scale_qk(model, shape.qk_scale)
    return model.eval()


def example(tokenizer: Any, index: int, args: argparse.Namespace) -> dict[str, str]:
    """One synthetic record; every index has its own seeds, so every record differs."""
    seed = args.seed + 2 * index
    return {
        "id": f"ex-{index:05d}",
        "context": " ".join(text_of(tokenizer, args.prompt_tokens, seed)),
        "question": QUESTION.format(WORDS[index % len(WORDS)]),
        "answer": " ".join(text_of(tokenizer, args.answer_tokens, seed + 1)),
    }


def token_count(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def cmd_make(args: argparse.Namespace) -> None:
    tokenizer = tokenizer_of(args.tokenizer)
    start = time.perf_counter()
    model = build(SHAPES[args.shape], tokenizer, getattr(torch, args.dtype), args.device)
    built = time.perf_counter() - start
    print(f"built {args.shape} ({model.num_parameters() / 1e9:.2f} B) in {built:.1f} s", flush=True)
    model.save_pretrained(args.out)  # transformers 5 writes safetensors only
    tokenizer.save_pretrained(args.out)
    records = [example(tokenizer, i, args) for i in range(args.examples)]
    with (args.out / "examples.jsonl").open("w", encoding="utf-8") as file:
        file.writelines(json.dumps(record) + "\n" for record in records)
    rows: list[dict[str, Any]] = [
        {
            "id": r["id"],
            "context_tokens": token_count(tokenizer, r["context"]),
            "answer_tokens": token_count(tokenizer, r["answer"]),
        }
        for r in records
    ]
    meta = machine(args.device) | {
        "shape": args.shape,
        **asdict(SHAPES[args.shape]),
        "dtype": args.dtype,
        "parameters": model.num_parameters(),
        "build_s": built,
        "seconds": time.perf_counter() - start,
    }
    write(args.out, "make", rows, meta)
    mean = {k: np.mean([r[k] for r in rows]) for k in ("context_tokens", "answer_tokens")}
    print(
        f"{args.out}: model, tokenizer, {len(rows)} examples of {mean['context_tokens']:.0f} "
        f"context and {mean['answer_tokens']:.0f} answer tokens on average "
        f"({meta['seconds']:.1f} s)",
        flush=True,
    )


# ---------------------------------------------------------------------------------------------
# throughput


@dataclass
class HeadsRun:
    """One ``rcstat heads`` command: wall time, collect time (see the module notes), rates."""

    run: str
    processes: int
    wall_s: float
    collect_s: float
    examples: int
    failed: int
    examples_per_s_wall: float
    examples_per_s_collect: float


@dataclass
class Agreement:
    """The merged data-parallel heads.csv against the single run's."""

    same_rows: bool
    rows_one: int
    rows_dp: int
    max_abs_diff_expected: float
    max_abs_diff_upper: float


def heads_args(args: argparse.Namespace, out: Path, options: list[str]) -> list[str]:
    common = ["heads", "--dataset", "jsonl", "--data", str(args.data), "--model", str(args.model)]
    return [*common, "--out", str(out), *options, *args.extra]


def timed_command(command: list[str]) -> float:
    """Wall time of ``command``; a failure stops the benchmark."""
    print("$ " + shlex.join(command), flush=True)
    start = time.perf_counter()
    status = subprocess.run(command, check=False).returncode
    if status != 0:
        raise SystemExit(f"exit status {status}: {shlex.join(command)}")
    return time.perf_counter() - start


def example_log(path: Path) -> tuple[float, int, int]:
    """Sum of ``seconds``, analysed and failed examples of an ``examples.csv``."""
    import pandas as pd

    log = pd.read_csv(path, dtype=str, keep_default_na=False)
    ok = log["error"] == ""
    return float(pd.to_numeric(log["seconds"]).sum()), int(ok.sum()), int((~ok).sum())


def part_seconds(dp: Path) -> list[float]:
    """Collect time of each rank's part of a data-parallel run."""
    logs = sorted((dp / "parts").glob("*/examples.csv"))
    if not logs:
        raise SystemExit(
            f"no {dp}/parts/*/examples.csv: this rcstat's `heads` does not split its examples "
            "over torch.distributed ranks"
        )
    return [example_log(log)[0] for log in logs]


def heads_run(run: str, processes: int, wall: float, folder: Path, collect: float) -> HeadsRun:
    _, examples, failed = example_log(folder / "examples.csv")
    return HeadsRun(
        run, processes, wall, collect, examples, failed, examples / wall, examples / collect
    )


def agreement(one: Path, dp: Path) -> Agreement:
    from rcstat.heads.table import read_heads

    a, b = read_heads(one / "heads.csv"), read_heads(dp / "heads.csv")
    keys = ["example", "layer", "head"]
    same = len(a) == len(b) and a[keys].reset_index(drop=True).equals(
        b[keys].reset_index(drop=True)
    )
    both = a.merge(b, on=keys, suffixes=("_one", "_dp"))
    diff = {
        stat: float((both[f"{stat}_one"] - both[f"{stat}_dp"]).abs().max())
        for stat in ("expected", "upper")
    }
    return Agreement(same, len(a), len(b), diff["expected"], diff["upper"])


def cmd_throughput(args: argparse.Namespace) -> None:
    on_cpu = args.device == "cpu"
    if not on_cpu and args.nproc > len(gpus()):
        raise SystemExit(f"--nproc {args.nproc}: {len(gpus())} GPU(s) visible")
    one, dp = args.out / "one", args.out / "dp"
    for folder in (one, dp):
        if folder.exists():  # rcstat heads would resume there and skip what is done
            raise SystemExit(f"{folder} exists: remove it or choose another --out")
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(args.nproc)]
    rcstat = ["-m", "rcstat"]
    commands = {
        "one": [sys.executable, *rcstat, *heads_args(args, one, ["--device", args.device])],
        # each rank takes cuda:LOCAL_RANK itself; the CPU check puts every rank on the CPU
        "dp": [
            sys.executable,
            *torchrun,
            *rcstat,
            *heads_args(args, dp, ["--device", "cpu"] if on_cpu else []),
        ],
    }
    order = ["one", "dp"] if args.order == "one-first" else ["dp", "one"]
    wall = {name: timed_command(commands[name]) for name in order}
    parts = part_seconds(dp)
    runs = [
        heads_run("one", 1, wall["one"], one, example_log(one / "examples.csv")[0]),
        heads_run("dp", args.nproc, wall["dp"], dp, max(parts)),
    ]
    check = agreement(one, dp)
    summary = {
        "order": args.order,
        "extra_options": shlex.join(args.extra),
        "part_collect_s": parts,
        "speedup_wall": runs[1].examples_per_s_wall / runs[0].examples_per_s_wall,
        "speedup_collect": runs[1].examples_per_s_collect / runs[0].examples_per_s_collect,
        "target_speedup": 1.8,
        **asdict(check),
    }
    report(args.out, "throughput", [asdict(r) for r in runs], summary, args.device)


# ---------------------------------------------------------------------------------------------
# split


@dataclass
class Placed:
    """One placement of the model in ``split``."""

    placement: str
    devices: str
    seconds_per_example: float
    peak_mib: dict[str, float]


def analyze_timed(model: Any, tokenizer: Any, item: Any) -> tuple[Any, float]:
    from rcstat import analyze

    sync_all()
    start = time.perf_counter()
    result = analyze(
        model,
        tokenizer,
        context=item.context,
        question=item.question,
        answer=item.answer,
        question_placement="generation",
    )
    sync_all()
    return result, time.perf_counter() - start


def model_devices(model: Any) -> str:
    """The devices of ``model.hf_device_map`` (of its parameters when it has no map)."""
    mapped = getattr(model, "hf_device_map", None)
    values = mapped.values() if mapped else (p.device for p in model.parameters())
    return ",".join(sorted({str(v) for v in values}))


def run_placement(
    name: str, model_dir: Path, placement: dict[str, Any], items: list[Any]
) -> tuple[Placed, list[Any]]:
    """Load the model with ``placement``, analyse every item after one warm-up item."""
    from rcstat import load_model

    reset_peaks()
    model, tokenizer = load_model(model_dir, dtype="float32", **placement)
    devices = model_devices(model)
    print(f"{name}: {placement} on {devices}", flush=True)
    analyze_timed(model, tokenizer, items[0])
    timed = [analyze_timed(model, tokenizer, item) for item in items]
    seconds = sum(s for _, s in timed) / len(timed)
    print(f"{name}: {seconds:.3f} s per example", flush=True)
    return Placed(name, devices, seconds, peaks_mib()), [r for r, _ in timed]


def free_memory() -> None:
    gc.collect()  # accelerate's hooks keep the model in reference cycles
    if cuda():
        torch.cuda.empty_cache()


def differences(one: list[Any], split: list[Any]) -> dict[str, float]:
    """Largest absolute and relative (to the larger magnitude) differences of E and A."""
    found: dict[str, float] = {}
    for stat in ("expected", "upper"):
        a = np.stack([getattr(r, stat) for r in one])
        b = np.stack([getattr(r, stat) for r in split])
        gap = np.abs(a - b)
        scale = np.maximum(np.maximum(np.abs(a), np.abs(b)), np.finfo(np.float64).tiny)
        found[f"max_abs_diff_{stat}"] = float(gap.max())
        found[f"max_rel_diff_{stat}"] = float((gap / scale).max())
    return found


def cmd_split(args: argparse.Namespace) -> None:
    from rcstat.heads.collection import load_jsonl

    items = load_jsonl(args.data, limit=args.n)
    if cuda():
        placements: dict[str, dict[str, Any]] = {
            "one": {"device": "cuda:0"},
            "split": {"device_map": "auto"},
        }
    else:
        print("no GPU: both placements are the CPU (a check of the script)", flush=True)
        placements = {"one": {"device": None}, "split": {"device_map": "auto"}}
    rows, results = [], []
    for name, placement in placements.items():
        placed, found = run_placement(name, args.model, placement, items)
        free_memory()
        rows.append(asdict(placed))
        results.append(found)
    summary = {
        "examples": len(items),
        "prompt_len": results[0][0].prompt_len,
        "gen_len": results[0][0].gen_len,
        **differences(results[0], results[1]),
    }
    report(args.out, "split", rows, summary, "cuda" if cuda() else "cpu")


# ---------------------------------------------------------------------------------------------
# too-big


def device_of(name: str, device_map: dict[str, Any]) -> str:
    """The device ``device_map`` gives the parameter or buffer ``name`` (longest prefix)."""
    owners = [k for k in device_map if k == "" or name == k or name.startswith(k + ".")]
    if not owners:
        raise ValueError(f"{name} has no device in the device map")
    device = device_map[max(owners, key=len)]
    return f"cuda:{device}" if isinstance(device, int) else str(device)


def materialise(
    model: Any, device_map: dict[str, Any], dtype: torch.dtype, qk_scale: float
) -> dict[str, int]:
    """Random weights for a meta-initialised model, made on their mapped devices (the model's
    own init: N(0, STD²), norms 1, then :func:`scale_qk`); buffers (the rotary frequencies,
    real tensors under ``init_empty_weights``) are moved there. Returns bytes per device."""
    from accelerate.utils import set_module_tensor_to_device

    placed: dict[str, int] = {}
    torch.manual_seed(0)
    for name, param in list(model.named_parameters()):
        device = device_of(name, device_map)
        value = torch.empty(param.shape, dtype=dtype, device=device)
        if name.endswith("norm.weight"):
            value.fill_(1.0)
        else:
            value.normal_(0.0, STD)
        set_module_tensor_to_device(
            model, name, device, value=value, dtype=dtype, clear_cache=False
        )
        placed[device] = placed.get(device, 0) + value.numel() * value.element_size()
    for name, _ in list(model.named_buffers()):
        set_module_tensor_to_device(model, name, device_of(name, device_map), clear_cache=False)
    scale_qk(model, qk_scale)
    return placed


def memory_budget(text: str) -> dict[int | str, int | str]:
    """``--max-memory``: a budget for every visible GPU, or ``cpu`` (all of the RAM)."""
    if text == "cpu":
        return {"cpu": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")}
    if not cuda():
        raise SystemExit(f"--max-memory {text}: no GPU visible (use --max-memory cpu)")
    return {i: text for i in gpus()}


def place(
    shape: Shape, tokenizer: Any, dtype: torch.dtype, budget: str
) -> tuple[Any, dict[str, Any]]:
    """The meta-initialised model of ``shape`` and accelerate's map of it within ``budget``."""
    from accelerate import infer_auto_device_map, init_empty_weights
    from transformers import LlamaForCausalLM

    with init_empty_weights():
        model = LlamaForCausalLM(shape.config(tokenizer))
    device_map = infer_auto_device_map(
        model,
        max_memory=memory_budget(budget),
        no_split_module_classes=["LlamaDecoderLayer"],
        dtype=dtype,
    )
    used = set(device_map.values())
    if not used <= ({"cpu"} if budget == "cpu" else set(gpus())):
        raise SystemExit(f"--max-memory {budget}: the model does not fit the GPUs ({used})")
    return model, dict(device_map)


def sizes(model: Any, dtype: torch.dtype, budget: str) -> dict[str, Any]:
    """The weights' size, and against one GPU's memory (not in the CPU check)."""
    param_bytes = model.num_parameters() * dtype.itemsize
    found: dict[str, Any] = {"parameters": model.num_parameters(), "param_gib": param_bytes / 2**30}
    if budget != "cpu":
        total = torch.cuda.get_device_properties(0).total_memory
        found |= {"gpu_total_gib": total / 2**30, "fits_one_gpu": param_bytes < total}
        if param_bytes < total:
            print("warning: the weights fit one GPU of this machine", flush=True)
    return found


def cmd_too_big(args: argparse.Namespace) -> None:
    from accelerate import dispatch_model

    from rcstat.heads.collection import JsonlExample

    shape, dtype = SHAPES[args.shape], getattr(torch, args.dtype)
    tokenizer = tokenizer_of(args.tokenizer)
    start = time.perf_counter()
    model, device_map = place(shape, tokenizer, dtype, args.max_memory)
    summary = {"shape": args.shape, "dtype": args.dtype, "max_memory": args.max_memory}
    summary |= sizes(model, dtype, args.max_memory)
    print(f"{args.shape}: {summary['param_gib']:.1f} GiB of weights over {device_map}", flush=True)
    placed = materialise(model, device_map, dtype, shape.qk_scale)
    model = dispatch_model(model, device_map).eval()
    summary["build_s"] = time.perf_counter() - start
    print(f"materialised and dispatched in {summary['build_s']:.1f} s", flush=True)
    resident = {f"cuda:{i}": torch.cuda.memory_allocated(i) / 2**20 for i in gpus()}
    reset_peaks()
    item = JsonlExample(
        id="too-big",
        context=" ".join(text_of(tokenizer, args.prompt_tokens, args.seed)),
        question=QUESTION.format("rivers"),
        answer=" ".join(text_of(tokenizer, args.answer_tokens, args.seed + 1)),
    )
    # twice: the first call includes one-time work (kernel compilation, allocator growth)
    (_, first), (result, second) = (analyze_timed(model, tokenizer, item) for _ in range(2))
    print(f"analyze: {first:.2f} s, then {second:.2f} s", flush=True)
    peaks = peaks_mib()
    summary |= {
        "prompt_len": result.prompt_len,
        "gen_len": result.gen_len,
        "first_s": first,
        "second_s": second,
        "finite": bool(np.isfinite(result.expected).all() and np.isfinite(result.upper).all()),
    }
    rows = [
        {
            "device": device,
            "weights_gib": placed[device] / 2**30,
            "resident_mib": resident.get(device),
            "peak_mib": peaks.get(device),
        }
        for device in sorted(placed)
    ]
    report(args.out, "too_big", rows, summary, "cpu" if args.max_memory == "cpu" else "cuda")


# ---------------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    main_parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = main_parser.add_subparsers(dest="command", required=True)

    make = sub.add_parser("make", help="save a random-weight model and examples.jsonl")
    make.add_argument("--shape", default="llama-8b", choices=["llama-8b", "tiny"])
    make.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    make.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    make.add_argument("--examples", type=int, default=64)
    make.add_argument("--prompt-tokens", type=int, default=2048)
    make.add_argument("--answer-tokens", type=int, default=64)

    throughput = sub.add_parser("throughput", help="rcstat heads: one process vs data-parallel")
    throughput.add_argument("--nproc", type=int, default=2)
    throughput.add_argument("--device", default="cuda:0", help="of the single run; cpu: both")
    throughput.add_argument("--order", default="one-first", choices=["one-first", "dp-first"])

    split = sub.add_parser("split", help="analyze on one GPU vs split over the GPUs")
    split.add_argument("--n", type=int, default=4)

    too_big = sub.add_parser("too-big", help="analyze with a model larger than one GPU")
    too_big.add_argument("--shape", default="llama-70b-56l", choices=list(SHAPES))
    too_big.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    too_big.add_argument("--max-memory", default="56GiB", help="budget per GPU, or cpu")
    too_big.add_argument("--prompt-tokens", type=int, default=2048)
    too_big.add_argument("--answer-tokens", type=int, default=64)

    for command in (throughput, split):
        command.add_argument("--model", type=Path, required=True, help="a `make` folder")
        command.add_argument("--data", type=Path, required=True, help="its examples.jsonl")
    for command in (make, too_big):
        command.add_argument("--tokenizer", type=Path, default=Path("runs/tok"))
        command.add_argument("--seed", type=int, default=0)
    for command in (make, throughput, split, too_big):
        command.add_argument("--out", type=Path, required=True)
    return main_parser


def main() -> None:
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser().parse_args(argv[:cut])
    args.extra = argv[cut + 1 :]
    if args.extra and args.command != "throughput":
        raise SystemExit("options after -- go to rcstat heads: throughput only")
    args.out.mkdir(parents=True, exist_ok=True)
    commands = {
        "make": cmd_make,
        "throughput": cmd_throughput,
        "split": cmd_split,
        "too-big": cmd_too_big,
    }
    commands[args.command](args)


if __name__ == "__main__":
    main()
