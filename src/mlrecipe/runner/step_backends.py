"""Which backend runs each step of a release: the release's own, or the one a pipeline step names (hybrid
pipelines: data preparation locally, training on Slurm or Kubernetes, in one release).

The release's backend carries the command line's options (``--backend-opt``); a backend only some steps
name takes its options from the config file's section. One instance per backend name serves every step on
it, so what a backend tracks across its steps (the local backend's CPUs) covers them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlrecipe.backends.base import Backend
from mlrecipe.backends.registry import BACKENDS, get_backend
from mlrecipe.errors import SpecError, SpecIssue
from mlrecipe.spec.load import ReleaseSpec, StepSpec

AnyBackend = Backend[Any, Any, Any]


@dataclass
class StepBackends:
    """The backends of one release, by name; the release's own is ``default``."""

    default: AnyBackend
    by_name: dict[str, AnyBackend] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_name.setdefault(self.default.name, self.default)

    @classmethod
    def for_release(cls, spec: ReleaseSpec, default: AnyBackend) -> StepBackends:
        """The backends of ``spec``'s steps; a step naming an unknown backend is a :class:`SpecError` at the
        pipeline's line (every such step at once), before anything starts."""
        unknown = [s for s in spec.steps if s.backend is not None and s.backend not in BACKENDS]
        issues: list[SpecIssue] = []
        for step in unknown:
            file, line, path = step.backend_at or (spec.source or "<input>", None, f"{step.name}.backend")
            known = ", ".join(sorted(BACKENDS))
            issue = SpecIssue(file, line, path, f"unknown backend '{step.backend}'; known: {known}")
            if issue not in issues:  # a matrix step's expansions share the line
                issues.append(issue)
        if issues:
            raise SpecError(issues)
        backends = cls(default)
        for step in spec.steps:
            backends.named(step.backend)
        return backends

    def named(self, name: str | None) -> AnyBackend:
        """The backend called ``name`` (``None``: the release's), made once with its config file options."""
        if name is None:
            return self.default
        if name not in self.by_name:
            self.by_name[name] = get_backend(name)
        return self.by_name[name]

    def of(self, step: StepSpec) -> AnyBackend:
        """The backend that runs ``step``."""
        return self.named(step.backend)

    def hybrid(self, spec: ReleaseSpec) -> bool:
        """Whether some step of ``spec`` runs on another backend than the release's."""
        return any(self.of(s) is not self.default for s in spec.steps)
