"""Every error mlrecipe raises on purpose, and the exit codes of the CLI.

Two branches under one root: a :class:`UserError` is the user's to fix (bad input, an unknown name, an
option out of range; exit code 2, nothing started), a :class:`BackendError` is what a backend or the
machine refused or failed at (sbatch, the Kubernetes API, Helm; a failed step, exit code 1). A
:class:`TransientBackendError` may succeed when asked again: runners retry it while they poll.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes of every ``mlrecipe`` command."""

    OK = 0  #: done, or nothing to do
    FAILED = 1  #: a step or a backend action failed
    USAGE = 2  #: bad input; nothing was started or written
    INTERRUPTED = 130  #: stopped by the user (Ctrl-C, SIGTERM)


class MlrecipeError(Exception):
    """Root of every error mlrecipe raises on purpose."""

    exit_code: ExitCode = ExitCode.FAILED


class UserError(MlrecipeError):
    """Bad input: the user fixes it; nothing was started (exit 2)."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class SpecIssue:
    """One problem found in an input file: file, line, field path and what is wrong."""

    file: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        field = f"{self.path}: " if self.path else ""
        return f"{where}: {field}{self.message}"


class SpecError(UserError):
    """All the issues of the inputs at once; the CLI prints one line each and exits 2."""

    def __init__(self, issues: list[SpecIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))

    @classmethod
    def single(cls, file: str, message: str, line: int | None = None, path: str = "") -> SpecError:
        return cls([SpecIssue(file, line, path, message)])


class UnknownChartError(UserError):
    """A chart name that is not in the catalog."""


class UnknownBackendError(UserError):
    """A backend name that is not in the registry."""


class ResourceError(UserError):
    """A resource quantity a backend cannot express (e.g. ``cpu: lots``)."""


@dataclass(frozen=True)
class SchemaError:
    """One values-schema violation of a chart: a dotted field path ("" for the top level) and a message."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '<values>'}: {self.message}"


class ChartRenderError(UserError):
    """A chart failed to load, validate its values or render; ``errors`` lists schema violations."""

    def __init__(self, chart: str, message: str, errors: list[SchemaError] | None = None) -> None:
        self.chart = chart
        self.errors = list(errors or [])
        self.detail = message
        lines = [f"{chart}: {message}"] if not self.errors else [f"{chart}: invalid values"]
        lines += [f"  {e}" for e in self.errors]
        super().__init__("\n".join(lines))


class SecretConflictError(UserError):
    """One variable name carries two different credential values in one step (a Secret holds one per name)."""


class TemplateError(UserError):
    """A Helm expression in a recipe's env failed to evaluate."""

    index: int | None = None  #: position of the failing string among those evaluated together


class RecipeInputError(UserError):
    """``mlrecipe doctor`` was given a recipe file that is missing or unreadable."""


class EksctlConfigError(UserError):
    """``mlrecipe cluster eksctl`` options cannot make a valid cluster config (the message says why)."""


class BackendError(MlrecipeError):
    """A backend refused or failed an action (submission, cancel, a cluster call); the step fails."""


class TransientBackendError(BackendError):
    """A backend call that may succeed when asked again (a busy controller, an unreachable API server)."""


class SlurmError(BackendError):
    """A Slurm client tool failed; the message holds its output."""


class ClusterError(BackendError):
    """The Kubernetes cluster refused an action (``status``: the API's HTTP status, when it answered)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ReleaseBusyError(UserError):
    """Another CLI process is driving this release (it holds the release's lock; exit 2, nothing started)."""


class CorruptStateError(UserError):
    """A release's state record cannot be read (truncated, not JSON, not a record); the message says how to recover."""


class LinkedPathError(UserError):
    """A path under ``$MLRECIPE_HOME`` that mlrecipe would write or delete is a symbolic link: refused, not followed."""


class DiskFullError(MlrecipeError):
    """The disk holding a release's state is full (ENOSPC, EDQUOT); the message says whether the failure was
    recorded and what to do."""
