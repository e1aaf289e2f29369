"""The options of :class:`~rcstat.grounding.Grounder`: their one home, defaults and checks.

:class:`GroundingOptions` is to the grounder what :class:`~rcstat.press.options.RCStatOptions`
is to the press: every option of a verdict, with its default, checked by one validator whose
messages name the option as the caller wrote it (``quantile`` in Python, ``--quantile`` on the
command line). ``rcstat ground`` builds it from its flags (:meth:`GroundingOptions.from_flags`:
each flag defaults to None and the dataclass holds the default), every config that grounds
embeds it, and its :meth:`~GroundingOptions.manifest` is what a run folder records. This module
imports neither torch nor transformers.

Adding a grounding option: a field here (default, check, and its manifest entry when it changes
results), its flag in :mod:`rcstat.cli.ground` (the same name), and where the grounder reads
it (:mod:`rcstat.grounding.grounder`) — three files (CONTRIBUTING.md).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rcstat.checks import check_file, check_language, check_number, optional_count
from rcstat.defaults import (
    DEFAULT_GROUNDING_QUANTILE,
    DEFAULT_LANGUAGE,
    DEFAULT_MAX_CHARS,
    DEFAULT_MAX_RESPONSE_TOKENS,
    MIN_PASS_TOKENS,
)
from rcstat.grounding.limits import check_limit, check_pass_tokens
from rcstat.grounding.score import check_threshold

if TYPE_CHECKING:
    from rcstat.grounding.detector import Detector
    from rcstat.grounding.probe import GroundingProbe
    from rcstat.grounding.profile import HeadProfile

__all__ = ["GroundingOptions"]

#: The options whose value may be a file, and the flag that names it.
_FILES = ("profile", "probe", "detector")


@dataclass(frozen=True)
class GroundingOptions:
    """Every option of a grounding verdict (see :class:`~rcstat.grounding.Grounder`).

    Attributes
    ----------
    profile
        The head profile (:class:`~rcstat.grounding.HeadProfile` or its JSON file); None: the
        one shipped for the model.
    fraction
        Share of the heads (by profile value) the zero-shot score averages over, in ``(0, 1]``;
        None: the profile's.
    quantile
        Lower quantile of its token scores that a sentence scores, in ``(0, 1)``.
    threshold
        The verdict's threshold in ``[0, 1]``; None: the detector's (per kind of response) or
        the profile's.
    probe
        A trained :class:`~rcstat.grounding.GroundingProbe` (or its JSON file) reported beside
        the score.
    top_k
        Heads that attribute each sentence to its evidence (paper eq. 10); None: 20, or every
        head of a smaller model; 0: no eq. (10) in the pass (neither the verdict nor the
        detector uses it), each sentence's evidence only where its words were copied from.
    allow_special_tokens
        Special-token strings in the texts become special tokens (trusted text only).
    language
        Language code of the sentence splitter.
    max_tokens
        Longest input of one pass (a longer context is read in windows); None: the model's
        window.
    max_chars
        Most characters of each text.
    max_response_tokens
        Most tokens of a response.
    detector
        The trained detector (:class:`~rcstat.grounding.detector.Detector` or its JSON file);
        None: the one shipped for the model, if any; False: the zero-shot word score.
    """

    profile: HeadProfile | str | Path | None = None
    fraction: float | None = None
    quantile: float = DEFAULT_GROUNDING_QUANTILE
    threshold: float | None = None
    probe: GroundingProbe | str | Path | None = None
    top_k: int | None = None
    allow_special_tokens: bool = False
    language: str = DEFAULT_LANGUAGE
    max_tokens: int | None = None
    max_chars: int = DEFAULT_MAX_CHARS
    max_response_tokens: int = DEFAULT_MAX_RESPONSE_TOKENS
    detector: Detector | str | Path | bool | None = None

    @classmethod
    def from_flags(cls, flags: Any, **given: Any) -> GroundingOptions:
        """The checked options of an object whose attributes are named as the fields (an
        argparse namespace: a flag left at None keeps the default; ``given`` overrides),
        every message naming the flag."""
        values = {f.name: getattr(flags, f.name, None) for f in fields(cls)}
        values.update(given)
        for option in _FILES:  # a flag gives a file's name
            value = values[option]
            if isinstance(value, str):
                values[option] = Path(value)
        return cls(**{k: v for k, v in values.items() if v is not None}).checked(flags=True)

    def checked(self, *, flags: bool = False) -> GroundingOptions:
        """These options with every value in its range (and, with ``flags``, files that
        exist); a ``ValueError`` naming the first bad one (``--top-k`` with ``flags``, else
        ``top_k``)."""

        def name(option: str) -> str:
            return f"--{option.replace('_', '-')}" if flags else option

        for option in _FILES if flags else ():  # the library opens them (FileNotFoundError)
            value = getattr(self, option)
            if isinstance(value, (str, Path)):
                check_file(name(option), value)
        fraction = self.fraction
        if fraction is not None:
            fraction = check_number(name("fraction"), fraction, low=0.0, high=1.0, low_open=True)
        return replace(
            self,
            fraction=fraction,
            quantile=check_number(
                name("quantile"), self.quantile, low=0.0, high=1.0, low_open=True, high_open=True
            ),
            threshold=check_threshold(self.threshold, name("threshold")),
            top_k=optional_count(name("top_k"), self.top_k, low=0),
            language=check_language(self.language, name("language")),
            max_tokens=check_pass_tokens(name("max_tokens"), self.max_tokens, low=MIN_PASS_TOKENS),
            max_chars=check_limit(name("max_chars"), self.max_chars),
            max_response_tokens=check_limit(name("max_response_tokens"), self.max_response_tokens),
        )

    def manifest(self) -> dict[str, Any]:
        """The options that change results, as a run folder records and compares them (files
        as resolved paths; the limits on input size change no row and are left out)."""
        out: dict[str, Any] = {}
        for option in (
            "profile",
            "probe",
            "fraction",
            "quantile",
            "threshold",
            "top_k",
            "language",
            "allow_special_tokens",
            "max_tokens",
            "detector",
        ):
            value = getattr(self, option)
            if option in _FILES and isinstance(value, (str, Path)):
                value = str(Path(value).resolve())
            elif value is not None and not isinstance(value, (bool, int, float, str)):
                raise ValueError(
                    f"{option}: a run folder records files, not objects; pass the {option}'s "
                    "JSON file"
                )
            out[option] = value
        return out
