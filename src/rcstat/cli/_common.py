"""What every sub-command shares: the console, its parser, text reading, checked numbers, safe
outputs. The shared options themselves are in :mod:`rcstat.cli.options` (RCStatPress's in
:mod:`rcstat.cli.press_options`, a dataset job's in :mod:`rcstat.cli.job_options`).

Rules every command follows (tested in ``tests/test_cli_*.py``):

* options are checked before any model is loaded or any file is written (``from_namespace``
  of each command's arguments dataclass raises ``ValueError`` naming the option);
* text comes from ``--NAME`` or ``--NAME-file`` (``-`` reads standard input), never both;
* results are written through :func:`staged_output`: into a temporary folder first, moved into
  ``--out`` only when the command succeeded, and never over a file rcstat did not write there.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Generic, TypeVar

from rich.console import Console
from rich.markup import escape

from rcstat.checks import float_list as float_list  # the options' checks, shared with the API
from rcstat.checks import int_list as int_list
from rcstat.checks import optional_count as optional_count
from rcstat.checks import split_list as split_list
from rcstat.cli.options import add_model_option
from rcstat.report.console import CUT_MARK
from rcstat.runs.devices import Devices
from rcstat.runs.folder import OUTPUT_MARKER as OUTPUT_MARKER  # the commands' output safety
from rcstat.runs.folder import check_output_folder as check_output_folder
from rcstat.runs.folder import check_writable as check_writable
from rcstat.runs.folder import claim_output_folder as claim_output_folder
from rcstat.runs.folder import staged_output as staged_output

# Results go to standard output; progress, errors and warnings to standard error. Every line
# stays one line in a pipe (soft_wrap: no wrapping at the console width).
console = Console(stderr=False, highlight=False, soft_wrap=True)
progress_console = Console(stderr=True, highlight=False, soft_wrap=True)
error_console = progress_console


ConfigT = TypeVar("ConfigT")


@dataclass(frozen=True)
class JsonArgs(Generic[ConfigT]):
    """A command's checked library config and whether to print ``--json``."""

    config: ConfigT
    json: bool = False


def print_json(document: dict[str, Any]) -> None:
    """Write ``document`` on standard output as one line of JSON (a NaN is an error: results
    write a missing number as null)."""
    sys.stdout.write(json.dumps(document, ensure_ascii=False, allow_nan=False) + "\n")
    sys.stdout.flush()


def print_json_result(document: dict[str, Any], out: str | Path | None) -> None:
    """``--json``: ``document`` on standard output (:func:`print_json`), and the folder the
    command wrote, ``out`` (None: none), on standard error."""
    print_json(document)
    if out is not None:
        error_console.print(f"results written to {escape(str(out))}/")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows every default (``(default: …)``) but not for ``None`` and not for flags
    that take no value (``--no-full``, ``--no-retry-failed``: their help says what the default
    does)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "%(default)" in text:
            return text
        if action.nargs == 0:  # store_true / store_false / store_const
            return text
        return super()._get_help_string(action)


def add_command(
    sub: Any, name: str, help: str, description: str | None = None, *, model: bool = True
) -> argparse.ArgumentParser:
    """The parser of sub-command ``name`` in ``sub`` (the result of ``add_subparsers``), whose
    ``--help`` shows the defaults; with ``--model`` and where it runs unless ``model`` is
    False."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=description, formatter_class=HelpFormatter
    )
    if model:
        add_model_option(parser)
    return parser


def flag_values(config: type, ns: argparse.Namespace, **given: Any) -> dict[str, Any]:
    """The values of the config dataclass ``config``'s fields that the flags in ``ns`` give
    (an attribute named as a field), with ``given`` (what the command read or made itself) on
    top; None is left out: a flag not given keeps the config's default, the one home of it."""
    values = {f.name: getattr(ns, f.name, None) for f in fields(config)}
    values.update(given)
    return {name: value for name, value in values.items() if value is not None}


