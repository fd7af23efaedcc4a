"""The local backend (the default): each node of a step is a process group on this machine.

``nnodes`` step runtimes start, one per node, with the master on 127.0.0.1 and a free port;
``nproc_per_node`` processes per node come from the recipe's own launcher (torchrun, accelerate).

Serving charts (StepKind.SERVER; ``serving/rayserve`` through :mod:`mlrecipe.backends.rayserve`) run one
node whose command is a long-running server: it gets ``PORT`` / ``MLRECIPE_SERVER_PORT`` (a free port, or
the probe's fixed port) and ``MLRECIPE_SERVER_HOST=127.0.0.1``; readiness as in :mod:`mlrecipe.backends.serving`.
A server does not die with the CLI: it runs until ``mlrecipe uninstall``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from mlrecipe.backends import rayserve
from mlrecipe.backends.base import Backend, Plan, ReleaseContext, RunningStep, StepOutcome
from mlrecipe.backends.common import contract_env, free_port, image_envs, recipe_env, step_program
from mlrecipe.backends.local import procs
from mlrecipe.backends.local.plan import LocalPlan, NodeLaunch, ServerLaunch
from mlrecipe.backends.local.volumes import mount_problems, plan_mounts, prepare_mounts, wrap_argv
from mlrecipe.backends.serving import fixed_probe_port, probe, readiness, server_problems
from mlrecipe.config import load_config
from mlrecipe.logtail import tail
from mlrecipe.runtime import RUNTIME_PATH
from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.load import StepSpec


def gpu_count() -> int:
    """Number of NVIDIA GPUs visible here (0 without ``nvidia-smi``)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


