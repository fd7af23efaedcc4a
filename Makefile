# mlrecipe — developer entry points. `make demo` and `make test` work on a fresh Debian machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_VERSION ?= 2.13.0
STAMP := $(VENV)/.installed

.PHONY: help venv system-deps demo test test-fast lint bench golden clean

help:
	@echo "make demo        create the environment and run examples/quickstart locally"
	@echo "make test        install everything needed and run lint + the whole test suite"
	@echo "make test-fast   unit tests only (no real processes)"
	@echo "make lint        ruff"
	@echo "make bench       benchmark scripts (figures printed, see README)"
	@echo "make golden      refresh golden files (review the diff)"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The pinned CPU wheel first: an unpinned torch pulls a multi-GB CUDA build.
	$(BIN)/pip install -q torch==$(TORCH_VERSION) numpy
	$(BIN)/pip install -q -e '.[ml,kubernetes,dev]'
	touch $@

venv: $(STAMP)

# Debian packages the integration tests use (Open MPI, util-linux's unshare, git, Slurm + munge).
system-deps:
	@missing=""; \
	command -v mpirun >/dev/null || missing="$$missing openmpi-bin libopenmpi-dev"; \
	command -v unshare >/dev/null || missing="$$missing util-linux"; \
	command -v git >/dev/null || missing="$$missing git"; \
	command -v slurmctld >/dev/null || missing="$$missing slurm-wlm munge"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "missing Debian packages:$$missing (sudo apt-get install$$missing)"; exit 1; fi; \
	fi

demo: venv
	$(BIN)/mlrecipe run examples/quickstart/pipeline.yaml
	@echo "--- evaluation (held-out perplexity) ---"
	@$(BIN)/mlrecipe logs quickstart evaluate | grep -E "perplexity" | head -1

lint: venv
	$(BIN)/ruff check src tests benchmarks examples

test: venv system-deps lint
	$(BIN)/python -m pytest -q

test-fast: venv
	$(BIN)/python -m pytest -q -m "not integration"

bench: venv
	$(BIN)/python benchmarks/bench_cli_overhead.py

golden: venv
	$(BIN)/python -m pytest -q tests -k golden --update-golden

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
