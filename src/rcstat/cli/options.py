"""The options several commands share, each defined once: ``--model`` (with where it runs),
``--out``, ``--n``, ``--dataset`` with ``--data``, ``--max-new-tokens``, ``--language``,
``--top-k``, the text options, ``--allow-special-tokens`` and the attribution options, with the
checks that refuse a bad value before any model is loaded (the error names the flag).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

from rcstat.data.registry import dataset_names
from rcstat.defaults import (
    DEFAULT_LANGUAGE,
    DEFAULT_MODEL_NAME,
    DEFAULT_SPAN_SCORE,
    SPAN_SCORES,
    resolve_span_score,
)
from rcstat.runs.devices import DEVICE_MAPS, DTYPES

__all__ = [
    "add_attribution_options",
    "add_dataset_options",
    "add_language_option",
    "add_max_new_tokens_option",
    "add_model_option",
    "add_n_option",
    "add_out_option",
    "add_special_tokens_option",
    "add_text_options",
    "check_span_score",
    "join_dash_values",
]


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


def add_out_option(parser: argparse.ArgumentParser, command: str | None, note: str = "") -> None:
    """``--out FOLDER`` (default ``runs/<command>``; None: the command chooses, ``note`` says
    how)."""
    default = None if command is None else f"runs/{command}"
    parser.add_argument("--out", default=default, help="output folder" + note)


def add_json_option(parser: argparse.ArgumentParser, what: str, instead: str) -> None:
    """``--json``: print the result as one JSON object on standard output (``what`` it holds)
    instead of ``instead``; the progress and the folder written stay on standard error."""
    parser.add_argument(
        "--json",
        action="store_true",
        help=f"print one JSON object on standard output ({what}) instead of {instead}",
    )


def add_n_option(parser: argparse.ArgumentParser) -> None:
    """``--n N``: the first ``N`` examples of the dataset (default: all)."""
    parser.add_argument("--n", type=int, default=None, help="first N examples (default: all)")


def add_dataset_options(
    parser: argparse.ArgumentParser,
    default: str | None,
    tasks: Sequence[str] = ("qa",),
    *,
    extra: Sequence[str] = (),
    note: str = "",
) -> tuple[str, ...]:
    """``--dataset NAME`` among the registry's datasets of ``tasks`` (:mod:`rcstat.data.registry`)
    and the command's ``extra`` names (None default: the command's own, which ``note`` tells),
    then ``--data PATH``, the dataset's file in its upstream format (default: the shared slice);
    returns the names."""
    names = (*dataset_names(tasks), *extra)
    parser.add_argument("--dataset", default=default, help=f"one of {', '.join(names)}{note}")
    parser.add_argument(
        "--data",
        default=None,
        metavar="PATH",
        help="data file (or folder) in the dataset's upstream format (default: the shared slice)",
    )
    return names


def add_max_new_tokens_option(
    parser: argparse.ArgumentParser, default: int | None, what: str
) -> None:
    """``--max-new-tokens N``: the token limit of each generated ``what`` (None: the config's
    default, which ``what`` tells)."""
    parser.add_argument("--max-new-tokens", type=int, default=default, help=what)


def add_language_option(parser: argparse.ArgumentParser) -> None:
    """``--language CODE`` for sentence splitting (refused when it is not a language code)."""
    parser.add_argument(
        "--language",
        default=DEFAULT_LANGUAGE,
        help="language code for sentence splitting, e.g. en, ja, zh-hant (any script splits)",
    )


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


def add_attribution_options(parser: argparse.ArgumentParser) -> None:
    """``--statistic``, ``--span-score`` and ``--question-first`` (``rcstat attribute`` and its
    benchmark)."""
    parser.add_argument(
        "--statistic",
        choices=["expected", "upper"],
        help="the RC statistic that scores spans and ranks heads (default: expected)",
    )
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


#: Options whose value may start with ``-`` (``--shard -1/2`` is then refused by its own check
#: instead of argparse's "expected one argument").
DASH_VALUE_FLAGS = ("--shard",)


def join_dash_values(argv: Sequence[str]) -> list[str]:
    """``["--shard", "-1/2"]`` → ``["--shard=-1/2"]`` for :data:`DASH_VALUE_FLAGS`."""
    out: list[str] = []
    items = list(argv)
    i = 0
    while i < len(items):
        value = items[i + 1] if i + 1 < len(items) else ""
        if items[i] in DASH_VALUE_FLAGS and re.match(r"-\d", value):
            out.append(f"{items[i]}={value}")
            i += 2
            continue
        out.append(items[i])
        i += 1
    return out
