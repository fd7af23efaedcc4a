"""Independent branches of a pipeline really run at the same time on the local backend."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.repo import BIN, cli_env

pytestmark = pytest.mark.integration

# Each branch announces itself, then waits for the other one: run one after the other, both would fail.
RENDEZVOUS = "touch {dir}/{me}; for i in $(seq 200); do [ -e {dir}/{other} ] && exit 0; sleep 0.1; done; exit 1"


def test_two_branches_meet(mlhome: Path, tmp_path: Path) -> None:
    meet = tmp_path / "meet"
    meet.mkdir()

    def step(name: str, command: str, needs: list[str]) -> str:
        return (f"  - name: {name}\n    chart: data-prep/data-process\n    depends_on: {needs}\n    values:\n"
                f"      pvc: []\n      process:\n        command: ['{command}']\n")

    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("release: branches\nsteps:\n"
                        + step("prep", "true", [])
                        + step("left", RENDEZVOUS.format(dir=meet, me="left", other="right"), ["prep"])
                        + step("right", RENDEZVOUS.format(dir=meet, me="right", other="left"), ["prep"])
                        + step("merge", f"test -e {meet}/left -a -e {meet}/right", ["left", "right"]))
    done = subprocess.run([str(BIN / "mlrecipe"), "run", str(pipeline)], capture_output=True, text=True,
                          env=cli_env(mlhome), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.index("step merge (") > done.stdout.index("step left: succeeded")
    serial = subprocess.run([str(BIN / "mlrecipe"), "run", str(pipeline), "--max-parallel", "1", "--force"],
                            capture_output=True, text=True, env=cli_env(mlhome), timeout=120)
    assert serial.returncode == 0, "the markers are still there: one at a time works too"


# Each node marks itself running and fails if a node of the other branch runs at the same time.
ALONE = ("touch {dir}/{me}-$PET_NODE_RANK; sleep 1; ls {dir} | grep -q '^{other}-' && exit 1; "
         "sleep 1; rm {dir}/{me}-$PET_NODE_RANK")


def test_branches_wait_for_cpus_on_the_local_backend(mlhome: Path, tmp_path: Path) -> None:
    """Two 2-node branches on 2 CPUs run one after the other, the waiting one saying why."""
    marks = tmp_path / "marks"
    marks.mkdir()

    def step(name: str, other: str) -> str:
        return (f"  - name: {name}\n    chart: data-prep/data-process\n    depends_on: [prep]\n    values:\n"
                f"      pvc: []\n      resources: {{nnodes: 2}}\n"
                f"      process:\n        command: [\"{ALONE.format(dir=marks, me=name, other=other)}\"]\n")

    pipeline = tmp_path / "pipeline.yaml"
    prep = "  - name: prep\n    chart: data-prep/data-process\n    values: {pvc: [], process: {command: ['true']}}\n"
    pipeline.write_text("release: cpus\nsteps:\n" + prep + step("left", "right") + step("right", "left"))
    done = subprocess.run([str(BIN / "mlrecipe"), "run", str(pipeline), "-B", "cpus=2"], capture_output=True,
                          text=True, env=cli_env(mlhome), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "for CPUs: its 2 rank(s) and the 2 of the running steps do not fit this machine's 2 CPU(s)" in done.stdout
    crowded = subprocess.run([str(BIN / "mlrecipe"), "run", str(pipeline), "-B", "cpus=4", "--force"],
                             capture_output=True, text=True, env=cli_env(mlhome), timeout=120)
    assert crowded.returncode == 1, "with room for both, they overlap (and each sees the other)"
