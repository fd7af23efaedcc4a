"""The step runtime: script order, env contract mapping, exit status, logs."""

from __future__ import annotations

import getpass
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlrecipe.runtime import RUNTIME_PATH, step_runtime


def program(**kw: object) -> dict:
    base = {"version": 1, "release": "r", "namespace": "n", "step": "s", "chart": "data-prep/data-process",
            "git": None, "inline_script": [], "pre_script": [], "command": [], "args": [], "post_script": []}
    base.update(kw)
    return base


def test_script_follows_reference_order() -> None:
    script = step_runtime.build_script(program(
        git={"repo_url": "https://example.com/x.git", "branch": "main", "commit": "abc"},
        inline_script=["echo inline"], pre_script=["echo pre"], command=["torchrun"],
        args=["$DISTRIBUTED_ARGS", "train.py", "2>&1 | tee $LOG"], post_script=["echo post"],
    ))
    order = [script.index(s) for s in ("git clone", "git checkout main", "git reset --hard abc", "echo inline",
                                        "echo pre", "torchrun $DISTRIBUTED_ARGS train.py 2>&1 | tee $LOG",
                                        "echo post", 'cd "$HOME"\nrm -rf')]
    assert order == sorted(order)
    assert 'export GIT_CLONE_DIR="$HOME/tmp/$HOSTNAME"' in script


