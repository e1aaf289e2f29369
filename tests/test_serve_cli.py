"""``rcstat serve``'s options: refused before any heavy import (torch, transformers, FastAPI,
uvicorn) with one line naming the flag; a valid command line makes the library's config."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rcstat.cli import build_parser
from rcstat.cli.serve import from_namespace
from rcstat.serve.config import ServeConfig


def test_the_flags_make_the_config() -> None:
    ns = build_parser().parse_args(
        ["serve", "--port", "9000", "--token", "t", "--max-batch", "4", "--zero-shot"]
    )
    config = from_namespace(ns).config
    assert (config.host, config.port, config.token, config.max_batch) == ("127.0.0.1", 9000, "t", 4)
    assert config.options.detector is False
    default = from_namespace(build_parser().parse_args(["serve"])).config
    assert default.address == "127.0.0.1:8000"
    assert default.max_queue == ServeConfig().max_queue


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("serve --port 70000", "--port must be an integer in [0, 65535]"),
        ("serve --max-queue 0", "--max-queue"),
        ("serve --max-wait-ms -1", "--max-wait-ms"),
        ("serve --token ' '", "--token is empty"),
        ("serve --max-chars 0", "--max-chars"),
        ("serve --profile /", "--profile /: a folder, not a file"),
        ("serve --detector x --zero-shot", "--detector and --zero-shot exclude each other"),
    ],
)
def test_serve_refuses_a_bad_option_before_the_heavy_imports(args: str, message: str) -> None:
    probe = (
        "import contextlib, io, json, shlex, sys\n"
        "from rcstat import cli\n"
        "err = io.StringIO()\n"
        "with contextlib.redirect_stderr(err):\n"
        "    try:\n"
        "        code = cli.main(shlex.split(sys.argv[1]))\n"
        "    except SystemExit as exit:\n"
        "        code = exit.code\n"
        "heavy = [m for m in ('torch', 'transformers', 'fastapi', 'uvicorn') if m in sys.modules]\n"
        "print(json.dumps({'code': code, 'heavy': heavy, 'error': err.getvalue().strip()}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, args], capture_output=True, text=True, timeout=120
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["code"] == 2
    assert report["heavy"] == []
    assert message in report["error"] and len(report["error"].splitlines()) == 1
