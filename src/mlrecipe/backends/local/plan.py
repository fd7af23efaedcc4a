"""The local plan: one step runtime per node, as exact argv + env, and the generated script; rendered from the
step's :class:`~mlrecipe.backends.host.request.HostStepRequest` by :func:`render`."""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrecipe.backends.base import Plan
from mlrecipe.backends.host.images import PythonEnvironment
from mlrecipe.backends.host.launch_env import mpi_env
from mlrecipe.backends.host.request import HostStepRequest
from mlrecipe.backends.host.serving import Readiness
from mlrecipe.backends.host.volumes import Mount
from mlrecipe.backends.local.devices import DevicePlan
from mlrecipe.credentials import redact_env
from mlrecipe.runtime import RUNTIME_PATH, step_runtime
from mlrecipe.spec.catalog import StepKind


@dataclass
class NodeLaunch:
    """One node: the argv that starts its runtime and the env it adds to the CLI's environment."""

    rank: int
    argv: list[str]
    env: dict[str, str]
    log_path: Path


@dataclass(frozen=True)
class ServerLaunch:
    """A serving step: where it listens, and how its readiness is checked."""

    url: str
    readiness: Readiness

    @property
    def health_url(self) -> str:
        return self.readiness.health_url(self.url)

    @property
    def ready_timeout(self) -> float:
        return self.readiness.timeout


@dataclass
class LocalPlan(Plan):
    """Everything the local backend runs for one step: one step runtime per node launch."""

    step: str
    chart: str
    program: dict[str, Any]
    program_path: Path
    nodes: list[NodeLaunch]
    nnodes: int = 1
    notes: list[str] = field(default_factory=list)
    mounts: list[Mount] = field(default_factory=list)
    scratch: Path | None = None
    server: ServerLaunch | None = None
    files: dict[Path, str] = field(default_factory=dict)
    python: PythonEnvironment = field(default_factory=lambda: PythonEnvironment(None))
    needs: tuple[str, ...] = ()  #: packages the chart needs in ``python``
    devices: DevicePlan = field(default_factory=lambda: DevicePlan([]))  #: each node's GPUs, the GPU lease
    release: str = ""
    ranks: int = 1  #: CPUs the step holds while it runs (nnodes x nproc_per_node; 0 for a server)

    @property
    def node_count(self) -> int:
        """The recipe's nodes (an MPI step has one launcher whose mpirun starts every node's ranks)."""
        return self.nnodes

    @property
    def server_url(self) -> str | None:
        return self.server.url if self.server is not None else None

    @property
    def script(self) -> str:
        return step_runtime.build_script(self.program)

    def materialize(self) -> str:
        out = [f"# step {self.step} ({self.chart}) on backend local: {len(self.nodes)} node(s)"]
        out += [f"# note: {n}" for n in self.notes]
        if self.server is not None:
            out.append(f"# server: {self.server.url}, ready when GET {self.server.health_url} answers 2xx within "
                       f"{self.server.ready_timeout:.0f} s; runs until uninstalled")
        out.append(f"# step program: {self.program_path}")
        out.append(json.dumps(self.program, indent=2, sort_keys=True))
        for path, text in sorted(self.files.items()):
            out += [f"# file {path}:", text.rstrip("\n")]
        out.append("# script run by the step runtime in every node:")
        out.append(self.script.rstrip("\n"))
        for node in self.nodes:
            gpus = self.devices.nodes[node.rank] if node.rank < len(self.devices.nodes) else ()
            where = ", ".join(g.describe() for g in gpus) if gpus else "CPU"
            out.append(f"# node {node.rank}: devices {where}; log {node.log_path}")
            shown = sorted(redact_env(node.env).items())
            out.append("env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in shown) + " \\")
            out.append("  " + shlex.join(node.argv))
        return "\n".join(out) + "\n"

    def write_program(self) -> None:
        """Write the step program and the step's other files (e.g. a Ray Serve config) into the state dir.

        The program is replaced through a temporary file that never outlives a failure; an ``OSError`` (a full disk:
        ENOSPC) names the program's path."""
        for path, text in self.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        self.program_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.program_path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(self.program, indent=2, sort_keys=True), encoding="utf-8")
            tmp.replace(self.program_path)
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if isinstance(exc, OSError) and exc.filename is None:
                exc.filename = str(self.program_path)
            raise


@dataclass(frozen=True)
class LocalSlots:
    """What the local backend chose for a step on this machine: its master port, its node launches (1 when mpirun
    or a Ray cluster starts every node), their devices, a server's port and the CPUs the step holds."""

    master_port: int
    launches: int
    devices: DevicePlan
    server_port: int | None
    ranks: int


def render(request: HostStepRequest, slots: LocalSlots, release: str, env: dict[str, str]) -> LocalPlan:
    """The local plan of ``request``: one step runtime per node launch, ``env`` (earlier steps' outputs) added."""
    step = request.step
    server = _server(request, slots.server_port)
    notes = [*request.notes, *request.launch_notes, *slots.devices.notes]
    if server is not None:
        notes.append(f"step {step.name} serves on {server.url}: ready when GET {server.health_url} answers 2xx "
                     f"(within {server.ready_timeout:.0f} s); it runs until 'mlrecipe uninstall {release}'")
    shared = _shared_env(request, env, slots.server_port if server is not None else None)
    argv = request.runtime_argv(request.wrapper, sys.executable, RUNTIME_PATH)
    nodes = [NodeLaunch(rank, argv, {**shared, **slots.devices.node_env(rank), **request.recipe_env,
                                     **request.contract_env, **request.node_env(rank, "127.0.0.1", slots.master_port),
                                     "HOSTNAME": f"{release}-{step.name}-{rank}"[:63]},
                        request.step_dir / f"node-{rank}.log")
             for rank in range(slots.launches)]
    return LocalPlan(step=step.name, chart=step.chart.name, program=request.program,
                     program_path=request.program_path, nodes=nodes, nnodes=request.nnodes, notes=notes,
                     mounts=list(request.mounts), scratch=request.scratch, server=server, files=dict(request.files),
                     python=request.python, needs=request.needs, devices=slots.devices, release=release,
                     ranks=0 if server is not None else slots.ranks)


def _server(request: HostStepRequest, port: int | None) -> ServerLaunch | None:
    if request.readiness is None or port is None:
        return None
    scheme = "https" if request.step.chart.tls else "http"
    return ServerLaunch(url=f"{scheme}://127.0.0.1:{port}", readiness=request.readiness)


def _shared_env(request: HostStepRequest, env: dict[str, str], server_port: int | None) -> dict[str, str]:
    """The env every node launch gets before its devices and the contract: volumes, PATH, image, MPI, server."""
    python = request.python
    out = {**request.volume_env, "PATH": f"{python.bin_dir}:{os.environ.get('PATH', '')}", **python.env(), **env}
    if request.kind is StepKind.MPI:  # one launcher: mpirun starts every rank on this machine
        out["MLRECIPE_HOSTFILE"] = str(request.step_dir / "hostfile")
        out.update({k: v for k, v in mpi_env().items() if k not in out})
    if server_port is not None:
        port = str(server_port)
        out.update({"PORT": port, "MLRECIPE_SERVER_PORT": port, "MLRECIPE_SERVER_HOST": "127.0.0.1"})
    return out
