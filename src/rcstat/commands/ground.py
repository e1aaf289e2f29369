"""``rcstat ground`` (one pair) as a library call: :class:`GroundConfig` → :func:`run` →
:class:`GroundResult`.

:class:`GroundConfig` holds the texts, the model and the output folder, and embeds the
grounder's :class:`~rcstat.grounding.options.GroundingOptions` (the one home of every option of
a verdict); one validator (:meth:`GroundConfig.check`) names the command-line flag of each
refusal. :func:`run` checks the output folder before the model loads, grounds the response
(:meth:`rcstat.grounding.Grounder.ground`) and, when ``out`` is set, writes the command's
folder (:meth:`GroundResult.write`: ``ground.json``, ``ground.csv``, ``ground_tokens.csv``,
``ground.html``). A folder that cannot be written at the end raises :class:`NotSavedError`,
which holds the result: the verdict is not lost. :meth:`GroundResult.document` is the JSON
object of ``rcstat ground --json``. Many pairs are :mod:`rcstat.evaluation.bench.ground_pairs`.
This module imports neither torch nor pandas.

>>> config = GroundConfig.from_dict(
...     {"context": "The sky is blue.", "response": "Blue.", "options": {"quantile": 0.3}}
... )
>>> config.options.quantile, config.out
(0.3, None)
"""

from __future__ import annotations

import logging
import math
import unicodedata
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rcstat.defaults import DEFAULT_MODEL_NAME
from rcstat.evaluation.bench.common import load_for
from rcstat.grounding.limits import check_texts
from rcstat.grounding.options import GroundingOptions
from rcstat.progress import Step
from rcstat.runs.devices import Devices
from rcstat.runs.folder import check_output_folder, check_writable, staged_output
from rcstat.runs.job import Config

if TYPE_CHECKING:
    from rcstat.evaluation.bench.common import Loader
    from rcstat.grounding.result import Grounding

__all__ = [
    "FILES",
    "MODEL_LANGUAGES",
    "NAME",
    "TEXTS",
    "GroundConfig",
    "GroundResult",
    "NotSavedError",
    "Say",
    "language_warning",
    "latin_share",
    "lowered_note",
    "run",
]

logger = logging.getLogger("rcstat.commands")

#: The command, and the owner of the folders it writes.
NAME = "ground"
#: The files of the folder (:meth:`GroundResult.write`).
FILES = ("ground.json", "ground.csv", "ground_tokens.csv", "ground.html")
#: The languages of the default analysis model (SmolLM2-135M-Instruct is trained on English).
MODEL_LANGUAGES = f"the default analysis model {DEFAULT_MODEL_NAME} reads English only"
#: Below this share of Latin letters a text is "mostly not in the Latin script".
LATIN_SHARE_MIN = 0.5
#: The text fields (each the flag ``--NAME`` or ``--NAME-file`` on the command line).
TEXTS = ("context", "response", "question")

#: Where the notes go (a warning on the texts, a lowered ``max_tokens``); default: the
#: ``rcstat.commands`` logger.
Say = Callable[[str], None]


@dataclass
class GroundConfig(Config):
    """The options of ``rcstat ground`` on one pair, a field a flag (:mod:`rcstat.commands`;
    the grounder's among ``options``).

    Attributes
    ----------
    context, response
        The context (source) and the response to check (both needed).
    question
        The question or instruction the response answers; None: a default instruction.
    options
        The grounder's options (:class:`~rcstat.grounding.options.GroundingOptions`).
    """

    context: str | None = None
    response: str | None = None
    question: str | None = None
    model: str | None = None
    devices: Devices = field(default_factory=Devices)
    out: Path | None = None
    options: GroundingOptions = field(default_factory=GroundingOptions)

    def check(self) -> None:
        """Refuse what ``rcstat ground`` refuses before the model loads: a missing or empty
        text, an option out of its range or a file that is not there, a text longer than
        ``--max-chars``, a response without a word (``ValueError`` naming the flag).

        >>> GroundConfig(context="The sky is blue.", response="?!").check()
        ... # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: the response has no word (no letter or digit): ...
        """
        if self.context is None or self.response is None:
            raise ValueError(
                "ground needs --context (or --context-file) and --response (or --response-file)"
            )
        for name in TEXTS:
            text = getattr(self, name)
            if text is not None and not isinstance(text, str):
                raise ValueError(f"--{name}: expected a text, got {type(text).__name__}")
            if text is not None and not text.strip():
                raise ValueError(f"--{name} is empty or whitespace only")
        self.options = self.options.checked(flags=True)
        check_texts(self.texts(), self.options.max_chars, option="--max-chars")

    def texts(self) -> dict[str, str | None]:
        """``{"context": …, "response": …, "question": …}``."""
        return {name: getattr(self, name) for name in TEXTS}


def latin_share(text: str) -> float:
    """Share of the letters of ``text`` that are Latin (NaN when it has no letter).

    >>> round(latin_share("Tokyo 東京"), 2), latin_share("1962!")
    (0.71, nan)
    """
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return math.nan
    latin = sum(unicodedata.name(c, "").startswith("LATIN") for c in letters)
    return latin / len(letters)


