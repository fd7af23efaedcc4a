"""One driver per release: the second of two CLI processes started together is refused, naming the first."""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from mlrecipe.errors import ReleaseBusyError
from mlrecipe.runner.lock import LOCK_FILE, driving
from tests.repo import BIN, cli_env

pytestmark = pytest.mark.integration  # starts real processes


def pipeline(tmp_path: Path) -> tuple[Path, Path]:
    """A one-step pipeline whose step adds a line to a file, then runs until the file ``go`` exists (60 s at most)."""
    runs = tmp_path / "runs.txt"
    step = tmp_path / "step.py"
    step.write_text(f"import os, time\nwith open({str(runs)!r}, 'a') as fh:\n    fh.write('ran\\n')\n"
                    f"end = time.time() + 60\nwhile not os.path.exists({str(tmp_path / 'go')!r}) and time.time() < end:"
                    "\n    time.sleep(0.05)\n", encoding="utf-8")
    (tmp_path / "recipe.yaml").write_text(f"image: python:3.11\npvc: []\nprocess:\n  command: [python3, {step}]\n",
                                          encoding="utf-8")
    path = tmp_path / "pipeline.yaml"
    path.write_text("release: lk\nsteps:\n  - {name: work, chart: data-prep/data-process, recipe: recipe.yaml}\n",
                    encoding="utf-8")
    return path, runs


@pytest.mark.parametrize("trial", range(3))
def test_two_runs_started_together_run_the_step_once(tmp_path: Path, mlhome: Path, trial: int) -> None:
    path, runs = pipeline(tmp_path)
    argv = [str(BIN / "mlrecipe"), "run", str(path), "--force"]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(mlhome))
             for _ in range(2)]
    deadline = time.monotonic() + 90
    while all(p.poll() is None for p in procs) and time.monotonic() < deadline:  # until one of them gives up
        time.sleep(0.05)
    (tmp_path / "go").touch()
    outs = [p.communicate(timeout=120) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 2], outs
    winner, loser = (0, 1) if codes[0] == 0 else (1, 0)
    assert re.search(rf"^error: release local://default/lk is being run by process {procs[winner].pid};",
                     outs[loser][1], re.M), outs[loser]
    assert "Traceback" not in outs[loser][1]
    assert runs.read_text(encoding="utf-8") == "ran\n"


def test_resume_and_install_are_refused_while_a_run_drives_the_release(tmp_path: Path, mlhome: Path) -> None:
    path, runs = pipeline(tmp_path)
    env = cli_env(mlhome)
    first = subprocess.Popen([str(BIN / "mlrecipe"), "run", str(path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60
    while not runs.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    resume = subprocess.run([str(BIN / "mlrecipe"), "resume", "lk"], capture_output=True, text=True, env=env,
                            timeout=120)
    install = subprocess.run([str(BIN / "mlrecipe"), "install", "lk", "data-prep/data-process", "-f",
                              str(tmp_path / "recipe.yaml")], capture_output=True, text=True, env=env, timeout=120)
    (tmp_path / "go").touch()
    first.communicate(timeout=120)
    assert first.returncode == 0
    for done in (resume, install):
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"is being run by process {first.pid}" in done.stderr
    assert runs.read_text(encoding="utf-8") == "ran\n"


def test_the_lock_is_taken_again_by_its_holder_and_let_go_at_the_end(tmp_path: Path, mlhome: Path) -> None:
    directory = mlhome / "releases" / "local" / "default" / "rel"
    with driving(directory, "local://default/rel"), driving(directory, "local://default/rel"):
        fd = os.open(directory / LOCK_FILE, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):  # another open file (another driver) cannot take it
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        assert (directory / LOCK_FILE).read_text(encoding="utf-8") == f"{os.getpid()}\n"
    with driving(directory, "local://default/rel"):
        pass
    child = subprocess.Popen([str(BIN.parent / "bin" / "python"), "-c",
                              "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); "
                              "os.pwrite(fd, b'%d' % os.getpid(), 0); fcntl.flock(fd, fcntl.LOCK_EX); "
                              "print('held', flush=True); time.sleep(30)", str(directory / LOCK_FILE)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "held\n"
        with pytest.raises(ReleaseBusyError, match=f"being run by process {child.pid}"), \
                driving(directory, "local://default/rel"):
            pass
    finally:
        child.kill()
        child.wait()
