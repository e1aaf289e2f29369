"""Grounding: is a response supported by its context? (docs/grounding.md)

:class:`Grounder` scores every token, sentence and the whole response from one teacher-forced
pass of an analysis model; :class:`Grounding` is its result; :class:`HeadProfile` names the
contextual heads without hallucination labels; :class:`GroundingProbe` is the trained
alternative (logistic regression on per-head features).

The public names are resolved lazily (PEP 562): the light submodules (``limits``, ``score``,
``lexicon``) import without torch or transformers, so a command checks its options before the
heavy imports.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rcstat.grounding.cross_validation import CrossValidation, cross_validate
    from rcstat.grounding.grounder import Grounder
    from rcstat.grounding.measure import DEFAULT_INSTRUCTION, Measurement, Measurer
    from rcstat.grounding.probe import GroundingProbe
    from rcstat.grounding.profile import HeadProfile, shipped_profile
    from rcstat.grounding.result import Grounding, SentenceGrounding

__all__ = [
    "DEFAULT_INSTRUCTION",
    "CrossValidation",
    "Grounder",
    "Grounding",
    "GroundingProbe",
    "HeadProfile",
    "Measurement",
    "Measurer",
    "SentenceGrounding",
    "cross_validate",
    "shipped_profile",
]

_HOMES = {
    "CrossValidation": "cross_validation",
    "cross_validate": "cross_validation",
    "Grounder": "grounder",
    "DEFAULT_INSTRUCTION": "measure",
    "Measurement": "measure",
    "Measurer": "measure",
    "GroundingProbe": "probe",
    "HeadProfile": "profile",
    "shipped_profile": "profile",
    "Grounding": "result",
    "SentenceGrounding": "result",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(f"rcstat.grounding.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'rcstat.grounding' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
