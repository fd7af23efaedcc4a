"""Render a host step request into a Slurm job: the ``#SBATCH`` options, the job's env, the launch lines and the
files the batch script references (:class:`~mlrecipe.backends.slurm.plan.SlurmPlan`)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from mlrecipe.backends.base import ReleaseContext
from mlrecipe.backends.host import rayjob, resources
from mlrecipe.backends.host.launch_env import device_env, mpi_env
from mlrecipe.backends.host.mount_points import MOUNT_SCRIPT_PATH
from mlrecipe.backends.host.request import HostStepRequest
from mlrecipe.backends.host.volumes import wrap_argv
from mlrecipe.backends.slurm.options import SlurmOptions
from mlrecipe.backends.slurm.plan import SlurmPlan
from mlrecipe.backends.slurm.script import NODE_WRAPPER, BatchScript, rank_mounts_script, server_lines
from mlrecipe.credentials import is_secret
from mlrecipe.runtime import RAY_CLUSTER_PATH
from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.load import StepSpec

#: A Ray worker node's temp dir on its allocated node (short: Ray's socket paths must fit 107 bytes).
RAY_WORKER_TEMP_DIR = "/tmp/mlrecipe-ray/${SLURM_JOB_ID}-${SLURM_PROCID}"
#: Runs ``ray start ...`` ("$@") on an allocated node with its own temp dir and agent port, so that worker nodes
#: sharing a host (a head's host, a test cluster's nodes) do not share sockets.
RAY_WORKER_SCRIPT = (
    'port=$(python3 -c "import socket; s = socket.socket(); s.bind((\'\', 0)); print(s.getsockname()[1])"); '
    f'exec "$@" --temp-dir="{RAY_WORKER_TEMP_DIR}" --dashboard-agent-listen-port="$port"'
)
#: Removes those temp dirs, one task per node, once the worker nodes have stopped (srun kills a stopping Ray node
#: before it could clean up after itself).
RAY_WORKER_CLEANUP_SCRIPT = f'rm -rf "{RAY_WORKER_TEMP_DIR}"'


def wants_requeue(step: StepSpec) -> bool:
    """The recipe asks to be retried (``backoff_limit`` or elastic ``max_restarts``): requeue on node failure."""
    policy = step.recipe.elastic_policy
    return bool(step.recipe.backoff_limit) or bool(policy and policy.max_restarts)


def sbatch_options(
    step: StepSpec, cfg: SlurmOptions, step_dir: Path, job_name: str
) -> tuple[list[str], int | None, list[str]]:
    """The ``#SBATCH`` options of a step, its GPUs per node, and notes on what has no Slurm equivalent."""
    res = step.recipe.resources
    mpi = step.chart.kind is StepKind.MPI
    per_node = res.nproc_per_node if mpi else 1
    opts = [
        f"--job-name={job_name}",
        f"--nodes={res.nnodes}",
        f"--ntasks-per-node={per_node}",
    ]
    cpus = resources.cpus(res)
    if cpus is not None:
        opts.append(f"--cpus-per-task={max(1, -(-cpus // per_node))}")
    mem = resources.memory_mb(res)
    if mem is not None:
        opts.append(f"--mem={mem}M")
    gpus = cfg.gpus_per_node if cfg.gpus_per_node is not None else resources.gpus(res)
    if gpus:
        opts.append(f"--gpus-per-node={gpus}")
    for name in ("partition", "account", "qos", "time"):
        value = getattr(cfg, name)
        if value:
            opts.append(f"--{name}={value}")
    opts.append("--requeue" if wants_requeue(step) else "--no-requeue")
    opts += ["--open-mode=append", f"--output={step_dir / 'batch.log'}"]
    opts += [o if o.startswith("-") else f"--{o}" for o in cfg.extra_sbatch]
    notes = [f"resources {k} has no Slurm equivalent here and is ignored" for k in resources.unmapped(res)]
    if res.node_type:
        notes.append(f"node_type {res.node_type} is not mapped: select nodes with slurm.extra_sbatch (--constraint)")
    return opts, gpus, notes


def render(request: HostStepRequest, cfg: SlurmOptions, ctx: ReleaseContext, env: dict[str, str]) -> SlurmPlan:
    """The Slurm job of ``request``: one batch script, ``env`` (earlier steps' outputs) added to the job's env."""
    step, step_dir = request.step, request.step_dir
    opts, gpus, notes = sbatch_options(step, cfg, step_dir, f"{ctx.release}-{step.name}")
    notes += request.notes
    files = dict(request.files)
    job_env = {**_launch_env(request, bool(gpus), files, notes), **env, **request.recipe_env, **request.contract_env}
    secrets = {k: v for k, v in job_env.items() if is_secret(k, v)}
    for key in secrets:
        job_env.pop(key)
        notes.append(f"{key} is passed to the job from the submitting environment; its value is not written "
                     "into the batch script")
    url_file = step_dir / "server.url" if request.readiness is not None else None
    pre_launch = _server(request, cfg, ctx.release, url_file, notes)
    runtime_path = step_dir / "step_runtime.py"
    ray_wrapper = _ray_cluster(request, files, notes) if request.kind is StepKind.RAY else []
    launch_lines, redirect, nodes = _launch(request, cfg, runtime_path, ray_wrapper)
    resources_ = step.recipe.resources
    script = BatchScript(
        header=[f"mlrecipe: step {step.name} ({step.chart.name}) of release {ctx.address}, "
                f"{resources_.nnodes} node(s) x {resources_.nproc_per_node} process(es)"],
        sbatch=opts,
        env={k: v for k, v in job_env.items() if k != "PATH"},
        path_prefix=None if "PATH" in job_env else str(request.python.bin_dir),
        master_port=cfg.master_port,
        elastic=request.kind is StepKind.TORCH_ELASTIC,
        launch=launch_lines,
        redirect=redirect,
        comments=[f"note: {n}" for n in notes],
        pre_launch=pre_launch,
    )
    if "PATH" in job_env:
        script.env["PATH"] = job_env["PATH"]
    return SlurmPlan(step=step.name, chart=step.chart.name, script=script.render(), script_path=step_dir / "job.sbatch",
                     program=request.program, program_path=request.program_path, runtime_path=runtime_path,
                     mount_script_path=_mount_script(request) if request.mounts else None,
                     step_dir=step_dir, nodes=nodes, nnodes=request.nnodes, mounts=list(request.mounts), notes=notes,
                     base_env=env, secret_env=secrets, extra_files=files, readiness=request.readiness,
                     url_file=url_file)


