"""Chart-specific launches on hosts: charts whose catalog entry names a ``host_launch`` run a program of
mlrecipe's instead of the recipe's command (the way an operator would on Kubernetes).

Adding one is a module with ``problems(step)`` and ``launch(step, step_dir)`` and a line in ``LAUNCHES``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from mlrecipe.backends.host.volumes import Mount
from mlrecipe.spec.load import StepSpec

#: ``ChartInfo.host_launch`` -> the module that implements it.
LAUNCHES = {"ray-serve": "mlrecipe.backends.host.rayserve", "ray-job": "mlrecipe.backends.host.rayjob",
            "jupyter": "mlrecipe.backends.host.jupyter"}


@dataclass
class HostLaunch:
    """Files to write (path -> text), their bind mounts, the step program's command and args (empty: the recipe's),
    a wrapper (an argv prefix, its program found on the step's PATH) that runs the step runtime, notes, and for a
    server the path that answers 2xx while it serves, where the chart's default does not say that of this recipe."""

    files: dict[Path, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    wrapper: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    health_path: str | None = None


def _module(step: StepSpec) -> ModuleType | None:
    name = step.chart.host_launch
    return importlib.import_module(LAUNCHES[name]) if name else None


def launch_problems(step: StepSpec) -> list[str]:
    """Why the chart's host launch cannot run this step (empty when it has none, or when fine)."""
    module = _module(step)
    return module.problems(step) if module is not None else []


def host_launch(step: StepSpec, step_dir: Path) -> HostLaunch | None:
    """The chart's host launch for ``step`` (state in ``step_dir``), or ``None`` to run the recipe's command."""
    module = _module(step)
    return module.launch(step, step_dir) if module is not None else None
