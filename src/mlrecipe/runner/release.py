"""Run a release: steps as their dependencies allow (in parallel, bounded), skipping unchanged successes,
persisting state at every change.

The runner reads only what :mod:`mlrecipe.backends.base` declares: a backend's ``check``, ``plan``,
``preflight``, ``submit``, ``cancel_handle`` and ``handle_alive``; a plan's ``notes``, ``node_count`` and
``server_url``; a running step's ``settled``, ``progress_note``, ``wakeup_fds`` and ``handle``. Each step runs
on its own backend (:mod:`mlrecipe.runner.step_backends`: the release's, or the one the step names); its record
says which.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from mlrecipe.backends.base import Backend, QueuesAhead, ReleaseContext, StepOutcome, StepState, sleep_until_readable
from mlrecipe.config import release_dir
from mlrecipe.errors import (
    BackendError,
    DiskFullError,
    ExitCode,
    MlrecipeError,
    ReleaseBusyError,
    SpecIssue,
    TransientBackendError,
)
from mlrecipe.nccl_network import efa_warning
from mlrecipe.runner import submit_retry
from mlrecipe.runner.active import ActiveStep
from mlrecipe.runner.lock import driving
from mlrecipe.runner.progress import Display
from mlrecipe.runner.recorded_inputs import redact
from mlrecipe.runner.release_inputs import release_inputs
from mlrecipe.runner.state import (
    DISK_FULL,
    STATE_FILE,
    ReleaseRecord,
    StepRecord,
    check_tree_has_no_links,
    disk_full_error,
    load_record,
)
from mlrecipe.runner.step_backends import AnyBackend, StepBackends
from mlrecipe.spec.load import ReleaseSpec, StepSpec
from mlrecipe.spec.names import step_output_var

TICK_SECONDS = 0.25  #: between two looks at the running steps; a step's process that exits wakes the runner at once

__all__ = ["ReleaseBusyError", "ReleaseRunner", "spec_from_inputs", "url_var"]


def url_var(step: str) -> str:
    """The variable that carries a serving step's URL to later steps: ``MLRECIPE_<STEP>_URL``."""
    return step_output_var(step, "url")


def outputs_env(step: str, outputs: dict[str, str]) -> dict[str, str]:
    """The variables that carry a finished step's typed outputs to later steps: ``MLRECIPE_<STEP>_<NAME>``."""
    return {step_output_var(step, name): value for name, value in outputs.items()}


