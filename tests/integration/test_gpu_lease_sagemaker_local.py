"""A SageMaker-local training step and a local step of one release, in parallel, never run on the same GPU: both
take the machine-wide GPU lease (the fake ``nvidia-smi``'s 2 GPUs; the 2 SageMaker hosts get one each, the local
step asks for one). Every node marks the GPUs it was given on a shared board while it runs (an atomic ``mkdir`` per
GPU index); a node that finds its GPU already marked records a collision. A node holds its GPUs until a node of the
other step has started, or for ``HOLD`` seconds: without the lease both steps run at once and collide."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from mlrecipe.backends.host.gpu_lease import LEASE_DIR_VAR
from tests.fake_gpus import gpu_env, install_fake_nvidia_smi
from tests.repo import BIN, cli_env

pytestmark = pytest.mark.integration

HOLD = 10
PROBE = """
import os, sys, time
from pathlib import Path
board, who, hold = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
ids = [i for i in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if i]
(board / f"{who}-{os.environ.get('SM_CURRENT_HOST', 'node')}-{os.getpid()}.gpus").write_text(",".join(ids))
held = []
for i in ids:
    try:
        (board / f"gpu-{i}").mkdir()
        held.append(i)
    except FileExistsError:
        (board / f"collision-gpu-{i}-{who}").write_text("")
other = "local" if who == "sagemaker" else "sagemaker"
deadline = time.monotonic() + hold
while not list(board.glob(f"{other}-*.gpus")) and time.monotonic() < deadline:
    time.sleep(0.05)
for i in held:
    (board / f"gpu-{i}").rmdir()
"""
PIPELINE = """
release: gpushare
steps:
  - name: on-sagemaker
    chart: training/pytorchjob-distributed
    backend: sagemaker
    depends_on: []
    values:
      image: pytorch-training:2.5-cpu
      resources: {{nnodes: 2}}
      pvc: []
      train:
        command: [python3, {probe}, {board}, sagemaker, "{hold}"]
  - name: on-local
    chart: training/pytorchjob-distributed
    depends_on: []
    values:
      image: python
      resources: {{limits: {{"nvidia.com/gpu": 1}}}}
      pvc: []
      train:
        command: [python3, {probe}, {board}, local, "{hold}"]
"""


def test_sagemaker_local_and_local_steps_never_share_a_gpu(tmp_path: Path, mlhome: Path) -> None:
    install_fake_nvidia_smi(tmp_path / "fakebin", 2)
    env = gpu_env(cli_env(mlhome), tmp_path / "fakebin")
    env[LEASE_DIR_VAR] = str(tmp_path / "leases")
    board = tmp_path / "board"
    board.mkdir()
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(textwrap.dedent(PIPELINE.format(probe=probe, board=board, hold=HOLD)))
    try:
        run = subprocess.run([str(BIN / "mlrecipe"), "run", str(pipeline), "-B", "sagemaker.mode=local",
                              "-B", "sagemaker.poll_seconds=0.2"], env=env, capture_output=True, text=True,
                             timeout=240)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
        given = {p.name.split("-")[0]: set(p.read_text().split(",")) for p in board.glob("*.gpus")}
        sagemaker = set().union(*(set(p.read_text().split(",")) for p in board.glob("sagemaker-*.gpus")))
        assert len(list(board.glob("sagemaker-*.gpus"))) == 2, "both SageMaker hosts ran"
        assert sagemaker == {"0", "1"}, "the 2 hosts were given the fake GPUs, one each"
        assert given["local"] and given["local"] <= {"0", "1"}, "the local step was given a fake GPU"
        assert sorted(p.name for p in board.glob("collision-*")) == [], "two steps ran on one GPU at once"
        assert not list(board.glob("gpu-*")), "every node let go of its GPUs"
    finally:
        subprocess.run([str(BIN / "mlrecipe"), "uninstall", "gpushare"], env=env, capture_output=True, timeout=120)
