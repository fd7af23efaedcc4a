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

With ``ssh_host`` every Slurm call runs on that login node over one shared SSH connection
(:mod:`.transport`), the step's files are staged under ``remote_root`` by digest and its logs mirrored
back into the local step directory (:mod:`.remote`); with it unset nothing differs from a login node.
"""

from __future__ import annotations

import os
import shlex
import shutil
import uuid
from pathlib import Path

from mlrecipe.backends.base import Backend, CollectsDebugRecords, DebugRecord, QueuesAhead, ReleaseContext, StepState
from mlrecipe.backends.host import resources
from mlrecipe.backends.host.images import ImageEnvironments
from mlrecipe.backends.host.launches import launch_problems
from mlrecipe.backends.host.request import HostPlacement, HostStepRequest
from mlrecipe.backends.host.serving import server_problems
from mlrecipe.backends.host.volumes import mount_problems, prepare_mounts
from mlrecipe.backends.slurm import chain, debug, job, remote, scontrol
from mlrecipe.backends.slurm.handle import SlurmHandle
from mlrecipe.backends.slurm.options import SlurmOptions
from mlrecipe.backends.slurm.plan import SlurmPlan
from mlrecipe.backends.slurm.running import LogMirror, SlurmRunningStep
from mlrecipe.backends.slurm.transport import SshTarget, SshTransport, StaleStaging
from mlrecipe.config import mlrecipe_home
from mlrecipe.errors import ResourceError, SlurmError
from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.load import StepSpec


class SlurmBackend(QueuesAhead, CollectsDebugRecords, Backend[SlurmPlan, SlurmHandle, SlurmOptions]):
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

    def placement(self) -> HostPlacement:
        """How this backend places a step: its image map, the pvc volumes' shared directories on the nodes."""
        return HostPlacement(ImageEnvironments(self.options.images), self.options.volume_source,
                             self.options.mount != "none", "slurm.mount",
                             " on every node (the step directory is shared)")

    def plan(self, step: StepSpec, ctx: ReleaseContext, env: dict[str, str] | None = None) -> SlurmPlan:
        plan = job.render(HostStepRequest.from_step(step, ctx, self.placement()), self.options, ctx, dict(env or {}))
        target = self.options.ssh_target()
        if target is not None:
            source = (env or {}).get("MLRECIPE_PIPELINE_DIR")
            pipeline_dir = Path(source) if source else None
            plan.remote = remote.RemotePlan(
                target, self._remote_root or self.options.remote_root, mlrecipe_home(), pipeline_dir, ctx.namespace,
                ctx.release, remote.pipeline_files(pipeline_dir) if pipeline_dir else [])
        return plan

    _run = uuid.uuid4().hex  #: names the chain entries this driver process queued
    _remote_root: str | None = None  #: ``remote_root`` as the login node resolved it (once per process)
    _stager: remote.Stager | None = None  #: what this process staged on the login node (:class:`remote.Stager`)

    def _transport(self, target: SshTarget) -> SshTransport:
        return SshTransport(target, self.options.slurm_conf)

    def _resolved(self, plan: SlurmPlan) -> remote.RemotePlan:
        """The plan's remote side with ``remote_root`` resolved; the first time, in the same round trip, the
        digests of the plan's files there (the :class:`remote.Stager`'s starting knowledge)."""
        assert plan.remote is not None
        if self._remote_root is None:
            transport = self._transport(plan.remote.target)
            self._stager = remote.Stager(transport)
            root, known = remote.load_record(remote.record_path(plan.remote.target, self.options.remote_root))
            if root is None:
                prefix = plan.remote.root.rstrip("/") + "/"
                relative = [p[len(prefix):] for p in plan.remote_files() if p.startswith(prefix)]
                root, known = remote.resolve_root(transport, self.options.remote_root, relative)
            self._remote_root, self._stager.known = root, known
        return plan.remote.with_root(self._remote_root)

    def preflight(self, plan: SlurmPlan) -> list[str]:
        """Machine problems that stop the plan before it is submitted."""
        if plan.remote is not None:
            return []  # the login node's tools and directories are checked as the plan is staged
        if shutil.which("sbatch") is None:
            return ["the Slurm client tools (sbatch, scontrol, scancel) are not on PATH: "
                    "apt-get install slurm-client and point SLURM_CONF at the cluster's slurm.conf"]
        return mount_problems(plan.mounts)

    def _conf(self) -> str | None:
        if self.options.ssh_host is not None:  # this machine's SLURM_CONF says nothing of the login node's
            return self.options.slurm_conf
        return self.options.slurm_conf or os.environ.get("SLURM_CONF")

    def submit(self, plan: SlurmPlan, ctx: ReleaseContext) -> SlurmRunningStep:
        conf = self._conf()
        if self.options.mode == "chain":
            job_id, rest = self._submit_chain(plan, ctx, conf)
        else:
            job_id, rest = self._submit_one(plan, conf), []
        target = self.options.ssh_target()
        remote_dir = self._resolved(plan).map_path(plan.step_dir) if plan.remote is not None else None
        handle = SlurmHandle(job_id=job_id, chain=rest, slurm_conf=conf, ssh=target, remote_dir=remote_dir)
        mirror = LogMirror.of(handle, plan.step_dir, plan.nnodes)
        return SlurmRunningStep(plan.step_dir, handle, self.options.poll_seconds, plan.readiness, plan.url_file,
                                mirror)

    def _submit_one(self, plan: SlurmPlan, conf: str | None, extra: list[str] | None = None) -> str:
        plan.write()
        if plan.remote is not None:
            return self._submit_remote(plan, conf, extra)
        prepare_mounts(plan.mounts)
        if plan.url_file is not None:
            plan.url_file.unlink(missing_ok=True)
        return scontrol.sbatch(plan.script_path, extra, conf, plan.secret_env)

    def _submit_remote(self, plan: SlurmPlan, conf: str | None, extra: list[str] | None) -> str:
        """Stage what changed to the login node, then sbatch there (over the shared connection)."""
        assert plan.remote is not None
        resolved = self._resolved(plan)
        files = SlurmPlan(**{**plan.__dict__, "remote": resolved}).remote_files()
        if self._stager is None:
            self._stager = remote.Stager(self._transport(resolved.target))
        dirs = [resolved.map_path(plan.step_dir), *(resolved.map_path(m.source) for m in plan.mounts)]
        clear = f"rm -f -- {shlex.quote(resolved.map_path(plan.url_file))}\n" if plan.url_file is not None else ""
        for _ in range(2):
            prelude, _sent = self._stager.prelude(files, dirs)
            try:
                job_id = scontrol.sbatch(resolved.map_path(plan.script_path), extra, conf, plan.secret_env,
                                         ssh=resolved.target, prelude=prelude + clear)
            except StaleStaging:
                self._stager.forget()  # someone changed the files there: list the digests again
                continue
            self._stager.staged(files)
            remote.save_record(remote.record_path(resolved.target, self.options.remote_root), resolved.root,
                               self._stager.known or {})
            return job_id
        raise SlurmError(f"the files staged on {resolved.target.host} kept changing while submitting")

    def _submit_chain(self, plan: SlurmPlan, ctx: ReleaseContext, conf: str | None) -> tuple[str, list[str]]:
        entries = chain.load(ctx)
        names = [e.step for e in entries]
        if plan.step in names:
            i = names.index(plan.step)
            mine = entries[i]
            info = scontrol.show_job(mine.job_id, conf, self.options.ssh_target()) \
                if mine.digest == plan.digest else None
            if info is not None and (info.active or info.step_state is StepState.SUCCEEDED or mine.run == self._run):
                return mine.job_id, [e.job_id for e in entries[i + 1:]]
        here_on = chain.steps_from(ctx, plan.step)
        scontrol.scancel([e.job_id for e in entries if e.step in here_on], conf, self.options.ssh_target())
        first = self._submit_one(plan, conf)
        new = [chain.ChainEntry(plan.step, first, plan.digest, self._run)]
        for step in [] if plan.readiness is not None else ctx.upcoming:
            later = self.plan(step, ctx, plan.base_env)
            dep = ["--dependency=afterok:" + new[-1].job_id, "--kill-on-invalid-dep=yes"]
            new.append(chain.ChainEntry(step.name, self._submit_one(later, conf, dep), later.digest, self._run))
            if later.readiness is not None:
                break  # a server never ends: the steps after it are submitted once it is ready
        chain.save(ctx, new)
        return first, [e.job_id for e in new[1:]]

    def cancel_handle(self, handle: SlurmHandle) -> None:
        scontrol.scancel(handle.job_ids, handle.slurm_conf, handle.ssh)

    def handle_alive(self, handle: SlurmHandle) -> bool:
        for job_id in handle.job_ids:
            info = scontrol.show_job(job_id, handle.slurm_conf, handle.ssh)
            if info is not None and info.active:
                return True
        return False

    def debug_records(self, handle: SlurmHandle) -> list[DebugRecord]:
        """``scontrol show job`` and ``sacct`` of the step's jobs (:mod:`.debug`)."""
        return debug.debug_records(handle)
