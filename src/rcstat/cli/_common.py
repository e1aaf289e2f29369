"""What every sub-command shares: the console, text options, checked numbers, safe outputs.

Rules every command follows (tested in ``tests/cli``):

* options are checked before any model is loaded or any file is written (``from_namespace``
  of each command's arguments dataclass raises ``ValueError`` naming the option);
* text comes from ``--NAME`` or ``--NAME-file`` (``-`` reads standard input), never both;
* results are written through :func:`staged_output`: into a temporary folder first, moved into
  ``--out`` only when the command succeeded, and never over a file rcstat did not write there.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from rcstat.checks import float_list as float_list  # the options' checks, shared with the API
from rcstat.checks import int_list as int_list
from rcstat.checks import optional_count as optional_count
from rcstat.checks import split_list as split_list
from rcstat.defaults import (
    DEFAULT_MODEL_NAME,
    DEFAULT_SPAN_SCORE,
    SPAN_SCORES,
    resolve_span_score,
)
from rcstat.press.options import knob_choices, knob_default
from rcstat.report.console import CUT_MARK
from rcstat.runs.devices import DEVICE_MAPS, DTYPES, Devices
from rcstat.runs.folder import OUTPUT_MARKER as OUTPUT_MARKER  # the commands' output safety
from rcstat.runs.folder import check_output_folder as check_output_folder
from rcstat.runs.folder import claim_output_folder as claim_output_folder
from rcstat.runs.folder import staged_output as staged_output

if TYPE_CHECKING:
    from rcstat.runs.shards import Shard

# Results go to standard output; progress, errors and warnings to standard error. Every line
# stays one line in a pipe (soft_wrap: no wrapping at the console width).
console = Console(stderr=False, highlight=False, soft_wrap=True)
progress_console = Console(stderr=True, highlight=False, soft_wrap=True)
error_console = progress_console


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


def add_model_option(parser: argparse.ArgumentParser) -> None:
    """``--model`` (hub id, local folder or ``.gguf`` file; the embedded model by default) and
    where it runs: ``--device``, ``--device-map``, ``--dtype`` (see
    :class:`~rcstat.runs.devices.Devices`)."""
    parser.add_argument(
        "--model",
        default=None,
        help=f"hub id, local folder or .gguf file (default: the embedded {DEFAULT_MODEL_NAME})",
    )
    parser.add_argument(
        "--device",
        default=None,
        help="where the model runs: cpu, cuda or cuda:N (default: cuda when a GPU is visible, "
        "else cpu)",
    )
    parser.add_argument(
        "--device-map",
        default=None,
        choices=DEVICE_MAPS,
        help="split a model larger than one GPU across the visible GPUs (accelerate's strategy); "
        "instead of --device",
    )
    parser.add_argument(
        "--dtype",
        default=None,
        choices=DTYPES,
        help="parameter dtype (default: float32 on cpu, the checkpoint's own on a GPU)",
    )


def add_shard_option(parser: argparse.ArgumentParser) -> None:
    """``--shard i/N``: take shard ``i`` of ``N`` of the examples (default: from torchrun,
    accelerate or srun; see :mod:`rcstat.runs.shards`)."""
    parser.add_argument(
        "--shard",
        default=None,
        metavar="i/N",
        help="work on shard i (0-based) of N of the examples, in the run's part "
        "OUT/parts/i-of-N (default: from torchrun / accelerate launch / srun, else the whole "
        "dataset); the last shard to finish merges the parts",
    )


def shard_from_namespace(ns: argparse.Namespace) -> Shard:
    """The shard of ``--shard`` or of the launcher's environment (checked)."""
    from rcstat.runs.shards import detect_shard, parse_shard

    text = getattr(ns, "shard", None)
    return parse_shard(text) if text is not None else detect_shard()


def add_run_options(
    parser: argparse.ArgumentParser, *, items: str = "items", redo: str = "running them again"
) -> None:
    """``--no-retry-failed`` and ``--shard`` (every dataset job is a resumable run)."""
    parser.add_argument(
        "--no-retry-failed",
        dest="retry_failed",
        action="store_false",
        help=f"when resuming, skip the {items} that failed instead of {redo}",
    )
    add_shard_option(parser)


def devices_and_shard(ns: argparse.Namespace) -> tuple[Devices, Shard]:
    """The checked device plan and shard of a dataset job's process (its own GPUs)."""
    shard = shard_from_namespace(ns)
    return Devices.from_namespace(ns).for_shard(shard), shard


