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
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from rcstat.checks import check_count, check_number
from rcstat.defaults import (
    DEFAULT_MODEL_NAME,
    DEFAULT_SPAN_SCORE,
    SPAN_SCORES,
    resolve_span_score,
)
from rcstat.press.options import knob_choices, knob_default
from rcstat.report.console import CUT_MARK
from rcstat.shards import process_gpus

if TYPE_CHECKING:
    from rcstat.shards import Shard

# Results go to standard output; progress, errors and warnings to standard error. Every line
# stays one line in a pipe (soft_wrap: no wrapping at the console width).
console = Console(stderr=False, highlight=False, soft_wrap=True)
progress_console = Console(stderr=True, highlight=False, soft_wrap=True)
error_console = progress_console

#: The file that marks a folder as written by an rcstat command (and lists what it wrote).
OUTPUT_MARKER = ".rcstat-output.json"


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
    where it runs: ``--device``, ``--device-map``, ``--dtype`` (see :class:`Placement`)."""
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


#: ``--device-map`` strategies (accelerate) and ``--dtype`` names.
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
DTYPES = ("auto", "float32", "float16", "bfloat16")


def add_shard_option(parser: argparse.ArgumentParser) -> None:
    """``--shard i/N``: take shard ``i`` of ``N`` of the examples (default: from torchrun,
    accelerate or srun; see :mod:`rcstat.shards`)."""
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
    from rcstat.shards import detect_shard, parse_shard

    text = getattr(ns, "shard", None)
    return parse_shard(text) if text is not None else detect_shard()


def check_run_options(out: Path, kind: str, options: dict[str, Any], shard: Shard | None) -> None:
    """Refuse, before the model loads, a run folder — or this shard's part of it — made with
    other options (:func:`rcstat.runs.check_options`)."""
    from rcstat.merge import part_folder
    from rcstat.runs import check_options

    check_options(out, kind, options)
    if shard is not None and shard.split:
        check_options(part_folder(out, shard), kind, options)


def visible_gpus() -> int:
    """The number of CUDA devices this process sees (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@dataclass(frozen=True)
class Placement:
    """Where and in which precision a command's model runs (checked before it loads).

    ``device`` None picks ``cuda`` when a GPU is visible, else ``cpu``; ``device_map`` (one of
    :data:`DEVICE_MAPS`) splits the model across GPUs instead; ``dtype`` None is float32 on the
    CPU and the checkpoint's own dtype elsewhere.
    """

    device: str | None = None
    device_map: str | None = None
    dtype: str | None = None
    gpus: tuple[int, ...] = ()

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> Placement:
        device, device_map = getattr(ns, "device", None), getattr(ns, "device_map", None)
        if device is not None and device_map is not None:
            raise ValueError("--device and --device-map: give one of them, not both")
        if device_map is not None and not visible_gpus():
            raise ValueError(
                f"--device-map {device_map}: no GPU is visible (it splits a model across GPUs; "
                "leave it out to run on the CPU)"
            )
        if device is not None:
            import torch

            try:
                parsed = torch.device(device)
            except (RuntimeError, ValueError) as err:
                raise ValueError(
                    f"--device {device!r} is not a device (cpu, cuda, cuda:N)"
                ) from err
            if parsed.type == "cuda":
                visible = visible_gpus()
                if (parsed.index is not None and parsed.index >= visible) or not visible:
                    raise ValueError(f"--device {device}: {visible} CUDA device(s) visible")
            elif parsed.type != "cpu":
                raise ValueError(f"--device {device!r}: only cpu and cuda devices are supported")
        return cls(device=device, device_map=device_map, dtype=getattr(ns, "dtype", None))

    def for_shard(self, shard: Shard) -> Placement:
        """This process's placement in a data-parallel run: its own GPU (or group of GPUs for
        ``--device-map``, see :func:`rcstat.shards.process_gpus`) unless ``--device`` names
        one; unchanged for a single process or on the CPU."""
        import torch

        if not shard.split or not torch.cuda.is_available():
            return self
        if self.device is not None and self.device != "cuda":
            return self  # cpu, or an explicit cuda:N
        gpus = tuple(process_gpus(shard, torch.cuda.device_count()))
        return replace(self, gpus=gpus)

    def load_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`rcstat.load_model`."""
        import torch

        if self.device_map is not None:  # on GPUs: the checkpoint's dtype by default
            kwargs: dict[str, Any] = {"device_map": self.device_map, "dtype": self.dtype or "auto"}
            if self.gpus:  # this process's group of GPUs only
                kwargs["max_memory"] = {
                    i: int(torch.cuda.get_device_properties(i).total_memory * 0.9)
                    for i in self.gpus
                }
            return kwargs
        if self.gpus:
            return {"device": f"cuda:{self.gpus[0]}", "dtype": self.dtype}
        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        return {"device": None if device == "cpu" else device, "dtype": self.dtype}


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


def optional_count(option: str, value: int | None, *, low: int = 1) -> int | None:
    """``None`` or a checked count."""
    return None if value is None else check_count(option, value, low=low)


def split_list(text: str) -> list[str]:
    """``"a,b,,c"`` → ``["a", "b", "c"]`` (argparse type of list options)."""
    return [v.strip() for v in text.split(",") if v.strip()]


def float_list(option: str, values: Sequence[str], **bounds: Any) -> list[float]:
    """Comma-separated numbers of ``option``, each checked; an empty list is an error."""
    return _checked_list(
        option, values, float, "a number", lambda v: check_number(option, v, **bounds)
    )


def int_list(option: str, values: Sequence[str], *, low: int = 1) -> list[int]:
    """Comma-separated integers of ``option``, each ``>= low``."""
    return _checked_list(
        option, values, int, "an integer", lambda v: check_count(option, v, low=low)
    )


def _checked_list(
    option: str, values: Sequence[str], parse: Any, what: str, check: Any
) -> list[Any]:
    if not values:
        raise ValueError(f"{option} needs at least one value")
    out = []
    for value in values:
        try:
            parsed = parse(value)
        except ValueError as err:
            raise ValueError(f"{option}: {value!r} is not {what}") from err
        out.append(check(parsed))
    return out


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


def load_model_quietly(model: str | None, placement: Placement | None = None) -> tuple[Any, Any]:
    """Load ``--model`` where ``placement`` says, with a progress line and without
    transformers' loading bars."""
    from rcstat.models import load_model

    placement = placement or Placement()
    if placement.gpus:  # work that names no device (kernels, streams) goes to this process's
        import torch

        torch.cuda.set_device(placement.gpus[0])
    with step("loading model…"):
        return load_model(model, **placement.load_kwargs())


def check_output_folder(out: Path, command: str) -> None:
    """Refuse an ``--out`` that holds files rcstat's ``command`` did not write.

    An absent or empty folder, or one whose :data:`OUTPUT_MARKER` names the same command, is
    fine (the command's previous files there are replaced as a whole).
    """
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder")
    if not out.is_dir() or not any(out.iterdir()):
        return
    marker = _read_marker(out)
    if marker is None:
        raise ValueError(
            f"--out {out} is not empty and was not written by rcstat; choose a new or empty "
            "folder (rcstat never replaces files it did not write)"
        )
    if marker.get("command") != command:
        raise ValueError(
            f"--out {out} holds the output of `rcstat {marker.get('command')}`, not of "
            f"`rcstat {command}`; choose another folder"
        )


def _read_marker(out: Path) -> dict[str, Any] | None:
    path = out / OUTPUT_MARKER
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@contextmanager
def staged_output(out: Path, command: str, *, keep: Sequence[str] = ()) -> Iterator[Path]:
    """Yield a temporary folder; on success move its files into ``out``, else delete it.

    ``out`` is checked by :func:`check_output_folder` first. Files that this command wrote
    there before and does not write again are removed (no stale results beside new ones),
    except those named in ``keep`` (the rows of a resumable run). The files written are
    listed in ``out``'s :data:`OUTPUT_MARKER`.
    """
    check_output_folder(out, command)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield stage
        out.mkdir(parents=True, exist_ok=True)
        previous = _read_marker(out) or {}
        written = sorted(item.name for item in stage.iterdir())
        for name in previous.get("files", []):
            stale = out / str(name)
            if name not in written and name not in keep and stale.is_file():
                stale.unlink()
        for name in written:
            target = out / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
            shutil.move(str(stage / name), target)
        marker = {"command": command, "files": sorted({*written, *keep})}
        (out / OUTPUT_MARKER).write_text(json.dumps(marker, indent=1), encoding="utf-8")
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def clip(text: str, width: int = 70) -> str:
    """One line of at most ``width`` characters (``…`` marks a cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def answer_line(label: str, text: str, finished: bool | None) -> str:
    """``label: 'text'`` with a visible mark when the answer was cut at the token limit."""
    return f"{label}: {text!r}" + ("" if finished is not False else CUT_MARK)


def claim_output_folder(out: Path, command: str) -> None:
    """Check ``out`` (see :func:`check_output_folder`) and mark it as ``command``'s, for
    commands that write rows into ``out`` as they go (resumable runs)."""
    check_output_folder(out, command)
    out.mkdir(parents=True, exist_ok=True)
    if _read_marker(out) is None:
        marker = {"command": command, "files": []}
        (out / OUTPUT_MARKER).write_text(json.dumps(marker, indent=1), encoding="utf-8")
