"""What the serve tests share: the tiny model's head profile, a service on it, waiting for it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from rcstat.grounding import HeadProfile
from rcstat.grounding.options import GroundingOptions
from rcstat.serve.config import ServeConfig

CONTEXT = (
    "The river flows through the city. The bridge was built in 1889 by a team of engineers. "
    "Paris is the capital of France."
)
QUESTION = "Who built the bridge?"
RESPONSE = "The bridge was built in 1889. It crosses the river in Paris."
#: Distinct pairs (context, response, question) for concurrency checks.
PAIRS = [
    (
        f"{CONTEXT} Item {k} costs {k * 7} euros.",
        f"The bridge was built in {1880 + k}. Item {k} costs {k * 3} euros.",
        None if k % 3 == 0 else f"What does item {k} cost?",
    )
    for k in range(24)
]


def save_profile(folder: Path) -> Path:
    """A head profile of the tiny model's 3 layers x 4 heads (as tests/test_commands_ground.py)."""
    values = np.random.default_rng(0).uniform(0.2, 0.9, size=(3, 4))
    copy = np.random.default_rng(10).random(values.shape)
    return HeadProfile(
        "tiny", values, threshold=0.05, quantile=0.1, fraction=0.5, copy_values=copy
    ).save(folder / "profile.json")


def serve_config(model_dir: Path, profile: Path, **changes: Any) -> ServeConfig:
    """The service on the tiny model with the test profile (``top_k`` 5)."""
    return ServeConfig(
        model=str(model_dir), options=GroundingOptions(profile=profile, top_k=5), **changes
    )


def wait_ready(client: Any, timeout: float = 60.0) -> None:
    """Poll ``/health`` until 200 (``client``: a TestClient or an httpx client)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.get("/health").status_code == 200:
            return
        time.sleep(0.05)
    raise AssertionError("the service did not become ready")
