"""The debug bundle and ``--keep-on-failure`` on the real test cluster: a failed 2-node job's bundle holds both
nodes' logs, the batch log and ``scontrol show job -d`` as Slurm answered it (this cluster keeps no accounting:
MANIFEST says why there is no ``sacct``); a server that was not ready in time keeps its job running when asked to,
until ``uninstall``."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from tests.integration.helpers import cli, wait_for
from tests.serve.serving import NEVER_READY_RECIPE, write
from tests.slurm.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("slurm_cluster")]


def _job_state(cluster: Cluster, job_id: str) -> str:
    out = cluster.run("scontrol", "show", "job", "-o", job_id).stdout
    return next((p.split("=", 1)[1] for p in out.split() if p.startswith("JobState=")), "")


def test_the_bundle_of_a_failed_two_node_job(tmp_path: Path, mlhome: Path) -> None:
    recipe = write(tmp_path / "fail.yaml", """
        resources: {nnodes: 2}
        process:
          command: ['echo "node $PET_NODE_RANK on $HOSTNAME"; d="$(dirname "$MLRECIPE_METRICS_FILE")";
                     if [ "$PET_NODE_RANK" = 1 ]; then for i in $(seq 300); do
                     grep -q "node 0 on" "$d/node-0.log" && break; sleep 0.1; done; exit 7; fi; sleep 60']
        """)
    ran = cli(mlhome, "install", "sbroken", "data-prep/data-process", "-f", str(recipe), "-b", "slurm", timeout=120)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    record = json.loads((mlhome / "releases" / "slurm" / "default" / "sbroken" / "state.json").read_text())
    job = record["steps"]["data-process"]["handle"]["job_id"]
    out = tmp_path / "b.tar.gz"
    made = cli(mlhome, "debug-bundle", "sbroken", "-o", str(out))
    assert made.returncode == 0, made.stderr
    with tarfile.open(out) as tar:
        members = {m.name.split("/", 1)[1]: (tar.extractfile(m) or b"").read().decode() for m in tar.getmembers()}
    assert "node 0 on n1" in members["steps/data-process/node-0.log"]
    assert "node 1 on n2" in members["steps/data-process/node-1.log"]
    assert "steps/data-process/batch.log" in members
    shown = members[f"backend/data-process/scontrol-show-job-{job}.txt"]
    assert f"JobId={job} " in shown and "JobState=FAILED" in shown and "NodeList=n[1-2]" in shown
    assert f"backend/data-process/sacct-{job}.txt: " in members["MANIFEST.txt"], "no accounting here: said why"
    assert "#!/" in members["plans/template.txt"], "the batch script as template prints it"


def test_keep_on_failure_keeps_a_server_job_until_uninstall(tmp_path: Path, mlhome: Path,
                                                            slurm_cluster: Cluster) -> None:
    recipe = write(tmp_path / "never.yaml", NEVER_READY_RECIPE)
    ran = cli(mlhome, "install", "kept", "serving/generic-server", "-f", str(recipe), "-b", "slurm",
              "--keep-on-failure", timeout=90)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    job = json.loads((mlhome / "releases" / "slurm" / "default" / "kept" / "state.json").read_text())[
        "steps"]["generic-server"]["handle"]["job_id"]
    try:
        assert f"kept for inspection (--keep-on-failure): step generic-server: Slurm job {job}" in ran.stdout
        assert "mlrecipe uninstall slurm://default/kept" in ran.stdout
        assert _job_state(slurm_cluster, job) == "RUNNING", "the job and its allocation are kept"
    finally:
        assert cli(mlhome, "uninstall", "slurm://default/kept").returncode == 0
    wait_for(lambda: _job_state(slurm_cluster, job) in ("CANCELLED", ""), 60, "the kept job cancelled by uninstall")
