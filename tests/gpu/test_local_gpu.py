"""The local backend on real GPUs (run on a GPU machine; CI has none, so these skip there, saying so):
NCCL DDP on each node's slice, accelerate on the GPU with the precision the device supports, and a
request that does not fit refused before anything starts."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mlrecipe.backends.host.devices import visible_gpus
from tests.integration.helpers import cli

GPUS = visible_gpus()
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not GPUS, reason="needs an NVIDIA GPU (nvidia-smi lists none here)")]
SCRIPT = Path(__file__).with_name("gpu_step.py")
TORCH = "training/pytorchjob-distributed"


def _recipe(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_nccl_ddp_each_node_on_its_own_gpus(tmp_path: Path, mlhome: Path) -> None:
    nodes = min(len(GPUS), 2)
    recipe = _recipe(tmp_path, f"""
        resources: {{nnodes: {nodes}, nproc_per_node: 1, limits: {{"nvidia.com/gpu": 1}}}}
        launcher: {{type: torchrun, script: {SCRIPT}}}
        """)
    done = cli(mlhome, "install", "nccl", TORCH, "-f", str(recipe))
    assert done.returncode == 0, done.stdout + done.stderr
    logs = [cli(mlhome, "logs", "nccl", "--rank", str(r)).stdout for r in range(nodes)]
    total = nodes * (nodes + 1) // 2
    for rank, log in enumerate(logs):
        assert f"world_size={nodes} sum={total:g} device=cuda:0 visible={GPUS[rank].index}" in log
    assert "devices" not in done.stderr


def test_accelerate_on_the_gpu_with_the_device_precision(tmp_path: Path, mlhome: Path) -> None:
    recipe = _recipe(tmp_path, f"""
        resources: {{nnodes: 1, nproc_per_node: 1, limits: {{"nvidia.com/gpu": 1}}}}
        launcher: {{type: accelerate, script: {SCRIPT}}}
        train:
          env: [{{name: MODE, value: accelerate}}]
        """)
    done = cli(mlhome, "install", "acc", TORCH, "-f", str(recipe))
    assert done.returncode == 0, done.stdout + done.stderr
    log = cli(mlhome, "logs", "acc").stdout
    precision = "bf16" if GPUS[0].supports_bf16 else "fp16"
    assert f"rank=0 device=cuda mixed_precision={precision} visible={GPUS[0].index}" in log, log


def test_more_gpus_than_the_machine_has_is_refused(tmp_path: Path, mlhome: Path) -> None:
    recipe = _recipe(tmp_path, f"""
        resources: {{nnodes: 2, nproc_per_node: 1, limits: {{"nvidia.com/gpu": {len(GPUS)}}}}}
        launcher: {{type: torchrun, script: {SCRIPT}}}
        """)
    done = cli(mlhome, "install", "big", TORCH, "-f", str(recipe))
    assert done.returncode == 2
    assert f"= {2 * len(GPUS)} GPU(s), but {len(GPUS)}" in done.stderr
    assert not (mlhome / "releases").exists()
