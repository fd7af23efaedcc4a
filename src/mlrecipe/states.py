"""The states of a step and of a release: one enum, read by the contract, the runner and the CLI.

Its own module, with nothing imported, so that the commands that only read records (``list``, ``status``,
``logs``) can name states without loading the backend contract and the recipe models behind it.
"""

from __future__ import annotations

from enum import Enum


class StepState(str, Enum):
    """The state of a step, and of a release (the same words in ``state.json`` and ``status -o json``)."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    SERVING = "serving"  #: a server step that is up and ready; it runs until uninstalled
    SKIPPED = "skipped"

    def __str__(self) -> str:
        return self.value

    @property
    def active(self) -> bool:
        """Something may still be running: pending or running."""
        return self in (StepState.PENDING, StepState.RUNNING)

    @property
    def ok(self) -> bool:
        """The step did what it should: it succeeded, or its server is ready."""
        return self in (StepState.SUCCEEDED, StepState.SERVING)
