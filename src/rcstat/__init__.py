"""rcstat: Relative Contextualization statistics from pre-softmax attention scores.

The public names are resolved lazily (PEP 562), so ``import rcstat.stats`` stays a pure
torch import and ``import rcstat`` does no work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rcstat.lazy import lazy_names

if TYPE_CHECKING:
    from rcstat.analysis import HeadAnalysis, analyze
    from rcstat.attribution import Attribution, Attributor
    from rcstat.grounding import Grounder, Grounding, GroundingProbe, HeadProfile
    from rcstat.models import load_model
    from rcstat.press.rcstat_press import RCStatPress

__all__ = [
    "Attribution",
    "Attributor",
    "Grounder",
    "Grounding",
    "GroundingProbe",
    "HeadAnalysis",
    "HeadProfile",
    "RCStatPress",
    "analyze",
    "load_model",
]

_HOMES = {
    "Attribution": "rcstat.attribution",
    "Attributor": "rcstat.attribution",
    "Grounder": "rcstat.grounding",
    "Grounding": "rcstat.grounding",
    "GroundingProbe": "rcstat.grounding",
    "HeadProfile": "rcstat.grounding",
    "HeadAnalysis": "rcstat.analysis",
    "analyze": "rcstat.analysis",
    "load_model": "rcstat.models",
    "RCStatPress": "rcstat.press.rcstat_press",
}


_names = lazy_names(__name__, _HOMES)


def __getattr__(name: str) -> Any:
    if name == "__version__":  # one source: the installed package's metadata (pyproject.toml)
        from rcstat.runs import rcstat_version

        return rcstat_version()
    return _names(name)
