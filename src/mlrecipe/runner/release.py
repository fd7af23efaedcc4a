"""Run a release: steps in order, skipping unchanged successes, persisting state at every change."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from mlrecipe.backends.base import SERVING, Backend, ReleaseContext, RunningStep, StepOutcome
from mlrecipe.config import release_dir
from mlrecipe.logtail import tail
from mlrecipe.runner.progress import Display
from mlrecipe.runner.state import ReleaseRecord, StepRecord, load_record
from mlrecipe.spec.load import ReleaseSpec, StepSpec, load_pipeline, load_step_release

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
TICK_SECONDS = 0.25


def url_var(step: str) -> str:
    """The variable that carries a serving step's URL to later steps: ``MLRECIPE_<STEP>_URL``."""
    return "MLRECIPE_" + step.upper().replace("-", "_") + "_URL"


class ReleaseBusyError(RuntimeError):
    """Another CLI process is driving this release."""


def spec_from_inputs(inputs: dict[str, Any]) -> ReleaseSpec:
    """Rebuild a release spec from the inputs recorded in its state (for ``resume``)."""
    if inputs["kind"] == "pipeline":
        return load_pipeline(inputs["path"], inputs.get("sets") or [])
    return load_step_release(
        inputs["release"], inputs["chart"], inputs["files"], inputs.get("sets") or [], inputs["namespace"]
    )


@contextmanager
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
    backend: Backend
    inputs: dict[str, Any]
    display: Display
    options: dict[str, Any] = field(default_factory=dict)
    force: bool = False
    _said: set[str] = field(default_factory=set)

    @property
    def context(self) -> ReleaseContext:
        return ReleaseContext(
            self.spec.release,
            self.spec.namespace,
            self.backend.name,
            release_dir(self.backend.name, self.spec.namespace, self.spec.release),
            self.options,
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
            server = getattr(plan, "server", None)
            if server is not None:  # later steps see the URL the server will have
                env[url_var(step.name)] = server.url
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
        me = _self_process()
        record.driver_pid, record.driver_created = me
        record.state = "running"
        return record

    def run(self) -> int:
        """Run every step; return the exit code (0, 1 failed, 130 interrupted)."""
        record = self._record()
        record.save()
        env = self._base_env()
        with _sigterm_as_interrupt(), self.display:
            for step in self.spec.steps:
                prev = record.steps.get(step.name)
                if (not self.force and prev is not None and prev.state == "succeeded"
                        and prev.hash == step.content_hash):
                    self.display.step_skipped(step.name, "unchanged since its last success; --force re-runs it")
                    continue
                if prev is not None and prev.state == SERVING and prev.handle:
                    if (not self.force and prev.hash == step.content_hash and prev.url
                            and self.backend.handle_alive(prev.handle)):
                        env[url_var(step.name)] = prev.url
                        self.display.step_skipped(step.name, f"still serving at {prev.url}; --force restarts it")
                        continue
                    self.backend.cancel_handle(prev.handle)  # changed, forced or dead: stop what is left of it
                code = self._run_step(step, record, env)
                if code != EXIT_OK:
                    return code
            servers = [s for s in record.steps.values() if s.state == SERVING and s.name in record.order]
            record.state = SERVING if servers else "succeeded"
            record.driver_pid = None
            record.save()
        if servers:
            where = ", ".join(f"{s.name} at {s.url}" for s in servers)
            self.display.say(f"release {self.context.address}: serving ({where}); "
                             f"stop with 'mlrecipe uninstall {self.spec.release}'")
        else:
            self.display.say(f"release {self.context.address}: succeeded")
        return EXIT_OK

    def _run_step(self, step: StepSpec, record: ReleaseRecord, env: dict[str, str]) -> int:
        ctx = self.context
        rec = StepRecord(step.name, step.chart.name, "running", step.content_hash, time.time())
        record.steps[step.name] = rec
        plan = self.backend.plan(step, ctx, env)
        problems = getattr(self.backend, "preflight", lambda _p: [])(plan)
        if problems:
            return self._finish(record, rec, StepOutcome("failed", None, "; ".join(problems)), 0.0)
        for note in getattr(plan, "notes", []):
            if note not in self._said:
                self._said.add(note)
                self.display.say(f"note: {note}")
        started = time.monotonic()
        self.display.step_started(step.name, step.chart.name, len(getattr(plan, "nodes", [None])))
        running: RunningStep | None = None
        try:
            running = self.backend.submit(plan, ctx)
            rec.handle = running.handle
            record.save()
            outcome = self._watch(step, running, started)
        except KeyboardInterrupt:
            if running is not None:
                running.cancel()
            outcome = StepOutcome("interrupted", None, "stopped by the user")
        if outcome.state == SERVING:
            rec.url = outcome.message
            env[url_var(step.name)] = rec.url
            outcome = StepOutcome(SERVING, None, f"ready at {rec.url}; {url_var(step.name)} is set for later steps")
        return self._finish(record, rec, outcome, time.monotonic() - started)

    def _watch(self, step: StepSpec, running: RunningStep, started: float) -> StepOutcome:
        log = self.backend.log_path(self.context, step.name, 0)
        while (outcome := running.settled()) is None:
            note = running.progress_note()
            lines = tail(log, 1)
            self.display.tick(step.name, time.monotonic() - started, note or (lines[-1] if lines else ""))
            time.sleep(TICK_SECONDS)
        return outcome

    def _finish(self, record: ReleaseRecord, rec: StepRecord, outcome: StepOutcome, elapsed: float) -> int:
        rec.state = outcome.state
        rec.exit_code = outcome.exit_code
        rec.message = outcome.message
        rec.ended = time.time()
        self.display.step_finished(rec.name, outcome, elapsed)
        if outcome.state in ("succeeded", SERVING):
            record.save()
            return EXIT_OK
        record.state = outcome.state
        record.driver_pid = None
        record.save()
        self.display.say(f"release {self.context.address}: {outcome.state} at step {rec.name}")
        up = [s.name for s in record.steps.values() if s.state == SERVING]
        if up:
            self.display.say(f"servers still up: {', '.join(up)}; stop them with 'mlrecipe uninstall "
                             f"{self.spec.release}'")
        return EXIT_INTERRUPTED if outcome.state == "interrupted" else EXIT_FAILED


def _self_process() -> tuple[int, float | None]:
    from mlrecipe.backends.local.procs import create_time

    pid = os.getpid()
    return pid, create_time(pid)
