"""``rcstat serve``: the grounding service and its page (:mod:`rcstat.serve`).

The flags make a :class:`~rcstat.serve.config.ServeConfig` (checked before anything heavy is
imported: FastAPI, torch and the model load only in :func:`run`); :func:`run` serves until
SIGTERM (which drains the requests in flight; exit 0) or Ctrl-C.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from rcstat.cli._common import Devices, add_command, add_config_option, error_console
from rcstat.cli.ground_flags import add_batch_tokens_option, add_limit_options, grounding_options
from rcstat.serve.config import ServeConfig

NAME = "serve"

#: The service's own limits: (field, type, what it bounds).
LIMITS: tuple[tuple[str, type, str], ...] = (
    ("max_queue", int, "requests waiting for the model at most; one more is answered 503"),
    ("max_batch", int, "requests grounded together at most (one batch of the worker)"),
    ("max_wait_ms", float, "how long the worker waits for more requests to fill a batch (ms)"),
    ("max_body_bytes", int, "largest request body (413 above it)"),
)


def register(sub: Any) -> None:
    """Add ``serve`` to the sub-command parsers ``sub``."""
    parser = add_command(
        sub,
        NAME,
        "serve grounding over HTTP (JSON API and a page at /)",
        "An HTTP JSON service on one loaded model: POST /v1/ground answers exactly what "
        "`rcstat ground --json` prints for the same texts and options, POST /v1/attribute the "
        "attribution of each response sentence; GET /health, GET /v1/model, the OpenAPI schema "
        "at /docs and a page at / to paste texts into. Concurrent requests wait in a bounded "
        "queue (503 with Retry-After when full) and are grounded in batches on one worker "
        "thread. One log line per request on standard error; SIGTERM finishes the requests in "
        "flight and exits 0.",
    )
    add_config_option(parser, ServeConfig, "host", str, "address to listen on")
    add_config_option(parser, ServeConfig, "port", int, "port to listen on")
    parser.add_argument(
        "--token",
        default=None,
        help="require `Authorization: Bearer TOKEN` on every /v1/ request (401 otherwise)",
    )
    parser.add_argument(
        "--profile", default=None, metavar="PATH", help="head profile JSON (default: shipped)"
    )
    parser.add_argument(
        "--detector",
        default=None,
        metavar="PATH",
        help="trained detector JSON (default: the one shipped for the model, else zero-shot)",
    )
    parser.add_argument(
        "--zero-shot",
        action="store_true",
        help="judge with the zero-shot word score by default (a request may ask for it too)",
    )
    add_limit_options(parser)
    for name, kind, meaning in LIMITS:
        add_config_option(parser, ServeConfig, name, kind, meaning)
    add_batch_tokens_option(parser, "in a batch of requests, ")


@dataclass
class ServeArgs:
    """The checked :class:`~rcstat.serve.config.ServeConfig` of the flags."""

    config: ServeConfig


def from_namespace(ns: argparse.Namespace) -> ServeArgs:
    """The checked options of ``rcstat serve`` (before any heavy import)."""
    config = ServeConfig.from_flags(ns, options=grounding_options(ns))
    config.devices = Devices.from_namespace(ns)  # last: it may ask torch for the GPUs
    return ServeArgs(config)


def run(args: ServeArgs) -> int:
    """Serve until SIGTERM (exit 0) or Ctrl-C; one line saying where."""
    from rcstat.serve.app import run as serve

    config = args.config
    where = f"http://{config.address}/"
    error_console.print(f"serving on {where} (the page), {where}docs (the API)", markup=False)
    return serve(config)
