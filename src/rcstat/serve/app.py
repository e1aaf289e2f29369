"""The service: :func:`create_app` (the FastAPI application) and :func:`run` (uvicorn).

Endpoints: ``GET /`` (the page, :mod:`.page`), ``GET /health`` (200 once the model is loaded,
503 before), ``GET /v1/model``, ``POST /v1/ground`` (the object of ``rcstat ground --json``),
``POST /v1/attribute`` (:func:`~rcstat.serve.worker.attribution_document`); the OpenAPI schema
at ``/docs``. A request is checked before it is queued — the options by
:meth:`ServeConfig.request_options`, the texts by :meth:`GroundConfig.check` — and a refusal is
``422 {"error": "<the line rcstat ground prints>"}``. Then it waits in the
:class:`~rcstat.serve.batcher.Batcher`'s bounded queue (full: 503 with ``Retry-After``, at
once). With a token, ``/v1/`` needs ``Authorization: Bearer <token>`` (401). A body over
``max_body_bytes`` is 413, one without a length 411. Each request is one line on ``log``
(default: standard error). On SIGTERM uvicorn stops accepting, finishes the requests in flight,
then the worker finishes its queue, and :func:`run` returns. FastAPI, pydantic and uvicorn
are imported by :func:`create_app` and :func:`run` only (the ``serve`` extra), so that the
package imports without them.
"""

import asyncio
import hmac
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, cast

from rcstat.commands.attribute import AttributeConfig
from rcstat.commands.ground import GroundConfig
from rcstat.defaults import DEFAULT_TOP_K
from rcstat.serve.api_docs import add_api_docs
from rcstat.serve.batcher import Batcher, QueueFullError
from rcstat.serve.config import REQUEST_OPTIONS, ServeConfig
from rcstat.serve.page import PAGE
from rcstat.serve.worker import OptionsKey, Worker

if TYPE_CHECKING:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response

    from rcstat.evaluation.bench.common import Loader

__all__ = ["create_app", "request_models", "run"]

#: The instruction an attribution reads when a request has no question (the grounder's).
NO_QUESTION = "Write a response based on the text above."


def request_models() -> tuple[type, type]:
    """The bodies of ``POST /v1/ground`` and ``POST /v1/attribute`` (pydantic models; made
    here, not at import, so that the package imports without the ``serve`` extra)."""
    from pydantic import BaseModel, ConfigDict, create_model

    class TextsRequest(BaseModel):
        """The texts every request carries (checked by the command's config, so optional here);
        any other name is refused."""

        model_config = ConfigDict(extra="forbid")
        context: str | None = None
        response: str | None = None
        question: str | None = None

    # the options a request may set, as REQUEST_OPTIONS lists them (their one home)
    options: dict[str, Any] = {name: (kind | None, None) for name, kind in REQUEST_OPTIONS.items()}
    GroundRequest = create_model(
        "GroundRequest",
        __base__=TextsRequest,
        __doc__=(  # the schema's description, line break included
            "``POST /v1/ground``: the texts of ``rcstat ground`` and its options by name (each as "
            "its\nflag: ``top_k`` is ``--top-k``; ``zero_shot`` is ``--zero-shot``; None: the "
            "service's)."
        ),
        **options,
    )

    class AttributeRequest(TextsRequest):
        """``POST /v1/attribute``: the response attributed to the context, sentence by sentence
        (the options of ``rcstat attribute``; None: its defaults, ``top_k`` at most the model's
        heads)."""

        granularity: str | None = None
        top_k: int | None = None
        ranking: str | None = None
        statistic: str | None = None
        span_score: str | None = None
        language: str | None = None

    return GroundRequest, AttributeRequest


