"""Slurm plans without a cluster: golden batch scripts, resources translation, config, job parsing.

Refresh the golden files with ``pytest tests/slurm --update-golden`` and review the diff (only that flag
writes them; a missing golden file fails).
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from mlrecipe.backends.base import ReleaseContext
from mlrecipe.backends.host import resources
from mlrecipe.backends.host.mount_points import MOUNT_SCRIPT_PATH
from mlrecipe.backends.options import load_options
from mlrecipe.backends.registry import get_backend
from mlrecipe.backends.slurm.options import SlurmOptions
from mlrecipe.backends.slurm.outcome import failed_task, outcome_of
from mlrecipe.backends.slurm.scontrol import parse_job
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
from mlrecipe.spec.errors import SpecError
from mlrecipe.spec.recipe import Resources
from tests.golden import check_golden, interpreter_replacements
from tests.golden import normalize as replace_all
from tests.repo import EXAMPLES, REPO

GOLDEN = REPO / "tests" / "golden" / "slurm"
ASSETS = REPO / "tests" / "integration" / "assets"
CLUSTER_OPTIONS = {
    "master_port": 29500, "partition": "gpu", "account": "ml-team", "time": "04:00:00", "qos": "high",
    "extra_sbatch": ["--exclusive", "constraint=p4d"], "volumes": {"pv-fsx": "/shared/fsx"},
}


def _mpi_recipe(tmp_path: Path) -> str:
    path = tmp_path / "mpi.yaml"
    path.write_text(textwrap.dedent("""
        resources: {nnodes: 2, nproc_per_node: 2, requests: {cpu: "4", memory: 8Gi, nvidia.com/gpu: 1}}
        backoff_limit: 2
        pvc: [{name: pv-fsx, mount_path: /fsx}]
        launcher: {type: mpirun, script: /fsx/code/mpi_rank.py}
        """))
    return str(path)


CASES = {
    "quickstart": ({"kind": "pipeline", "path": str(EXAMPLES / "quickstart" / "pipeline.yaml"), "sets": []}, {}),
    "reference-style-ddp": ({
        "kind": "install", "release": "raw-ddp", "chart": "training/pytorchjob-distributed",
        "files": [str(EXAMPLES / "reference-style" / "pretrain-ddp.yaml")], "sets": [], "namespace": "default",
    }, CLUSTER_OPTIONS),
    "rayserve-vllm": ({
        "kind": "install", "release": "llm", "chart": "serving/rayserve",
        "files": [str(EXAMPLES / "eks" / "serving" / "rayserve-vllm.yaml")], "sets": [], "namespace": "default",
    }, {}),
    "mpijob": ({
        "kind": "install", "release": "mpi", "chart": "training/mpijob", "files": ["<mpi>"], "sets": [],
        "namespace": "default",
    }, {}),
}


def normalize(text: str, home: Path, tmp: Path) -> str:
    return replace_all(text, [(str(home), "$MLRECIPE_HOME"), *interpreter_replacements(),
                              (str(REPO), "$REPO"), (str(tmp), "$TMP")])


def _materialize(inputs: dict, options: dict) -> str:
    spec = spec_from_inputs(inputs)
    runner = ReleaseRunner(spec, get_backend("slurm", {"master_port": 29500, **options}), inputs, QuietDisplay())
    return runner.materialize()


@pytest.mark.parametrize("name", sorted(CASES))
def test_slurm_batch_script_golden(name: str, mlhome: Path, tmp_path: Path, update_golden: bool,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    inputs, options = CASES[name]
    inputs = {**inputs, "files": [_mpi_recipe(tmp_path) if f == "<mpi>" else f for f in inputs.get("files", [])]}
    text = normalize(_materialize(inputs, options), mlhome, tmp_path)
    check_golden(GOLDEN / f"{name}.txt", text, update_golden)
    assert not (mlhome / "releases").exists(), "materializing a plan writes nothing"


def test_batch_script_maps_options_and_resources(mlhome: Path, tmp_path: Path) -> None:
    inputs = {**CASES["mpijob"][0], "files": [_mpi_recipe(tmp_path)]}
    text = _materialize(inputs, {"partition": "p", "account": "a", "time": "1:00:00", "qos": "q",
                                 "extra_sbatch": ["--exclusive"]})
    for line in ("--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=2", "--mem=8192M", "--gpus-per-node=1",
                 "--partition=p", "--account=a", "--time=1:00:00", "--qos=q", "--requeue", "--exclusive"):
        assert f"#SBATCH {line}\n" in text, line
    assert "export MLRECIPE_DEVICE=cuda" in text and "OMPI_ALLOW_RUN_AS_ROOT=1" in text
    assert "srun" not in text.split("exec ", 1)[1].splitlines()[0], "mpirun starts the ranks, not srun"


def test_quickstart_script_runs_one_runtime_per_node(mlhome: Path) -> None:
    text = _materialize(CASES["quickstart"][0], {})
    train = text.split("steps/train/job.sbatch", 1)[1].split("steps/evaluate/job.sbatch", 1)[0]
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n" in train
    assert "exec srun --nodes=2 --ntasks=2 --ntasks-per-node=1" in train
    assert "export PET_RDZV_ENDPOINT=\"$PET_MASTER_ADDR:$PET_MASTER_PORT\"" in train
    script = train.split("program.json (step program", 1)[0]
    assert "PET_NODE_RANK" not in script, "the runtime derives the rank from SLURM_NODEID"
    assert "--requeue" in train, "elastic max_restarts asks for a requeue on node failure"
    assert "export HOME=/efs/home/quickstart" in train, "Helm expressions of the env are evaluated"
    assert f"{mlhome}/volumes/pv-fsx /fsx" in train


def test_default_master_port_comes_from_the_job_id(mlhome: Path) -> None:
    inputs = CASES["quickstart"][0]
    spec = spec_from_inputs(inputs)
    text = ReleaseRunner(spec, get_backend("slurm"), inputs, QuietDisplay()).materialize()
    assert "export PET_MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))" in text
    assert text == ReleaseRunner(spec, get_backend("slurm"), inputs, QuietDisplay()).materialize(), "deterministic"


@pytest.mark.parametrize(("given", "cpus", "mem"), [
    ({"cpu": "500m", "memory": "512Mi"}, 1, 512), ({"cpu": 8, "memory": "2G"}, 8, 1908), ({"cpu": "2"}, 2, None),
])
def test_resources_translation(given: dict, cpus: int, mem: int | None) -> None:
    res = Resources(requests=given, limits={"cpu": "99", "nvidia.com/gpu": 4, "vpc.amazonaws.com/efa": 4})
    assert resources.cpus(res) == cpus
    assert resources.memory_mb(res) == mem
    assert resources.gpus(res) == 4
    assert resources.unmapped(res) == ["vpc.amazonaws.com/efa"]
    with pytest.raises(ValidationError, match="cannot read quantity 'lots'"):  # refused at load, with its line
        Resources(requests={"memory": "lots"})
    with pytest.raises(resources.ResourceError):  # and still by the translation, should one get through
        resources.memory_mb(Resources.model_construct(requests={"memory": "lots"}))


def test_config_section_and_errors(mlhome: Path) -> None:
    mlhome.mkdir(parents=True)
    (mlhome / "config.yaml").write_text("slurm:\n  partition: gpu\n  mode: chain\n  volumes: {pv-fsx: /lustre}\n")
    cfg = load_options(SlurmOptions, "slurm", {"partition": "cpu"})
    assert (cfg.partition, cfg.mode, str(cfg.volume_source("pv-fsx"))) == ("cpu", "chain", "/lustre")
    assert cfg.volume_source("pv-efs") == mlhome / "volumes" / "pv-efs"
    (mlhome / "config.yaml").write_text("slurm:\n  partition: gpu\n  mode: sometimes\n  partiton: x\n")
    with pytest.raises(SpecError) as err:
        load_options(SlurmOptions, "slurm")
    shown = {(i.line, i.path) for i in err.value.issues}
    assert (3, "slurm.mode") in shown and (4, "slurm.partiton") in shown


JOB_FAILED = (
    "JobId=42 JobName=r-train UserId=root(0) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) Requeue=0 "
    "Restarts=0 BatchFlag=1 ExitCode=143:0 NodeList=n[1-2] BatchHost=n1 NumNodes=2"
)


def test_failed_job_names_node_exit_code_reason_and_log(tmp_path: Path) -> None:
    (tmp_path / "batch.log").write_text(
        "[mlrecipe] job 42\nsrun: error: n1: task 0: Terminated\nsrun: error: n2: task 1: Exited with exit code 3\n")
    (tmp_path / "node-1.log").write_text("loading\nTraceback: boom\n")
    info = parse_job(JOB_FAILED)
    assert info is not None and not info.active and info.exit_code == 143
    assert failed_task(tmp_path / "batch.log") == (1, "n2", 3)
    outcome = outcome_of(info, tmp_path)
    assert (outcome.state, outcome.exit_code, outcome.failed_rank) == ("failed", 3, 1)
    assert "FAILED (reason: NonZeroExitCode)" in outcome.message
    assert "node 1 (n2) exited with status 3" in outcome.message
    assert outcome.log_tail == ["loading", "Traceback: boom"]


def test_job_states() -> None:
    pending = parse_job("JobId=7 JobState=PENDING Reason=Dependency ExitCode=0:0")
    never = parse_job("JobId=8 JobState=PENDING Reason=DependencyNeverSatisfied ExitCode=0:0")
    timeout = parse_job("JobId=9 JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15 Restarts=1")
    assert pending is not None and pending.active
    assert never is not None and not never.active
    assert timeout is not None and not timeout.active and timeout.signal == 15 and timeout.restarts == 1
    outcome = outcome_of(timeout, Path("/nonexistent"))
    assert outcome.exit_code == 143 and "TIMEOUT (reason: TimeLimit)" in outcome.message
    assert parse_job("garbage") is None


@pytest.mark.parametrize(("native", "reason", "state"), [
    ("PENDING", "Priority", "pending"), ("REQUEUED", "None", "pending"), ("SUSPENDED", "None", "pending"),
    ("COMPLETING", "None", "pending"), ("RUNNING", "None", "running"), ("COMPLETED", "None", "succeeded"),
    ("CANCELLED", "None", "failed"), ("OUT_OF_MEMORY", "None", "failed"), ("NODE_FAIL", "None", "failed"),
    ("PENDING", "DependencyNeverSatisfied", "failed"), ("SOME_NEW_STATE", "None", "failed"),
])
def test_slurm_states_map_onto_step_states_through_one_table(native: str, reason: str, state: str) -> None:
    info = parse_job(f"JobId=5 JobState={native} Reason={reason} ExitCode=0:0")
    assert info is not None and info.step_state == state
    assert info.active is (state in ("pending", "running"))


def test_a_tls_server_is_refused_before_anything_starts(mlhome: Path) -> None:
    """``testing/jupyter`` serves HTTPS on 127.0.0.1: a compute node's server would never be reachable."""
    from mlrecipe.spec.load import load_step_release

    step = load_step_release("look", "testing/jupyter", [str(EXAMPLES / "quickstart" / "recipes" / "jupyter.yaml")],
                             ["nginx.htpasswd=$apr1$x$y"]).steps[0]
    problems = get_backend("slurm", {}).check(step)
    assert any("serves over TLS" in p and "--backend local" in p for p in problems), problems


def test_the_mount_script_is_written_beside_the_runtime_and_run_by_path(mlhome: Path, tmp_path: Path) -> None:
    """A step with mounts runs the step directory's copy of ``mount_points.sh`` (written with the step runtime at
    submit), by path: the batch script and mpirun's launch agent name it, neither embeds it."""
    inputs = {**CASES["mpijob"][0], "files": [_mpi_recipe(tmp_path)]}
    spec = spec_from_inputs(inputs)
    (step,) = spec.steps
    ctx = ReleaseContext("mpi", "default", "slurm", mlhome / "releases" / "slurm" / "default" / "mpi")
    plan = get_backend("slurm", {"master_port": 29500}).plan(step, ctx)
    copy = plan.step_dir / "mount_points.sh"
    agent = plan.step_dir / "rank-mounts.sh"
    assert plan.mount_script_path == copy
    plan.write()
    assert copy.read_bytes() == MOUNT_SCRIPT_PATH.read_bytes()
    assert (plan.step_dir / "step_runtime.py").is_file()
    for text in (plan.script, agent.read_text()):
        assert f"--propagation private sh {copy} '' " in text
        assert "pivot_root" not in text, "the mount script is run by path, not embedded"
