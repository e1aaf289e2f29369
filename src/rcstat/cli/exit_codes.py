"""The exit statuses of ``rcstat`` (the one home: ``rcstat --help``, ``rcstat ground --help`` and
docs/cli.md list them)."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "ERROR",
    "EXIT_CODES",
    "PAIRS_EXIT_CODES",
    "SUPPORTED",
    "UNSUPPORTED",
    "UNVERIFIED",
    "exit_status_text",
    "pairs_status",
    "pairs_status_text",
]

#: ``rcstat ground``'s verdicts as exit statuses.
SUPPORTED, UNSUPPORTED, UNVERIFIED = 0, 1, 3
#: A usage or input error (one ``error:`` line).
ERROR = 2

#: Exit statuses of every command.
EXIT_CODES = {
    SUPPORTED: "success (for `rcstat ground`: the response is supported)",
    UNSUPPORTED: "unsupported: `rcstat ground` found the response unsupported (its weakest "
    "sentence scores below the threshold); no other command exits with 1",
    ERROR: "usage or input error: a bad option, input file or model, refused with one `error:` "
    "line on standard error before any work where it can be checked first (for `rcstat "
    "ground`, also when --out cannot be written at the end: the verdict is printed first)",
    UNVERIFIED: "unverified: `rcstat ground` found no unsupported sentence but could not check "
    "part of the response (too long for the model's window beside any context)",
    130: "interrupted (Ctrl-C): one `interrupted:` line on standard error says what was kept",
}

#: Exit statuses of ``rcstat ground --pairs``: the verdicts of all its pairs.
PAIRS_EXIT_CODES = {
    SUPPORTED: "every pair is supported",
    UNSUPPORTED: "at least one pair is unsupported",
    ERROR: "a usage or input error (a bad option or line of the file, refused before the model "
    "loads)",
    UNVERIFIED: "no pair is unsupported, but at least one is unverified or could not be scored "
    "(verdict error, its reason in the row)",
    130: "interrupted (the finished rows are kept; run the same command to resume)",
}


def pairs_status(counts: Mapping[str, int]) -> int:
    """The exit status of ``rcstat ground --pairs`` from the count of each verdict
    (:data:`PAIRS_EXIT_CODES`).

    >>> pairs_status({"supported": 3, "unsupported": 1, "unverified": 1, "error": 1})
    1
    >>> pairs_status({"supported": 3, "unsupported": 0, "unverified": 0, "error": 1})
    3
    >>> pairs_status({"supported": 3, "unsupported": 0, "unverified": 0, "error": 0})
    0
    """
    if counts.get("unsupported", 0):
        return UNSUPPORTED
    if counts.get("unverified", 0) or counts.get("error", 0):
        return UNVERIFIED
    return SUPPORTED


def exit_status_text() -> str:
    """``Exit status: 0 …; 1 …; 2 …; 130 ….`` for a help epilog."""
    return "Exit status: " + "; ".join(f"{c} {m}" for c, m in EXIT_CODES.items()) + "."


def pairs_status_text() -> str:
    """``0 …; 1 …; 2 …; 3 …; 130 …`` of ``--pairs`` for its help."""
    return "; ".join(f"{c} {m}" for c, m in PAIRS_EXIT_CODES.items())
