"""The Slurm backend: each step is one batch job of ``nnodes`` nodes, one step runtime per node.

The batch script (``Plan.materialize()``, what ``mlrecipe template --backend slurm`` prints) exports
the env contract except what differs per node, computes ``PET_MASTER_ADDR`` from the first node's
``NodeAddr``, and starts the runtime on every node with ``srun --ntasks-per-node=1``; the runtime
maps ``SLURM_NODEID`` onto ``PET_NODE_RANK``. ``nproc_per_node`` processes per node come from the
recipe's own launcher (torchrun, accelerate); MPI charts run the launcher once in the batch step and
``mpirun`` starts the ranks over the allocation (its daemons through srun, their pvc binds through a
launch agent). Serving steps are one-node jobs that run until ``uninstall``: the script publishes the
server's URL (the node's address and a port) and the CLI waits for its health path
(:mod:`mlrecipe.backends.slurm.running`). Credential-like env values reach the job through sbatch's
environment, never the script on disk. Settings: :mod:`mlrecipe.backends.slurm.config`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

from mlrecipe.backends.base import Backend, ReleaseContext
from mlrecipe.backends.common import contract_env, recipe_env, step_program
from mlrecipe.backends.host import rayjob, resources
from mlrecipe.backends.host.images import ImageEnvironments
from mlrecipe.backends.host.launch_env import device_env, mpi_env
from mlrecipe.backends.host.launches import host_launch, launch_problems
from mlrecipe.backends.host.serving import fixed_probe_port, readiness, server_problems
from mlrecipe.backends.host.volumes import (
    Mount,
    describe_framework_mount,
    framework_mount,
    mount_problems,
    plan_mounts,
    prepare_mounts,
    wrap_argv,
)
from mlrecipe.backends.slurm import chain, scontrol
from mlrecipe.backends.slurm.handle import SlurmHandle
from mlrecipe.backends.slurm.options import SlurmOptions
from mlrecipe.backends.slurm.plan import SlurmPlan
from mlrecipe.backends.slurm.running import SlurmRunningStep
from mlrecipe.backends.slurm.script import NODE_WRAPPER, BatchScript, rank_mounts_script, server_lines
from mlrecipe.errors import ResourceError
from mlrecipe.runtime import RAY_CLUSTER_PATH
from mlrecipe.secrets import is_secret_name
from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.load import StepSpec

PER_NODE = ("PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_RDZV_ENDPOINT")


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


#: Runs ``ray start ...`` ("$@") on an allocated node with its own temp dir and agent port, so that worker nodes
#: sharing a host (a head's host, a test cluster's nodes) do not share sockets.
RAY_WORKER_SCRIPT = (
    'port=$(python3 -c "import socket; s = socket.socket(); s.bind((\'\', 0)); print(s.getsockname()[1])"); '
    'exec "$@" --temp-dir="/tmp/mlrecipe-ray/${SLURM_JOB_ID}-${SLURM_PROCID}" --dashboard-agent-listen-port="$port"'
)


class SlurmBackend(Backend[SlurmPlan, SlurmHandle, SlurmOptions]):
    """Runs each step as one Slurm batch job; see the module docstring."""

    name = "slurm"
    kinds = frozenset({StepKind.TORCH, StepKind.TORCH_ELASTIC, StepKind.JOB, StepKind.MPI, StepKind.SERVER,
                       StepKind.RAY})
    options_type = SlurmOptions
    handle_type = SlurmHandle

    def check(self, step: StepSpec) -> list[str]:
        problems = super().check(step) + server_problems(step, self.name)
        if step.chart.tls:
            problems.append(f"chart {step.chart.name} serves over TLS on 127.0.0.1, which the Slurm backend cannot "
                            "reach on a compute node: run it with --backend local where the training logs are, "
                            "or on Kubernetes")
        if step.chart.kind is StepKind.RAY:
            problems += launch_problems(step)
        try:
            resources.cpus(step.recipe.resources)
            resources.memory_mb(step.recipe.resources)
            resources.gpus(step.recipe.resources)
        except ResourceError as exc:
            problems.append(str(exc))
        return problems

    def plan(self, step: StepSpec, ctx: ReleaseContext, env: dict[str, str] | None = None) -> SlurmPlan:
        cfg = self.options
        step_dir = ctx.step_dir(step.name)
        recipe = step.recipe
        mpi = step.chart.kind is StepKind.MPI
        opts, gpus, notes = sbatch_options(step, cfg, step_dir, f"{ctx.release}-{step.name}")
        python, image_note = ImageEnvironments(cfg.images).resolve(recipe.image_name)
        notes += [image_note] if image_note else []
        mounts, volume_env = self._mounts(step, step_dir)
        scripts = framework_mount(step, step_dir)
        if scripts is not None and cfg.mount != "none":
            mounts.append(scripts)
            notes.append(describe_framework_mount(scripts) + " on every node (the step directory is shared)")
        elif scripts is not None:
            notes.append(f"slurm.mount is none: {scripts.target} is not set up; the framework scripts are in "
                         f"{scripts.fill_from}")
        program = step_program(step, ctx)
        extra_files: dict[Path, str] = {}
        launch = host_launch(step, step_dir)
        if launch is not None:
            if launch.command:
                program.update(command=launch.command, args=launch.args)
            mounts, extra_files = mounts + launch.mounts, dict(launch.files)
        extra = {**volume_env, **python.env(), **device_env(bool(gpus))}
        if mpi:
            extra.update(mpi_env())
            notes.append("MPI ranks start through mpirun inside the allocation (Open MPI launches its daemons "
                         "with srun)")
            if mounts:
                agent = step_dir / "rank-mounts.sh"
                extra_files[agent] = rank_mounts_script(mounts)
                extra["OMPI_MCA_orte_launch_agent"] = f"{agent} orted"
                notes.append("the ranks on the other nodes see the pvc mount paths too (mpirun's launch agent "
                             f"{agent.name} binds them)")
        contract = contract_env(step, ctx, 0, "", 0)
        for key in PER_NODE:
            contract.pop(key, None)
        job_env = {**extra, **(env or {}), **recipe_env(step, ctx), **contract}
        secrets = {k: v for k, v in job_env.items() if v and is_secret_name(k)}
        for key in secrets:
            job_env.pop(key)
            notes.append(f"{key} is passed to the job from the submitting environment; its value is not written "
                         "into the batch script")
        ready, url_file, pre_launch = None, None, []
        if step.chart.kind is StepKind.SERVER:
            ready, url_file = readiness(step), step_dir / "server.url"
            port = fixed_probe_port(step) or cfg.server_port
            pre_launch = server_lines(int(port) if port else None, str(url_file))
            notes.append(f"step {step.name} serves on its node's address (NodeAddr), port "
                         f"{port or 'chosen on the node'}: ready when GET {ready.path} answers 2xx within "
                         f"{ready.timeout:.0f} s of the job running; it runs until 'mlrecipe uninstall {ctx.release}' "
                         "(or the job's time limit)")
        program_path = step_dir / "program.json"
        runtime_path = step_dir / "step_runtime.py"
        ray_wrapper: list[str] = []
        if step.chart.kind is StepKind.RAY:
            ray_wrapper = self._ray_cluster(step, step_dir, mounts, extra_files, notes)
        launch_lines, redirect, nodes = self._launch(step, step_dir, mounts, program_path, runtime_path, ray_wrapper)
        script = BatchScript(
            header=[f"mlrecipe: step {step.name} ({step.chart.name}) of release {ctx.address}, "
                    f"{recipe.resources.nnodes} node(s) x {recipe.resources.nproc_per_node} process(es)"],
            sbatch=opts,
            env={k: v for k, v in job_env.items() if k != "PATH"},
            path_prefix=None if "PATH" in job_env else str(python.bin_dir),
            master_port=cfg.master_port,
            elastic=step.chart.kind is StepKind.TORCH_ELASTIC,
            launch=launch_lines,
            redirect=redirect,
            comments=[f"note: {n}" for n in notes],
            pre_launch=pre_launch,
        )
        if "PATH" in job_env:
            script.env["PATH"] = job_env["PATH"]
        return SlurmPlan(
            step=step.name,
            chart=step.chart.name,
            script=script.render(),
            script_path=step_dir / "job.sbatch",
            program=program,
            program_path=program_path,
            runtime_path=runtime_path,
            step_dir=step_dir,
            nodes=nodes,
            nnodes=recipe.resources.nnodes,
            mounts=mounts,
            notes=notes,
            base_env=dict(env or {}),
            secret_env=secrets,
            extra_files=extra_files,
            readiness=ready,
            url_file=url_file,
        )

    def _mounts(self, step: StepSpec, step_dir: Path) -> tuple[list[Mount], dict[str, str]]:
        """The pvc binds (from the shared directories the options name) and the ebs scratch of a step."""
        recipe = step.recipe
        mounts, volume_env = plan_mounts(recipe, Path("/"), step_dir / "scratch")
        pvcs = [Mount(self.options.volume_source(p.name), p.mount_path) for p in recipe.pvc]
        mounts = pvcs + mounts[len(recipe.pvc):]
        return ([] if self.options.mount == "none" else mounts), volume_env

    @staticmethod
    def _ray_cluster(step: StepSpec, step_dir: Path, mounts: list[Mount], files: dict[Path, str],
                     notes: list[str]) -> list[str]:
        """A RayJob in the allocation: the head and the driver on the batch host, one worker node per allocated node
        (``srun``, with the step's mounts); the files it needs and the argv prefix of its driver."""
        nnodes = step.recipe.resources.nnodes
        launcher = ["srun", f"--nodes={nnodes}", f"--ntasks={nnodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=0",
                    *wrap_argv(["sh", "-c", RAY_WORKER_SCRIPT, "mlrecipe-ray-worker"], mounts)]
        spec_path, program = step_dir / "ray" / "cluster.json", step_dir / "ray_cluster.py"
        files[spec_path] = json.dumps(rayjob.remote_workers(step, launcher), indent=2)
        files[program] = RAY_CLUSTER_PATH.read_text(encoding="utf-8")
        notes.append(f"step {step.name} runs as a Ray job: the Ray head and the driver on the first node, a worker "
                     f"node on each of the {nnodes} allocated node(s) (srun ... ray start --block)")
        return rayjob.wrapper(program, spec_path)

    def _launch(self, step: StepSpec, step_dir: Path, mounts: list[Mount], program_path: Path,
                runtime_path: Path, ray_wrapper: list[str]) -> tuple[list[list[str]], str, list[int]]:
        """The launch lines of the batch script, its redirect, and the ranks that write node logs."""
        argv = wrap_argv([*NODE_WRAPPER, *ray_wrapper, "python3", str(runtime_path), str(program_path)], mounts)
        if step.chart.kind in (StepKind.MPI, StepKind.RAY):  # runs once: mpirun / Ray start the other nodes' work
            return [argv], f">> {shlex.quote(str(step_dir / 'node-0.log'))} 2>&1", [0]
        nnodes = step.recipe.resources.nnodes
        srun = ["srun", f"--nodes={nnodes}", f"--ntasks={nnodes}", "--ntasks-per-node=1",
                "--kill-on-bad-exit=1", "--open-mode=append", f"--output={step_dir / 'node-%n.log'}",
                *self.options.srun_args]
        return [srun, argv], "", list(range(nnodes))

    def preflight(self, plan: SlurmPlan) -> list[str]:
        """Machine problems that stop the plan before it is submitted."""
        if shutil.which("sbatch") is None:
            return ["the Slurm client tools (sbatch, scontrol, scancel) are not on PATH: "
                    "apt-get install slurm-client and point SLURM_CONF at the cluster's slurm.conf"]
        return mount_problems(plan.mounts)

    def _conf(self) -> str | None:
        return self.options.slurm_conf or os.environ.get("SLURM_CONF")

    def submit(self, plan: SlurmPlan, ctx: ReleaseContext) -> SlurmRunningStep:
        conf = self._conf()
        if self.options.mode == "chain":
            job_id, rest = self._submit_chain(plan, ctx, conf)
        else:
            job_id, rest = self._submit_one(plan, conf), []
        handle = SlurmHandle(job_id=job_id, chain=rest, slurm_conf=conf)
        return SlurmRunningStep(plan.step_dir, handle, self.options.poll_seconds, plan.readiness, plan.url_file)

    @staticmethod
    def _submit_one(plan: SlurmPlan, conf: str | None, extra: list[str] | None = None) -> str:
        plan.write()
        prepare_mounts(plan.mounts)
        if plan.url_file is not None:
            plan.url_file.unlink(missing_ok=True)
        return scontrol.sbatch(plan.script_path, extra, conf, plan.secret_env)

    def _submit_chain(self, plan: SlurmPlan, ctx: ReleaseContext, conf: str | None) -> tuple[str, list[str]]:
        entries = chain.load(ctx)
        names = [e.step for e in entries]
        if plan.step in names:
            i = names.index(plan.step)
            mine = entries[i]
            info = scontrol.show_job(mine.job_id, conf) if mine.digest == plan.digest else None
            if info is not None and (info.active or info.state == "COMPLETED"):
                return mine.job_id, [e.job_id for e in entries[i + 1:]]
        here_on = chain.steps_from(ctx, plan.step)
        scontrol.scancel([e.job_id for e in entries if e.step in here_on], conf)
        first = self._submit_one(plan, conf)
        new = [chain.ChainEntry(plan.step, first, plan.digest)]
        for step in [] if plan.readiness is not None else ctx.upcoming:
            later = self.plan(step, ctx, plan.base_env)
            dep = ["--dependency=afterok:" + new[-1].job_id, "--kill-on-invalid-dep=yes"]
            new.append(chain.ChainEntry(step.name, self._submit_one(later, conf, dep), later.digest))
            if later.readiness is not None:
                break  # a server never ends: the steps after it are submitted once it is ready
        chain.save(ctx, new)
        return first, [e.job_id for e in new[1:]]

    def cancel_handle(self, handle: SlurmHandle) -> None:
        scontrol.scancel(handle.job_ids, handle.slurm_conf)

    def handle_alive(self, handle: SlurmHandle) -> bool:
        for job_id in handle.job_ids:
            info = scontrol.show_job(job_id, handle.slurm_conf)
            if info is not None and info.active:
                return True
        return False
