"""The command line's error convention — one ``error:`` line on standard error
(:func:`error_line`) — and the argument parser that keeps it for usage errors
(:class:`Parser`)."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from typing import NoReturn

from rich.markup import escape

from rcstat.cli._common import error_console

__all__ = ["Parser", "error_line"]


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one ``error:`` line on standard error, exit
    status 2, naming the command (``rcstat ground: unrecognized arguments: --treshold (did you
    mean --threshold?)``) and where its options are listed, instead of argparse's usage block.

    A sub-command's unknown options are refused by the sub-command's own parser (argparse
    would hand them back up to ``rcstat``, whose message names no command), with the nearest
    option name when one is close (``difflib``)."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        ns, extras = super().parse_known_args(args, namespace)
        if extras and self._subparsers is None:  # a leaf command: nothing below takes them
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._nearest(extras)}")
        return ns, extras

    def _nearest(self, extras: Sequence[str]) -> str:
        options = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        for given in extras:
            if given.startswith("--"):
                near = difflib.get_close_matches(given.split("=", 1)[0], options, n=1, cutoff=0.75)
                if near:
                    return f" (did you mean {near[0]}?)"
        return ""

    def error(self, message: str) -> NoReturn:
        error_line(f"{self.prog}: {message}; see {self.prog} --help")
        sys.exit(2)


def error_line(message: str) -> None:
    """Print ``error: message`` on standard error as one line (whitespace runs, newlines
    included, become one space; no rich markup in ``message`` is read)."""
    error_console.print(f"[red]error:[/red] {escape(' '.join(message.split()))}")