@pytest.mark.integration
def test_env_contract_from_slurm_and_indexed_jobs() -> None:
    slurm = step_runtime.map_env_contract(
        {"SLURM_JOB_ID": "7", "SLURM_NODEID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "n1"})
    assert slurm["PET_NODE_RANK"] == "1" and slurm["PET_NNODES"] == "2" and slurm["PET_MASTER_ADDR"] == "n1"
    job = step_runtime.map_env_contract({"JOB_COMPLETION_INDEX": "3", "PET_NNODES": "4"})
    assert job["PET_NODE_RANK"] == "3" and "PET_NNODES" not in job
    lws = step_runtime.map_env_contract({"LWS_WORKER_INDEX": "1", "LWS_GROUP_SIZE": "2", "LWS_LEADER_ADDRESS": "l"})
    assert (lws["PET_NODE_RANK"], lws["PET_NNODES"], lws["PET_MASTER_ADDR"]) == ("1", "2", "l")
    kept = step_runtime.map_env_contract({"PET_NODE_RANK": "5"})
    assert "PET_NODE_RANK" not in kept


def runtime_argv(tmp_path: Path, prog: dict) -> list[str]:
    path = tmp_path / "program.json"
    path.write_text(json.dumps(prog))
    return [sys.executable, str(RUNTIME_PATH), str(path)]


def runtime_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"HOME": str(tmp_path / "home"), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "PET_NODE_RANK": "0", **extra}


def run_runtime(tmp_path: Path, prog: dict, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(runtime_argv(tmp_path, prog), env=runtime_env(tmp_path, **env), capture_output=True,
                          text=True, timeout=60)


#: What a step leaves in its temp dir: a directory (torchrun's torchelastic_*), a Unix socket (vLLM's IPC), a file;
#: then it records where that was and where TorchInductor's cache is.
LITTER = ['mkdir "$TMPDIR/torchelastic_x" && touch "$TMPDIR/vllm_dist_x"',
          """python -c 'import os, socket; socket.socket(socket.AF_UNIX).bind(os.environ["TMPDIR"] + "/ipc")'""",
          'echo "$TMPDIR" > "$HOME/tmpdir.txt"; echo "${TORCHINDUCTOR_CACHE_DIR:-}" > "$HOME/inductor.txt"']


@pytest.mark.integration
def test_a_node_gets_its_own_tmpdir_removed_when_the_script_ends(tmp_path: Path) -> None:
    result = run_runtime(tmp_path, program(pre_script=LITTER, command=["true"]))
    assert result.returncode == 0, result.stdout + result.stderr
    used = Path((tmp_path / "home" / "tmpdir.txt").read_text().strip())
    assert used.parent == Path("/tmp") and used.name.startswith(step_runtime.NODE_TEMP_PREFIX), used
    assert not used.exists(), "the node's temp dir, socket and all, goes with the node"
    inductor = (tmp_path / "home" / "inductor.txt").read_text().strip()
    assert inductor == f"/tmp/torchinductor_{getpass.getuser()}", "the compile cache stays where torch keeps it"


@pytest.mark.integration
def test_a_stopped_node_removes_its_tmpdir_too(tmp_path: Path) -> None:
    proc = subprocess.Popen(runtime_argv(tmp_path, program(pre_script=LITTER, command=["sleep", "60"])),
                            env=runtime_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = tmp_path / "home" / "inductor.txt"
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    used = Path((tmp_path / "home" / "tmpdir.txt").read_text().strip())
    assert (used / "ipc").exists()
    os.kill(proc.pid, signal.SIGTERM)  # what uninstall sends a node
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert not used.exists()


@pytest.mark.parametrize("named", [True, False], ids=["plain-name", "name-with-a-path"])
@pytest.mark.integration
def test_a_backend_may_name_the_tmpdir(tmp_path: Path, named: bool) -> None:
    """The local backend names each node's directory (``MLRECIPE_NODE_TEMP_NAME``) to remove it after a SIGKILL; a
    name that is not one plain file name is not used."""
    name = f"{os.getpid()}-test-1" if named else "../escape"
    result = run_runtime(tmp_path, program(pre_script=LITTER, command=["true"]), MLRECIPE_NODE_TEMP_NAME=name)
    assert result.returncode == 0, result.stdout + result.stderr
    used = Path((tmp_path / "home" / "tmpdir.txt").read_text().strip())
    assert (used == Path(step_runtime.named_node_temp_dir(name))) is named
    assert used.parent == Path("/tmp") and used.name.startswith(step_runtime.NODE_TEMP_PREFIX) and not used.exists()


@pytest.mark.integration
def test_a_tmpdir_the_step_sets_is_kept(tmp_path: Path) -> None:
    scratch = tmp_path / "ebs-scratch"  # an ebs volume at /tmp: its files are the step's to keep
    scratch.mkdir()
    result = run_runtime(tmp_path, program(pre_script=LITTER, command=["true"]), TMPDIR=str(scratch))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "home" / "tmpdir.txt").read_text().strip() == str(scratch)
    assert (scratch / "torchelastic_x").is_dir() and (scratch / "ipc").exists()
    assert (tmp_path / "home" / "inductor.txt").read_text().strip() == ""


@pytest.mark.integration
def test_exports_carry_over_and_status_is_the_commands(tmp_path: Path) -> None:
    result = run_runtime(tmp_path, program(
        pre_script=["export GREETING=hello"], command=["bash", "-c"], args=["'echo $GREETING; exit 3'"],
        post_script=["echo post-ran"]))
    assert result.returncode == 3
    assert "hello" in result.stdout and "post-ran" in result.stdout
    log = tmp_path / "home" / "logs" / "s" / "node-0.log"
    assert "hello" in log.read_text()


@pytest.mark.integration
def test_pipefail_reports_failure_before_tee(tmp_path: Path) -> None:
    result = run_runtime(tmp_path, program(command=["false"], args=["2>&1 | tee $HOME/out.log"]))
    assert result.returncode == 1


@pytest.mark.integration
def test_git_clone_into_home_tmp_hostname(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "-c", "user.email=a@b", "-c", "user.name=a", "commit",
                                                       "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(cmd, cwd=repo, check=True)
    (repo / "hello.sh").write_text("echo from-repo\n")
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "x"], cwd=repo,
                   check=True)
    result = run_runtime(tmp_path, program(git={"repo_url": str(repo), "branch": "main", "commit": None},
                                           command=["bash", "hello.sh;", "echo", "$GIT_CLONE_DIR"]))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "from-repo" in result.stdout
    clone = result.stdout.strip().splitlines()[-1]
    assert clone.startswith(str(tmp_path / "home" / "tmp"))
    assert not Path(clone).exists(), "the clone is removed at the end"
