"""A local node's temporary directory (``TMPDIR``, made by the step runtime) goes with the step even when the node's
step runtime is killed with SIGKILL and cannot remove it itself: the backend removes it once the step's processes
are gone."""

from __future__ import annotations

import signal
from pathlib import Path

import psutil
import pytest

from tests.integration.helpers import bash_recipe, finish, release_processes, start_cli, wait_for

pytestmark = pytest.mark.integration


def _node_temp_dirs(release: str, home: Path) -> dict[str, str]:
    """TMPDIR of each node's ``sleep``, by the name the backend gave the node's directory."""
    found = {}
    for p in release_processes(release, home):
        try:
            env = p.environ()
            if p.name() == "sleep" and "TMPDIR" in env:
                found[env["MLRECIPE_NODE_TEMP_NAME"]] = env["TMPDIR"]
        except psutil.Error:
            continue
    return found


def test_the_temp_dir_of_a_node_killed_with_sigkill_is_removed(tmp_path: Path, mlhome: Path) -> None:
    recipe = bash_recipe(tmp_path, 'touch "$TMPDIR/scratch"; sleep 300\n')
    proc = start_cli(mlhome, "install", "tmpkill", "data-prep/data-process", "-f", str(recipe))
    wait_for(lambda: len(_node_temp_dirs("tmpkill", mlhome)) == 2, 60, "both nodes' sleep")
    dirs = _node_temp_dirs("tmpkill", mlhome)
    assert all(Path(d, "scratch").is_file() and Path(d).name == f"mlrecipe-tmp-{name}" for name, d in dirs.items())

    runtime, = [p for p in release_processes("tmpkill", mlhome) if "step_runtime" in " ".join(p.cmdline())
                and p.environ().get("MLRECIPE_NODE_TEMP_NAME", "").endswith("-1")]
    runtime.send_signal(signal.SIGKILL)
    out = finish(proc, 120)
    assert proc.returncode == 1 and "node 1 exited with status -9" in out, out
    wait_for(lambda: not release_processes("tmpkill", mlhome), 30, "no process of the release")
    assert [d for d in dirs.values() if Path(d).exists()] == []
