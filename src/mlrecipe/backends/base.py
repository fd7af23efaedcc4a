"""The backend contract: turn a step spec into a plan, run it, watch it, stop it.

A backend is one package behind :class:`Backend`, generic in its plan, its handle and its options:

- ``plan()`` is pure (no side effects beyond choosing free ports); ``Plan.materialize()`` is exactly
  what ``submit()`` runs, and what ``mlrecipe template`` and ``--dry-run`` print.
- ``preflight()`` says what on this machine stops a plan before it is submitted.
- ``submit()`` returns a :class:`RunningStep` whose typed :class:`StepHandle` is persisted in the release
  state, so that another CLI process can ask whether the step is alive or cancel it. A refused
  submission raises :class:`~mlrecipe.errors.BackendError`.
- Options (:class:`BackendOptions`) come from the config file and the command line; every field is
  described, so ``mlrecipe options BACKEND`` documents them.

The runner reads only what these classes declare.
"""

from __future__ import annotations

import select
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from mlrecipe.errors import SpecIssue
from mlrecipe.metrics import METRICS_FILE
from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.load import StepSpec
from mlrecipe.spec.model import PROTECTED_NAMESPACES, Model
from mlrecipe.states import StepState as StepState  # the contract names it; its own module keeps it light


@dataclass(frozen=True)
class ReleaseContext:
    """Where and as what a release runs, and what the runner will run after the current step.

    ``pipeline`` is every step name in order; ``upcoming`` the steps the runner will run after the one
    being submitted (steps it skips as unchanged are left out), for backends that queue ahead
    (:class:`QueuesAhead`; empty for the others): only steps of the same backend, up to the first step of another
    one. ``state_dir`` is the release's on every backend.
    """

    release: str
    namespace: str
    backend: str
    state_dir: Path
    pipeline: tuple[str, ...] = ()
    upcoming: tuple[StepSpec, ...] = ()
    runs_on: str = ""  #: the backend of the step being planned when it is not the release's (a hybrid pipeline)

    @property
    def address(self) -> str:
        return f"{self.backend}://{self.namespace}/{self.release}"

    def step_dir(self, step: str) -> Path:
        return self.state_dir / "steps" / step


@dataclass
class StepOutcome:
    """How a step ended (or that its server is ready), with the evidence."""

    state: StepState
    exit_code: int | None = None
    message: str = ""
    failed_rank: int | None = None
    log_tail: list[str] = field(default_factory=list)
    url: str | None = None  #: a serving step's URL, once it is ready
    #: Typed outputs of a finished step (name -> value, e.g. ``model_artifacts``): recorded in the release state
    #: and given to later steps as ``MLRECIPE_<STEP>_<NAME>``.
    outputs: dict[str, str] = field(default_factory=dict)


class BackendOptions(Model):
    """Base of each backend's options: unknown keys are errors, every field is described."""

    retry_seconds: float = Field(
        300.0, ge=0, description="How long the runner keeps asking a backend that cannot answer right now (a busy "
        "Slurm controller, an unreachable API server) before the step fails")


class StepHandle(BaseModel):
    """What identifies a submitted step, persisted as JSON in the release state (typed per backend)."""

    model_config = ConfigDict(extra="ignore", protected_namespaces=PROTECTED_NAMESPACES)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class Plan(ABC):
    """What a backend will run for one step; the runner reads the attributes declared here."""

    step: str
    chart: str
    notes: list[str]  #: things the user should know about how the step runs here (printed once)

    @property
    @abstractmethod
    def node_count(self) -> int:
        """How many nodes the step runs on (pods, Slurm nodes, local process groups)."""

    @property
    def server_url(self) -> str | None:
        """For a serving step: the URL later steps get as ``MLRECIPE_<STEP>_URL`` (``None`` otherwise)."""
        return None

    @abstractmethod
    def materialize(self) -> str:
        """The exact text of what runs (argv+env+script, manifests, or a batch script)."""


HandleT = TypeVar("HandleT", bound=StepHandle)
PlanT = TypeVar("PlanT", bound=Plan)
OptionsT = TypeVar("OptionsT", bound=BackendOptions)


