"""Serving steps outside Kubernetes (local and Slurm backends): checks, readiness settings, the health probe.

A serving step runs one long-lived server. It is ready when ``GET <readiness_probe.path>`` answers 2xx,
within the startup probe's budget (``initial_delay_secs + period_secs * failure_threshold``, default
600 s), as a kubelet would judge it; it runs until ``mlrecipe uninstall``.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass

from mlrecipe.backends import rayserve
from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.load import StepSpec

DEFAULT_HEALTH_PATH = "/health"
DEFAULT_READY_TIMEOUT = 600.0


@dataclass(frozen=True)
class Readiness:
    """How a server's readiness is checked: the health path, the budget and the probe period (seconds)."""

    path: str
    timeout: float
    period: float

    def health_url(self, base_url: str) -> str:
        return base_url + (self.path if self.path.startswith("/") else "/" + self.path)


def readiness(step: StepSpec) -> Readiness:
    """The readiness settings of a serving step, from its probes (Kubernetes semantics)."""
    block = step.recipe.server
    probes = [p for p in (block.readiness_probe, block.startup_probe) if p is not None and p.enabled] \
        if block else []
    default = rayserve.HEALTH_PATH if step.chart.name == rayserve.CHART else DEFAULT_HEALTH_PATH
    path = probes[0].path if probes else default
    startup = block.startup_probe if block and block.startup_probe and block.startup_probe.enabled else None
    timeout = DEFAULT_READY_TIMEOUT
    if startup is not None:
        timeout = float((startup.initial_delay_secs or 0) + startup.period_secs * startup.failure_threshold)
    period = min(p.period_secs for p in probes) if probes else 1
    return Readiness(path=path, timeout=timeout, period=float(min(period, 1)))


def fixed_probe_port(step: StepSpec) -> int | None:
    """A port the recipe pins in its probes (a server that hard-codes its port)."""
    block = step.recipe.server
    for probe_block in (block.readiness_probe, block.startup_probe) if block else ():
        if probe_block is not None and isinstance(probe_block.port, int):
            return probe_block.port
    return None


def server_problems(step: StepSpec, backend: str) -> list[str]:
    """Why a serving step cannot run on ``backend`` (a single-node server with a command, or a Serve config)."""
    if step.chart.kind is not StepKind.SERVER:
        return []
    if step.chart.name == rayserve.CHART:
        return rayserve.problems(step)
    problems = []
    if not any(c.strip() for c in step.command_line):
        problems.append(f"chart {step.chart.name}: server.command is empty (the command starting the server)")
    if step.recipe.resources.nnodes > 1:
        problems.append(f"chart {step.chart.name}: multi-node serving (nnodes > 1) is not supported on backend "
                        f"{backend}")
    return problems


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the server's own address: no proxy


def probe(url: str, timeout: float = 1.0) -> bool:
    """Whether ``GET url`` answers 2xx right now."""
    try:
        with _OPENER.open(url, timeout=timeout) as resp:
            return 200 <= resp.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False
