"""The options of ``rcstat serve``: :class:`ServeConfig` (their one home, with one validator).

The grounder's options are a :class:`~rcstat.grounding.options.GroundingOptions` (``options``):
the service's base (profile, detector, limits); a request may change the options of a verdict
by name (:data:`REQUEST_OPTIONS`) and lower the limits, never raise them. This module imports
neither torch nor FastAPI.

>>> ServeConfig.from_dict({"port": 8080, "max_batch": 4}).address
'127.0.0.1:8080'
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from rcstat.checks import check_count, check_number
from rcstat.grounding.options import GroundingOptions
from rcstat.runs.devices import Devices
from rcstat.runs.job import Config

__all__ = ["LIMITS", "REQUEST_OPTIONS", "ServeConfig"]

#: The grounding options a request may set by name, with the type of each value (the fields of
#: ``POST /v1/ground``'s body; ``zero_shot`` is ``detector=False``).
REQUEST_OPTIONS: dict[str, type] = {
    "fraction": float,
    "quantile": float,
    "threshold": float,
    "top_k": int,
    "language": str,
    "max_tokens": int,
    "max_chars": int,
    "max_response_tokens": int,
    "zero_shot": bool,
}
#: The limits a request may lower but not raise above the service's.
LIMITS = ("max_tokens", "max_chars", "max_response_tokens")


@dataclass
class ServeConfig(Config):
    """The options of ``rcstat serve`` (each flag ``--x-y`` is the field ``x_y``).

    Attributes
    ----------
    host, port
        Where the service listens (default ``127.0.0.1:8000``: this machine only).
    model, devices
        The model and where it runs, as in every command (:mod:`rcstat.commands`).
    token
        When set, every ``/v1/`` request needs ``Authorization: Bearer <token>`` (401 otherwise).
    max_queue
        Requests waiting for the model at most; one more is answered 503 with ``Retry-After``.
    max_batch
        Requests the worker takes together at most (one :meth:`Grounder.ground_many` call).
    max_wait_ms
        How long the worker waits for more requests once it holds one (milliseconds).
    max_body_bytes
        Largest request body (413 above it, before it is read to the end).
    batch_tokens
        The most tokens of one forward pass of a batch (None: one pair a pass on a CPU,
        :data:`~rcstat.defaults.DEFAULT_BATCH_TOKENS` on a GPU; see ``ground_many``).
    retry_after
        Seconds a 503 asks the client to wait.
    options
        The grounder's base options (:class:`~rcstat.grounding.options.GroundingOptions`).
    """

    host: str = "127.0.0.1"
    port: int = 8000
    model: str | None = None
    devices: Devices = field(default_factory=Devices)
    token: str | None = None
    max_queue: int = 256
    max_batch: int = 8
    max_wait_ms: float = 5.0
    max_body_bytes: int = 1_000_000
    batch_tokens: int | None = None
    retry_after: int = 1
    options: GroundingOptions = field(default_factory=GroundingOptions)

    PATHS = ()

    @property
    def address(self) -> str:
        """``host:port``."""
        return f"{self.host}:{self.port}"

    def check(self) -> None:
        """Every option in its range (``ValueError`` naming the flag).

        >>> ServeConfig(port=70000).check()
        Traceback (most recent call last):
        ...
        ValueError: --port must be an integer in [0, 65535], got 70000
        """
        if not isinstance(self.host, str) or not self.host.strip():
            raise ValueError("--host is empty")
        check_count("--port", self.port, low=0, high=65535)
        if self.token is not None and (not isinstance(self.token, str) or not self.token.strip()):
            raise ValueError("--token is empty or whitespace only")
        check_count("--max-queue", self.max_queue)
        check_count("--max-batch", self.max_batch)
        check_number("--max-wait-ms", self.max_wait_ms, low=0.0, high=10_000.0)
        check_count("--max-body-bytes", self.max_body_bytes, low=1024)
        if self.batch_tokens is not None:
            check_count("--batch-tokens", self.batch_tokens)
        check_count("--retry-after", self.retry_after, low=0)
        self.options = self.options.checked(flags=True)

    def request_options(self, given: dict[str, Any]) -> GroundingOptions:
        """The options of one request: the base :attr:`options` with ``given`` (names of
        :data:`REQUEST_OPTIONS`, None left out) over them, checked; a limit above the
        service's is refused (``ValueError`` naming the flag, as ``rcstat ground`` does)."""
        values = {k: v for k, v in given.items() if v is not None}
        unknown = sorted(set(values) - set(REQUEST_OPTIONS))
        if unknown:
            raise ValueError(f"unknown option(s) {unknown}; the options: {list(REQUEST_OPTIONS)}")
        if values.pop("zero_shot", False):
            values["detector"] = False
        for name in LIMITS:
            ceiling = getattr(self.options, name)
            value = values.get(name)
            if ceiling is not None and isinstance(value, int) and value > ceiling:
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{flag} {value:,}: this service allows at most {ceiling:,}")
        return replace(self.options, **values).checked(flags=True)
