"""A full disk is one clear failure, recorded, with no temporary file left; a killed driver leaves no step running."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlrecipe.cli.app import app
from mlrecipe.errors import DiskFullError
from mlrecipe.runner import state as state_module
from mlrecipe.runner.state import RESERVE_FILE, ReleaseRecord, load_record
from tests.repo import BIN, cli_env


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MB tmpfs (mounting needs root: skipped without it; the injected-ENOSPC tests below still run)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount an 8 MB tmpfs here ({done.stderr.strip()}); the save-level tests inject ENOSPC")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def filler(tmp_path: Path) -> Path:
    script = tmp_path / "filler.py"
    script.write_text("for i in range(500000):\n    print('x' * 100, flush=i % 1000 == 0)\n", encoding="utf-8")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"image: python:3.11\npvc: []\nprocess:\n  command: [python3, {script}]\n", encoding="utf-8")
    return recipe


def mlrecipe(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "mlrecipe"), *args], capture_output=True, text=True, env=cli_env(home),
                          timeout=180)


def assert_one_disk_full_error(done: subprocess.CompletedProcess[str]) -> None:
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: the disk is full: "), errors


@pytest.mark.integration
def test_a_step_whose_log_fills_the_disk_is_one_recorded_failure(tmp_path: Path, small_disk: Path) -> None:
    home = small_disk / "home"
    done = mlrecipe(home, "install", "big", "data-prep/data-process", "-f", str(filler(tmp_path)))
    assert_one_disk_full_error(done)
    assert "its state was recorded" in done.stderr
    state = json.loads((home / "releases/local/default/big/state.json").read_text(encoding="utf-8"))
    step = state["steps"]["data-process"]
    assert state["state"] == "failed" and step["state"] == "failed" and "disk is full" in step["message"]
    assert not list(home.rglob(".state.json.*.tmp"))
    status = mlrecipe(home, "status", "big")
    assert status.returncode == 0 and "running" not in status.stdout and "failed" in status.stdout
    resumed = mlrecipe(home, "resume", "big")  # the disk is still full: the same one line
    assert_one_disk_full_error(resumed)
    assert not list(home.rglob(".state.json.*.tmp"))


def record(mlhome: Path) -> ReleaseRecord:
    rec = ReleaseRecord("rel", "default", "local", {})
    rec.save()
    assert (rec.directory / RESERVE_FILE).stat().st_size == state_module.RESERVE_BYTES
    return rec


def full_disk(monkeypatch: pytest.MonkeyPatch, times: int) -> None:
    """``os.fsync`` of the state module fails with ENOSPC ``times`` times (a write that met a full disk)."""
    left = [times]
    real = os.fsync

    def fsync(fd: int) -> None:
        if left[0] > 0:
            left[0] -= 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(state_module.os, "fsync", fsync)


def test_on_a_full_disk_the_reserve_makes_room_for_the_record(mlhome: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = record(mlhome)
    rec.state = state_module.StepState.FAILED
    full_disk(monkeypatch, 1)
    with pytest.raises(DiskFullError, match=r"^the disk is full: .*its state was recorded"):
        rec.save()
    loaded = load_record("local", "default", "rel")
    assert loaded is not None and loaded.state is state_module.StepState.FAILED
    assert not list(rec.directory.glob(".state.json.*.tmp"))


def test_without_room_at_all_the_error_says_so_and_no_temporary_file_stays(
        mlhome: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = record(mlhome)
    rec.state = state_module.StepState.FAILED
    full_disk(monkeypatch, 2)
    with pytest.raises(DiskFullError, match="its last state may not be recorded"):
        rec.save()
    assert not list(rec.directory.glob(".state.json.*.tmp"))
    loaded = load_record("local", "default", "rel")
    assert loaded is not None and loaded.state is state_module.StepState.PENDING  # the old record, whole


@pytest.mark.integration
def test_after_kill_9_of_the_cli_no_step_shows_running(tmp_path: Path, mlhome: Path) -> None:
    script = tmp_path / "slow.py"
    script.write_text("import time\nprint('started', flush=True)\ntime.sleep(20)\n", encoding="utf-8")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"image: python:3.11\npvc: []\nprocess:\n  command: [python3, {script}]\n", encoding="utf-8")
    cli = subprocess.Popen([str(BIN / "mlrecipe"), "install", "slow", "data-prep/data-process", "-f", str(recipe)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cli_env(mlhome))
    log = mlhome / "releases/local/default/slow/steps/data-process/node-0.log"
    deadline = time.monotonic() + 60
    while not (log.exists() and "started" in log.read_text(encoding="utf-8")) and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(cli.pid, signal.SIGKILL)
    cli.wait()
    try:
        status = mlrecipe(mlhome, "status", "slow")
        assert status.returncode == 0, status.stderr
        assert "interrupted" in status.stdout and "running" not in status.stdout, status.stdout
        doc = json.loads(mlrecipe(mlhome, "status", "slow", "-o", "json").stdout)
        assert [s["state"] for s in doc[0]["steps"]] == ["interrupted"] and doc[0]["state"] == "interrupted"
    finally:
        mlrecipe(mlhome, "uninstall", "slow")


def test_a_full_disk_while_writing_the_step_program_leaves_no_temporary_file(
        tmp_path: Path, mlhome: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = Path.write_text

    def write_text(self: Path, data: str, *args: object, **kwargs: object) -> int:
        if self.name != "program.tmp":
            return real(self, data, *args, **kwargs)  # type: ignore[arg-type]
        real(self, data[:10], encoding="utf-8")  # a part was written, then the disk was full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_text", write_text)
    recipe = tmp_path / "recipe.yaml"
    real(recipe, "image: python:3.11\npvc: []\nprocess:\n  command: [echo, hi]\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["install", "rel", "data-prep/data-process", "-f", str(recipe)])
    program = mlhome / "releases/local/default/rel/steps/data-process/program.json"
    assert isinstance(result.exception, DiskFullError), result.output  # the one error line mlrecipe.cli.app.main prints
    assert str(result.exception).startswith(f"the disk is full: no space left to write {program} ")
    assert "error:" not in result.output
    assert not list(mlhome.rglob("program.tmp")) and not program.exists()
    state = json.loads((mlhome / "releases/local/default/rel/state.json").read_text(encoding="utf-8"))
    assert state["state"] == "failed" and "disk is full" in state["steps"]["data-process"]["message"]
