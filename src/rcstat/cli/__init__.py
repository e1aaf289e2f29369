"""The ``rcstat`` command line: ``demo``, ``analyze``, ``compress``, ``attribute``, ``ground``,
``ground-profile``, ``ground-train``, ``heads``, ``bench``, ``merge``, ``serve``.

Each sub-command is a module of this package with ``register(sub)`` (its parser),
``from_namespace(ns)`` (its checked arguments: every option is validated before a model is
loaded or a file written) and ``run(args)`` (the exit status). :func:`main` dispatches, turns
the errors a user can fix into one ``error:`` line on standard error with exit status 2, and
ends Ctrl-C with one ``interrupted:`` line there saying what was kept; ``rcstat ground`` exits
with its verdict (:data:`EXIT_CODES`, from :mod:`rcstat.cli.exit_codes`).
Results go to standard output.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from rich.markup import escape

from rcstat.cli import (
    analyze,
    attribute,
    bench,
    compress,
    demo,
    ground,
    ground_profile,
    ground_train,
    heads,
    merge,
    serve,
)
from rcstat.cli._common import HelpFormatter, error_console
from rcstat.cli.exit_codes import EXIT_CODES, exit_status_text
from rcstat.cli.model_option import check_model_option
from rcstat.cli.options import join_dash_values
from rcstat.cli.parser import Parser, error_line

__all__ = ["EXIT_CODES", "build_parser", "main"]

COMMANDS: dict[str, ModuleType] = {
    module.NAME: module
    for module in (
        demo,
        analyze,
        compress,
        attribute,
        ground,
        ground_profile,
        ground_train,
        heads,
        bench,
        merge,
        serve,
    )
}
# Commands whose results are kept row by row and resume when run again.
_RESUMABLE = {"heads", "bench"}


def version() -> str:
    """The installed rcstat version (from the package metadata, the one source)."""
    from rcstat.runs import rcstat_version

    return rcstat_version()


def build_parser() -> argparse.ArgumentParser:
    """The ``rcstat`` parser with every sub-command."""
    parser = Parser(
        prog="rcstat",
        description="Relative Contextualization statistics of attention heads.",
        epilog="Results go to standard output; progress, errors and warnings to standard "
        "error, one line each. " + exit_status_text(),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rcstat {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS.values():
        module.register(sub)
    return parser


def _quiet_transformers() -> None:
    """The CLI shows its own progress: silence transformers' per-tensor loading bars."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    from rcstat.press.extra import MissingExtraError

    arguments = sys.argv[1:] if argv is None else argv
    ns = build_parser().parse_args(join_dash_values(arguments))
    module = COMMANDS[ns.command]
    args: Any = None
    try:
        args = module.from_namespace(ns)  # every option's own check first
        check_model_option(getattr(ns, "model", None))
        _quiet_transformers()
        return int(module.run(args))
    except KeyboardInterrupt:
        out = getattr(args, "out", None) or getattr(ns, "out", None)
        if (ns.command in _RESUMABLE or getattr(ns, "pairs", None)) and out is not None:
            kept = f"rows finished so far are kept in {out}; run the same command to resume"
        else:
            kept = "nothing was written"
        error_console.print(f"interrupted: {escape(kept)}")
        return 130
    # OSError: a --model path that does not exist or is a file, an unreadable checkpoint.
    except (ValueError, FloatingPointError, RuntimeError, OSError, MissingExtraError) as err:
        error_line(str(err))
        return 2


if __name__ == "__main__":
    sys.exit(main())
