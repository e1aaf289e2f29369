"""What ``rcstat ground`` prints for one grounded response, and its checks of what it reads.

* :func:`result_document`: the JSON object of ``--json`` (verdict, score, threshold, every
  sentence with its score, verdict and evidence); :func:`print_json` writes it, alone, on
  standard output.
* :func:`print_table`: the console table, whole sentences and their evidence wrapped to the
  terminal, never cut.
* :func:`write_results`: the files of ``--out``, or the error line when they cannot be written.
* :func:`verdict_status`: the exit status of the verdict (:mod:`rcstat.cli.exit_codes`).
* :func:`language_warning`: one line when a text is mostly not in the Latin script while the
  analysis model is the default, English-only one.

``rcstat ground --pairs`` can build its rows and checks from the same helpers.
"""

from __future__ import annotations

import json
import math
import sys
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from rcstat.cli._common import console, staged_output, step
from rcstat.cli.exit_codes import SUPPORTED, UNSUPPORTED, UNVERIFIED
from rcstat.defaults import DEFAULT_MODEL_NAME

if TYPE_CHECKING:
    from rcstat.grounding.result import Grounding

__all__ = [
    "MODEL_LANGUAGES",
    "language_warning",
    "latin_share",
    "print_json",
    "print_table",
    "result_document",
    "verdict_status",
    "write_results",
]

#: The languages of the default analysis model (SmolLM2-135M-Instruct is trained on English).
MODEL_LANGUAGES = f"the default analysis model {DEFAULT_MODEL_NAME} reads English only"
#: Below this share of Latin letters a text is "mostly not in the Latin script".
LATIN_SHARE_MIN = 0.5


def verdict_status(result: Grounding) -> int:
    """The exit status of the verdict: 0 supported, 1 unsupported, 3 unverified."""
    return {"supported": SUPPORTED, "unsupported": UNSUPPORTED}.get(result.verdict, UNVERIFIED)


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


def language_warning(model: str | None, texts: dict[str, str]) -> str | None:
    """The warning line when the model is the default and a text (``{option: text}``) is mostly
    not in the Latin script (under :data:`LATIN_SHARE_MIN` of its letters); None otherwise."""
    if model not in (None, DEFAULT_MODEL_NAME):
        return None
    for option, text in texts.items():
        share = latin_share(text)
        if share < LATIN_SHARE_MIN:  # NaN (no letter) compares False
            return (
                f"warning: the {option} is mostly not in the Latin script ({share:.0%} Latin "
                f"letters) and {MODEL_LANGUAGES}: its scores are unreliable there; "
                "pass --model with a model that reads the language"
            )
    return None


def _number(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def result_document(result: Grounding, out: Path | None = None) -> dict[str, Any]:
    """The JSON object of one grounded response (plain JSON types; NaN written as null).

    ``verdict`` is ``"supported"``, ``"unsupported"`` or ``"unverified"``
    (:attr:`Grounding.verdict`); each sentence is :meth:`Grounding.sentence_dict` (the schema
    of ``Grounding.to_dict`` and of the rows of ``--pairs``): its score and verdict, the context
    sentence that supports it (``support``: character span in the context, text, share) and
    its least supported word (``weakest_word``: character span in the response, text, score).
    ``spans`` are the unsupported spans (character offsets in the response, text, score), the
    same as in ``Grounding.to_dict`` and the ``--pairs`` rows; ``method`` says which score
    judged (``"detector"`` or ``"zero-shot"``). ``out`` is the folder the files were written to
    (None when they could not be written).
    """
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
        "out": None if out is None else str(out),
    }


def write_results(result: Grounding, out: Path, command: str) -> str | None:
    """Write ``ground.json``, ``ground.csv``, ``ground_tokens.csv`` and ``ground.html`` into
    ``out`` (staged: all or none); the one-line error naming ``--out`` when they cannot be
    written (None when they were), so that the verdict can still be printed."""
    from rcstat.report.grounding_html import save_grounding_html

    try:
        with step("writing results…"), staged_output(out, command) as stage:
            result.to_frame().to_csv(stage / "ground.csv", index=False)
            result.to_frame("token").to_csv(stage / "ground_tokens.csv", index=False)
            result.save(stage / "ground.json")
            save_grounding_html(stage / "ground.html", result)
    except OSError as err:
        return f"cannot write --out {out}: {err.strerror or err}; the verdict above is not saved"
    return None


def print_json(result: Grounding, out: Path | None = None) -> None:
    """Write :func:`result_document` on standard output as one line of JSON."""
    sys.stdout.write(json.dumps(result_document(result, out), ensure_ascii=False) + "\n")
    sys.stdout.flush()


def print_table(result: Grounding) -> None:
    """The verdict line and a table of every sentence, its score and its evidence: the context
    sentence that supports it, or the weakest word of an unsupported one; wrapped, not cut."""
    verdict = result.verdict if result.supported else result.verdict.upper()
    windows = "" if result.windows == 1 else f"; context read in {result.windows} windows"
    console.print(
        f"response score {result.score:.3f} (threshold {result.threshold:.3f}): {verdict}"
        + windows
        + ("" if result.probe_score is None else f"; probe p(unsupported) {result.probe_score:.3f}")
    )
    table = Table(title="sentences")
    table.add_column("#", justify="right")
    table.add_column("sentence", overflow="fold", ratio=1)
    table.add_column("score", justify="right")
    table.add_column("evidence", overflow="fold", ratio=1)
    for i, sentence in enumerate(result.sentences):
        if sentence.status == "supported":
            support = sentence.support
            evidence = "—" if support is None else escape(" ".join(support.text.split()))
            mark = ""
        elif sentence.status == "unverified":
            limit = result.method.get("max_tokens")
            where = "" if limit is None else f" {limit:,}"
            evidence = (
                f"[bold yellow]unverified[/]: past the{where} tokens of one pass (--max-tokens)"
            )
            mark = "? "
        else:
            inside = [
                span.text
                for span in result.spans
                if span.start < sentence.end and span.end > sentence.start
            ]
            word = sentence.weakest
            named = "" if word is None else f": {word.text!r} is not supported"
            if inside:
                named += " — spans " + ", ".join(repr(" ".join(t.split())) for t in inside)
            evidence, mark = f"[bold red]unsupported[/]{escape(named)}", "✗ "
        table.add_row(
            str(i + 1),
            mark + escape(" ".join(sentence.text.split())),
            "—" if math.isnan(sentence.score) else f"{sentence.score:.3f}",
            evidence,
        )
    console.print(table, soft_wrap=False)