def read_texts(ns: argparse.Namespace, names: Sequence[str]) -> dict[str, str | None]:
    """The text of each ``--NAME`` / ``--NAME-file`` pair (None when neither is given).

    At most one of them may read standard input; an unreadable file and a pair given twice
    are errors that name the option.
    """
    from_stdin = [n for n in names if getattr(ns, f"{n}_file") == "-"]
    if len(from_stdin) > 1:
        raise ValueError(
            "only one option can read standard input, got "
            + ", ".join(f"--{n}-file -" for n in from_stdin)
        )
    texts: dict[str, str | None] = {}
    for name in names:
        value, path = getattr(ns, name), getattr(ns, f"{name}_file")
        if value is not None and path is not None:
            raise ValueError(f"give --{name} or --{name}-file, not both")
        texts[name] = value if path is None else read_file_option(f"--{name}-file", path)
    return texts


def read_file_option(option: str, path: str) -> str:
    """The UTF-8 text of ``path`` (``-``: standard input)."""
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read {option} {path}: {err}") from err


def read_lines_option(option: str, path: str, what: str) -> tuple[str, ...]:
    """The non-empty, stripped lines of ``path`` (``-``: standard input), at least one."""
    lines = tuple(line.strip() for line in read_file_option(option, path).splitlines())
    kept = tuple(line for line in lines if line)
    if not kept:
        raise ValueError(f"{option} {path} holds no {what} (one a line)")
    return kept


@contextmanager
def step(message: str) -> Iterator[None]:
    """Show ``message`` while the block runs: a spinner on a terminal, a plain line (with the
    time it took) in logs and pipes."""
    if progress_console.is_terminal:
        with progress_console.status(message):
            yield
        return
    progress_console.print(message, markup=False)
    started = time.perf_counter()
    yield
    progress_console.print(f"  done in {time.perf_counter() - started:.1f} s", markup=False)


def load_model_quietly(model: str | None, devices: Devices | None = None) -> tuple[Any, Any]:
    """Load ``--model`` where ``devices`` says, with a progress line and without
    transformers' loading bars."""
    from rcstat.models import load_model

    devices = devices or Devices()
    devices.select()
    with step("loading model…"):
        return load_model(model, **devices.load_kwargs())


def clip(text: str, width: int = 70) -> str:
    """One line of at most ``width`` characters (``…`` marks a cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def answer_line(label: str, text: str, finished: bool | None) -> str:
    """``label: 'text'`` with a visible mark when the answer was cut at the token limit."""
    return f"{label}: {text!r}" + ("" if finished is not False else CUT_MARK)


def say(text: str) -> None:
    """Print one line of results as it is (no rich markup)."""
    console.print(text, markup=False)


def note(text: str) -> None:
    """Print one line of a message on standard error (a job's notes: skipped examples, the
    size of its grid), as it is."""
    progress_console.print(text, markup=False)


def folder_note(held: int | None, n: int | None) -> str | None:
    """The line that says a run folder holds more examples than ``--n`` asks for (its summary
    describes the whole folder); None when it does not."""
    if held is None or n is None or held <= n:
        return None
    return (
        f"the run folder holds {held} examples, more than --n {n} asks for: "
        f"the summary describes all {held}"
    )


def add_config_option(
    parser: argparse.ArgumentParser,
    config: Any,
    name: str,
    kind: type,
    help: str,
    *,
    choices: Sequence[str] | None = None,
) -> None:
    """``--name`` (the field ``name`` of ``config``, a :class:`~rcstat.runs.job.Config`, with
    dashes) of type ``kind`` (one of ``choices`` where given), defaulting to None so that the
    config holds the default, which ``--help`` states."""
    flag = "--" + name.replace("_", "-")
    parser.add_argument(
        flag, type=kind, choices=choices, help=f"{help} (default: {shown_default(config, name)})"
    )


def shown_default(config: Any, name: str) -> str:
    """The default of field ``name`` of ``config`` (a :class:`~rcstat.runs.job.Config`) as
    ``--help`` states it: a list comma-separated, as its flag takes it."""
    value = config.default(name)
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)
