"""Check, CheckResult and the logic that runs a list of checks."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mlrecipe.errors import ExitCode


@dataclass(frozen=True)
class CheckResult:
    """What one check found: ``ok``, a one-line ``detail``, and how to fix it when not ok."""

    ok: bool
    detail: str
    fix_hint: str = ""
    skipped: bool = False

    @classmethod
    def passed(cls, detail: str) -> CheckResult:
        return cls(True, detail)

    @classmethod
    def failed(cls, detail: str, fix_hint: str) -> CheckResult:
        return cls(False, detail, fix_hint)

    @classmethod
    def skip(cls, detail: str) -> CheckResult:
        return cls(False, detail, skipped=True)


@dataclass(frozen=True)
class Check:
    """One preflight check. A failed ``blocking`` check makes ``doctor`` exit 1."""

    name: str
    blocking: bool
    probe: Callable[[], CheckResult]

    def run(self) -> CheckResult:
        """Run the probe; an unexpected exception becomes a failed result, never a crash."""
        try:
            return self.probe()
        except Exception as exc:  # a broken environment must still produce a report
            return CheckResult.failed(f"check raised {type(exc).__name__}: {exc}", "re-run with a clean environment")


@dataclass(frozen=True)
class Outcome:
    """A check together with its result."""

    check: Check
    result: CheckResult

    @property
    def status(self) -> str:
        """ok, FAIL (blocking failure), warn (non-blocking failure) or skip."""
        if self.result.skipped:
            return "skip"
        if self.result.ok:
            return "ok"
        return "FAIL" if self.check.blocking else "warn"

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.check.name,
            "blocking": self.check.blocking,
            "status": self.status,
            "ok": self.result.ok,
            "detail": self.result.detail,
            "fix_hint": self.result.fix_hint,
        }


def run_checks(checks: Iterable[Check]) -> list[Outcome]:
    """Run every check in order."""
    return [Outcome(check, check.run()) for check in checks]


def exit_code(outcomes: Iterable[Outcome]) -> int:
    """0 when every blocking check passed (skipped ones do not count), else 1."""
    return ExitCode.FAILED if any(o.status == "FAIL" for o in outcomes) else ExitCode.OK