class LocalBackend(Backend):
    """Runs steps as local process groups; see the module docstring."""

    name = "local"
    kinds = frozenset({StepKind.TORCH, StepKind.TORCH_ELASTIC, StepKind.JOB, StepKind.MPI, StepKind.SERVER})

    def __init__(self) -> None:
        self.config = load_config().local

    def check(self, step: StepSpec) -> list[str]:
        problems = super().check(step)
        if step.chart.kind is StepKind.MPI and shutil.which("mpirun") is None:
            problems.append(f"chart {step.chart.name} needs Open MPI's mpirun on PATH (apt-get install openmpi-bin)")
        return problems + server_problems(step, self.name)

    def _python_env(self, step: StepSpec) -> dict[str, str]:
        """PATH for the step: the image's mapped environment, else the CLI's own environment."""
        image = step.recipe.image_name
        prefix = image_envs(self.config.images).get(image or "") if image else None
        bin_dir = Path(prefix).expanduser() / "bin" if prefix else Path(sys.executable).parent
        env = {"PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}
        if prefix:
            env["VIRTUAL_ENV"] = str(Path(prefix).expanduser())
        return env

    def plan(self, step: StepSpec, ctx: ReleaseContext, env: dict[str, str] | None = None) -> LocalPlan:
        step_dir = ctx.step_dir(step.name)
        port = int(ctx.options.get("master_port") or free_port())
        program = step_program(step, ctx)
        notes: list[str] = []
        image = step.recipe.image_name
        images = image_envs(self.config.images)
        if image:
            if image in images:
                notes.append(f"image {image} runs in the local environment {images[image]}")
            else:
                notes.append(f"image {image} is not pulled: the step runs in this machine's environment")
        scratch = step_dir / "scratch"
        mounts, volume_env = plan_mounts(step.recipe, self.config.volume_root(), scratch)
        if self.config.volumes == "none":
            mounts = []
        files: dict[Path, str] = {}
        if step.chart.name == rayserve.CHART:
            ray = rayserve.rayserve_launch(step, step_dir)
            program.update(command=ray.command, args=ray.args)
            mounts, files = mounts + ray.mounts, ray.files
            notes.append(f"step {step.name} runs Ray Serve on this machine (python -m mlrecipe.serve.rayserve); "
                         f"engine config and code are mounted at {rayserve.ENGINE_CONFIG_DIR}, "
                         f"{rayserve.ENGINE_CODE_DIR}")
        nnodes = step.recipe.resources.nnodes
        extra = {**volume_env, **self._python_env(step), **(env or {})}
        if gpu_count() == 0:
            extra.update({"MLRECIPE_DEVICE": "cpu", "ACCELERATE_USE_CPU": "1"})
        else:
            extra["MLRECIPE_DEVICE"] = "cuda"
        if step.chart.kind is StepKind.MPI:
            hostfile = step_dir / "hostfile"
            extra["MLRECIPE_HOSTFILE"] = str(hostfile)
            extra.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            extra.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            extra.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
            nnodes = 1  # the launcher runs mpirun over every rank
        server = None
        if step.chart.kind is StepKind.SERVER:
            server_port = fixed_probe_port(step) or int(ctx.options.get("server_port") or port)
            url = f"http://127.0.0.1:{server_port}"
            ready = readiness(step)
            server = ServerLaunch(url=url, health_url=ready.health_url(url), ready_timeout=ready.timeout,
                                  probe_period=ready.period)
            extra.update({"PORT": str(server_port), "MLRECIPE_SERVER_PORT": str(server_port),
                          "MLRECIPE_SERVER_HOST": "127.0.0.1"})
            notes.append(f"step {step.name} serves on {server.url}: ready when GET {server.health_url} answers 2xx "
                         f"(within {server.ready_timeout:.0f} s); it runs until 'mlrecipe uninstall {ctx.release}'")
        user_env = recipe_env(step, ctx)
        nodes = []
        for rank in range(nnodes):
            node_env = {
                **extra,
                **user_env,
                **contract_env(step, ctx, rank, "127.0.0.1", port),
                "HOSTNAME": f"{ctx.release}-{step.name}-{rank}"[:63],
            }
            argv = wrap_argv([sys.executable, str(RUNTIME_PATH), str(step_dir / "program.json")], mounts)
            nodes.append(NodeLaunch(rank, argv, node_env, step_dir / f"node-{rank}.log"))
        return LocalPlan(
            step=step.name,
            chart=step.chart.name,
            program=program,
            program_path=step_dir / "program.json",
            nodes=nodes,
            notes=notes,
            mounts=mounts,
            scratch=scratch,
            server=server,
            files=files,
        )

    def preflight(self, plan: LocalPlan) -> list[str]:
        """Machine problems that stop the plan before it starts."""
        return mount_problems(plan.mounts)

    def submit(self, plan: Plan, ctx: ReleaseContext) -> LocalRunningStep:
        assert isinstance(plan, LocalPlan)
        prepare_mounts(plan.mounts)
        if plan.scratch is not None:
            plan.scratch.mkdir(parents=True, exist_ok=True)
        plan.write_program()
        if "MLRECIPE_HOSTFILE" in plan.nodes[0].env:
            self._write_hostfile(plan)
        run_id = uuid.uuid4().hex[:12]
        running = LocalRunningStep(plan, run_id, self.config.stop_grace_seconds)
        running.start()
        return running

    @staticmethod
    def _write_hostfile(plan: LocalPlan) -> None:
        node = plan.nodes[0]
        slots = int(node.env.get("PET_NNODES", "1").split(":")[-1]) * int(node.env.get("PET_NPROC_PER_NODE", "1"))
        Path(node.env["MLRECIPE_HOSTFILE"]).write_text(f"localhost slots={slots}\n", encoding="utf-8")

    def cancel_handle(self, handle: dict[str, Any]) -> None:
        procs.stop_run(handle, self.config.stop_grace_seconds)

    def handle_alive(self, handle: dict[str, Any]) -> bool:
        return procs.run_alive(handle)


class LocalRunningStep(RunningStep):
    """The node processes of one local step."""

    def __init__(self, plan: LocalPlan, run_id: str, grace: float) -> None:
        self.plan = plan
        self.run_id = run_id
        self.grace = grace
        self.popens: list[subprocess.Popen[bytes]] = []
        self.handle: dict[str, Any] = {"run_id": run_id, "nodes": []}
        self._outcome: StepOutcome | None = None
        self.server = plan.server
        self._started = time.monotonic()
        self._ready = False
        self._next_probe = 0.0
        if self.server is not None:
            self.handle["server"] = {"url": self.server.url, "health": self.server.health_url}

    def start(self) -> None:
        base = dict(os.environ)
        for node in self.plan.nodes:
            node.log_path.parent.mkdir(parents=True, exist_ok=True)
            env = {**base, **node.env, procs.RUN_ID_VAR: self.run_id}
            with open(node.log_path, "ab") as log:
                p = subprocess.Popen(
                    node.argv,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    # a server outlives the CLI (until uninstall); other steps die with it
                    preexec_fn=None if self.server is not None else procs.die_with_parent,
                )
            self.popens.append(p)
            self.handle["nodes"].append({"rank": node.rank, "pid": p.pid, "created": procs.create_time(p.pid)})

    def poll(self) -> StepOutcome | None:
        if self._outcome is not None:
            return self._outcome
        codes = [p.poll() for p in self.popens]
        failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            rank, code = failed[0]
            self.cancel()
            log = self.plan.nodes[rank].log_path
            self._outcome = StepOutcome(
                "failed", code, f"node {rank} exited with status {code}", rank, tail(log)
            )
        elif self.server is not None and any(c is not None for c in codes):
            self.cancel()
            when = "after it was ready" if self._ready else "before it was ready"
            self._outcome = StepOutcome("failed", 0, f"the server exited with status 0 {when}", 0,
                                        tail(self.plan.nodes[0].log_path))
        elif all(c == 0 for c in codes):
            self._outcome = StepOutcome("succeeded", 0)
        elif self.server is not None and not self._ready:
            waited = time.monotonic() - self._started
            if waited > self.server.ready_timeout and self.ready_url() is None:
                self.cancel()
                self._outcome = StepOutcome(
                    "failed", None, f"the server was not ready after {waited:.0f} s "
                    f"(GET {self.server.health_url}; raise server.startup_probe to wait longer)", 0,
                    tail(self.plan.nodes[0].log_path))
        return self._outcome

    def ready_url(self) -> str | None:
        """The server's URL once ``GET`` on its health path answers 2xx (probes at most once per period)."""
        if self.server is None or self._outcome is not None:
            return None
        if self._ready:
            return self.server.url
        now = time.monotonic()
        if now < self._next_probe:
            return None
        self._next_probe = now + self.server.probe_period
        if probe(self.server.health_url):
            self._ready = True
            return self.server.url
        return None

    def cancel(self) -> None:
        procs.stop_run(self.handle, self.grace, self.popens)