class RunningStep(ABC, Generic[HandleT]):
    """A submitted step, watched by the runner.

    ``keep_on_failure`` (set by the runner after ``submit``: ``--keep-on-failure``) asks a step that fails to leave
    what it holds on the cluster for inspection instead of removing it; ``kept`` then says, in words, what it left
    ("" when nothing of it remains to keep).
    """

    handle: HandleT
    keep_on_failure: bool = False
    kept: str = ""

    @abstractmethod
    def poll(self) -> StepOutcome | None:
        """``None`` while running, else the outcome (non-blocking).

        May raise :class:`~mlrecipe.errors.TransientBackendError` when the backend cannot answer right now.
        """

    @abstractmethod
    def cancel(self) -> None:
        """Stop every process of the step; idempotent."""

    def ready_url(self) -> str | None:
        """For serving steps: the URL once the server is ready."""
        return None

    def progress_note(self) -> str:
        """Why the step makes no progress right now (e.g. pods that cannot start), or ``""``."""
        return ""

    def wakeup_fds(self) -> list[int]:
        """File descriptors that become readable when the step may have settled (a local node process
        exited), so that the runner looks at once instead of at its next tick; ``[]``: ticks only.

        Only descriptors that are not readable yet: one that stays readable would wake the runner at once,
        every time.
        """
        return []

    def settled(self) -> StepOutcome | None:
        """The step's outcome if it ended, ``serving`` (with its URL) if it is a server now ready, else None."""
        outcome = self.poll()
        if outcome is not None:
            return outcome
        url = self.ready_url()
        return StepOutcome(StepState.SERVING, url=url) if url is not None else None

    def wait(self, interval: float = 0.2) -> StepOutcome:
        """Block until :meth:`settled` has an answer (looking every ``interval`` s, and as a process exits)."""
        while (outcome := self.settled()) is None:
            sleep_until_readable(self.wakeup_fds(), interval)
        return outcome


def sleep_until_readable(fds: list[int], timeout: float) -> None:
    """Sleep ``timeout`` seconds, or less: until one of ``fds`` becomes readable (a signal handler's exception
    ends it too)."""
    if not fds:
        time.sleep(timeout)
        return
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    poller.poll(timeout * 1000)


class PollClock:
    """When a :class:`RunningStep` asks its backend again: at once the first time, then at most once per ``period``
    seconds, however often the runner calls ``poll``. ``now`` is the clock it reads (tests put a clock of their own)."""

    now = staticmethod(time.monotonic)

    def __init__(self, period: float) -> None:
        self.period = period
        self._next = 0.0

    def due(self) -> bool:
        """True when a look is due (the next one then waits a period)."""
        now = self.now()
        if now < self._next:
            return False
        self._next = now + self.period
        return True


class QueuesAhead:
    """Capability of a backend that submits the steps after the one being submitted at once, each waiting for the
    one before (Slurm's chain mode). The runner fills ``ReleaseContext.upcoming`` only for such a backend (checked
    with ``isinstance``); when the runner reaches a queued step, the backend attaches to its waiting job."""


class AdoptsSubmitted:
    """Capability of a backend whose ``submit`` finds a step's earlier submission (running or finished) and adopts
    it instead of starting the step twice: ``resume`` leaves such a running step alone rather than cancelling it
    first (checked with ``isinstance``)."""


class RemovesByRelease(ABC):
    """Capability of a backend whose resources carry their release's name (tags), so that ``uninstall`` finds and
    removes them without the release's state on this machine (another ``MLRECIPE_HOME``, a KFP task's pod), and
    after the recorded handles were cancelled (checked with ``isinstance``)."""

    @abstractmethod
    def remove_release(self, release: str, namespace: str | None,
                       handle: dict[str, Any] | None = None) -> list[str]:
        """Stop or delete everything tagged with ``release`` in ``namespace`` (``None``: the one namespace it was
        found in; several raise :class:`~mlrecipe.errors.UserError`). ``handle``: a recorded step handle saying
        where to look (``None``: where the options say). Returns one line per thing stopped or deleted; raises
        :class:`~mlrecipe.errors.BackendError` when the backend cannot be asked."""


@dataclass(frozen=True)
class DebugRecord:
    """One file a backend adds to a debug bundle: ``name`` (a relative path such as ``pods/worker-0.log``) and its
    ``text``, or ``text`` ``None`` and ``missing``: why it could not be collected."""

    name: str
    text: str | None = None
    missing: str = ""


class CollectsDebugRecords(ABC):
    """Capability of a backend that holds more of a step than the files in its step directory: the scheduler's
    record of the job, pod logs and events, the job's description and log streams. ``mlrecipe debug-bundle`` adds
    them to the bundle (checked with ``issubclass``)."""

    @abstractmethod
    def debug_records(self, handle: Any) -> list[DebugRecord]:
        """What the backend holds now of the step described by ``handle`` (the backend's typed handle,
        :meth:`Backend.load_handle`). Never raises for what it cannot read: such a thing is a record with
        ``missing`` saying why (the bundle is collected when things have gone wrong)."""


