"""Run a release: steps in order, skipping unchanged successes, persisting state at every change.

The runner reads only what :mod:`mlrecipe.backends.base` declares: a backend's ``check``, ``plan``,
``preflight``, ``submit``, ``cancel_handle`` and ``handle_alive``; a plan's ``notes``, ``node_count`` and
``server_url``; a running step's ``settled``, ``progress_note`` and ``handle``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from mlrecipe.backends.base import Backend, ReleaseContext, RunningStep, StepOutcome, StepState
from mlrecipe.config import release_dir
from mlrecipe.errors import BackendError, ExitCode, ReleaseBusyError, TransientBackendError
from mlrecipe.logtail import tail
from mlrecipe.metrics import read_progress
from mlrecipe.runner.progress import Display
from mlrecipe.runner.state import ReleaseRecord, StepRecord, create_time, load_record
from mlrecipe.spec.load import ReleaseSpec, StepSpec, load_pipeline, load_step_release

TICK_SECONDS = 0.25

__all__ = ["ReleaseBusyError", "ReleaseRunner", "spec_from_inputs", "url_var"]


def url_var(step: str) -> str:
    """The variable that carries a serving step's URL to later steps: ``MLRECIPE_<STEP>_URL``."""
    return "MLRECIPE_" + step.upper().replace("-", "_") + "_URL"


