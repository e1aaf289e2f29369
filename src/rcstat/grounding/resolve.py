"""The grounder's trained parts from its options: the head profile, the detector and the
probe, each given as an object, a JSON file, or (profile, detector) the one shipped for the
model."""

from __future__ import annotations

from pathlib import Path

from rcstat.grounding.detector import Detector, shipped_detector
from rcstat.grounding.probe import GroundingProbe
from rcstat.grounding.profile import HeadProfile, shipped_profile

__all__ = ["resolve_detector", "resolve_probe", "resolve_profile"]


def resolve_detector(
    detector: Detector | str | Path | bool | None, model_name: str, layers: int, heads: int
) -> Detector | None:
    """The detector of ``GroundingOptions.detector`` for a model of ``layers`` layers of
    ``heads`` attention heads: None
    for ``False``; the shipped one for None (``True``: it must ship); else the object or file
    given."""
    if detector is False:
        return None
    if isinstance(detector, Detector):
        chosen: Detector | None = detector
    elif detector is None or detector is True:
        chosen = shipped_detector(model_name)
        if chosen is None and detector is True:
            raise ValueError(
                f"no detector ships for {model_name!r}: train one with `rcstat ground-train`"
            )
    else:
        chosen = Detector.load(detector)
    if chosen is not None and (chosen.layers, chosen.heads) != (layers, heads):
        raise ValueError(
            f"the detector is for a model of {chosen.layers} layers of {chosen.heads} heads "
            f"({chosen.model}); the model has {layers} layers of {heads} heads"
        )
    return chosen


def resolve_profile(profile: HeadProfile | str | Path | None, model_name: str) -> HeadProfile:
    """The head profile given (object or file), else the one shipped for ``model_name``."""
    if isinstance(profile, HeadProfile):
        return profile
    if profile is not None:
        return HeadProfile.load(profile)
    shipped = shipped_profile(model_name)
    if shipped is None:
        raise ValueError(
            f"no head profile ships for {model_name!r}: compute one with "
            "`rcstat ground-profile --model <model> --out <folder>` and pass "
            "profile=<folder>/profile.json"
        )
    return shipped


def resolve_probe(
    probe: GroundingProbe | str | Path | None, names: list[str]
) -> GroundingProbe | None:
    """The probe given (object or file), checked against the model's feature ``names``."""
    if probe is None:
        return None
    loaded = probe if isinstance(probe, GroundingProbe) else GroundingProbe.load(probe)
    if loaded.feature_names != names:
        raise ValueError(
            f"the probe was trained on {len(loaded.feature_names)} features "
            f"({loaded.feature_names[0]} ...); this model gives {len(names)} ({names[0]} ...)"
        )
    return loaded
