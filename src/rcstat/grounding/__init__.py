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

from typing import TYPE_CHECKING

from rcstat.lazy import lazy_names

if TYPE_CHECKING:
    from rcstat.grounding.cross_validation import CrossValidation, cross_validate
    from rcstat.grounding.grounder import Grounder
    from rcstat.grounding.measure import DEFAULT_INSTRUCTION, Measurer
    from rcstat.grounding.measurement import Measurement
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
    "CrossValidation": "rcstat.grounding.cross_validation",
    "cross_validate": "rcstat.grounding.cross_validation",
    "Grounder": "rcstat.grounding.grounder",
    "DEFAULT_INSTRUCTION": "rcstat.grounding.measure",
    "Measurement": "rcstat.grounding.measurement",
    "Measurer": "rcstat.grounding.measure",
    "GroundingProbe": "rcstat.grounding.probe",
    "HeadProfile": "rcstat.grounding.profile",
    "shipped_profile": "rcstat.grounding.profile",
    "Grounding": "rcstat.grounding.result",
    "SentenceGrounding": "rcstat.grounding.result",
}

__getattr__ = lazy_names(__name__, _HOMES)


def __dir__() -> list[str]:
    return sorted(__all__)