def spec_from_inputs(inputs: dict[str, Any]) -> ReleaseSpec:
    """Rebuild a release spec from the inputs recorded in its state (for ``resume``)."""
    if inputs["kind"] == "pipeline":
        return load_pipeline(inputs["path"], inputs.get("sets") or [])
    return load_step_release(
        inputs["release"], inputs["chart"], inputs["files"], inputs.get("sets") or [], inputs["namespace"]
    )


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
    """Drives one release on one backend."""

    spec: ReleaseSpec
    backend: Backend[Any, Any, Any]
    inputs: dict[str, Any]
    display: Display
    force: bool = False
    _said: set[str] = field(default_factory=set)

    @property
    def context(self) -> ReleaseContext:
        return ReleaseContext(
            self.spec.release,
            self.spec.namespace,
            self.backend.name,
            release_dir(self.backend.name, self.spec.namespace, self.spec.release),
            pipeline=tuple(s.name for s in self.spec.steps),
        )

    def problems(self) -> list[str]:
        """Capability problems of every step on this backend (nothing has started)."""
        out: list[str] = []
        for step in self.spec.steps:
            out += [f"step {step.name}: {p}" for p in self.backend.check(step)]
        return out

    def materialize(self) -> str:
        """What every step would run, as ``template`` / ``--dry-run`` print it."""
        ctx = self.context
        env = self._base_env()
        out = []
        for step in self.spec.steps:
            plan = self.backend.plan(step, ctx, dict(env))
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
            record = ReleaseRecord(self.spec.release, self.spec.namespace, self.backend.name, self.inputs)
        record.inputs = self.inputs
        record.order = [s.name for s in self.spec.steps]
        record.driver_pid = os.getpid()
        record.driver_created = create_time(record.driver_pid)
        record.state = StepState.RUNNING
        return record

    def _unchanged_success(self, step: StepSpec, record: ReleaseRecord) -> bool:
        prev = record.steps.get(step.name)
        return (not self.force and prev is not None and prev.state is StepState.SUCCEEDED
                and prev.hash == step.content_hash)

    def _live_server(self, step: StepSpec, record: ReleaseRecord) -> str | None:
        """The URL of this step's server when it is still up and unchanged (it is reused, not restarted)."""
        prev = record.steps.get(step.name)
        if (self.force or prev is None or prev.state is not StepState.SERVING or not prev.handle or not prev.url
                or prev.hash != step.content_hash):
            return None
        return prev.url if self.backend.handle_alive(self.backend.load_handle(prev.handle)) else None

    def will_skip(self, step: StepSpec, record: ReleaseRecord) -> bool:
        """The one skip rule: an unchanged success, or an unchanged server that is still up."""
        return self._unchanged_success(step, record) or self._live_server(step, record) is not None

    def run(self) -> ExitCode:
        """Run every step; return the exit code (0, 1 failed, 130 interrupted)."""
        record = self._record()
        record.save()
        env = self._base_env()
        with _sigterm_as_interrupt(), self.display:
            for i, step in enumerate(self.spec.steps):
                if self._unchanged_success(step, record):
                    self.display.step_skipped(step.name, "unchanged since its last success; --force re-runs it")
                    continue
                url = self._live_server(step, record)
                if url is not None:
                    env[url_var(step.name)] = url
                    self.display.step_skipped(step.name, f"still serving at {url}; --force restarts it")
                    continue
                prev = record.steps.get(step.name)
                if prev is not None and prev.state is StepState.SERVING and prev.handle:
                    self.backend.cancel_handle(self.backend.load_handle(prev.handle))  # changed, forced or dead
                upcoming = tuple(s for s in self.spec.steps[i + 1:] if not self.will_skip(s, record))
                code = self._run_step(step, record, env, upcoming)
                if code != ExitCode.OK:
                    return code
            servers = [s for s in record.steps.values() if s.state is StepState.SERVING and s.name in record.order]
            record.state = StepState.SERVING if servers else StepState.SUCCEEDED
            record.driver_pid = None
            record.save()
        if servers:
            where = ", ".join(f"{s.name} at {s.url}" for s in servers)
            self.display.say(f"release {self.context.address}: serving ({where}); "
                             f"stop with 'mlrecipe uninstall {self.spec.release}'")
        else:
            self.display.say(f"release {self.context.address}: succeeded")
        return ExitCode.OK

    def _say_notes(self, notes: list[str]) -> None:
        for note in notes:
            if note not in self._said:
                self._said.add(note)
                self.display.say(f"note: {note}")

    def _run_step(self, step: StepSpec, record: ReleaseRecord, env: dict[str, str],
                  upcoming: tuple[StepSpec, ...]) -> ExitCode:
        ctx = replace(self.context, upcoming=upcoming)
        rec = StepRecord(step.name, step.chart.name, StepState.RUNNING, step.content_hash, time.time())
        record.steps[step.name] = rec
        plan = self.backend.plan(step, ctx, env)
        problems = self.backend.preflight(plan)
        if problems:
            return self._finish(record, rec, StepOutcome(StepState.FAILED, None, "; ".join(problems)), 0.0)
        self._say_notes(plan.notes)
        started = time.monotonic()
        self.display.step_started(step.name, step.chart.name, plan.node_count)
        running: RunningStep[Any] | None = None
        try:
            running = self.backend.submit(plan, ctx)
            rec.handle = running.handle.to_json()
            record.save()
            outcome = self._watch(step, running, started, rec)
            rec.handle = running.handle.to_json()
        except BackendError as exc:
            outcome = StepOutcome(StepState.FAILED, None, f"{'submission' if running is None else 'backend'} "
                                  f"failed: {exc}")
            if running is not None:
                with contextlib.suppress(BackendError):
                    running.cancel()
        except KeyboardInterrupt:
            if running is not None:
                running.cancel()
            outcome = StepOutcome(StepState.INTERRUPTED, None, "stopped by the user")
        if outcome.state is StepState.SERVING and outcome.url is not None:
            rec.url = outcome.url
            env[url_var(step.name)] = outcome.url
            outcome.message = f"ready at {outcome.url}; {url_var(step.name)} is set for later steps"
        return self._finish(record, rec, outcome, time.monotonic() - started)

    def _watch(self, step: StepSpec, running: RunningStep[Any], started: float, rec: StepRecord) -> StepOutcome:
        """Wait for the step to settle, showing its progress; a backend that cannot answer is asked again for
        ``retry_seconds``."""
        log = self.backend.log_path(self.context, step.name, 0)
        metrics = self.backend.metrics_path(self.context, step.name)
        failing_since: float | None = None
        while True:
            try:
                outcome = running.settled()
                failing_since, note = None, running.progress_note()
            except TransientBackendError as exc:
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > self.backend.options.retry_seconds:
                    raise BackendError(f"{exc} (still failing after {now - failing_since:.0f} s)") from exc
                outcome, note = None, f"retrying: {exc}"
            progress = read_progress(metrics)
            if progress is not None:
                rec.progress = progress.to_json()
            if outcome is not None:
                return outcome
            lines = tail(log, 1)
            self.display.tick(step.name, time.monotonic() - started, note or (lines[-1] if lines else ""), progress)
            time.sleep(TICK_SECONDS)

    def _finish(self, record: ReleaseRecord, rec: StepRecord, outcome: StepOutcome, elapsed: float) -> ExitCode:
        rec.state = outcome.state
        rec.exit_code = outcome.exit_code
        rec.message = outcome.message
        rec.ended = time.time()
        self.display.step_finished(rec.name, outcome, elapsed)
        if outcome.state.ok:
            record.save()
            return ExitCode.OK
        record.state = outcome.state
        record.driver_pid = None
        record.save()
        self.display.say(f"release {self.context.address}: {outcome.state} at step {rec.name}")
        up = [s.name for s in record.steps.values() if s.state is StepState.SERVING]
        if up:
            self.display.say(f"servers still up: {', '.join(up)}; stop them with 'mlrecipe uninstall "
                             f"{self.spec.release}'")
        return ExitCode.INTERRUPTED if outcome.state is StepState.INTERRUPTED else ExitCode.FAILED