def _error(status: int, message: str, **headers: str) -> "JSONResponse":
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": " ".join(message.split())}, status_code=status, headers=headers)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def create_app(
    config: ServeConfig,
    *,
    loader: "Loader | None" = None,
    log: Callable[[str], None] | None = None,
) -> "FastAPI":
    """The service of ``config`` (checked again): the model loads on the worker thread when
    the application starts (``loader`` as for every command), the worker stops when it ends;
    ``log`` gets one line per request."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import HTMLResponse, JSONResponse, Response

    config.check()
    GroundRequest, AttributeRequest = request_models()
    say = log or _stderr
    retry = {"Retry-After": str(config.retry_after)}
    worker = Worker(config, loader)
    state: dict[str, Batcher] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher = Batcher(
            worker.work,
            max_queue=config.max_queue,
            max_batch=config.max_batch,
            max_wait=config.max_wait_ms / 1000,
            start=worker.load,
        )
        state["batcher"] = batcher
        app.state.batcher = batcher
        watch = asyncio.create_task(loaded(batcher))
        try:
            yield
        finally:
            watch.cancel()
            await asyncio.to_thread(batcher.close)  # the queue drains first

    async def loaded(batcher: Batcher) -> None:
        """Say when the model is loaded, or why not (then ``app.state.on_failure()``)."""
        await asyncio.to_thread(batcher.ready.wait)
        if batcher.failed is None:
            say(f"model loaded: {worker.info.get('model')}")
            return
        say(f"error: the model could not be loaded: {' '.join(str(batcher.failed).split())}")
        on_failure = getattr(app.state, "on_failure", None)
        if on_failure is not None:
            on_failure()

    app = FastAPI(title="rcstat serve", lifespan=lifespan, docs_url=None, redoc_url=None)
    add_api_docs(app, "rcstat serve")

    def unavailable() -> JSONResponse | None:
        batcher = state.get("batcher")
        if batcher is None or not batcher.ready.is_set():
            return _error(503, "the model is loading", **retry)
        if batcher.failed is not None:
            return _error(503, f"the model could not be loaded: {batcher.failed}")
        return None

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        started = time.perf_counter()
        response = _refusal(request, config) or await call_next(request)
        took = (time.perf_counter() - started) * 1000
        client = request.client.host if request.client else "-"
        say(f"{client} {request.method} {request.url.path} {response.status_code} {took:.1f} ms")
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0] if err.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return _error(422, f"{where}: {first.get('msg')}" if where else str(first.get("msg")))

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(PAGE)

    @app.get("/health")
    async def health() -> Response:
        """200 ``{"status": "ok", "waiting": <requests in the queue>}`` once the model is
        loaded, 503 before."""
        return unavailable() or JSONResponse({"status": "ok", "waiting": state["batcher"].waiting})

    @app.get("/v1/model")
    async def model() -> Response:
        """The model, its head profile and the verdict's threshold."""
        return unavailable() or JSONResponse(worker.info)

    async def answer(kind: str, key: Any, data: Any) -> Response:
        refused = unavailable()
        if refused is not None:
            return refused
        try:
            future = state["batcher"].submit(kind, key, data)
        except QueueFullError:
            return _error(503, "the service is busy: retry later", **retry)
        try:
            return JSONResponse(await asyncio.wrap_future(future))
        except ValueError as err:
            return _error(422, str(err))
        except Exception as err:  # a failure of the model: one line, the service lives on
            say(f"error: {type(err).__name__}: {err}")
            return _error(500, f"{type(err).__name__}: {err}")

    @app.post("/v1/ground")
    async def ground(body: GroundRequest) -> Response:  # type: ignore[valid-type]
        """Exactly the object ``rcstat ground --json`` prints for the same texts and options
        (``out`` is null: the service writes no folder)."""
        given: dict[str, Any] = cast(Any, body).model_dump()
        texts = (given["context"], given["response"], given["question"])
        try:
            options = config.request_options({k: given[k] for k in REQUEST_OPTIONS})
            checked = GroundConfig(context=texts[0], response=texts[1], question=texts[2])
            checked.options = options
            checked.check()
        except ValueError as err:
            return _error(422, str(err))
        return await answer("ground", OptionsKey(checked.options), texts)

    @app.post("/v1/attribute")
    async def attribute(body: AttributeRequest) -> Response:  # type: ignore[valid-type]
        """The response attributed to the context: the candidate spans, each response
        sentence's scores over them and its best span (as ``rcstat attribute`` measures)."""
        given: dict[str, Any] = cast(Any, body).model_dump(exclude_none=True)
        context, response = given.pop("context", None), given.pop("response", None)
        question = given.pop("question", NO_QUESTION)
        try:
            if response is None:
                raise ValueError(
                    "attribute needs --answer (the response: the service does not generate)"
                )
            checked = AttributeConfig(
                context=context,
                question=question,
                answer=response,
                **{"top_k": DEFAULT_TOP_K, **given},
            )
            checked.check()
        except (ValueError, TypeError) as err:
            return _error(422, str(err))
        return await answer("attribute", None, (checked, "top_k" in given))

    return app


def _refusal(request: "Request", config: ServeConfig) -> "Response | None":
    """401 without the token on ``/v1/``; 411/413 for a body without a length or too long."""
    if config.token is not None and request.url.path.startswith("/v1/"):
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {config.token}".encode()):
            return _error(
                401,
                "this service needs Authorization: Bearer <token>",
                **{"WWW-Authenticate": "Bearer"},
            )
    if request.method in ("POST", "PUT", "PATCH"):
        length = request.headers.get("content-length")
        if length is None or not length.isdigit():
            return _error(411, "a request body needs a Content-Length")
        if int(length) > config.max_body_bytes:
            return _error(
                413, f"the body has {int(length):,} bytes; at most {config.max_body_bytes:,}"
            )
    return None


def run(config: ServeConfig, *, loader: "Loader | None" = None) -> int:
    """Serve ``config`` with uvicorn until SIGTERM or Ctrl-C; 0 after a SIGTERM drained the
    requests in flight (uvicorn re-raises the signal it caught: the handler set here takes it
    and the process ends normally); 2 when the port cannot be bound or the model cannot be
    loaded (one ``error:`` line says why)."""
    import uvicorn

    app = create_app(config, loader=loader)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            access_log=False,
            log_level="warning",
            timeout_graceful_shutdown=None,
        )
    )
    app.state.on_failure = lambda: setattr(server, "should_exit", True)
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        server.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    batcher = getattr(app.state, "batcher", None)
    failed = not server.started or (batcher is not None and batcher.failed is not None)
    return 2 if failed else 0
