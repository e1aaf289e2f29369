"""Where and in which precision a job's model runs: the device plan, and shards → GPUs.

:class:`Devices` is checked before any model loads (the messages name the command-line flags
``--device``, ``--device-map`` and ``--dtype`` it comes from). In a data-parallel run
(:mod:`rcstat.runs.shards`) each process takes its own GPU, or its own group of GPUs for a
model split with a device map (:func:`~rcstat.runs.shards.process_gpus`). "Devices" names
where the model runs; where the question goes in a prompt is the *question placement*.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from rcstat.runs.shards import Shard, process_gpus

__all__ = ["DEVICE_MAPS", "DTYPES", "Devices"]

#: A ``--device``: ``cpu``, ``cuda`` or ``cuda:N`` (``cpu:0`` as torch writes it).
_DEVICE = re.compile(r"(cpu|cuda)(?::(\d+))?")
#: ``--device-map`` strategies (accelerate) and ``--dtype`` names.
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
DTYPES = ("auto", "float32", "float16", "bfloat16")


def visible_gpus() -> int:
    """The number of CUDA devices this process sees (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@dataclass(frozen=True)
class Devices:
    """Where and in which precision a model runs (checked before it loads).

    ``device`` None picks ``cuda`` when a GPU is visible, else ``cpu``; ``device_map`` (one of
    :data:`DEVICE_MAPS`) splits the model across GPUs instead; ``dtype`` None is float32 on the
    CPU and the checkpoint's own dtype elsewhere; ``gpus`` is this process's group of GPUs in a
    data-parallel run (:meth:`for_shard`).
    """

    device: str | None = None
    device_map: str | None = None
    dtype: str | None = None
    gpus: tuple[int, ...] = ()

    @classmethod
    def from_namespace(cls, ns: Any) -> Devices:
        """The checked plan of an object with ``device``, ``device_map`` and ``dtype``
        attributes (an argparse namespace; an absent attribute is None)."""
        return cls.checked(
            getattr(ns, "device", None), getattr(ns, "device_map", None), getattr(ns, "dtype", None)
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Devices:
        """The checked plan of a mapping with optional ``device``, ``device_map``, ``dtype``."""
        return cls.checked(data.get("device"), data.get("device_map"), data.get("dtype"))

    @classmethod
    def checked(
        cls, device: str | None = None, device_map: str | None = None, dtype: str | None = None
    ) -> Devices:
        """A plan whose device exists: ``ValueError`` naming the flag otherwise."""
        if device is not None and device_map is not None:
            raise ValueError("--device and --device-map: give one of them, not both")
        if device_map is not None and device_map not in DEVICE_MAPS:
            raise ValueError(f"--device-map {device_map!r}: choose one of {', '.join(DEVICE_MAPS)}")
        if dtype is not None and dtype not in DTYPES:
            raise ValueError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
        if device_map is not None and not visible_gpus():
            raise ValueError(
                f"--device-map {device_map}: no GPU is visible (it splits a model across GPUs; "
                "leave it out to run on the CPU)"
            )
        if device is not None:
            parsed = _DEVICE.fullmatch(device.strip())
            if parsed is None:
                raise ValueError(
                    f"--device {device!r} is not a device: only cpu, cuda and cuda:N are supported"
                )
            if parsed[1] == "cuda":  # only then is torch asked what it sees
                visible = visible_gpus()
                index = None if parsed[2] is None else int(parsed[2])
                if (index is not None and index >= visible) or not visible:
                    raise ValueError(f"--device {device}: {visible} CUDA device(s) visible")
        return cls(device=device, device_map=device_map, dtype=dtype)

    def for_shard(self, shard: Shard) -> Devices:
        """This process's plan in a data-parallel run: its own GPU (or group of GPUs for
        ``--device-map``, see :func:`~rcstat.runs.shards.process_gpus`) unless ``--device``
        names one; unchanged for a single process or on the CPU."""
        if not shard.split or (self.device is not None and self.device != "cuda"):
            return self  # one process; or cpu, or an explicit cuda:N (no torch import)
        import torch

        if not torch.cuda.is_available():
            return self
        gpus = tuple(process_gpus(shard, torch.cuda.device_count()))
        return replace(self, gpus=gpus)

    def select(self) -> None:
        """Make this process's first GPU the current one, so that work that names no device
        (kernels, streams) goes there; nothing without ``gpus``."""
        if self.gpus:
            import torch

            torch.cuda.set_device(self.gpus[0])

    def load_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`rcstat.load_model`."""
        import torch

        if self.device_map is not None:  # on GPUs: the checkpoint's dtype by default
            kwargs: dict[str, Any] = {"device_map": self.device_map, "dtype": self.dtype or "auto"}
            if self.gpus:  # this process's group of GPUs only
                kwargs["max_memory"] = {
                    i: int(torch.cuda.get_device_properties(i).total_memory * 0.9)
                    for i in self.gpus
                }
            return kwargs
        if self.gpus:
            return {"device": f"cuda:{self.gpus[0]}", "dtype": self.dtype}
        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        return {"device": None if device == "cpu" else device, "dtype": self.dtype}