def spec_from_inputs(inputs: dict[str, Any]) -> ReleaseSpec:
    """Rebuild a release spec from the inputs recorded in its state (for ``resume``)."""
    return release_inputs(inputs).load()


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass
class ReleaseRunner:
    """Drives one release: each step on its backend (``backend``, the release's, unless the step names one)."""

    spec: ReleaseSpec
    backend: Backend[Any, Any, Any]
    inputs: dict[str, Any]
    display: Display
    force: bool = False
    max_parallel: int = 4
    keep_going: bool = False
    backend_options: dict[str, dict[str, Any]] = field(default_factory=dict)  # other backends' (-B NAME.key=value)
    #: A failed step's cluster objects are left for inspection (each running step is told; ``_kept`` says what).
    keep_on_failure: bool = False
    _said: set[str] = field(default_factory=set)
    _kept: dict[str, str] = field(default_factory=dict)
    backends: StepBackends = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.backends = StepBackends.for_release(self.spec, self.backend, self.backend_options)

    @property
    def context(self) -> ReleaseContext:
        return ReleaseContext(
            self.spec.release,
            self.spec.namespace,
            self.backend.name,
            release_dir(self.backend.name, self.spec.namespace, self.spec.release),
            pipeline=tuple(s.name for s in self.spec.steps),
        )

    def _step_context(self, impl: AnyBackend, upcoming: tuple[StepSpec, ...] = ()) -> ReleaseContext:
        """The release's context as the backend ``impl`` of a step sees it (the release's state directory)."""
        return replace(self.context, upcoming=upcoming, runs_on="" if impl is self.backend else impl.name)

    def problems(self) -> list[SpecIssue]:
        """Capability problems of every step on its backend (nothing has started), each where the step names its
        chart."""
        return [issue for step in self.spec.steps for issue in self.backends.of(step).check_issues(step)]

    def materialize(self) -> str:
        """What every step would run, as ``template`` / ``--dry-run`` print it."""
        env = self._base_env()
        hybrid = self.backends.hybrid(self.spec)
        out = []
        for step in self.spec.steps:
            impl = self.backends.of(step)
            plan = impl.plan(step, self._step_context(impl), dict(env))
            if hybrid:
                out.append(f"# ==== step {step.name}: backend {impl.name} ====")
            out.append(plan.materialize())
            if plan.server_url is not None:  # later steps see the URL the server will have
                env[url_var(step.name)] = plan.server_url
        return "\n".join(out)

    def _base_env(self) -> dict[str, str]:
        return {"MLRECIPE_PIPELINE_DIR": self.spec.source_dir}

    def _record(self) -> ReleaseRecord:
        record = load_record(self.backend.name, self.spec.namespace, self.spec.release)
        if record is not None and record.driver_alive() and record.driver_pid != os.getpid():
            raise ReleaseBusyError(
                f"release {self.context.address} is being run by process {record.driver_pid}; "
                f"wait for it or run 'mlrecipe uninstall {self.spec.release}'"
            )
        if record is None:
            record = ReleaseRecord(self.spec.release, self.spec.namespace, self.backend.name, {})
        record.inputs = redact(self.inputs, self.spec)  # credentials given with --set are not written
        record.order = [s.name for s in self.spec.steps]
        record.needs = {name: sorted(deps) for name, deps in self.spec.dependencies().items()}
        record.set_driver(os.getpid())
        record.state = StepState.RUNNING
        return record

    def _unchanged_success(self, step: StepSpec, record: ReleaseRecord) -> bool:
        prev = record.steps.get(step.name)
        return (not self.force and prev is not None and prev.state is StepState.SUCCEEDED
                and prev.hash == step.content_hash and record.backend_of(prev) == self.backends.of(step).name)

    def _live_server(self, step: StepSpec, record: ReleaseRecord) -> str | None:
        """The URL of this step's server when it is still up and unchanged (it is reused, not restarted)."""
        prev = record.steps.get(step.name)
        if (self.force or prev is None or prev.state is not StepState.SERVING or not prev.handle or not prev.url
                or prev.hash != step.content_hash or record.backend_of(prev) != self.backends.of(step).name):
            return None
        impl = self.backends.of(step)
        return prev.url if impl.handle_alive(impl.load_handle(prev.handle)) else None

    def will_skip(self, step: StepSpec, record: ReleaseRecord) -> bool:
        """The one skip rule: an unchanged success, or an unchanged server that is still up."""
        return self._unchanged_success(step, record) or self._live_server(step, record) is not None

    def run(self) -> ExitCode:
        """Run every step as soon as the steps it depends on are done, at most ``max_parallel`` at a time.

        A failing step stops the steps that depend on it and, unless ``keep_going``, cancels the running
        ones. Returns the exit code (0, 1 failed, 130 interrupted). The release's driver lock is held throughout
        (:func:`mlrecipe.runner.lock.driving`); a full disk stops every step, is recorded as far as the disk
        allows and raises :class:`DiskFullError`.
        """
        directory = self.context.state_dir
        with driving(directory, self.context.address):
            if directory.exists():
                check_tree_has_no_links(directory)
                for stale in directory.glob(f".{STATE_FILE}.*.tmp"):  # left by a driver killed while it wrote
                    stale.unlink(missing_ok=True)
            return self._run_locked()

    def _run_locked(self) -> ExitCode:
        since = time.time()
        record = self._record()
        sched = _Schedule(self.spec.dependencies(), list(self.spec.steps))
        env = self._base_env()
        try:
            record.save()
            return self._loop(record, sched, env)
        except DiskFullError:
            self._stop_on_full_disk(sched, record, since)
            raise
        except OSError as exc:
            if exc.errno not in DISK_FULL:
                raise
            self._stop_on_full_disk(sched, record, since)
            raise disk_full_error(exc.filename or self.context.state_dir, self.context.address, recorded=False) \
                from None

    def _stop_on_full_disk(self, sched: _Schedule, record: ReleaseRecord, since: float) -> None:
        """Stop every running step and record that the disk was full (on the steps that failed or were stopped
        since ``since``), as far as the disk allows."""
        for name, active in list(sched.active.items()):
            with contextlib.suppress(BackendError):
                active.running.cancel()
            del sched.active[name]
        for rec in record.steps.values():
            if rec.state.active:
                rec.state, rec.message, rec.ended = StepState.FAILED, "stopped: the disk is full", time.time()
            elif rec.state is StepState.FAILED and (rec.ended or 0) >= since and "disk is full" not in rec.message:
                rec.message = f"{rec.message}; the disk is full" if rec.message else "the disk is full"
        record.state = StepState.FAILED
        record.set_driver(None)
        with contextlib.suppress(MlrecipeError, OSError):
            record.save()

    def _loop(self, record: ReleaseRecord, sched: _Schedule, env: dict[str, str]) -> ExitCode:
        with _sigterm_as_interrupt(), self.display:
            self.display.graph([(s.name, s.chart.name) for s in self.spec.steps], sched.deps)
            try:
                while sched.waiting or sched.active:
                    self._start_ready(sched, record, env)
                    self._look_at_active(sched, record, env)
                    if sched.failed and not self.keep_going:
                        self._cancel_all(sched, record, f"cancelled: step {sched.failed[0]} failed",
                                         StepState.INTERRUPTED)
                        sched.waiting.clear()
                    if sched.waiting or sched.active:
                        sleep_until_readable([fd for a in sched.active.values() for fd in a.running.wakeup_fds()],
                                             TICK_SECONDS)
            except KeyboardInterrupt:
                self._cancel_all(sched, record, "stopped by the user", StepState.INTERRUPTED)
                return self._end(record, StepState.INTERRUPTED, sched)
        return self._end(record, StepState.FAILED if sched.failed else StepState.SUCCEEDED, sched)

    def _start_ready(self, sched: _Schedule, record: ReleaseRecord, env: dict[str, str]) -> None:
        """Start (or skip) every waiting step whose dependencies are done, within ``max_parallel``."""
        for step in list(sched.waiting):
            if len(sched.active) >= self.max_parallel:
                return
            needs = sched.deps[step.name]
            if needs & sched.stopped:
                sched.waiting.remove(step)
                sched.stopped.add(step.name)
                blockers = ", ".join(sorted(needs & sched.stopped))
                self.display.step_skipped(step.name, f"not run: it depends on {blockers}")
                continue
            if not needs <= sched.done or not sched.due(step.name):
                continue
            sched.waiting.remove(step)
            if self._skip(step, record, env):
                sched.done.add(step.name)
                continue
            started: ActiveStep | StepOutcome
            try:
                started = self._start(step, record, env, self._upcoming(step, sched, record))
            except TransientBackendError as exc:
                failed = self._retry_later(sched, step, record.steps[step.name], exc)
                if failed is None:
                    continue
                started = failed
            if isinstance(started, ActiveStep):
                sched.active[step.name] = started
            elif self._finish(record, record.steps[step.name], started, 0.0):
                sched.done.add(step.name)
            else:
                sched.fail(step.name)

    def _retry_later(self, sched: _Schedule, step: StepSpec, rec: StepRecord,
                     exc: TransientBackendError) -> StepOutcome | None:
        """Put ``step`` back among the waiting steps to be submitted again after the backoff (``None``), or, its
        tries spent, the failed outcome of its submission."""
        delay = sched.retry_later(step)
        if delay is None:
            return StepOutcome(StepState.FAILED, None, f"submission failed: {exc}")
        rec.message = f"submitting again in {delay:g} s: {exc}"
        self.display.say(f"note: step {step.name}: {exc}; submitting again in {delay:g} s")
        return None

    def _upcoming(self, step: StepSpec, sched: _Schedule, record: ReleaseRecord) -> tuple[StepSpec, ...]:
        """The steps the runner will run after ``step`` on the same backend, up to one on another backend, for a
        backend that queues ahead (none for the others)."""
        impl, out = self.backends.of(step), []
        if not isinstance(impl, QueuesAhead):
            return ()
        for later in sched.waiting:
            if self.will_skip(later, record):
                continue
            if self.backends.of(later) is not impl:
                break
            out.append(later)
        return tuple(out)

    def _skip(self, step: StepSpec, record: ReleaseRecord, env: dict[str, str]) -> bool:
        """Skip an unchanged success or reuse an unchanged live server; stop a server that is to restart."""
        if self._unchanged_success(step, record):
            env.update(outputs_env(step.name, record.steps[step.name].outputs))
            self.display.step_skipped(step.name, "unchanged since its last success; --force re-runs it")
            return True
        url = self._live_server(step, record)
        if url is not None:
            env[url_var(step.name)] = url
            env.update(outputs_env(step.name, record.steps[step.name].outputs))
            self.display.step_skipped(step.name, f"still serving at {url}; --force restarts it")
            return True
        prev = record.steps.get(step.name)
        if prev is not None and prev.state is StepState.SERVING and prev.handle:  # changed, moved, forced or dead
            impl = self.backends.named(record.backend_of(prev))
            impl.cancel_handle(impl.load_handle(prev.handle))
        return False

    def _say_notes(self, notes: list[str]) -> None:
        for note in notes:
            if note not in self._said:
                self._said.add(note)
                self.display.say(f"note: {note}")

    def _start(self, step: StepSpec, record: ReleaseRecord, env: dict[str, str],
               upcoming: tuple[StepSpec, ...]) -> ActiveStep | StepOutcome:
        """Plan and submit ``step``; the running step, or the outcome of a step that could not start. A transient
        submission error propagates (the caller submits the step again later)."""
        impl = self.backends.of(step)
        ctx = self._step_context(impl, upcoming)
        rec = StepRecord(step.name, step.chart.name, StepState.RUNNING, step.content_hash, time.time())
        rec.matrix = step.matrix.as_dict() if step.matrix is not None else None
        rec.backend = impl.name
        record.steps[step.name] = rec
        plan = impl.plan(step, ctx, env)
        problems = impl.preflight(plan)
        if problems:
            return StepOutcome(StepState.FAILED, None, "; ".join(problems))
        self._say_notes(plan.notes)
        where = "" if impl is self.backend else f" on {impl.name}"
        self.display.step_started(step.name, step.chart.name + where, plan.node_count)
        try:
            running = impl.submit(plan, ctx)
        except TransientBackendError:
            raise  # the caller submits it again later (runner/submit_retry.py)
        except BackendError as exc:
            return StepOutcome(StepState.FAILED, None, f"submission failed: {exc}")
        running.keep_on_failure = self.keep_on_failure
        rec.handle = running.handle.to_json()
        rec.log_file = impl.log_file_pattern(ctx, step.name)
        record.save()
        return ActiveStep(step, rec, running, time.monotonic(), impl.log_path(ctx, step.name, 0),
                          impl.metrics_path(ctx, step.name), impl.options.retry_seconds)

    def _look_at_active(self, sched: _Schedule, record: ReleaseRecord, env: dict[str, str]) -> None:
        """One look at every running step: progress on the display, outcomes recorded."""
        for name, active in list(sched.active.items()):
            try:
                outcome, note, progress = active.look()
            except BackendError as exc:
                if self.keep_on_failure:
                    active.running.kept = active.running.kept or f"whatever it still runs (its backend failed: {exc})"
                else:
                    with contextlib.suppress(BackendError):
                        active.running.cancel()
                outcome, note, progress = StepOutcome(StepState.FAILED, None, f"backend failed: {exc}"), "", None
            if outcome is None:
                if active.waiting:
                    self.display.step_waiting(name, active.elapsed, active.waiting)
                self.display.tick(name, active.elapsed, note, progress)
                continue
            del sched.active[name]
            active.rec.handle = active.running.handle.to_json()
            if outcome.state is StepState.SERVING and outcome.url is not None:
                active.rec.url = outcome.url
                env[url_var(name)] = outcome.url
                outcome.message = f"ready at {outcome.url}; {url_var(name)} is set for later steps"
            if outcome.outputs:
                active.rec.outputs = dict(outcome.outputs)
                env.update(outputs_env(name, outcome.outputs))
            network = efa_warning(active.step.values, active.log)
            if network:  # the step's end shows it, and status through the record's message
                outcome.message = "; ".join(m for m in (outcome.message, f"warning: {network}") if m)
            if self._finish(record, active.rec, outcome, active.elapsed):
                sched.done.add(name)
            else:
                sched.fail(name)
                if self.keep_on_failure and outcome.state is StepState.FAILED:
                    self._kept[name] = active.running.kept

    def _cancel_all(self, sched: _Schedule, record: ReleaseRecord, why: str, state: StepState) -> None:
        """Stop every running step (their records say why)."""
        for name, active in list(sched.active.items()):
            with contextlib.suppress(BackendError):
                active.running.cancel()
            del sched.active[name]
            self._finish(record, active.rec, StepOutcome(state, None, why), active.elapsed)
            sched.stopped.add(name)

    def _end(self, record: ReleaseRecord, state: StepState, sched: _Schedule) -> ExitCode:
        """Record how the release ended and say it; the exit code."""
        servers = [s for s in record.steps.values() if s.state is StepState.SERVING and s.name in record.order]
        if state is StepState.SUCCEEDED and servers:
            state = StepState.SERVING
        record.state = state
        record.set_driver(None)
        record.save()
        address = self.context.address
        if state is StepState.SERVING:
            where = ", ".join(f"{s.name} at {s.url}" for s in servers)
            self.display.say(f"release {address}: serving ({where}); stop with 'mlrecipe uninstall "
                             f"{self.spec.release}'")
            return ExitCode.OK
        if state is StepState.SUCCEEDED:
            self.display.say(f"release {address}: succeeded")
            return ExitCode.OK
        at = sched.failed[0] if sched.failed else next(iter(sorted(sched.stopped)), "")
        self.display.say(f"release {address}: {state} at step {at}")
        self._say_kept(record)
        if servers:
            self.display.say(f"servers still up: {', '.join(s.name for s in servers)}; stop them with "
                             f"'mlrecipe uninstall {self.spec.release}'")
        return ExitCode.INTERRUPTED if state is StepState.INTERRUPTED else ExitCode.FAILED

    def _say_kept(self, record: ReleaseRecord) -> None:
        """With ``keep_on_failure``: what each failed step left for inspection, and how to remove it."""
        for name, kept in self._kept.items():
            backend = record.backend_of(record.steps[name])
            if kept:
                self.display.say(f"kept for inspection (--keep-on-failure): step {name}: {kept}; remove it with "
                                 f"'mlrecipe uninstall {self.context.address}'")
            else:
                self.display.say(f"--keep-on-failure: step {name} left nothing on {backend} to keep (nothing of the "
                                 "failed step runs there any more); its logs and state stay: 'mlrecipe debug-bundle "
                                 f"{self.context.address}' collects them")

    def _finish(self, record: ReleaseRecord, rec: StepRecord, outcome: StepOutcome, elapsed: float) -> bool:
        """Record a step's outcome and show it; whether the step did what it should."""
        rec.state = outcome.state
        rec.exit_code = outcome.exit_code
        rec.message = outcome.message
        rec.ended = time.time()
        self.display.step_finished(rec.name, outcome, elapsed)
        record.save()
        return outcome.state.ok


