"""Real processes on the local backend: torchrun and accelerate DDP, failures, Ctrl-C, kill -9, resume."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import textwrap
from pathlib import Path

import psutil
import pytest

from mlrecipe.backends.host.devices import visible_gpus
from tests.integration.helpers import cli, finish, process_names, release_processes, start_cli, state, wait_for
from tests.repo import EXAMPLES

pytestmark = pytest.mark.integration
SCRIPTS = EXAMPLES / "quickstart" / "scripts"
ASSETS = Path(__file__).resolve().parent / "assets"


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def train_pipeline(tmp_path: Path, steps: int, sleep: float, ckpt_every: int, restarts: int) -> Path:
    """data + elastic train steps on the quickstart scripts, slowed down so tests can interfere."""
    write(tmp_path / "data.yaml", f"""
        process:
          env: [{{name: HOME, value: "/efs/home/{{{{ .Release.Name }}}}"}}]
          command: [python3, {SCRIPTS}/prepare_data.py]
          args: ["--out /fsx/$MLRECIPE_RELEASE/data", "--vocab-size 512"]
        """)
    write(tmp_path / "train.yaml", f"""
        resources: {{nnodes: 2, nproc_per_node: 1}}
        elastic_policy: {{min_replicas: 2, max_replicas: 2, max_restarts: {restarts}}}
        launcher:
          type: torchrun
          script: {SCRIPTS}/train.py
          args: ["--data /fsx/$MLRECIPE_RELEASE/data", "--ckpt-dir $HOME/ckpt", "--export $HOME/model",
                 "--steps {steps}", "--ckpt-every {ckpt_every}", "--step-sleep {sleep}", "--batch 4"]
        train:
          env:
            - {{name: HOME, value: "/efs/home/{{{{ .Release.Name }}}}"}}
            - {{name: OMP_NUM_THREADS, value: "1"}}
        """)
    return write(tmp_path / "pipeline.yaml", """
        release: trainrel
        steps:
          - {name: data, chart: data-prep/data-process, recipe: data.yaml}
          - {name: train, chart: training/pytorchjob-elastic, recipe: train.yaml}
        """)


def efs_home(home: Path, release: str) -> Path:
    return home / "volumes" / "pv-efs" / "home" / release


def test_quickstart_pipeline_end_to_end(mlhome: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The main job: real data, real 2-node DDP training, evaluation (the loss goes down), vLLM serving, a client."""
    from tests.serve.serving import SERVE_ENV, SERVE_IMAGE, has_serve_env

    if not has_serve_env():
        pytest.skip(f"the quickstart's serving step needs vLLM in {SERVE_ENV} (run 'make serve-env')")
    monkeypatch.setenv("MLRECIPE_IMAGES", f"{SERVE_IMAGE}={SERVE_ENV}")
    try:
        _quickstart(mlhome)
    finally:
        cli(mlhome, "uninstall", "quickstart")
    assert release_processes("quickstart", mlhome) == []


