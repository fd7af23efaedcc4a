"""A fake backend, added the way a real one is (its class and one registry line), for the runner's tests.

What each step does is its command: ``ok``, ``fail``, ``serve`` (a server that becomes ready), ``interrupt``
(Ctrl-C while it runs), ``refuse`` (the submission is refused), ``busy`` (two submissions meet a transient error,
the third is taken), ``down`` (every submission meets one), ``flaky`` (the backend cannot answer twice, then
succeeds), ``wake`` (running at the first look; its process has exited, which its wakeup descriptor says at once).
``WORLD`` is what its "cluster" holds; the fixture ``fake_backend`` (``tests/unit/conftest.py``) registers it and
empties ``WORLD``.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from mlrecipe.backends.base import (
    Backend,
    BackendOptions,
    Plan,
    ReleaseContext,
    RunningStep,
    StepHandle,
    StepOutcome,
    StepState,
)
from mlrecipe.errors import BackendError, TransientBackendError
from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.load import StepSpec


@dataclass
class World:
    """What the fake backend's "cluster" holds: live servers, submissions, cancels, the env each plan got."""

    running: set[str] = field(default_factory=set)
    most_at_once: int = 0
    alive: set[str] = field(default_factory=set)
    submitted: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    envs: dict[str, dict[str, str]] = field(default_factory=dict)
    tries: dict[str, int] = field(default_factory=dict)  #: submit calls per step (``busy``/``down`` count them)
    calls: list[str] = field(default_factory=list)  #: every submit call's step, in order
    ids: Any = field(default_factory=lambda: itertools.count(1))

    def reset(self) -> None:
        """Empty again, for the next test (in place: test modules hold this object)."""
        self.__init__()  # type: ignore[misc]


WORLD = World()


class FakeOptions(BackendOptions):
    """Options of the fake backend."""

    flaky_polls: int = Field(2, description="How many polls of a flaky step fail before it answers")


class FakeHandle(StepHandle):
    """A fake step: its id and command."""

    run: str
    command: str


@dataclass
class FakePlan(Plan):
    step: str
    chart: str
    command: str
    nodes: int
    notes: list[str] = field(default_factory=list)
    url: str | None = None

    @property
    def node_count(self) -> int:
        return self.nodes

    @property
    def server_url(self) -> str | None:
        return self.url

    def materialize(self) -> str:
        return f"# {self.step}: {self.command} on {self.nodes} node(s)\n"


class FakeRunning(RunningStep[FakeHandle]):
    def __init__(self, handle: FakeHandle, plan: FakePlan, flaky: int) -> None:
        self.handle, self.plan, self.flaky, self.polls = handle, plan, flaky, 0
        WORLD.running.add(handle.run)
        WORLD.most_at_once = max(WORLD.most_at_once, len(WORLD.running))
        self.exited: tuple[int, int] | None = None
        if handle.command == "wake":  # a pipe with a byte in it: readable, as a pidfd once its process exited
            self.exited = os.pipe()
            os.write(self.exited[1], b"x")

    def wakeup_fds(self) -> list[int]:
        return [self.exited[0]] if self.exited is not None else []

    def poll(self) -> StepOutcome | None:
        outcome = self._poll()
        if outcome is not None:
            WORLD.running.discard(self.handle.run)
        return outcome

    def _poll(self) -> StepOutcome | None:
        command = self.handle.command
        self.polls += 1
        if command.startswith("slow") and self.polls < (50 if command == "slower" else 5):
            return None
        if command == "slowfail":
            return StepOutcome(StepState.FAILED, 1, "slow failure")
        if command == "interrupt":
            raise KeyboardInterrupt
        if command == "wake" and self.polls == 1:
            return None
        if command == "wake" and self.exited is not None:
            for fd in self.exited:
                os.close(fd)
            self.exited = None
        if command == "flaky" and self.flaky > 0:
            self.flaky -= 1
            raise TransientBackendError("controller busy")
        if command == "fail":
            return StepOutcome(StepState.FAILED, 3, "node 0 exited with status 3", 0, ["boom"])
        if command == "serve":
            WORLD.alive.add(self.handle.run)
            return None
        return StepOutcome(StepState.SUCCEEDED, 0)

    def ready_url(self) -> str | None:
        return self.plan.url if self.handle.run in WORLD.alive else None

    def cancel(self) -> None:
        WORLD.cancelled.append(self.handle.run)
        WORLD.alive.discard(self.handle.run)
        WORLD.running.discard(self.handle.run)


class FakeBackend(Backend[FakePlan, FakeHandle, FakeOptions]):
    name = "fake"
    kinds = frozenset({StepKind.JOB, StepKind.SERVER})
    options_type = FakeOptions
    handle_type = FakeHandle

    def plan(self, step: StepSpec, ctx: ReleaseContext, env: dict[str, str] | None = None) -> FakePlan:
        WORLD.envs[step.name] = dict(env or {})
        url = f"http://fake/{step.name}" if step.chart.kind is StepKind.SERVER else None
        return FakePlan(step.name, step.chart.name, step.command_line[0], step.recipe.resources.nnodes,
                        [f"{step.name} runs nowhere"], url)

    def submit(self, plan: FakePlan, ctx: ReleaseContext) -> FakeRunning:
        WORLD.tries[plan.step] = WORLD.tries.get(plan.step, 0) + 1
        WORLD.calls.append(plan.step)
        if plan.command == "refuse":
            raise BackendError("the fake cluster refused the job: quota exceeded")
        if plan.command == "down" or (plan.command == "busy" and WORLD.tries[plan.step] < 3):
            raise TransientBackendError("the fake cluster is busy: try again")
        handle = FakeHandle(run=f"{plan.step}-{next(WORLD.ids)}", command=plan.command)
        WORLD.submitted.append(plan.step)
        return FakeRunning(handle, plan, self.options.flaky_polls)

    def cancel_handle(self, handle: FakeHandle) -> None:
        WORLD.cancelled.append(handle.run)
        WORLD.alive.discard(handle.run)

    def handle_alive(self, handle: FakeHandle) -> bool:
        return handle.run in WORLD.alive
