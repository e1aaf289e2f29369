"""The ``--model`` option's checks, made before anything loads: the path names a checkpoint
folder, a ``.gguf`` file or a hub id, and ``--top-k`` fits the heads its ``config.json`` names."""

from __future__ import annotations

import json
from pathlib import Path

from rcstat.checks import is_hub_id
from rcstat.defaults import DEFAULT_MODEL_HEADS, DEFAULT_MODEL_NAME

__all__ = ["check_model_option", "check_top_k", "config_heads"]

#: What ``--model`` takes, closing each of its refusals.
_GIVE = "(give a checkpoint folder, a .gguf file or a hub id such as organization/name)"


def check_model_option(model: str | None) -> None:
    """Refuse, before anything loads, a ``--model`` that names a local folder without a
    ``config.json`` (not a checkpoint), a missing ``.gguf`` file, another file, or a missing
    path that cannot be a hub id (``ValueError`` naming ``--model``); hub ids and the embedded
    default pass."""
    if model is None:
        return
    path = Path(model).expanduser()
    if not path.exists() and not is_hub_id(model):
        raise ValueError(f"--model {model}: no such file or folder, and not a hub id {_GIVE}")
    if path.is_dir() and not (path / "config.json").is_file():
        raise ValueError(
            f"--model {model}: a folder without a config.json, not a model checkpoint {_GIVE}"
        )
    if model.endswith(".gguf") and not path.is_file():
        raise ValueError(f"--model {model}: no such file")
    if path.is_file() and not model.endswith(".gguf"):
        raise ValueError(f"--model {model}: a file but not a .gguf file {_GIVE}")


def config_heads(model: str | None) -> int | None:
    """The number of attention heads (layers × heads per layer) of ``--model`` read from its
    ``config.json`` without loading any weight; None when there is no local config to read
    (a GGUF file or a hub id: the library checks after loading); the embedded default's
    :data:`~rcstat.defaults.DEFAULT_MODEL_HEADS`."""
    if model is None or model == DEFAULT_MODEL_NAME:
        return DEFAULT_MODEL_HEADS
    config = Path(model).expanduser() / "config.json"
    if not config.is_file():
        return None
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
        data = data.get("text_config", data)
        return int(data["num_hidden_layers"]) * int(data["num_attention_heads"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def check_top_k(top_k: int | None, model: str | None) -> None:
    """Refuse ``--top-k`` beyond the heads of ``--model`` when its config tells them."""
    heads = None if top_k is None else config_heads(model)
    if heads is not None and top_k is not None and top_k > heads:
        raise ValueError(f"--top-k {top_k}: the model has {heads} heads (layers × heads)")
