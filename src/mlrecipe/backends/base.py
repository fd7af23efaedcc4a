"""The backend contract: turn a step spec into a plan, run it, watch it, stop it.

A backend is one module behind this small base class. ``plan()`` is pure (no side effects
beyond choosing free ports); ``Plan.materialize()`` is exactly what ``submit()`` runs, and what
``mlrecipe template`` and ``--dry-run`` print. ``submit()`` returns a :class:`RunningStep` whose
``handle`` (JSON data) is persisted in the release state so that another CLI process can ask
for status, logs or cancel.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.load import StepSpec

SERVING = "serving"  # the state of a server step that is up and ready


@dataclass(frozen=True)
class ReleaseContext:
    """Where and as what a release runs: names, backend options and its state directory."""

    release: str
    namespace: str
    backend: str
    state_dir: Path
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"{self.backend}://{self.namespace}/{self.release}"

    def step_dir(self, step: str) -> Path:
        return self.state_dir / "steps" / step


@dataclass
class StepOutcome:
    """How a step ended: ``succeeded``, ``failed`` or ``interrupted``, with the evidence."""

    state: str
    exit_code: int | None = None
    message: str = ""
    failed_rank: int | None = None
    log_tail: list[str] = field(default_factory=list)


class Plan(ABC):
    """What a backend will run for one step."""

    step: str

    @abstractmethod
    def materialize(self) -> str:
        """The exact text of what runs (argv+env+script, manifests, or a batch script)."""


class RunningStep(ABC):
    """A submitted step, watched by the runner."""

    handle: dict[str, Any]

    @abstractmethod
    def poll(self) -> StepOutcome | None:
        """``None`` while running, else the outcome (non-blocking)."""

    @abstractmethod
    def cancel(self) -> None:
        """Stop every process of the step; idempotent."""

    def ready_url(self) -> str | None:
        """For serving steps: the URL once the server is ready."""
        return None

    def progress_note(self) -> str:
        """Why the step makes no progress right now (e.g. pods that cannot start), or ``""``."""
        return ""

    def settled(self) -> StepOutcome | None:
        """The step's outcome if it ended, ``serving`` (URL as message) if it is a server now ready, else None."""
        outcome = self.poll()
        if outcome is not None:
            return outcome
        url = self.ready_url()
        return StepOutcome(SERVING, None, url) if url is not None else None

    def wait(self, interval: float = 0.2) -> StepOutcome:
        """Block until :meth:`settled` has an answer."""
        while (outcome := self.settled()) is None:
            time.sleep(interval)
        return outcome


class Backend(ABC):
    """Base class of every backend (one module each, one line in the registry)."""

    name: ClassVar[str]
    kinds: ClassVar[frozenset[StepKind]]

    def check(self, step: StepSpec) -> list[str]:
        """Capability problems that stop the step before anything starts (empty when fine)."""
        if step.chart.kind not in self.kinds:
            return [f"chart {step.chart.name} ({step.chart.kind.value}) is not supported on backend {self.name}"]
        return []

    @abstractmethod
    def plan(self, step: StepSpec, ctx: ReleaseContext, env: dict[str, str] | None = None) -> Plan:
        """Turn a step into a plan. ``env`` carries outputs of earlier steps (e.g. server URLs)."""

    @abstractmethod
    def submit(self, plan: Plan, ctx: ReleaseContext) -> RunningStep:
        """Start what the plan says; return at once."""

    @abstractmethod
    def cancel_handle(self, handle: dict[str, Any]) -> None:
        """Stop a step from its persisted handle (used by ``uninstall`` from another process)."""

    @abstractmethod
    def handle_alive(self, handle: dict[str, Any]) -> bool:
        """Whether anything of the step described by ``handle`` still runs."""

    def log_path(self, ctx: ReleaseContext, step: str, rank: int = 0) -> Path:
        """The local file holding the log of ``rank`` of ``step``."""
        return ctx.step_dir(step) / f"node-{rank}.log"