def add_text_options(parser: argparse.ArgumentParser, names: Sequence[tuple[str, str]]) -> None:
    """``--NAME TEXT`` and ``--NAME-file PATH`` (``-`` = standard input) for each name."""
    for name, what in names:
        parser.add_argument(f"--{name}", default=None, help=what)
        parser.add_argument(
            f"--{name}-file",
            default=None,
            metavar="PATH",
            help=f"read the {name} from a UTF-8 file ('-': standard input)",
        )


def add_special_tokens_option(parser: argparse.ArgumentParser) -> None:
    """``--allow-special-tokens``: let user text contain real special tokens (unsafe)."""
    parser.add_argument(
        "--allow-special-tokens",
        action="store_true",
        help="encode special-token strings in the texts (e.g. <|im_start|>) as special tokens "
        "instead of literal text; only for trusted text, it can open chat turns",
    )


def _default_first(name: str, default: str | None = None) -> tuple[str, ...]:
    """The values of RCStatPress's option ``name``, its default (or ``default``) first."""
    values, first = knob_choices(name), default or knob_default(name)
    return (first, *(v for v in values if v != first))


#: RCStatPress's named options on the command line: (flag, values with the default first,
#: what each value means); the values and defaults come from
#: :class:`~rcstat.press.options.RCStatOptions`.
PRESS_CHOICES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "--group",
        _default_first("group", "mean"),  # the default of the target-ratio mode first
        "how a GQA group's query heads decide for their KV head: mean (the group's mean "
        "relative score) or max (any head keeps an entry, the paper's rule); the press's "
        "default: mean with a target ratio, max with a threshold",
    ),
    (
        "--score",
        _default_first("score"),
        "token score: the exact expected RC or its upper bound A",
    ),
    (
        "--budget",
        _default_first("budget"),
        "target-ratio mode: r of the whole model, layers differing (pooled), or r per layer "
        "(layer, the paper's)",
    ),
)


def add_attribution_options(parser: argparse.ArgumentParser) -> None:
    """``--span-score`` and ``--question-first`` (``rcstat attribute`` and its benchmark)."""
    parser.add_argument(
        "--span-score",
        choices=list(SPAN_SCORES),
        default=None,
        help="how a span's tokens make its score: their mean (the paper's eq. 10), their sum "
        "(longer spans weigh more) or the span's best sentence; sum and sentence need "
        f"--statistic expected (default: {DEFAULT_SPAN_SCORE}, mean with --statistic upper)",
    )
    parser.add_argument(
        "--question-first",
        action="store_true",
        help="write the question before the context in the prompt (default: after it)",
    )


def check_span_score(span_score: str | None, statistic: str) -> str:
    """``--span-score`` (None: the default of ``statistic``); ``sum|sentence`` with
    ``--statistic upper`` is refused before any work (see
    :func:`rcstat.defaults.resolve_span_score`)."""
    return resolve_span_score(span_score, statistic, names=("--span-score", "--statistic"))


def add_press_options(parser: argparse.ArgumentParser, *, sweep: bool) -> None:
    """RCStatPress's ``--group``, ``--score``, ``--budget`` (comma-separated lists when
    ``sweep``), ``--floor`` and ``--placement``."""
    for flag, values, meaning in PRESS_CHOICES:
        press_default = knob_default(flag.removeprefix("--"))
        if sweep:  # --group's default: the press's, which depends on the mode
            parser.add_argument(flag, default=press_default, help=f"comma-separated; {meaning}")
        else:  # None (--group, --budget): the press's own default, which depends on the mode
            default = press_default if flag == "--score" else None
            parser.add_argument(flag, choices=list(values), default=default, help=meaning)
    parser.add_argument(
        "--floor",
        type=float,
        default=knob_default("floor"),
        help="pooled budget: every KV head keeps at least this share of a uniform budget",
    )
    parser.add_argument(
        "--sinks",
        default=str(knob_default("sinks")),
        help=("comma-separated; " if sweep else "")
        + "the first N prompt tokens are never evicted (attention sinks, the chat template)",
    )
    parser.add_argument(
        "--placement",
        choices=["context", "question"],
        default="context",
        help="context: compress the context, then read the question (question-agnostic, "
        "kvpress's pipeline); question: compress the question with it (query-aware"
        + ("; reported apart)" if sweep else ")"),
    )


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
