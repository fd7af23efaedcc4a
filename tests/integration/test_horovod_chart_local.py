"""``training/mpijob-horovod-tensorflow-gpu`` on the local backend: the reference's GPU keys size the MPI job
(``gpu_nodes x gpus_per_node`` ranks) and its ``horovod`` / ``nccl`` keys reach every rank through ``mpirun.env``,
as they do in the MPIJob the chart renders. Horovod itself is not installed here (see the chart's README)."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml

from mlrecipe.helm.render import charts_root, render_chart
from tests.integration.helpers import cli

pytestmark = pytest.mark.integration
CHART = "training/mpijob-horovod-tensorflow-gpu"


def recipe(tmp_path: Path) -> Path:
    script = tmp_path / "rank.py"
    # one write per line: with PYTHONUNBUFFERED each part of a multi-argument print is its own write, and the other
    # rank's line can land in the middle (seen: "rank 0 of rank 1 of 2 0 WARN")
    script.write_text('import os, sys\nsys.stdout.write(" ".join(["rank", os.environ["OMPI_COMM_WORLD_RANK"], "of", '
                      'os.environ["OMPI_COMM_WORLD_SIZE"], os.environ["HOROVOD_AUTOTUNE"], os.environ["NCCL_DEBUG"]]) '
                      '+ "\\n")\n')
    path = tmp_path / "hvd.yaml"
    path.write_text(textwrap.dedent(f"""
        image: horovod/horovod:0.28.1
        resources: {{gpu_nodes: 1, gpus_per_node: 2}}
        horovod: {{autotune: "0"}}
        nccl: {{debug_level: WARN}}
        mpirun:
          env:
            - {{name: HOROVOD_AUTOTUNE, value: "{{{{ .Values.horovod.autotune }}}}"}}
            - {{name: NCCL_DEBUG, value: "{{{{ .Values.nccl.debug_level }}}}"}}
        launcher: {{type: mpirun, script: {script}}}
        """))
    return path


@pytest.mark.skipif(shutil.which("mpirun") is None and not os.environ.get("CI"),
                    reason="Open MPI is not installed here (make test installs it)")
def test_gpu_keys_size_the_ranks_and_settings_reach_them(tmp_path: Path, mlhome: Path) -> None:
    path = recipe(tmp_path)
    done = cli(mlhome, "install", "hvd", CHART, "-f", str(path), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    log = cli(mlhome, "logs", "hvd").stdout
    assert "rank 0 of 2 0 WARN" in log and "rank 1 of 2 0 WARN" in log
    objs = render_chart(charts_root() / CHART, yaml.safe_load(path.read_text()), "hvd", "ns")
    job = next(o for o in objs if o["kind"] == "MPIJob")["spec"]
    assert job["slotsPerWorker"] == 2 and job["mpiReplicaSpecs"]["Worker"]["replicas"] == 1
    launcher = job["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in launcher["env"] if "value" in e}
    assert (env["HOROVOD_AUTOTUNE"], env["NCCL_DEBUG"]) == ("0", "WARN")