def language_warning(model: str | None, texts: Mapping[str, str]) -> str | None:
    """The warning line when the model is the default and a text (``{what: text}``) is mostly
    not in the Latin script (under :data:`LATIN_SHARE_MIN` of its letters); None otherwise."""
    if model not in (None, DEFAULT_MODEL_NAME):
        return None
    for what, text in texts.items():
        share = latin_share(text)
        if share < LATIN_SHARE_MIN:  # NaN (no letter) compares False
            return (
                f"warning: the {what} is mostly not in the Latin script ({share:.0%} Latin "
                f"letters) and {MODEL_LANGUAGES}: its scores are unreliable there; "
                "pass --model with a model that reads the language"
            )
    return None


def lowered_note(asked: int | None, used: int | None) -> str | None:
    """The line that says ``--max-tokens`` was lowered to the model's window; None when not.

    >>> lowered_note(100_000, 256)
    "note: --max-tokens 100,000 is more than the model's window: 256 used"
    """
    if asked is None or used is None or used >= asked:
        return None
    return f"note: --max-tokens {asked:,} is more than the model's window: {used:,} used"


def _number(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


@dataclass
class GroundResult:
    """What :func:`run` found: the :class:`~rcstat.grounding.Grounding` of the response, and
    the folder it was written to (None: not written)."""

    grounding: Grounding
    out: Path | None = None

    @property
    def verdict(self) -> str:
        """``"supported"``, ``"unsupported"`` or ``"unverified"``
        (:attr:`Grounding.verdict <rcstat.grounding.Grounding.verdict>`)."""
        return self.grounding.verdict

    def document(self) -> dict[str, Any]:
        """The JSON object of ``rcstat ground --json`` (plain JSON types; NaN written as null).

        ``verdict`` is :attr:`verdict`; each sentence is :meth:`Grounding.sentence_dict` (the
        schema of ``Grounding.to_dict`` and of the rows of ``--pairs``): its score and
        verdict, the context sentence that supports it (``support``: character span in the
        context, text, share) and its least supported word (``weakest_word``: character span
        in the response, text, score). ``spans`` are the unsupported spans (character offsets
        in the response, text, score); ``method`` says which score judged (``"detector"`` or
        ``"zero-shot"``); ``out`` is the folder the files were written to (None when they were
        not).
        """
        result = self.grounding
        return {
            "verdict": result.verdict,
            "score": _number(result.score),
            "threshold": result.threshold,
            "method": "zero-shot" if result.token_threshold is None else "detector",
            "spans": [span.to_dict() for span in result.spans],
            "model": result.model,
            "finished": result.finished,
            "windows": result.windows,
            "probe_score": _number(result.probe_score),
            "baselines": {k: _number(v) for k, v in result.baselines.items()},
            "sentences": [result.sentence_dict(s) for s in result.sentences],
            "out": None if self.out is None else str(self.out),
        }

    def write(self, out: Path) -> Path:
        """Write :data:`FILES` into ``out`` (staged: all or none; ``OSError`` when they cannot
        be written) and remember it as :attr:`out`."""
        from rcstat.report.grounding_html import save_grounding_html

        result, out = self.grounding, Path(out)
        with staged_output(out, NAME) as stage:
            result.to_frame().to_csv(stage / "ground.csv", index=False)
            result.to_frame("token").to_csv(stage / "ground_tokens.csv", index=False)
            result.save(stage / "ground.json")
            save_grounding_html(stage / "ground.html", result)
        self.out = out
        return out


class NotSavedError(OSError):
    """The output folder could not be written after the response was grounded: ``result``
    holds the verdict (its ``out`` None); the message names ``--out`` and the reason."""

    def __init__(self, result: GroundResult, out: Path, err: OSError) -> None:
        super().__init__(f"cannot write --out {out}: {err.strerror or err}")
        self.result = result


def run(
    config: GroundConfig,
    *,
    loader: Loader | None = None,
    say: Say | None = None,
    step: Step = nullcontext,
) -> GroundResult:
    """Ground the response of ``config`` against its context and, when ``config.out`` is set,
    write the folder of ``rcstat ground`` there.

    ``config`` (checked again), ``loader`` and ``step`` as for every command
    (:mod:`rcstat.commands`).

    Parameters
    ----------
    say
        Receives the notes: a text mostly not in the Latin script for the default (English)
        model, before it loads; a ``max_tokens`` lowered to the model's window. Default: the
        ``rcstat.commands`` logger.
    step
        ``step(message)`` shows progress around grounding and writing; silent by default.
        The windows of a long context show their progress on standard error.

    Raises
    ------
    ValueError
        A bad option, or an output folder of another command, with files rcstat did not
        write or that cannot be written (before the model loads); a profile of another shape
        than the model, a response longer than ``max_response_tokens``.
    NotSavedError
        The folder could not be written at the end (``err.result`` holds the verdict).
    """
    from rcstat.grounding.grounder import Grounder

    config.check()
    notes = logger.warning if say is None else say
    if config.out is not None:
        check_output_folder(Path(config.out), NAME)
        check_writable(Path(config.out))
    context, response, question = config.context, config.response, config.question
    assert context is not None and response is not None  # checked
    warning = language_warning(config.model, {"context": context, "response": response})
    if warning is not None:
        notes(warning)
    model, tokenizer = load_for(config, loader)
    grounder = Grounder(model, tokenizer, config.options)
    note = lowered_note(config.options.max_tokens, grounder.max_tokens)
    if note is not None:
        notes(note)
    with step("grounding…"):
        grounding = grounder.ground(context, response, question, show_progress=True)
    result = GroundResult(grounding)
    if config.out is not None:
        try:
            with step("writing results…"):
                result.write(Path(config.out))
        except OSError as err:
            raise NotSavedError(result, Path(config.out), err) from err
    return result
