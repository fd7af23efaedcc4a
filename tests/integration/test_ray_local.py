"""RayJob charts on the local backend: ``data-prep/ray-data-process`` and ``training/raytrain`` run their
command as the driver of a real Ray cluster on this machine (a head and ``resources.nnodes`` worker nodes, each
its own raylet), and no Ray process outlives the step: not after success, not after ``uninstall``, not after
the cluster's owner is killed with SIGKILL."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import psutil
import pytest

from tests.integration.helpers import cli, release_tree, still_alive, wait_for

pytestmark = pytest.mark.integration
JOB = Path(__file__).resolve().parent / "assets" / "ray_job.py"


def _recipe(tmp_path: Path, block: str, command: str) -> Path:
    path = tmp_path / f"{block}.yaml"
    path.write_text(f"""\
image: nvcr.io/nvidia/pytorch:25.10-py3
resources:
  nnodes: 2
  requests: {{cpu: "1"}}
{block}:
  env:
    - {{name: HOME, value: "/efs/home/{{{{ .Release.Name }}}}"}}
  command: [{json.dumps(command)}]
""")
    return path


def _report(home: Path, release: str) -> dict:
    return json.loads((home / "volumes" / "pv-efs" / "home" / release / "report.json").read_text())


def _ray_processes(home: Path) -> list[str]:
    """Ray's daemons started for releases under ``home`` (they inherit the step's environment)."""
    found = []
    for proc in psutil.process_iter(["pid", "name"]):
        try:
            if proc.info["name"] in ("raylet", "gcs_server") and proc.environ().get("MLRECIPE_HOME") == str(home):
                found.append(f"{proc.pid} {proc.info['name']}")
        except psutil.Error:
            continue
    return found


@pytest.fixture(autouse=True)
def _need_ray() -> None:
    pytest.importorskip("ray.train", reason="Ray runs from the frameworks extra (pip install '.[frameworks]')")


def test_ray_data_job_spreads_over_the_worker_nodes(mlhome: Path, tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, "process", f"python3 {JOB} data --out $HOME/report.json")
    plan = cli(mlhome, "template", "rd", "data-prep/ray-data-process", "-f", str(recipe))
    assert "a head (0 CPU) and 2 node(s) in group workers (1 CPU, 0 GPU each)" in plan.stdout, plan.stdout[:2000]
    done = cli(mlhome, "install", "rd", "data-prep/ray-data-process", "-f", str(recipe), timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    report = _report(mlhome, "rd")
    assert report["nodes"] == 3 and report["task_nodes"] == 2, report
    assert report["sum_of_squares"] == sum(i * i for i in range(1000))
    log = cli(mlhome, "logs", "rd").stdout
    assert "Ray cluster at" in log and "Ray cluster stopped" in log
    assert _ray_processes(mlhome) == []


@pytest.mark.slow
def test_ray_train_job_learns_with_two_workers(mlhome: Path, tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, "train", f"python3 {JOB} train --out $HOME/report.json")
    done = cli(mlhome, "install", "rt", "training/raytrain", "-f", str(recipe), timeout=400)
    assert done.returncode == 0, done.stdout[-3000:]
    report = _report(mlhome, "rt")
    assert report["world_size"] == 2 and report["last_loss"] < report["first_loss"] / 100, report
    assert _ray_processes(mlhome) == []


@pytest.mark.parametrize("how", ["uninstall", "kill -9 of the cluster's owner"])
def test_no_ray_process_outlives_a_stopped_job(mlhome: Path, tmp_path: Path, how: str) -> None:
    from tests.integration.helpers import start_cli

    recipe = _recipe(tmp_path, "process", "python3 -c 'import ray; ray.init(); print(\"driver up\")' && sleep 600")
    proc = start_cli(mlhome, "install", "stuck", "data-prep/ray-data-process", "-f", str(recipe))
    try:
        log = mlhome / "volumes" / "pv-efs" / "home" / "stuck" / "logs" / "ray-data-process" / "node-0.log"
        wait_for(lambda: log.exists() and "driver up" in log.read_text(), 180, "the driver to connect")
        tree = release_tree("stuck", mlhome)
        assert len(_ray_processes(mlhome)) == 4, "gcs_server and a raylet per node"
        if how == "uninstall":
            assert cli(mlhome, "uninstall", "stuck", timeout=120).returncode == 0
        else:
            (owner,) = [p for p in tree if "ray_cluster.py" in " ".join(p.cmdline()) and p.name() != "unshare"]
            owner.send_signal(signal.SIGKILL)
        try:
            wait_for(lambda: not still_alive(tree) and not _ray_processes(mlhome), 60, "every Ray process to end")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {still_alive(tree)} {_ray_processes(mlhome)}") from None
    finally:
        proc.kill()
        proc.communicate()
