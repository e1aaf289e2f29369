"""The width of the CLI's console for one test.

rich reads ``COLUMNS`` when a console is made, and keeps that width for good when it is set then
(pytest-xdist's workers under pytest 9 start with ``COLUMNS=80``); otherwise it reads the terminal
and ``COLUMNS`` at each print. Setting ``console.width`` and setting it back to the width read
would keep the read width for every later test of the process, so the console's own setting is
put back as it was: ``None`` (read at each print) or the width it was made with.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rcstat.cli._common import console


@contextlib.contextmanager
def console_width(width: int) -> Iterator[None]:
    """The results' console (standard output) ``width`` columns wide inside the block."""
    made_with = console._width  # rich's own setting: None, or the width it was made with
    console.width = width
    try:
        yield
    finally:
        console._width = made_with
