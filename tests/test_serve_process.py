"""``rcstat serve`` as a real uvicorn process on the tiny model: it answers, logs one line per
request on standard error, and SIGTERM lets the requests in flight finish before it exits 0."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests._serve_helpers import PAIRS, save_profile, wait_ready

httpx = pytest.importorskip("httpx", reason="needs httpx and FastAPI (pip install 'rcstat[serve]')")
pytest.importorskip("fastapi", reason="needs FastAPI (pip install 'rcstat[serve]')")

pytest.importorskip("uvicorn", reason="needs uvicorn (pip install 'rcstat[serve]')")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_sigterm_drains_the_requests_in_flight_and_exits_0(model_dir: Path, tmp_path: Path) -> None:
    port = _free_port()
    profile = save_profile(tmp_path)
    command = [sys.executable, "-m", "rcstat", "serve", "--model", str(model_dir)]
    command += ["--profile", str(profile), "--port", str(port), "--max-batch", "1"]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            deadline = time.monotonic() + 120
            while True:  # the port opens once the app started
                try:
                    wait_ready(client, timeout=120)
                    break
                except httpx.TransportError:
                    assert server.poll() is None, server.stderr.read() if server.stderr else ""
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
            bodies = [{"context": c * 20, "response": r, "question": q} for c, r, q in PAIRS[:12]]

            def post(body: dict[str, object]) -> tuple[httpx.Response, float]:
                answer = client.post("/v1/ground", json=body)
                return answer, time.monotonic()

            with ThreadPoolExecutor(len(bodies)) as pool:
                pending = [pool.submit(post, b) for b in bodies]
                while client.get("/health").json()["waiting"] < len(bodies) - 1:
                    assert time.monotonic() < deadline + 60  # all received: 1 runs, 11 wait
                    time.sleep(0.005)
                server.send_signal(signal.SIGTERM)
                signalled = time.monotonic()
                done = [p.result() for p in pending]
        code = server.wait(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
    err = server.stderr.read() if server.stderr else ""
    answers = [answer for answer, _ in done]
    assert [a.status_code for a in answers] == [200] * len(bodies), err
    assert any(at > signalled for _, at in done)  # some were in flight at the signal
    assert all(a.json()["verdict"] in ("supported", "unsupported") for a in answers)
    assert code == 0, err
    logged = [line for line in err.splitlines() if "POST /v1/ground 200" in line]
    assert len(logged) == len(bodies), err


def test_a_model_that_cannot_serve_exits_2_with_one_error_line(
    model_dir: Path, tmp_path: Path
) -> None:
    import numpy as np

    from rcstat.grounding import HeadProfile

    values = np.full((2, 2), 0.5)  # the tiny model has 3 layers x 4 heads
    wrong = HeadProfile("other", values, threshold=0.5, quantile=0.1, copy_values=values)
    profile = wrong.save(tmp_path / "wrong.json")
    command = [sys.executable, "-m", "rcstat", "serve", "--model", str(model_dir)]
    command += ["--profile", str(profile), "--port", str(_free_port())]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "head profile is for 2 layers x 2 heads" in errors[0]