def _quickstart(mlhome: Path) -> None:
    result = cli(mlhome, "run", str(EXAMPLES / "quickstart" / "pipeline.yaml"), timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    metrics = json.loads((efs_home(mlhome, "quickstart") / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["train_steps"] == 300
    assert metrics["train_last_loss"] < metrics["train_first_loss"] - 1.0
    assert metrics["perplexity"] < metrics["perplexity_untrained"] / 5
    export = mlhome / "volumes" / "pv-fsx" / "quickstart" / "model"
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (export / name).exists(), name
    answer = json.loads((efs_home(mlhome, "quickstart") / "answer.json").read_text())
    assert answer["completion"].strip() and answer["completion_tokens"] > 0 and answer["v2_text_output"].strip()
    again = cli(mlhome, "run", str(EXAMPLES / "quickstart" / "pipeline.yaml"))
    assert again.returncode == 0
    assert again.stdout.count("skipped (unchanged since its last success") == 4
    assert again.stdout.count("skipped (still serving at http://127.0.0.1:") == 1
    status = json.loads(cli(mlhome, "status", "quickstart", "-o", "json").stdout)
    assert status[0]["state"] == "serving"
    assert [s["state"] for s in status[0]["steps"]] == ["succeeded"] * 3 + ["serving", "succeeded"]
    assert status[0]["steps"][3]["url"] == answer["url"]


def test_reference_style_recipe_runs_unchanged(mlhome: Path) -> None:
    recipe = EXAMPLES / "reference-style" / "pretrain-ddp.yaml"
    # 2 nodes x 1 GPU: on CPU where there is no GPU (a note says so); a one-GPU machine refuses it, so run it on CPU
    cpu = ["-B", "gpus=cpu"] if len(visible_gpus()) == 1 else []
    result = cli(mlhome, "install", "raw-ddp", "training/pytorchjob-distributed", "-f", str(recipe), *cpu,
                 timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    home = efs_home(mlhome, "raw-ddp")
    assert sorted(p.name for p in (home / "checkpoints").glob("*.pt")) == ["step-000020.pt", "step-000040.pt"]
    tee_log = home / "logs" / "raw-ddp-pytorchjob-distributed-0" / "pretrain.log"
    assert "trained 40 steps on 2 rank(s)" in tee_log.read_text()
    node1 = cli(mlhome, "logs", "raw-ddp", "--rank", "1").stdout
    assert "DISTRIBUTED_ARGS=--nnodes 2 --nproc_per_node 1 --node_rank 1 --master_addr 127.0.0.1" in node1


def test_accelerate_ddp_two_processes(tmp_path: Path, mlhome: Path) -> None:
    recipe = write(tmp_path / "acc.yaml", f"""
        resources: {{nnodes: 1, nproc_per_node: 2}}
        launcher: {{type: accelerate, script: {ASSETS}/allreduce.py}}
        train:
          env: [{{name: OMP_NUM_THREADS, value: "1"}}]
        """)
    result = cli(mlhome, "install", "acc", "training/pytorchjob-distributed", "-f", str(recipe), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    log = cli(mlhome, "logs", "acc").stdout
    assert "rank=0 world_size=2 sum=3" in log and "rank=1 world_size=2 sum=3" in log


def test_torchrun_two_nodes_allreduce(tmp_path: Path, mlhome: Path) -> None:
    recipe = write(tmp_path / "tr.yaml", f"""
        resources: {{nnodes: 2, nproc_per_node: 1}}
        launcher: {{type: torchrun, script: {ASSETS}/allreduce.py}}
        """)
    result = cli(mlhome, "install", "tr", "training/pytorchjob-distributed", "-f", str(recipe), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank=1 world_size=2 sum=3" in cli(mlhome, "logs", "tr", "--rank", "1").stdout


def _worker(release: str, rank: str, home: Path) -> psutil.Process | None:
    for p in release_processes(release, home):
        try:
            env = p.environ()
            if env.get("RANK") == rank and "train.py" in " ".join(p.cmdline()) and "TORCHELASTIC_RUN_ID" in env:
                return p
        except psutil.Error:
            continue
    return None


def test_worker_killed_restarts_from_newest_checkpoint(tmp_path: Path, mlhome: Path) -> None:
    pipeline = train_pipeline(tmp_path, steps=40, sleep=0.15, ckpt_every=10, restarts=2)
    proc = start_cli(mlhome, "run", str(pipeline))
    ckpt = efs_home(mlhome, "trainrel") / "ckpt"
    wait_for(lambda: (ckpt / "step-000010.pt").exists(), 180, "the first checkpoint")
    victim = _worker("trainrel", "1", mlhome)
    assert victim is not None, "no rank-1 worker found"
    victim.send_signal(signal.SIGKILL)
    out = finish(proc, 300)
    assert proc.returncode == 0, out
    metrics = json.loads((efs_home(mlhome, "trainrel") / "model" / "train_metrics.json").read_text())
    assert metrics["steps"] == 40, "the total number of steps is exact after the restart"
    log = cli(mlhome, "logs", "trainrel", "train").stdout
    assert "resumed from step-0000" in log


def test_resume_after_cli_kill9(tmp_path: Path, mlhome: Path) -> None:
    pipeline = train_pipeline(tmp_path, steps=30, sleep=0.2, ckpt_every=10, restarts=0)
    proc = start_cli(mlhome, "run", str(pipeline))
    ckpt = efs_home(mlhome, "trainrel") / "ckpt"
    wait_for(lambda: (ckpt / "step-000010.pt").exists(), 180, "the first checkpoint")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    wait_for(lambda: not release_processes("trainrel", mlhome), 60, "the nodes to stop after the CLI died")
    status = cli(mlhome, "status", "trainrel", "-o", "json")
    assert json.loads(status.stdout)[0]["state"] == "interrupted"
    resumed = cli(mlhome, "resume", "trainrel", timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "step data: skipped" in resumed.stdout
    metrics = json.loads((efs_home(mlhome, "trainrel") / "model" / "train_metrics.json").read_text())
    assert metrics["steps"] == 30
    assert "resumed from step-0000" in cli(mlhome, "logs", "trainrel", "train").stdout


def test_a_cli_that_exited_but_is_not_reaped_does_not_drive_its_release() -> None:
    """A driver that exited and that its parent has not reaped yet (a zombie) is not alive: ``uninstall`` does not
    wait out its 30 s for it to go, ``status`` does not show its release as driven."""
    from mlrecipe.runner.state import ReleaseRecord

    with subprocess.Popen(["sleep", "30"]) as proc:
        created = psutil.Process(proc.pid).create_time()
        record = ReleaseRecord("rel", "default", "local", {}, driver_pid=proc.pid, driver_created=created)
        assert record.driver_alive()
        proc.send_signal(signal.SIGTERM)  # not waited for: a zombie until the with block reaps it
        wait_for(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE, 30, "the driver to exit")
        assert not record.driver_alive()


def test_ctrl_c_stops_every_process(tmp_path: Path, mlhome: Path) -> None:
    recipe = write(tmp_path / "sleep.yaml", """
        resources: {nnodes: 2}
        process:
          command: [bash, -c]
          args: ["'sleep 300 & sleep 300; wait'"]
        """)
    proc = start_cli(mlhome, "install", "sleepy", "data-prep/data-process", "-f", str(recipe))
    wait_for(lambda: process_names("sleepy", mlhome).count("sleep") >= 4, 60, "4 sleeps")
    proc.send_signal(signal.SIGINT)
    out = finish(proc, 60)
    assert proc.returncode == 130, out
    wait_for(lambda: not release_processes("sleepy", mlhome), 20, "no orphan process")
    assert state(mlhome, "sleepy")["state"] == "interrupted"


def test_failing_rank_stops_the_others_and_shows_its_log(tmp_path: Path, mlhome: Path) -> None:
    recipe = write(tmp_path / "fail.yaml", """
        resources: {nnodes: 2}
        process:
          command: [bash, -c]
          args: ["'if [ $PET_NODE_RANK = 1 ]; then echo boom-from-rank-1; exit 7; fi; sleep 300'"]
        """)
    # the healthy rank sleeps 300 s: the CLI returns within its timeout only when the failing rank stopped it
    result = cli(mlhome, "install", "failing", "data-prep/data-process", "-f", str(recipe), timeout=120)
    assert result.returncode == 1
    assert release_processes("failing", mlhome) == [], "the healthy rank was not stopped"
    assert "node 1 exited with status 7" in result.stdout
    assert "boom-from-rank-1" in result.stdout
    assert state(mlhome, "failing")["state"] == "failed"
    assert not release_processes("failing", mlhome)


def test_uninstall_is_idempotent(tmp_path: Path, mlhome: Path) -> None:
    recipe = write(tmp_path / "ok.yaml", "process: {command: [echo, hi]}\n")
    assert cli(mlhome, "install", "short", "data-prep/data-process", "-f", str(recipe)).returncode == 0
    first = cli(mlhome, "uninstall", "short")
    assert first.returncode == 0 and "uninstalled" in first.stdout
    second = cli(mlhome, "uninstall", "short")
    assert second.returncode == 0 and "not found" in second.stdout
    assert not (mlhome / "releases" / "local" / "default" / "short").exists()


@pytest.mark.skipif(shutil.which("mpirun") is None and not os.environ.get("CI"),
                    reason="Open MPI is not installed here (make test installs it)")
def test_mpijob_runs_ranks_with_mpirun(tmp_path: Path, mlhome: Path) -> None:
    recipe = write(tmp_path / "mpi.yaml", f"""
        resources: {{nnodes: 2, nproc_per_node: 1}}
        launcher: {{type: mpirun, script: {ASSETS}/mpi_rank.py}}
        """)
    result = cli(mlhome, "install", "mpi", "training/mpijob", "-f", str(recipe), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    log = cli(mlhome, "logs", "mpi").stdout
    assert "mpi-rank 0 of 2" in log and "mpi-rank 1 of 2" in log