def issues_at_chart(step: StepSpec, problems: list[str]) -> list[SpecIssue]:
    """``problems`` of ``step`` as issues where the step names its chart (pipeline file and line, or the command
    line's chart argument)."""
    return [SpecIssue(*step.chart_at, f"step {step.name}: {problem}") for problem in problems]


class Backend(ABC, Generic[PlanT, HandleT, OptionsT]):
    """Base class of every backend (one package each, one line in the registry)."""

    log_file_name: ClassVar[str] = "node-{rank}.log"  #: a node's log file in the step directory
    name: ClassVar[str]
    kinds: ClassVar[frozenset[StepKind]]
    options_type: ClassVar[type[BackendOptions]]
    handle_type: ClassVar[type[StepHandle]]

    def __init__(self, options: OptionsT) -> None:
        self.options = options

    def check(self, step: StepSpec) -> list[str]:
        """Capability problems that stop the step before anything starts (empty when fine)."""
        if step.chart.kind not in self.kinds:
            return [f"chart {step.chart.name} ({step.chart.kind.value}) is not supported on backend {self.name}"]
        return []

    def check_issues(self, step: StepSpec) -> list[SpecIssue]:
        """:meth:`check`'s problems where the user can fix them: by default where the step names its chart (a
        backend that knows the very value at fault returns the issue at that value's file and line)."""
        return issues_at_chart(step, self.check(step))

    @abstractmethod
    def plan(self, step: StepSpec, ctx: ReleaseContext, env: dict[str, str] | None = None) -> PlanT:
        """Turn a step into a plan. ``env`` carries outputs of earlier steps (e.g. server URLs)."""

    def preflight(self, plan: PlanT) -> list[str]:
        """What on this machine stops ``plan`` before it is submitted (empty when fine)."""
        return []

    @abstractmethod
    def submit(self, plan: PlanT, ctx: ReleaseContext) -> RunningStep[HandleT]:
        """Start what the plan says; return at once. A refused submission raises ``BackendError``; one that may work
        when asked again raises ``TransientBackendError``, which the runner submits again after a bounded backoff
        (:mod:`mlrecipe.runner.submit_retry`), so raise it only where a second ``submit`` is safe."""

    @abstractmethod
    def cancel_handle(self, handle: HandleT) -> None:
        """Stop a step from its persisted handle (used by ``uninstall`` from another process)."""

    @abstractmethod
    def handle_alive(self, handle: HandleT) -> bool:
        """Whether anything of the step described by ``handle`` still runs."""

    def server_health(self, handle: HandleT) -> str | None:
        """Why the server of the serving step described by ``handle`` is unhealthy right now (its health URL did not
        answer 2xx), or ``None`` when it is healthy or this backend cannot tell. Asked only while ``handle_alive``."""
        return None

    def live_note(self, handle: HandleT) -> str | None:
        """What the backend says about the running step of ``handle`` right now (e.g. SageMaker's secondary status
        and billable seconds), for ``status`` from another process; ``None``: nothing beyond the record. Raises
        :class:`~mlrecipe.errors.BackendError` when it cannot be asked (``status`` then says so beside the record)."""
        return None

    def load_handle(self, data: dict[str, Any]) -> HandleT:
        """The typed handle of a step from its JSON form in the release state."""
        return self.handle_type.model_validate(data)  # type: ignore[return-value]

    def log_path(self, ctx: ReleaseContext, step: str, rank: int = 0) -> Path:
        """The local file holding the log of ``rank`` of ``step`` (a backend that copies logs from elsewhere does it
        here); :meth:`log_file_pattern` names the same file once the step has ended."""
        return ctx.step_dir(step) / self.log_file_name.format(rank=rank)

    def log_file_pattern(self, ctx: ReleaseContext, step: str) -> str:
        """The path of :meth:`log_path` with ``{rank}`` in place of the rank, recorded with the step so that ``logs``
        of an ended step reads its file without loading the backend."""
        return str(ctx.step_dir(step) / self.log_file_name)

    def metrics_path(self, ctx: ReleaseContext, step: str) -> Path | None:
        """The local file where ``step``'s rank 0 appends progress (:mod:`mlrecipe.metrics`), or ``None``."""
        return ctx.step_dir(step) / METRICS_FILE
