"""The service's API (:mod:`rcstat.serve.app`) on the tiny model, in process (TestClient).

The oracle is the command: ``POST /v1/ground`` answers ``GroundResult.document()`` of
``rcstat.commands.ground.run`` (and the ``--json`` object of ``rcstat ground``, but ``out``)
for the same texts and options, also when many requests arrive at once and share batches; a
bad request gets the command line's own message before any model work.
"""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from rcstat import cli
from rcstat.commands.attribute import AttributeConfig
from rcstat.commands.attribute import run as run_attribute
from rcstat.commands.ground import GroundConfig
from rcstat.commands.ground import run as run_ground
from rcstat.evaluation.bench.common import load
from rcstat.serve.app import create_app
from tests._serve_helpers import (
    CONTEXT,
    PAIRS,
    QUESTION,
    RESPONSE,
    save_profile,
    serve_config,
    wait_ready,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
TestClient = pytest.importorskip(
    "fastapi.testclient", reason="needs FastAPI (pip install 'rcstat[serve]')"
).TestClient


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_profile(tmp_path_factory.mktemp("profile"))


def _expected(model_dir: Path, profile: Path, body: dict[str, Any]) -> dict[str, Any]:
    """``GroundResult.document()`` of the library call for the request ``body``."""
    texts = {k: body.get(k) for k in ("context", "response", "question")}
    options = {k: v for k, v in body.items() if k not in texts}
    if options.pop("zero_shot", False):
        options["detector"] = False
    config = GroundConfig.from_dict(
        {
            **texts,
            "model": str(model_dir),
            "options": {"profile": str(profile), "top_k": 5, **options},
        }
    )
    return run_ground(config, loader=load).document()


@pytest.fixture(scope="module")
def client(model_dir: Path, profile: Path) -> Any:
    app = create_app(serve_config(model_dir, profile, max_wait_ms=50.0, max_batch=6))
    with TestClient(app) as c:
        wait_ready(c)
        yield c


BODIES = [
    {"context": CONTEXT, "response": RESPONSE, "question": QUESTION},
    {"context": CONTEXT, "response": RESPONSE, "question": None, "quantile": 0.3},
    {"context": CONTEXT, "response": RESPONSE, "threshold": 0.99, "top_k": 3},
    {"context": CONTEXT, "response": RESPONSE, "fraction": 0.25, "zero_shot": True},
]


@pytest.mark.parametrize("body", BODIES)
def test_ground_answers_the_document_of_the_command(client, model_dir, profile, body) -> None:  # type: ignore[no-untyped-def]
    answer = client.post("/v1/ground", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json() == _expected(model_dir, profile, body)


def test_ground_answers_what_rcstat_ground_json_prints(
    client, model_dir, profile, tmp_path, capsys
) -> None:  # type: ignore[no-untyped-def]
    argv = ["ground", "--model", str(model_dir), "--profile", str(profile), "--top-k", "5"]
    texts = ["--context", CONTEXT, "--response", RESPONSE, "--question", QUESTION]
    code = cli.main([*argv, *texts, "--threshold", "0.99", "--json", "--out", str(tmp_path / "o")])
    printed = json.loads(capsys.readouterr().out)
    assert code == 1  # unsupported at this threshold: there are spans to compare
    body = {"context": CONTEXT, "response": RESPONSE, "question": QUESTION, "threshold": 0.99}
    answer = client.post("/v1/ground", json=body).json()
    assert printed.pop("out") == str(tmp_path / "o")
    assert answer.pop("out") is None  # the service writes no folder
    assert answer == printed
    assert answer["spans"]


def test_concurrent_requests_each_get_their_own_answer(client, model_dir, profile) -> None:  # type: ignore[no-untyped-def]
    bodies = [{"context": c, "response": r, "question": q} for c, r, q in PAIRS]
    alone = [client.post("/v1/ground", json=b).json() for b in bodies]  # one at a time
    batcher = client.app.state.batcher
    before = len(batcher.batches)
    with ThreadPoolExecutor(len(bodies)) as pool:
        together = list(pool.map(lambda b: client.post("/v1/ground", json=b), bodies))
    assert [a.status_code for a in together] == [200] * len(bodies)
    assert [a.json() for a in together] == alone
    assert max(batcher.batches[before:]) > 1  # requests shared batches
    assert alone[0] == _expected(model_dir, profile, bodies[0])
    assert len({json.dumps(a["sentences"]) for a in alone}) == len(alone)  # distinct answers


CLI_MESSAGES = [
    ({"context": CONTEXT}, "ground needs --context (or --context-file) and --response"),
    ({"context": " ", "response": RESPONSE}, "--context is empty or whitespace only"),
    ({"context": CONTEXT, "response": "?!"}, "the response has no word"),
    ({"context": CONTEXT, "response": RESPONSE, "quantile": 2}, "--quantile must be in (0, 1)"),
    ({"context": CONTEXT, "response": RESPONSE, "top_k": -1}, "--top-k"),
    ({"context": CONTEXT, "response": RESPONSE, "language": "xx"}, "--language"),
    ({"context": CONTEXT, "response": RESPONSE, "max_chars": 10**9}, "--max-chars 1,000,000,000"),
    ({"context": CONTEXT * 3, "response": RESPONSE, "max_chars": 100}, "--max-chars"),
    ({"context": CONTEXT, "response": RESPONSE, "quantile": "x"}, "quantile: Input should be"),
    ({"context": CONTEXT, "response": RESPONSE, "profile": "/etc"}, "profile: Extra inputs"),
]


@pytest.mark.parametrize(("body", "message"), CLI_MESSAGES)
def test_bad_input_is_refused_with_the_cli_message_before_model_work(  # type: ignore[no-untyped-def]
    client, body, message
) -> None:
    batcher = client.app.state.batcher
    before = len(batcher.batches)
    answer = client.post("/v1/ground", json=body)
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert message in error and "\n" not in error
    assert len(batcher.batches) == before  # nothing reached the worker


def test_cli_gives_the_same_lines(model_dir, profile, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    app = create_app(serve_config(model_dir, profile), log=lambda line: None)
    with TestClient(app) as c:
        wait_ready(c)
        capsys.readouterr()
        for body, _ in [*CLI_MESSAGES[:6], CLI_MESSAGES[7]]:  # those the command refuses
            argv = ["ground", "--model", str(model_dir), "--profile", str(profile)]
            argv += ["--top-k", "5", "--out", str(tmp_path / "out")]
            for k, v in body.items():
                argv += [f"--{k.replace('_', '-')}", str(v)]
            assert cli.main(argv) == 2
            line = capsys.readouterr().err.strip()
            assert line == "error: " + c.post("/v1/ground", json=body).json()["error"]


def test_a_response_over_its_token_limit_is_refused(client) -> None:  # type: ignore[no-untyped-def]
    body = {"context": CONTEXT, "response": RESPONSE * 4, "max_response_tokens": 5}
    answer = client.post("/v1/ground", json=body)
    assert answer.status_code == 422 and "max_response_tokens" in answer.json()["error"]


def test_attribute_answers_the_attribution_with_the_best_span(client, model_dir) -> None:  # type: ignore[no-untyped-def]
    body = {"context": CONTEXT, "response": RESPONSE, "question": QUESTION, "top_k": 5}
    answer = client.post("/v1/attribute", json=body)
    assert answer.status_code == 200, answer.text
    got = answer.json()
    config = AttributeConfig(context=CONTEXT, question=QUESTION, answer=RESPONSE, top_k=5)
    config.model = str(model_dir)
    expected = run_attribute(config, loader=load).attribution.to_dict()
    for unit in got["units"]:
        best = unit.pop("best")
        k = unit["attributed"]
        assert best == {**got["spans"][k], "score": unit["scores"][k]}
        assert max(unit["scores"]) == unit["scores"][k]
    assert got == expected
    assert len(got["units"]) == 2 and len(got["spans"]) == 3
    missing = client.post("/v1/attribute", json={"context": CONTEXT})
    assert missing.status_code == 422 and "response" in missing.json()["error"]


def test_model_health_docs_and_page(client) -> None:  # type: ignore[no-untyped-def]
    assert client.get("/health").json() == {"status": "ok", "waiting": 0}
    info = client.get("/v1/model").json()
    assert info["threshold"] == 0.05 and info["profile"]["shape"] == [3, 4]
    docs = client.get("/docs")
    assert docs.status_code == 200 and "/openapi.json" in docs.text
    # offline: every file the page loads is the service's own
    loaded = re.findall(r'(?:src|href)=["\'\s]*([^"\'\s>]+)', docs.text)
    loaded += re.findall(r"url: ?'([^']+)'", docs.text)
    assert loaded and not [u for u in loaded if u.startswith(("http:", "https:", "//"))]
    for url in (u for u in loaded if u.startswith("/docs-assets/")):
        assert client.get(url).status_code == 200, url
    schema = client.get("/openapi.json").json()
    assert {"/v1/ground", "/v1/attribute", "/health", "/v1/model"} <= set(schema["paths"])
    page = client.get("/").text
    assert "<textarea" in page and "http://" not in page and "https://" not in page


def test_health_is_503_until_the_model_is_loaded(model_dir, profile) -> None:  # type: ignore[no-untyped-def]
    gate = threading.Event()

    def slow(model: str | None, devices: Any) -> Any:
        gate.wait(30)
        return load(model, devices)

    with TestClient(create_app(serve_config(model_dir, profile), loader=slow)) as c:
        early = c.get("/health")
        assert early.status_code == 503 and early.headers["retry-after"] == "1"
        assert c.post("/v1/ground", json=BODIES[0]).status_code == 503
        gate.set()
        wait_ready(c)
        assert c.post("/v1/ground", json=BODIES[0]).status_code == 200


def _until(condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_full_queue_answers_503_at_once(model_dir, profile) -> None:  # type: ignore[no-untyped-def]
    config = serve_config(model_dir, profile, max_queue=2, max_batch=1, max_wait_ms=0.0)
    app = create_app(config)
    gate = threading.Event()
    with TestClient(app) as c:
        wait_ready(c)
        batcher = c.app.state.batcher
        work = batcher._work
        batcher._work = lambda jobs: (gate.wait(30), work(jobs))
        with ThreadPoolExecutor(3) as pool:
            first = pool.submit(c.post, "/v1/ground", json=BODIES[0])
            _until(lambda: not batcher.waiting and len(batcher.batches) == 1)  # held
            queued = [pool.submit(c.post, "/v1/ground", json=BODIES[0]) for _ in range(2)]
            _until(lambda: batcher.waiting == 2)
            started = time.perf_counter()
            full = c.post("/v1/ground", json=BODIES[0])
            took = time.perf_counter() - started
            gate.set()
            answers = [first.result(), *(q.result() for q in queued)]
        assert full.status_code == 503 and full.headers["retry-after"] == "1"
        assert "busy" in full.json()["error"]
        assert took < 0.05, took
        assert [a.status_code for a in answers] == [200, 200, 200]


def test_token_body_limit_and_one_log_line_per_request(model_dir, profile) -> None:  # type: ignore[no-untyped-def]
    lines: list[str] = []
    config = serve_config(model_dir, profile, token="s3cret", max_body_bytes=2048)
    with TestClient(create_app(config, log=lines.append)) as c:
        wait_ready(c)
        assert c.post("/v1/ground", json=BODIES[0]).status_code == 401
        bad = c.post("/v1/ground", json=BODIES[0], headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401 and bad.headers["www-authenticate"] == "Bearer"
        assert c.get("/v1/model").status_code == 401
        auth = {"Authorization": "Bearer s3cret"}
        assert c.post("/v1/ground", json=BODIES[0], headers=auth).status_code == 200
        big = {"context": "word " * 1000, "response": RESPONSE}
        too_big = c.post("/v1/ground", json=big, headers=auth)
        assert too_big.status_code == 413 and "at most 2,048" in too_big.json()["error"]
        assert c.get("/").status_code == 200  # the page itself needs no token
    requests = [line for line in lines if " /" in line]
    assert any(line.endswith("ms") and "POST /v1/ground 401" in line for line in requests)
    assert sum("POST /v1/ground" in line for line in requests) == 4
    assert all("\n" not in line for line in lines)


def test_a_profile_object_passed_in_python_serves_as_its_file(client, profile, model_dir) -> None:  # type: ignore[no-untyped-def]
    from rcstat.grounding import HeadProfile
    from rcstat.grounding.options import GroundingOptions

    config = serve_config(model_dir, profile)
    config.options = GroundingOptions(profile=HeadProfile.load(profile), top_k=5)
    with TestClient(create_app(config, log=lambda line: None)) as c:
        wait_ready(c)
        for body in BODIES[:2]:
            answer = c.post("/v1/ground", json=body)
            assert answer.status_code == 200, answer.text
            assert answer.json() == client.post("/v1/ground", json=body).json()
