"""The exit statuses of ``rcstat`` (the one home: ``rcstat --help``, ``rcstat ground --help`` and
the README list them)."""

from __future__ import annotations

__all__ = ["EXIT_CODES", "SUPPORTED", "UNSUPPORTED", "UNVERIFIED", "exit_status_text"]

#: ``rcstat ground``'s verdicts as exit statuses.
SUPPORTED, UNSUPPORTED, UNVERIFIED = 0, 1, 3

#: Exit statuses of every command.
EXIT_CODES = {
    SUPPORTED: "success (for `rcstat ground`: the response is supported)",
    UNSUPPORTED: "unsupported: `rcstat ground` found the response unsupported (its weakest "
    "sentence scores below the threshold); no other command exits with 1",
    2: "usage or input error: a bad option, input file or model, refused with one `error:` "
    "line on standard error before any work where it can be checked first",
    UNVERIFIED: "unverified: `rcstat ground` found no unsupported sentence but could not check "
    "part of the response (too long for the model's window beside any context)",
    130: "interrupted (Ctrl-C): one `interrupted:` line on standard error says what was kept",
}


def exit_status_text() -> str:
    """``Exit status: 0 …; 1 …; 2 …; 130 ….`` for a help epilog."""
    return "Exit status: " + "; ".join(f"{c} {m}" for c, m in EXIT_CODES.items()) + "."
