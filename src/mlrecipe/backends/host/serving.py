"""Serving steps on hosts (local and Slurm backends): checks, readiness settings, the readiness watcher.

A serving step runs one long-lived server. It is ready when ``GET <readiness_probe.path>`` answers 2xx,
within the startup probe's budget (``initial_delay_secs + period_secs * failure_threshold``, default
600 s), as a kubelet would judge it; it runs until ``mlrecipe uninstall``.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlrecipe.backends.host import triton
from mlrecipe.backends.host.launches import launch_problems
from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.load import StepSpec

if TYPE_CHECKING:
    import urllib.request

DEFAULT_READY_TIMEOUT = 600.0


@dataclass(frozen=True)
class Readiness:
    """How a server's readiness is checked: the health path, the budget and the probe period (seconds)."""

    path: str
    timeout: float
    period: float

    def health_url(self, base_url: str) -> str:
        return base_url + (self.path if self.path.startswith("/") else "/" + self.path)


def readiness(step: StepSpec, health_path: str | None = None) -> Readiness:
    """The readiness settings of a serving step, from its probes (Kubernetes semantics); without probes, GET on
    ``health_path`` (the chart's host launch's, for this recipe) or else the chart's health path."""
    block = step.recipe.server
    probes = [p for p in (block.readiness_probe, block.startup_probe) if p is not None and p.enabled] \
        if block else []
    path = probes[0].path if probes else health_path or step.chart.health_path
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


def located_server_problems(step: StepSpec, backend: str) -> list[tuple[str, str]]:
    """The problems of :func:`server_problems` that one recipe value causes: (its path in the recipe, message)."""
    if step.chart.kind is not StepKind.SERVER or step.chart.host_launch:
        return []
    located = []
    if not any(c.strip() for c in step.command_line):
        located.append((f"{step.chart.block}.command",
                        f"chart {step.chart.name}: server.command is empty (the command starting the server)"))
    if step.recipe.resources.nnodes > 1:
        located.append(("resources.nnodes", f"chart {step.chart.name}: multi-node serving (nnodes > 1) is not "
                                            f"supported on backend {backend}"))
    return located


def server_problems(step: StepSpec, backend: str) -> list[str]:
    """Why a serving step cannot run on ``backend`` (a single-node server with a command, or a Serve config)."""
    if step.chart.kind is not StepKind.SERVER:
        return []
    if step.chart.host_launch:
        return launch_problems(step)
    return [message for _, message in located_server_problems(step, backend)] + triton.problems(step, backend)


@functools.cache
def _opener() -> urllib.request.OpenerDirector:
    """The server's own address: no proxy, and a TLS server's self-signed certificate accepted (the probe only
    reaches the step's own address). Built at the first probe: ``urllib.request`` pulls in ``http.client`` and
    ``ssl`` (about 7 ms), which no step but a server needs, at every CLI start."""
    import ssl
    import urllib.request

    own = ssl.create_default_context()
    own.check_hostname, own.verify_mode = False, ssl.CERT_NONE
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=own))


def probe(url: str, timeout: float = 1.0) -> bool:
    """Whether ``GET url`` answers 2xx right now (a port that answers something other than HTTP is not ready)."""
    import http.client

    try:
        with _opener().open(url, timeout=timeout) as resp:
            return 200 <= resp.status < 300
    except (OSError, ValueError, http.client.HTTPException):  # urllib.error.URLError is an OSError
        return False


def health_problem(url: str, timeout: float = 2.0) -> str | None:
    """Why ``GET url`` does not answer 2xx right now (``None`` when it does)."""
    import http.client
    import urllib.error

    try:
        with _opener().open(url, timeout=timeout) as resp:
            return None if 200 <= resp.status < 300 else f"GET {url} answered {resp.status}"
    except urllib.error.HTTPError as exc:
        return f"GET {url} answered {exc.code}"
    except (OSError, ValueError) as exc:
        return f"GET {url} failed: {getattr(exc, 'reason', None) or exc}"
    except http.client.HTTPException as exc:
        return f"GET {url} was not answered in HTTP ({type(exc).__name__})"


@dataclass
class ReadinessWatcher:
    """Watches a server become ready: probes its health URL at most once a period, within the budget.

    The budget counts from :meth:`start_clock` (submission on the local backend, the job running on Slurm).
    """

    readiness: Readiness
    _url: str | None = None
    _since: float | None = None
    _next_probe: float = 0.0

    def start_clock(self) -> None:
        if self._since is None:
            self._since = time.monotonic()

    def stop_clock(self) -> None:
        self._since = None

    @property
    def ready(self) -> bool:
        return self._url is not None

    def check(self, base_url: str | None) -> str | None:
        """``base_url`` once its health path answered 2xx (it stays ready), else ``None``."""
        if self._url is not None:
            return self._url
        if base_url is None or self._since is None:
            return None
        now = time.monotonic()
        if now < self._next_probe:
            return None
        self._next_probe = now + self.readiness.period
        if probe(self.readiness.health_url(base_url)):
            self._url = base_url
        return self._url

    def overdue(self, base_url: str | None) -> float | None:
        """Seconds waited when the budget is spent and the server is still not ready, else ``None``."""
        if self._since is None or self.ready:
            return None
        waited = time.monotonic() - self._since
        if waited <= self.readiness.timeout:
            return None
        self._next_probe = 0.0
        return None if self.check(base_url) is not None else waited
