"""What ``rcstat ground`` prints for one grounded response: the console table and the exit
status of the verdict (the library's result, :class:`~rcstat.commands.ground.GroundResult`,
holds the grounding, the ``--json`` object that :func:`rcstat.cli._common.print_json` prints,
and the files).

* :func:`print_table`: the console table, whole sentences and their evidence wrapped to the
  terminal, never cut.
* :func:`verdict_status`: the exit status of the verdict (:mod:`rcstat.cli.exit_codes`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from rcstat.cli._common import console
from rcstat.cli.exit_codes import SUPPORTED, UNSUPPORTED, UNVERIFIED

if TYPE_CHECKING:
    from rcstat.grounding.result import Grounding

__all__ = ["print_table", "verdict_status"]


def verdict_status(verdict: str) -> int:
    """The exit status of a verdict: 0 supported, 1 unsupported, 3 unverified.

    >>> verdict_status("unsupported"), verdict_status("unverified")
    (1, 3)
    """
    return {"supported": SUPPORTED, "unsupported": UNSUPPORTED}.get(verdict, UNVERIFIED)


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
