"""RayJob charts on the local backend: ``data-prep/ray-data-process`` runs its command on a real Ray cluster on this
machine (a head and ``resources.nnodes`` worker nodes, each its own raylet): submitted as a Ray job through the Ray
Jobs API where Ray has its dashboard (``rayproject/ray`` images run in ``.venv-vllm``, which has ``ray[default]``),
else as the driver; and no Ray process outlives the step: not after success, not after ``uninstall``, not after the
cluster's owner is stopped, or killed with SIGKILL. The ``training/raytrain`` chart's Ray Train job (2 workers that
learn, no Ray process left after) runs in tests/integration/test_framework_examples.py, the ray_train example."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from mlrecipe.backends.host.images import serving_environment
from tests.integration.helpers import cli, ray_processes, release_tree, state, still_alive, wait_for

pytestmark = pytest.mark.integration
JOB = Path(__file__).resolve().parent / "assets" / "ray_job.py"
IMAGE = "nvcr.io/nvidia/pytorch:25.10-py3"  # the CLI's .venv (Ray of the frameworks extra: no dashboard yet)
RAY_IMAGE = "rayproject/ray:2.60.0"  # .venv-vllm (make serve-env): Ray with its dashboard, the Jobs API


def _recipe(tmp_path: Path, block: str, command: str, image: str = IMAGE) -> Path:
    path = tmp_path / f"{block}.yaml"
    path.write_text(f"""\
image: {image}
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


@pytest.fixture(autouse=True)
def _need_ray() -> None:
    pytest.importorskip("ray.train", reason="Ray runs from the frameworks extra (pip install '.[frameworks]')")


def _need_ray_jobs() -> None:
    """Skip unless the Ray image's environment runs Ray's dashboard (``ray[default]``), hence the Jobs API."""
    env = serving_environment()
    if env is None:
        pytest.skip("rayproject/ray images run in .venv-vllm: make serve-env")
    imports = "import ray.dashboard.optional_deps, ray.job_submission"
    probe = subprocess.run([str(env / "bin" / "python"), "-c", imports], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"{env} has no Ray dashboard (ray[default]): {probe.stderr.strip()[-200:]}")


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
    assert ray_processes(mlhome) == []


def test_the_command_is_submitted_as_a_ray_job(mlhome: Path, tmp_path: Path) -> None:
    _need_ray_jobs()
    recipe = _recipe(tmp_path, "process", f"python3 {JOB} data --out $HOME/report.json", RAY_IMAGE)
    done = cli(mlhome, "install", "rj", "data-prep/ray-data-process", "-f", str(recipe), timeout=300)
    log = cli(mlhome, "logs", "rj").stdout
    assert done.returncode == 0, done.stdout[-2000:] + log[-3000:]
    report = _report(mlhome, "rj")
    assert report["nodes"] == 3 and report["task_nodes"] == 2, report
    assert report["submission_id"] == "rj-ray-data-process", report  # the driver is that Ray job's
    assert report["cwd"] == "/efs/home/rj", report  # the step's $HOME (mounted), as for every step
    assert re.search(r"Ray job rj-ray-data-process submitted to the Ray dashboard at http://127\.0\.0\.1:\d+", log)
    # the Jobs API's own record of the job, read while the cluster was up, names the driver's Ray job id
    assert f"Ray job rj-ray-data-process SUCCEEDED (driver's job id {report['job_id']}, entrypoint exit code 0)" in log
    assert "report {" in log and log.index("submitted") < log.index("report {") < log.index("SUCCEEDED")
    assert "Ray cluster stopped" in log
    assert ray_processes(mlhome) == []


def test_a_failing_ray_job_fails_the_step_with_its_exit_code(mlhome: Path, tmp_path: Path) -> None:
    _need_ray_jobs()
    recipe = _recipe(tmp_path, "process", "python3 -c 'import ray; ray.init(); raise SystemExit(3)'", RAY_IMAGE)
    done = cli(mlhome, "install", "rf", "data-prep/ray-data-process", "-f", str(recipe), timeout=300)
    log = cli(mlhome, "logs", "rf").stdout
    assert done.returncode != 0, done.stdout[-2000:]
    assert re.search(r"Ray job rf-ray-data-process FAILED \(driver's job id \w+, entrypoint exit code 3\)", log), log
    assert state(mlhome, "rf")["steps"]["ray-data-process"]["exit_code"] == 3
    assert ray_processes(mlhome) == []


def _cmdline(process: psutil.Process) -> str:
    """The command line of ``process``, or ``""`` once it has exited (the snapshot holds short-lived processes)."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


@pytest.mark.parametrize(("image", "how"), [
    (IMAGE, "uninstall"), (IMAGE, "kill -9 of the cluster's owner"),
    (RAY_IMAGE, "uninstall"), (RAY_IMAGE, "kill -9 of the cluster's owner"),
    (RAY_IMAGE, "SIGTERM to the cluster's owner"),
])
def test_no_ray_process_outlives_a_stopped_job(mlhome: Path, tmp_path: Path, image: str, how: str) -> None:
    from tests.integration.helpers import start_cli

    if image == RAY_IMAGE:
        _need_ray_jobs()
    command = ("trap 'echo driver stopped; exit 143' TERM; "
               "python3 -c 'import ray; ray.init(); print(\"driver up\")' && sleep 600 & wait")
    recipe = _recipe(tmp_path, "process", command, image)
    proc = start_cli(mlhome, "install", "stuck", "data-prep/ray-data-process", "-f", str(recipe))
    try:
        log = mlhome / "volumes" / "pv-efs" / "home" / "stuck" / "logs" / "ray-data-process" / "node-0.log"
        wait_for(lambda: log.exists() and "driver up" in log.read_text(), 180, "the driver to connect")
        tree = release_tree("stuck", mlhome)
        assert len(ray_processes(mlhome)) == 4, "gcs_server and a raylet per node"
        if image == RAY_IMAGE:
            assert "Ray job stuck-ray-data-process submitted" in cli(mlhome, "logs", "stuck").stdout
        (owner,) = [p for p in tree
                    if "ray_cluster.py" in _cmdline(p) and not _cmdline(p).split()[0].endswith("unshare")]
        if how == "uninstall":
            assert cli(mlhome, "uninstall", "stuck", timeout=120).returncode == 0
        else:
            owner.send_signal(signal.SIGKILL if how.startswith("kill -9") else signal.SIGTERM)
        try:
            wait_for(lambda: not still_alive(tree) and not ray_processes(mlhome), 60, "every Ray process to end")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {still_alive(tree)} {ray_processes(mlhome)}") from None
        if how.startswith("SIGTERM"):  # the Jobs API stopped the job: its driver got SIGTERM, then the cluster went
            out = cli(mlhome, "logs", "stuck").stdout
            assert "driver stopped" in log.read_text()
            assert "stopping Ray job stuck-ray-data-process" in out and "Ray job stuck-ray-data-process STOPPED" in out
            assert "Ray cluster stopped" in out
    finally:
        proc.kill()
        proc.communicate()
