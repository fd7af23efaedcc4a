"""A Slurm node makes a pvc mount path its machine lacks in the node's own root (issue 41, R12): a top-level path
that does not exist, and one below an existing directory (made in a copy of it); the step writes and reads through
both, and the machine gains no entry."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import cli
from tests.serve.serving import write

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("slurm_cluster")]


@pytest.fixture
def absent_top_level() -> Iterator[str]:
    """A top-level path that does not exist on this machine (removed afterwards should a defect create it)."""
    path = f"/mlrecipe-r12-slurm-{uuid.uuid4().hex[:12]}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_missing_mount_points_are_made_on_the_node_only(tmp_path: Path, mlhome: Path, absent_top_level: str) -> None:
    existing = tmp_path / "existing"  # stands for /mnt: a directory the node's machine has
    (existing / "kept").mkdir(parents=True)
    (existing / "kept" / "note").write_text("still here\n")
    below = existing / "made" / "data"
    recipe = write(tmp_path / "mounts.yaml", f"""
        resources: {{nnodes: 1}}
        pvc: [{{name: pv-top, mount_path: {absent_top_level}}}, {{name: pv-below, mount_path: {below}}}]
        process:
          command: ['echo "on $SLURMD_NODENAME" > {absent_top_level}/top.txt && cat {absent_top_level}/top.txt
                     {existing}/kept/note > {below}/both.txt && ls {existing} > {below}/listed.txt']
        """)
    result = cli(mlhome, "install", "mounts", "data-prep/data-process", "-f", str(recipe), "-b", "slurm",
                 timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    volumes = mlhome / "volumes"
    assert (volumes / "pv-top" / "top.txt").read_text() == "on n1\n"  # written and read at the top-level path
    assert (volumes / "pv-below" / "both.txt").read_text() == "on n1\nstill here\n"  # the copy keeps the entries
    assert (volumes / "pv-below" / "listed.txt").read_text() == "kept\nmade\n"  # the mount point, on the node only
    assert not os.path.lexists(absent_top_level)
    assert sorted(p.name for p in existing.iterdir()) == ["kept"]
