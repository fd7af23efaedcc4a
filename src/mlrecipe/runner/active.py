"""A submitted step as the runner watches it: one non-blocking look at a time, with the backend's retries."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrecipe.backends.base import RunningStep, StepOutcome
from mlrecipe.errors import BackendError, TransientBackendError
from mlrecipe.logtail import tail
from mlrecipe.metrics import Progress, read_progress
from mlrecipe.runner.state import StepRecord
from mlrecipe.spec.load import StepSpec


@dataclass
class ActiveStep:
    """A running step: its spec and record, the backend's running step, where its log and progress are."""

    step: StepSpec
    rec: StepRecord
    running: RunningStep[Any]
    started: float
    log: Path
    metrics: Path | None
    retry_seconds: float
    failing_since: float | None = None
    waiting: str = ""  #: the backend's reason for no progress at the last look (``progress_note``), or ""

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def look(self) -> tuple[StepOutcome | None, str, Progress | None]:
        """The outcome if settled, else ``None``; a note for the display; the progress it reported.

        A backend that cannot answer (``TransientBackendError``) is asked again at the next look, for
        ``retry_seconds``; after that the step fails with :class:`~mlrecipe.errors.BackendError`.
        """
        try:
            outcome = self.running.settled()
            self.failing_since, note = None, self.running.progress_note()
        except TransientBackendError as exc:
            now = time.monotonic()
            self.failing_since = self.failing_since or now
            if now - self.failing_since > self.retry_seconds:
                raise BackendError(f"{exc} (still failing after {now - self.failing_since:.0f} s)") from exc
            outcome, note = None, f"retrying: {exc}"
        self.waiting = note
        progress = read_progress(self.metrics)
        if progress is not None:
            self.rec.progress = progress.to_json()
        if not note:
            lines = tail(self.log, 1)
            note = lines[-1] if lines else ""
        return outcome, note, progress
