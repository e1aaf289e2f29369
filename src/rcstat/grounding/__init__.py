"""Grounding: is a response supported by its context? (docs/grounding.md)

:class:`Grounder` scores every token, sentence and the whole response from one teacher-forced
pass of an analysis model; :class:`Grounding` is its result; :class:`HeadProfile` names the
contextual heads without hallucination labels; :class:`GroundingProbe` is the trained
alternative (logistic regression on per-head features).
"""

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