@dataclass
class _Schedule:
    """Where every step of a run is: waiting, running, done (ok), failed, or stopped (not run or cancelled)."""

    deps: dict[str, frozenset[str]]
    waiting: list[StepSpec]
    active: dict[str, ActiveStep] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)
    failed: list[str] = field(default_factory=list)
    stopped: set[str] = field(default_factory=set)
    tries: dict[str, int] = field(default_factory=dict)  #: transient submission errors met so far, per step
    not_before: dict[str, float] = field(default_factory=dict)  #: monotonic time of a step's next try

    def due(self, name: str) -> bool:
        """Whether ``name`` may be submitted now (it is not waiting out a backoff)."""
        return self.not_before.get(name, 0.0) <= time.monotonic()

    def retry_later(self, step: StepSpec) -> float | None:
        """Count a transient submission error of ``step``; put it back among the waiting steps with its next try's
        time, and return the delay, or ``None`` once its tries are spent."""
        self.tries[step.name] = self.tries.get(step.name, 0) + 1
        delay = submit_retry.retry_delay(self.tries[step.name])
        if delay is not None:
            self.waiting.insert(0, step)
            self.not_before[step.name] = time.monotonic() + delay
        return delay

    def fail(self, name: str) -> None:
        self.failed.append(name)
        self.stopped.add(name)
