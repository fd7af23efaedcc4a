"""The step runtime: script order, env contract mapping, exit status, logs."""

from __future__ import annotations

import json
import subprocess
import sys
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


def run_runtime(tmp_path: Path, prog: dict) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "program.json"
    path.write_text(json.dumps(prog))
    env = {"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin", "PET_NODE_RANK": "0"}
    return subprocess.run([sys.executable, str(RUNTIME_PATH), str(path)], env=env, capture_output=True, text=True,
                          timeout=60)


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
