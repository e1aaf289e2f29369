"""Head profiles: which heads read the context, measured without hallucination labels.

A :class:`HeadProfile` holds, for every head of one model, its mean token-level normalized RC
(:mod:`rcstat.grounding.features`) over responses that the model wrote itself with the
context in front of it (e.g. its greedy answers to the SQuAD v2 slice's questions). Heads
with a high mean read the context rather than the response when they write: the *contextual*
heads that :class:`~rcstat.grounding.Grounder` averages over. No hallucination label is used
to choose them. On the same answers it measures each head's ``copy`` weight
(:mod:`rcstat.grounding.features`) at the words the model took from the context: the *copy*
heads, whose attention lands on the source of a copied word, are the top
:data:`COPY_HEADS`. The profile also fixes the grounding threshold, calibrated on copied and
changed facts built from the same contexts (:mod:`rcstat.grounding.swaps`): ``quantile`` is
the share of the copied sentences that fall below it.

Profiles are JSON files. One ships for the default model; ``rcstat ground-profile`` computes
one for any model.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from rcstat.defaults import DEFAULT_GROUNDING_FRACTION
from rcstat.grounding.json_file import check_format, save_json

__all__ = ["COPY_HEADS", "HeadProfile", "shipped_profile"]

_FORMAT = "rcstat-head-profile-2"
_OLD_FORMATS = ("rcstat-head-profile-1",)
#: Copy heads the word score sums over.
COPY_HEADS = 10
DEFAULT_FRACTION = DEFAULT_GROUNDING_FRACTION


@dataclass
class HeadProfile:
    """Per-head mean normalized RC on label-free data, and the grounding threshold.

    Attributes
    ----------
    model
        Name of the model the profile was measured on.
    values
        ``[layers, heads]`` mean token-level normalized RC (in ``[0, 1]``).
    threshold
        Responses and sentences scoring below it are flagged unsupported.
    quantile
        The share of the label-free responses below ``threshold``.
    fraction
        Share of the heads (highest ``values`` first) the RC statistics average over.
    source
        What the profile was measured on (dataset, size, generation settings, calibration).
    copy_values
        ``[layers, heads]`` mean ``copy`` weight of each head at the tokens of the model's own
        answers whose word occurs in the context; the top :data:`COPY_HEADS` are the copy
        heads.
    """

    model: str
    values: np.ndarray  # [layers, heads]
    threshold: float
    quantile: float
    fraction: float = DEFAULT_FRACTION
    source: dict[str, Any] = field(default_factory=dict)
    copy_values: np.ndarray | None = None  # [layers, heads]

    def __post_init__(self) -> None:
        self.values = np.asarray(self.values, dtype=np.float64)
        if self.values.ndim != 2 or self.values.size == 0:
            raise ValueError(f"values must be [layers, heads], got shape {self.values.shape}")
        if not np.isfinite(self.values).all():
            raise ValueError("values contain NaN or infinite entries")
        if not 0 < self.fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {self.fraction}")
        if not 0 < self.quantile < 1:
            raise ValueError(f"quantile must be in (0, 1), got {self.quantile}")
        if not math.isfinite(self.threshold):
            raise ValueError(f"threshold must be finite, got {self.threshold}")
        if self.copy_values is not None:
            self.copy_values = np.asarray(self.copy_values, dtype=np.float64)
            if self.copy_values.shape != self.values.shape:
                raise ValueError(
                    f"copy_values must be {self.values.shape}, got {self.copy_values.shape}"
                )
            if not np.isfinite(self.copy_values).all():
                raise ValueError("copy_values contain NaN or infinite entries")

    def copy_heads(self, count: int = COPY_HEADS) -> np.ndarray:
        """Flat indices of the ``count`` heads with the highest ``copy_values`` (ties by
        index); ValueError for a profile measured before copy heads existed."""
        if self.copy_values is None:
            raise ValueError(
                f"the head profile of {self.model} has no copy heads (it predates them): "
                "measure it again with `rcstat ground-profile`"
            )
        flat = self.copy_values.ravel()
        return np.argsort(-flat, kind="stable")[: min(count, flat.size)]

    @property
    def shape(self) -> tuple[int, int]:
        """``(layers, heads)``."""
        layers, heads = self.values.shape
        return int(layers), int(heads)

    def heads(self, fraction: float | None = None) -> np.ndarray:
        """Flat indices ``layer * heads + head`` of the top ``fraction`` of heads (at least
        one), highest profile value first (ties by index)."""
        share = self.fraction if fraction is None else fraction
        if not 0 < share <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {share}")
        flat = self.values.ravel()
        count = max(1, round(share * flat.size))
        return np.argsort(-flat, kind="stable")[:count]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types."""
        return {
            "format": _FORMAT,
            "model": self.model,
            "threshold": self.threshold,
            "quantile": self.quantile,
            "fraction": self.fraction,
            "source": self.source,
            "values": self.values.round(6).tolist(),
            "copy_values": None if self.copy_values is None else self.copy_values.round(6).tolist(),
        }

    def save(self, path: str | Path) -> Path:
        """Write a ``.json`` file that :meth:`load` reads back."""
        return save_json(path, json.dumps(self.to_dict(), indent=1), "HeadProfile.save")

    @classmethod
    def from_dict(cls, data: Any, where: str = "profile") -> HeadProfile:
        """Build from :meth:`to_dict` output; raises ValueError naming ``where``."""
        if isinstance(data, dict) and data.get("format") in _OLD_FORMATS:
            raise ValueError(
                f"{where}: a head profile of an older rcstat ({data['format']}, without copy "
                "heads or a calibrated threshold): measure it again with `rcstat ground-profile`"
            )
        check_format(data, _FORMAT, where, "head profile")
        try:
            return cls(
                model=str(data["model"]),
                values=np.array(data["values"], dtype=np.float64),
                threshold=float(data["threshold"]),
                quantile=float(data["quantile"]),
                fraction=float(data["fraction"]),
                source=dict(data.get("source", {})),
                copy_values=None
                if data.get("copy_values") is None
                else np.array(data["copy_values"], dtype=np.float64),
            )
        except KeyError as err:
            raise ValueError(f"{where}: missing key {err}") from None

    @classmethod
    def load(cls, path: str | Path) -> HeadProfile:
        """Read a file written by :meth:`save`."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not JSON ({err})") from None
        return cls.from_dict(data, str(path))


def shipped_profile(model_name: str) -> HeadProfile | None:
    """The profile shipped with rcstat for a model of this name (``config.name_or_path``'s
    last part), or None."""
    name = Path(model_name).name
    folder = resources.files("rcstat.grounding") / "profiles"
    candidate = folder / f"{name}.json"
    if not candidate.is_file():
        return None
    return HeadProfile.from_dict(json.loads(candidate.read_text(encoding="utf-8")), name)