def _mount_script(request: HostStepRequest) -> Path:
    """The step's copy of the mount script, beside its step runtime (written with it at submit)."""
    return request.step_dir / MOUNT_SCRIPT_PATH.name


def _launch_env(request: HostStepRequest, gpus: bool, files: dict[Path, str], notes: list[str]) -> dict[str, str]:
    """The job's env before the recipe's and the contract's: volumes, image, devices, MPI (and its launch agent)."""
    out = {**request.volume_env, **request.python.env(), **device_env(gpus)}
    if request.kind is not StepKind.MPI:
        return out
    out.update(mpi_env())
    notes.append("MPI ranks start through mpirun inside the allocation (Open MPI launches its daemons with srun)")
    if request.mounts:
        agent = request.step_dir / "rank-mounts.sh"
        files[agent] = rank_mounts_script(list(request.mounts), _mount_script(request))
        out["OMPI_MCA_orte_launch_agent"] = f"{agent} orted"
        notes.append("the ranks on the other nodes see the pvc mount paths too (mpirun's launch agent "
                     f"{agent.name} binds them)")
    return out


def _server(request: HostStepRequest, cfg: SlurmOptions, release: str, url_file: Path | None,
            notes: list[str]) -> list[str]:
    """A serving step's lines before the launch: its address and port, published in ``url_file``."""
    ready = request.readiness
    if ready is None or url_file is None:
        return []
    port = request.fixed_port or cfg.server_port
    notes.append(f"step {request.step.name} serves on its node's address (NodeAddr), port "
                 f"{port or 'chosen on the node'}: ready when GET {ready.path} answers 2xx within "
                 f"{ready.timeout:.0f} s of the job running; it runs until 'mlrecipe uninstall {release}' "
                 "(or the job's time limit)")
    return server_lines(int(port) if port else None, str(url_file))


def _ray_cluster(request: HostStepRequest, files: dict[Path, str], notes: list[str]) -> list[str]:
    """A RayJob in the allocation: the head and the driver on the batch host, one worker node per allocated node
    (``srun``, with the step's mounts); the files it needs and the argv prefix of its driver."""
    step, nnodes = request.step, request.nnodes
    per_node = ["srun", f"--nodes={nnodes}", f"--ntasks={nnodes}", "--ntasks-per-node=1"]
    launcher = [*per_node, "--kill-on-bad-exit=0",
                *wrap_argv(["sh", "-c", RAY_WORKER_SCRIPT, "mlrecipe-ray-worker"], list(request.mounts),
                          _mount_script(request))]
    cleanup = [*per_node, "sh", "-c", RAY_WORKER_CLEANUP_SCRIPT]
    spec_path, program = request.step_dir / "ray" / "cluster.json", request.step_dir / "ray_cluster.py"
    files[spec_path] = json.dumps(rayjob.remote_workers(step, launcher, cleanup), indent=2)
    files[program] = RAY_CLUSTER_PATH.read_text(encoding="utf-8")
    notes.append(f"step {step.name} runs as a Ray job: the Ray head and the driver on the first node, a worker "
                 f"node on each of the {nnodes} allocated node(s) (srun ... ray start --block)")
    return rayjob.wrapper(program, spec_path)


def _launch(request: HostStepRequest, cfg: SlurmOptions, runtime_path: Path,
            ray_wrapper: list[str]) -> tuple[list[list[str]], str, list[int]]:
    """The launch lines of the batch script, its redirect, and the ranks that write node logs."""
    argv = request.runtime_argv([*NODE_WRAPPER, *ray_wrapper], "python3", runtime_path, _mount_script(request))
    step_dir = request.step_dir
    if request.kind in (StepKind.MPI, StepKind.RAY):  # runs once: mpirun / Ray start the other nodes' work
        return [argv], f">> {shlex.quote(str(step_dir / 'node-0.log'))} 2>&1", [0]
    nnodes = request.nnodes
    srun = ["srun", f"--nodes={nnodes}", f"--ntasks={nnodes}", "--ntasks-per-node=1",
            "--kill-on-bad-exit=1", "--open-mode=append", f"--output={step_dir / 'node-%n.log'}", *cfg.srun_args]
    return [srun, argv], "", list(range(nnodes))
