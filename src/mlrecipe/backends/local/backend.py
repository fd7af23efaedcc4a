"""The local backend (the default): each node of a step is a process group on this machine, the step's nodes one
node group of the host layer (:mod:`mlrecipe.backends.host.nodes`: started, watched and stopped there).

``nnodes`` step runtimes start, one per node, with the master on 127.0.0.1 and a free port;
``nproc_per_node`` processes per node come from the recipe's own launcher (torchrun, accelerate).

Serving charts (StepKind.SERVER) run one node whose command is a long-running server (or the chart's host
launch, e.g. Ray Serve: :mod:`mlrecipe.backends.host.launches`): it gets ``PORT`` / ``MLRECIPE_SERVER_PORT``
(a free port, or the probe's fixed port) and ``MLRECIPE_SERVER_HOST=127.0.0.1``; readiness as in
:mod:`mlrecipe.backends.host.serving`. A server does not die with the CLI: it runs until ``mlrecipe uninstall``.
Options: :mod:`mlrecipe.backends.local.options`.
"""

from __future__ import annotations

import errno
import math
import os
import shutil
import uuid
from pathlib import Path

from mlrecipe.backends.base import Backend, ReleaseContext, issues_at_chart
from mlrecipe.backends.host.cpus import CpuSlots
from mlrecipe.backends.host.devices import Gpu, neuron_devices, visible_gpus
from mlrecipe.backends.host.gpu_lease import is_free
from mlrecipe.backends.host.images import ImageEnvironments, environment_problems, known_images
from mlrecipe.backends.host.launches import launch_problems
from mlrecipe.backends.host.request import HostPlacement, HostStepRequest
from mlrecipe.backends.host.serving import health_problem, located_server_problems, server_problems
from mlrecipe.backends.host.volumes import mount_problems, prepare_mounts
from mlrecipe.backends.local import procs
from mlrecipe.backends.local.devices import fit_problems, plan_devices
from mlrecipe.backends.local.handle import LocalHandle
from mlrecipe.backends.local.options import RANKS_PER_CPU, LocalOptions
from mlrecipe.backends.local.plan import LocalPlan, LocalSlots, render
from mlrecipe.backends.local.running import LocalRunningStep
from mlrecipe.errors import BackendError, LinkedPathError, SpecIssue
from mlrecipe.ports import free_port
from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.load import StepSpec

#: Step kinds started by one launch on this machine (mpirun starts the ranks; a Ray cluster starts its nodes).
ONE_LAUNCH = frozenset({StepKind.MPI, StepKind.RAY})


def _within(step: StepSpec, limit: int) -> list[str]:
    """``--set`` changes that bring the step's largest size within ``limit`` ranks (fewer nodes first)."""
    res, policy = step.recipe.resources, step.recipe.elastic_policy
    changes: list[str] = []
    nproc = (policy.nproc_per_node if policy and policy.nproc_per_node else None) or res.nproc_per_node
    if nproc > limit:
        key = "elastic_policy.nproc_per_node" if policy and policy.nproc_per_node else "resources.nproc_per_node"
        changes.append(f"{key}={limit}")
        nproc = limit
    nodes = limit // nproc
    if res.nnodes > nodes:
        changes.append(f"resources.nnodes={nodes}")
    if policy is not None:
        changes += [f"elastic_policy.{key}={nodes}" for key, value in (("min_replicas", policy.min_replicas),
                                                                         ("max_replicas", policy.max_replicas))
                    if (value or 0) > nodes]
    return changes


