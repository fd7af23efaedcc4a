"""The local plan: one step runtime per node, as exact argv + env, and the generated script."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlrecipe.backends.base import Plan
from mlrecipe.backends.host.images import PythonEnvironment
from mlrecipe.backends.host.serving import Readiness
from mlrecipe.backends.host.volumes import Mount
from mlrecipe.backends.local.devices import DevicePlan
from mlrecipe.runtime import step_runtime
from mlrecipe.secrets import redact_env


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
        """Write the step program and the step's other files (e.g. a Ray Serve config) into the state dir."""
        for path, text in self.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        self.program_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.program_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.program, indent=2, sort_keys=True), encoding="utf-8")
        tmp.replace(self.program_path)
