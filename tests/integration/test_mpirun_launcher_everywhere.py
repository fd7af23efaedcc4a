"""One MPI recipe (``launcher: mpirun``) for every backend. The local and Slurm backends run an MPI step's command
once and its ``mpirun`` starts the ranks; an MPIJob's launcher (Kubernetes) runs ``mpirun`` over the step runtime on
every slot, so there each slot must run the script itself, not a second ``mpirun`` of its own. The step program the
Kubernetes backend renders is run here both ways: by the MPIJob's own launcher line (2 slots) and once, as the local
backend runs it; both give exactly ranks 0 and 1 of 2."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from mlrecipe.backends.host.launch_env import mpi_env
from mlrecipe.backends.registry import get_backend
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
from mlrecipe.runtime import step_runtime

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI is not installed here (make test installs it)"),
]
RANK_SCRIPT = Path(__file__).resolve().parent / "assets" / "mpi_rank.py"


def _kubernetes_mpijob(tmp_path: Path) -> tuple[str, dict]:
    """The MPIJob launcher's command line and the step program of a 1 node x 2 slots ``launcher: mpirun`` recipe."""
    (tmp_path / "mpi.yaml").write_text(textwrap.dedent(f"""
        image: mpi:1
        resources: {{nnodes: 1, nproc_per_node: 2}}
        launcher: {{type: mpirun, script: {RANK_SCRIPT}}}
        """))
    (tmp_path / "pipeline.yaml").write_text("release: mpi\nbackend: kubernetes\nsteps:\n"
                                            "  - {name: ranks, chart: training/mpijob, recipe: mpi.yaml}\n")
    inputs = {"kind": "pipeline", "path": str(tmp_path / "pipeline.yaml"), "sets": []}
    runner = ReleaseRunner(spec_from_inputs(inputs), get_backend("kubernetes", {}), inputs, QuietDisplay())
    objects = [o for o in yaml.safe_load_all(runner.materialize()) if o]
    (mpijob,) = [o for o in objects if o["kind"] == "MPIJob"]
    (line,) = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["args"]
    (program,) = [json.loads(o["data"]["step.json"]) for o in objects
                  if o["kind"] == "ConfigMap" and "step.json" in o.get("data", {})]
    return line, program


def _ranks(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 0, done.stdout + done.stderr
    return sorted(re.findall(r"mpi-rank \d+ of \d+", done.stdout))


def test_a_launcher_mpirun_recipe_runs_one_rank_per_slot_on_an_mpijob_and_starts_the_ranks_locally(
        tmp_path: Path, mlhome: Path) -> None:
    line, program = _kubernetes_mpijob(tmp_path)
    assert line.startswith("exec mpirun -np 2 ")
    (tmp_path / "step.json").write_text(json.dumps(program))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_COMM_WORLD", "PMI"))}
    env.update(mpi_env(), HOME=str(tmp_path), MLRECIPE_RELEASE="mpi", MLRECIPE_STEP="ranks")
    mpijob_launcher = line.replace("/etc/mlrecipe/step_runtime.py", step_runtime.__file__) \
        .replace("/etc/mlrecipe/step.json", str(tmp_path / "step.json"))
    per_slot = subprocess.run(["bash", "-c", mpijob_launcher], env=env, capture_output=True, text=True, timeout=120)
    assert _ranks(per_slot) == ["mpi-rank 0 of 2", "mpi-rank 1 of 2"]
    once = subprocess.run(["bash", "-c", step_runtime.build_script(program)], capture_output=True, text=True,
                          env={**env, "PET_NNODES": "1", "PET_NPROC_PER_NODE": "2"}, timeout=120)
    assert _ranks(once) == ["mpi-rank 0 of 2", "mpi-rank 1 of 2"]