class LocalBackend(Backend[LocalPlan, LocalHandle, LocalOptions]):
    """Runs steps as local process groups; see the module docstring."""

    name = "local"
    kinds = frozenset({StepKind.TORCH, StepKind.TORCH_ELASTIC, StepKind.JOB, StepKind.MPI, StepKind.SERVER,
                       StepKind.RAY})
    options_type = LocalOptions
    handle_type = LocalHandle
    _gpus: list[Gpu] | None = None
    _cpus: CpuSlots | None = None

    def gpus(self) -> list[Gpu]:
        """The GPUs this machine shows (read once per backend)."""
        if self._gpus is None:
            self._gpus = visible_gpus()
        return self._gpus

    def neuron_cores(self) -> int:
        return neuron_devices() * self.options.neuron_cores_per_device

    def check(self, step: StepSpec) -> list[str]:
        problems = super().check(step)
        if step.chart.kind is StepKind.MPI and shutil.which("mpirun") is None:
            problems.append(f"chart {step.chart.name} needs Open MPI's mpirun on PATH (apt-get install openmpi-bin)")
        devices = fit_problems(step, self.options, self.gpus(), self.neuron_cores())
        launch = launch_problems(step) if step.chart.kind is not StepKind.SERVER else []
        return problems + self._rank_problems(step) + devices + server_problems(step, self.name) + launch

    def check_issues(self, step: StepSpec) -> list[SpecIssue]:
        """:meth:`check`'s problems; a server's that one recipe value causes at that value's file and line."""
        located = located_server_problems(step, self.name)
        said = {message for _, message in located}
        rest = [p for p in self.check(step) if p not in said]
        return [step.issue(path, f"step {step.name}: {message}") for path, message in located] + issues_at_chart(
            step, rest)

    def cpu_slots(self) -> CpuSlots:
        """The CPUs the steps this backend runs share (one pool per backend, so per release)."""
        if self._cpus is None:
            self._cpus = CpuSlots(self.options.cpu_count())
        return self._cpus

    @staticmethod
    def _shape(step: StepSpec) -> tuple[int, int]:
        """The most nodes and processes per node the step may run (an elastic step's largest size)."""
        res = step.recipe.resources
        policy = step.recipe.elastic_policy
        nnodes = max(res.nnodes, (policy.max_replicas or 0) if policy else 0)
        nproc = (policy.nproc_per_node if policy and policy.nproc_per_node else None) or res.nproc_per_node
        return nnodes, nproc

    def _rank_problems(self, step: StepSpec) -> list[str]:
        nnodes, nproc = self._shape(step)
        ranks, limit = nnodes * nproc, self.options.rank_limit()
        if ranks <= limit:
            return []
        cpus = os.cpu_count() or 1
        where = (f"max_ranks {self.options.max_ranks}" if self.options.max_ranks
                 else f"{RANKS_PER_CPU} per CPU on this machine's {cpus} CPU(s)")
        fits = " ".join(f"--set {change}" for change in _within(step, limit))
        return [f"resources: {nnodes} node(s) x {nproc} process(es) = {ranks} ranks, more than the local backend "
                f"starts on this machine ({limit}: {where}); lower resources.nnodes or nproc_per_node (e.g. "
                f"{fits}), or raise the limit with --backend-opt max_ranks={ranks}"]

    def placement(self) -> HostPlacement:
        """How this backend places a step's image and volumes on this machine."""
        images = ImageEnvironments(self.options.images, mapped_note="image {image} runs in the local environment "
                                   "{prefix}", unmapped_note="image {image} is not pulled: the step runs in this "
                                   "machine's environment", known=known_images())
        root = self.options.volume_root()
        return HostPlacement(images, lambda pvc: root / pvc, self.options.volumes != "none", "local.volumes")

    def plan(self, step: StepSpec, ctx: ReleaseContext, env: dict[str, str] | None = None) -> LocalPlan:
        port = self.options.master_port or free_port()
        request = HostStepRequest.from_step(step, ctx, self.placement())
        launches = 1 if step.chart.kind in ONE_LAUNCH else step.recipe.resources.nnodes
        lease_dir = self.options.lease_dir()
        devices = plan_devices(step, self.options, self.gpus(), lambda gpu: is_free(lease_dir, gpu), launches,
                               self.neuron_cores())
        server_port = (request.fixed_port or self.options.server_port or port) if request.readiness else None
        slots = LocalSlots(port, launches, devices, server_port, math.prod(self._shape(step)))
        return render(request, slots, ctx.release, dict(env or {}))

    def preflight(self, plan: LocalPlan) -> list[str]:
        """Machine problems that stop the plan before it starts: mounts, packages the chart needs."""
        return mount_problems(plan.mounts) + environment_problems(plan.python, plan.needs, f"chart {plan.chart}")

    def submit(self, plan: LocalPlan, ctx: ReleaseContext) -> LocalRunningStep:
        running = LocalRunningStep(plan, uuid.uuid4().hex[:12], self.options.stop_grace_seconds,
                                   self.options.lease_dir(), self.cpu_slots())
        try:
            prepare_mounts(plan.mounts)
            if plan.scratch is not None:
                plan.scratch.mkdir(parents=True, exist_ok=True)
            plan.write_program()
            if "MLRECIPE_HOSTFILE" in plan.nodes[0].env:
                self._write_hostfile(plan)
            wait = running.take_devices()
            if wait is not None and wait.busy and self.options.gpu_busy == "refuse":
                raise BackendError(f"{wait.holders()}; --backend-opt gpu_busy=wait waits for them")
            if wait is None:
                running.start()  # else it starts once its GPUs and CPUs are free (LocalRunningStep.poll)
        except (OSError, LinkedPathError) as exc:  # a volume that cannot be created, a runtime that cannot start
            running.cancel()
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise  # a full disk stops the release, which says so (ReleaseRunner.run)
            raise BackendError(f"cannot start the step's processes: {exc}") from exc
        return running

    @staticmethod
    def _write_hostfile(plan: LocalPlan) -> None:
        node = plan.nodes[0]
        slots = int(node.env.get("PET_NNODES", "1").split(":")[-1]) * int(node.env.get("PET_NPROC_PER_NODE", "1"))
        Path(node.env["MLRECIPE_HOSTFILE"]).write_text(f"localhost slots={slots}\n", encoding="utf-8")

    def cancel_handle(self, handle: LocalHandle) -> None:
        procs.stop_run(handle, self.options.stop_grace_seconds)

    def handle_alive(self, handle: LocalHandle) -> bool:
        return procs.run_alive(handle)

    def server_health(self, handle: LocalHandle) -> str | None:
        return health_problem(handle.server.health) if handle.server is not None else None
