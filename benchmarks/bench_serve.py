"""``rcstat serve`` under load: N concurrent clients vs one request at a time (ratio in one run).

The script starts the service in a second process (itself with ``--role server``: the default
model, or random weights of Llama-3.1-8B shapes on a GPU with ``--model llama-8b``), waits for
``/health``, then

1. **one at a time**: one client sends each of ``--pairs`` RAGTruth-slice pairs once, in turn
   (each answer is that input's single-request result; requests per second = the baseline);
2. **concurrent**: ``--clients`` asyncio clients (httpx) each send ``--requests`` requests, the
   pairs in rotation; throughput, p50/p95/p99 latency, errors, and every answer compared with
   the single-request result of its input (``differ``: nothing lost, nothing mixed);
3. **full queue**: ``max_queue + max_batch + 16`` requests at once; the latency of the 503s.

    python -m benchmarks.bench_serve --clients 16 --requests 2
    python -m benchmarks.bench_serve --clients 64 --requests 4
    python -m benchmarks.bench_serve --pick contexts --pairs 48 --clients 64 --requests 4 \\
        --tolerance 1e-4
    python -m benchmarks.bench_serve --model llama-8b --model-dir DIR --device cuda \\
        --clients 64 --requests 8 --batch-tokens 16384 --tolerance 1e-4

On a CPU each answer must equal its single-request result exactly (one pair a forward pass,
the default there) unless answers of one context meet in a batch (``--pick contexts``): they
share the prompt's pass and, like several pairs a pass (``--batch-tokens``, the default on a
GPU), agree up to floating-point rounding: compare with ``--tolerance``. The one-at-a-time
phase already pays the service's own costs (HTTP, JSON, the queue), so the ratio is that of
batching alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx


def _server(args: argparse.Namespace) -> None:
    """The service, in this process (``--role server``)."""
    import torch

    from benchmarks.bench_heads import build
    from rcstat.grounding import HeadProfile
    from rcstat.grounding.options import GroundingOptions
    from rcstat.serve.app import run
    from rcstat.serve.config import ServeConfig

    model, tokenizer = build(args.model, args.model_dir, args.device)
    options = GroundingOptions()
    if args.model != "default":  # random shapes: a random profile of them, zero-shot
        layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
        generator = torch.Generator().manual_seed(0)
        values, copy = (torch.rand(layers, heads, generator=generator).numpy() for _ in "vc")
        profile = HeadProfile("random", values, threshold=0.5, quantile=0.1, copy_values=copy)
        path = profile.save(Path(tempfile.mkdtemp()) / "profile.json")
        options = GroundingOptions(profile=path, detector=False)
    config = ServeConfig(
        port=args.port,
        max_queue=args.max_queue,
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        batch_tokens=args.batch_tokens,
        max_body_bytes=10_000_000,
        options=options,
    )
    sys.exit(run(config, loader=lambda *_: (model, tokenizer)))


def same(a: Any, b: Any, tolerance: float) -> bool:
    """``a == b``, numbers within ``tolerance`` (relative; 0: exact) — the check of an answer
    against the single-request result (several pairs a pass on a GPU agree up to rounding)."""
    if tolerance == 0:
        return bool(a == b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], tolerance) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, tolerance) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= tolerance * max(1.0, abs(a), abs(b))
    return bool(a == b)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


async def _one_at_a_time(url: str, bodies: list[dict[str, Any]]) -> tuple[list[Any], float]:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await client.post("/v1/ground", json=bodies[0])  # warm-up
        started = time.perf_counter()
        answers = [(await client.post("/v1/ground", json=b)).json() for b in bodies]
        return answers, time.perf_counter() - started


async def _concurrent(
    url: str, bodies: list[dict[str, Any]], clients: int, requests: int
) -> tuple[list[tuple[int, int, Any, float]], float]:
    """``clients`` clients taking the next request of ``clients · requests`` in turn (the
    pairs in rotation, in their order: a pool working through a data set); (pair, status,
    answer, seconds) of every request."""
    results: list[tuple[int, int, Any, float]] = []
    limits = httpx.Limits(max_connections=clients + 8)
    queue = iter(range(clients * requests))
    async with httpx.AsyncClient(base_url=url, timeout=1800, limits=limits) as client:

        async def one_client() -> None:
            for taken in queue:
                k = taken % len(bodies)
                began = time.perf_counter()
                answer = await client.post("/v1/ground", json=bodies[k])
                took = time.perf_counter() - began
                results.append((k, answer.status_code, answer.json(), took))

        started = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(clients)))
        return results, time.perf_counter() - started


async def _full_queue(url: str, body: dict[str, Any], count: int) -> list[float]:
    """Fill the queue with ``count`` requests at once, then time 10 more, one at a time: the
    seconds each took to be answered 503."""
    limits = httpx.Limits(max_connections=count + 8)
    async with httpx.AsyncClient(base_url=url, timeout=1800, limits=limits) as client:
        flood = [asyncio.create_task(client.post("/v1/ground", json=body)) for _ in range(count)]
        pending, busy, deadline = set(flood), 0, time.monotonic() + 30
        while busy < count // 8 and pending and time.monotonic() < deadline:  # the queue is full
            done, pending = await asyncio.wait(pending, timeout=1, return_when="FIRST_COMPLETED")
            busy += sum(t.result().status_code == 503 for t in done if not t.exception())
        probes = []
        for _ in range(10):
            began = time.perf_counter()
            try:
                answer = await client.post("/v1/ground", json=body, timeout=2)
            except httpx.TimeoutException:  # taken: the queue was no longer full
                continue
            if answer.status_code == 503:
                probes.append(time.perf_counter() - began)
        for task in pending:
            task.cancel()
        return probes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", default="bench", choices=["bench", "server"])
    parser.add_argument("--model", default="default", choices=["default", "random", "llama-8b"])
    parser.add_argument("--model-dir", default=None, help="tokenizer (+ config for random)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--pairs", type=int, default=16, help="distinct RAGTruth-slice inputs")
    parser.add_argument(
        "--pick",
        default="spread",
        choices=["spread", "contexts"],
        help="one response of each of --pairs contexts (spread), or every response of "
        "--pairs / 6 contexts (contexts: answers that share a prompt share its pass)",
    )
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=2, help="requests of each client")
    parser.add_argument("--max-queue", type=int, default=64)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--batch-tokens", type=int, default=None)
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.0,
        help="relative tolerance of the numbers when an answer is compared with the "
        "single-request result (0: exact; e.g. 1e-4 with --batch-tokens on a GPU)",
    )
    parser.add_argument("--no-full-queue", action="store_true", help="skip phase 3")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    if args.role == "server":
        return _server(args)
    if args.port == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            args.port = int(s.getsockname()[1])
    argv = [a for a in sys.argv[1:] if not a.startswith("--port")]
    command = [sys.executable, "-m", "benchmarks.bench_serve", *argv, "--role", "server"]
    args.out.mkdir(parents=True, exist_ok=True)
    log = (args.out / "serve.log").open("w")  # the service's line per request
    server = subprocess.Popen([*command, "--port", str(args.port)], stderr=log)
    url = f"http://127.0.0.1:{args.port}"
    try:
        _wait(url, server)
        report = asyncio.run(_bench(url, args))
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    log.close()
    print(json.dumps(report, indent=1))
    name = f"serve_{args.model}_{args.device.split(':')[0]}_{args.clients}x{args.requests}.json"
    (args.out / name).write_text(json.dumps(report, indent=1))


def _wait(url: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited with {server.returncode}")
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise SystemExit("the server did not become ready")


async def _bench(url: str, args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks._common import ragtruth_pairs

    bodies = [
        {"context": c, "response": r, "question": q}
        for c, r, q in ragtruth_pairs(args.pairs, args.pick)
    ]
    alone, alone_s = await _one_at_a_time(url, bodies)
    results, together_s = await _concurrent(url, bodies, args.clients, args.requests)
    errors = sum(status != 200 for _, status, _, _ in results)
    differ = sum(
        status == 200 and not same(answer, alone[k], args.tolerance)
        for k, status, answer, _ in results
    )
    latencies = [took for *_, took in results]
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python -m benchmarks.bench_serve " + " ".join(sys.argv[1:]),
        "model": args.model,
        "device": args.device,
        "pairs": len(bodies),
        "pick": args.pick,
        "one_at_a_time_rps": len(bodies) / alone_s,
        "clients": args.clients,
        "requests": len(results),
        "concurrent_rps": len(results) / together_s,
        "speedup": (len(results) / together_s) / (len(bodies) / alone_s),
        "p50_s": _percentile(latencies, 50),
        "p95_s": _percentile(latencies, 95),
        "p99_s": _percentile(latencies, 99),
        "errors": errors,
        "differ": differ,
        "max_batch": args.max_batch,
        "max_wait_ms": args.max_wait_ms,
        "batch_tokens": args.batch_tokens,
        "tolerance": args.tolerance,
    }
    if not args.no_full_queue:
        shortest = min(bodies, key=lambda b: len(b["context"]) + len(b["response"]))
        busy = await _full_queue(url, shortest, args.max_queue + args.max_batch + 16)
        report["full_queue_503_of_10"] = len(busy)
        report["full_queue_503_max_ms"] = max(busy, default=float("nan")) * 1000
        report["full_queue_503_median_ms"] = (
            statistics.median(busy) * 1000 if busy else float("nan")
        )
    return report


if __name__ == "__main__":
    main()
