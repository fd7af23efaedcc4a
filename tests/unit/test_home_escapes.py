"""Nothing escapes MLRECIPE_HOME: not through a record's contents, a --namespace, or a planted symbolic link."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.repo import BIN, cli_env

pytestmark = pytest.mark.integration  # starts real processes


def mlrecipe(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "mlrecipe"), *args], capture_output=True, text=True, env=cli_env(home),
                          timeout=120)


def recipe(tmp_path: Path) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text("image: python:3.11\npvc: []\nprocess:\n  command: [echo, step output]\n", encoding="utf-8")
    return path


def plant_record(directory: Path, **fields: object) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    record = {"release": "rel", "namespace": "default", "backend": "local", "inputs": {}, "state": "failed", **fields}
    (directory / "state.json").write_text(json.dumps(record), encoding="utf-8")


def test_uninstall_removes_the_directory_the_record_was_read_from(tmp_path: Path, mlhome: Path) -> None:
    victim = tmp_path / "victim"
    (victim / "rel").mkdir(parents=True)
    (victim / "rel" / "precious.txt").write_text("keep me", encoding="utf-8")
    planted = mlhome / "releases" / "local" / "default" / "rel"
    plant_record(planted, namespace=str(victim))
    done = mlrecipe(mlhome, "uninstall", "rel")
    assert done.returncode == 0, done.stderr
    assert not planted.exists()
    assert (victim / "rel" / "precious.txt").read_text(encoding="utf-8") == "keep me"


@pytest.mark.parametrize("verb", ["install", "template"])
@pytest.mark.parametrize("namespace", ["../../../x", "/abs/dir", "a/b", "UPPER", ""])
def test_namespace_option_is_validated_like_a_pipelines(tmp_path: Path, mlhome: Path, verb: str,
                                                         namespace: str) -> None:
    done = mlrecipe(mlhome, verb, "rel", "data-prep/data-process", "-f", str(recipe(tmp_path)), "-n", namespace)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"error: <command line>: --namespace: invalid namespace '{namespace}'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (mlhome / "releases").exists() and not (tmp_path / "x").exists()


def test_a_symlinked_log_is_not_written_through(tmp_path: Path, mlhome: Path) -> None:
    rec = recipe(tmp_path)
    first = mlrecipe(mlhome, "install", "rel", "data-prep/data-process", "-f", str(rec))
    assert first.returncode == 0, first.stdout + first.stderr
    log = mlhome / "releases" / "local" / "default" / "rel" / "steps" / "data-process" / "node-0.log"
    assert "step output" in log.read_text(encoding="utf-8")
    outside = tmp_path / "outside.log"
    outside.write_text("untouched\n", encoding="utf-8")
    log.unlink()
    log.symlink_to(outside)
    again = mlrecipe(mlhome, "install", "rel", "data-prep/data-process", "-f", str(rec), "--force")
    assert again.returncode == 2, again.stdout + again.stderr
    assert f"error: {log} is a symbolic link" in again.stderr and "Traceback" not in again.stderr
    assert outside.read_text(encoding="utf-8") == "untouched\n"


@pytest.mark.parametrize("linked", ["releases/local/default/rel", "releases/local/default"])
def test_a_symlinked_release_directory_is_refused_not_reported_removed(tmp_path: Path, mlhome: Path,
                                                                       linked: str) -> None:
    outside = tmp_path / "outside"
    plant_record(outside / "rel" if linked.endswith("default") else outside)
    link = mlhome / linked
    link.parent.mkdir(parents=True)
    link.symlink_to(outside)
    done = mlrecipe(mlhome, "uninstall", "rel")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"error: {link} is a symbolic link" in done.stderr and "uninstalled" not in done.stdout
    assert link.is_symlink() and list(outside.rglob("state.json"))
    run = mlrecipe(mlhome, "install", "rel", "data-prep/data-process", "-f", str(recipe(tmp_path)), "--force")
    assert run.returncode == 2 and f"error: {link} is a symbolic link" in run.stderr, run.stdout + run.stderr
    assert not list(outside.rglob("steps"))


def test_a_log_linked_during_the_run_is_refused_not_written_through(tmp_path: Path, mlhome: Path) -> None:
    outside = tmp_path / "outside.log"
    outside.write_text("untouched\n", encoding="utf-8")
    log = mlhome / "releases" / "local" / "default" / "rel" / "steps" / "second" / "node-0.log"
    script = tmp_path / "plant.sh"
    script.write_text(f"mkdir -p {log.parent} && ln -s {outside} {log}\n", encoding="utf-8")
    plant = tmp_path / "plant.yaml"
    plant.write_text(f"image: python:3.11\npvc: []\nprocess:\n  command: [sh, {script}]\n", encoding="utf-8")
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("release: rel\nsteps:\n"
                        f"  - {{name: first, chart: data-prep/data-process, recipe: {plant}}}\n"
                        f"  - {{name: second, chart: data-prep/data-process, recipe: {recipe(tmp_path)}, "
                        "depends_on: [first]}\n", encoding="utf-8")
    done = mlrecipe(mlhome, "run", str(pipeline))
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{log} is a symbolic link (to {outside})" in done.stdout + done.stderr, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert outside.read_text(encoding="utf-8") == "untouched\n"
    record = json.loads((log.parents[2] / "state.json").read_text(encoding="utf-8"))
    assert record["steps"]["second"]["state"] == "failed" and "symbolic link" in record["steps"]["second"]["message"]


def test_list_and_status_show_the_address_of_the_directory_not_a_planted_records(tmp_path: Path,
                                                                                 mlhome: Path) -> None:
    """Issue 41 R14: a record planted with another namespace is listed at the address its directory holds; a
    failure reason of several lines is one line in ``status`` (the rest in ``status -o json``)."""
    reason = "AlgorithmError: exit 1\nTraceback (most recent call last):\n  File x\n    y\nValueError: z"
    plant_record(mlhome / "releases" / "local" / "default" / "rel", namespace=str(tmp_path / "forged"),
                 order=["train"], steps={"train": {"name": "train", "chart": "c", "state": "failed",
                                                   "message": reason}})
    listed = mlrecipe(mlhome, "list")
    assert listed.returncode == 0, listed.stderr
    assert "local://default/rel" in listed.stdout and "forged" not in listed.stdout
    status = mlrecipe(mlhome, "status", "rel")
    [line] = [ln for ln in status.stdout.splitlines() if "train" in ln]
    assert "AlgorithmError: exit 1 (+4 line(s)" in line and "Traceback" not in status.stdout
    assert json.loads(mlrecipe(mlhome, "status", "rel", "-o", "json").stdout)[0]["steps"][0]["message"] == reason


def test_logs_do_not_read_through_a_planted_symlink(tmp_path: Path, mlhome: Path) -> None:
    """Issue 41 R14: ``logs`` refuses a link under MLRECIPE_HOME, as writes and deletes do."""
    first = mlrecipe(mlhome, "install", "rel", "data-prep/data-process", "-f", str(recipe(tmp_path)))
    assert first.returncode == 0, first.stdout + first.stderr
    log = mlhome / "releases" / "local" / "default" / "rel" / "steps" / "data-process" / "node-0.log"
    secret = tmp_path / "secret.txt"
    secret.write_text("not for mlrecipe logs\n", encoding="utf-8")
    log.unlink()
    log.symlink_to(secret)
    shown = mlrecipe(mlhome, "logs", "rel")
    assert shown.returncode == 2 and "not for mlrecipe logs" not in shown.stdout
    assert f"error: {log} is a symbolic link" in shown.stderr and "Traceback" not in shown.stderr
