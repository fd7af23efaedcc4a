"""Which backend runs each step of a release: the release's own, or the one a pipeline step names (hybrid
pipelines: data preparation locally, training on Slurm, Kubernetes or SageMaker, in one release).

The release's backend takes the command line's plain options (``-B key=value``); another backend takes those
spelled with its name first (``-B sagemaker.mode=local``: :func:`split_options`), over its config file section.
One instance per backend name serves every step on it, so what a backend tracks across its steps (the local
backend's CPUs) covers them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from mlrecipe.backends.base import Backend
from mlrecipe.backends.options import CLI_SOURCE
from mlrecipe.backends.registry import BACKENDS, backend_class, get_backend
from mlrecipe.errors import SpecError, SpecIssue
from mlrecipe.spec.load import ReleaseSpec, StepSpec

AnyBackend = Backend[Any, Any, Any]


def split_options(release_backend: str, options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The command line's backend options (``parse_backend_opts``) as the release backend's own and, by name,
    those of other backends: a top-level key naming a registered backend (and no option of the release's) holds
    that backend's options; naming the release's own backend, they join its plain keys.

    ``release_backend`` must be registered (:func:`backend_class` raises ``UnknownBackendError`` otherwise).
    """
    own_fields = backend_class(release_backend).options_type.model_fields
    own: dict[str, Any] = {}
    others: dict[str, dict[str, Any]] = {}
    for key, value in options.items():
        if key in BACKENDS and key not in own_fields and isinstance(value, dict):
            if key == release_backend:
                own.update(value)
            else:
                others[key] = value
        else:
            own[key] = value
    return own, others


def hint_other_backends(exc: SpecError, release_backend: str) -> SpecError:
    """``exc`` with the way to another backend added to each unknown command-line option that backend has
    (``-B mode=local`` on a local release: ``-B sagemaker.mode=...`` for a step's SageMaker backend)."""
    issues = []
    for issue in exc.issues:
        key = issue.path.split(".", 1)[0]
        owners = [n for n in sorted(BACKENDS) if n != release_backend and issue.file == CLI_SOURCE
                  and issue.message.startswith("unknown option") and key in backend_class(n).options_type.model_fields]
        if owners:
            spelled = " or ".join(f"-B {n}.{issue.path}=..." for n in owners)
            issue = replace(issue, message=f"{issue.message}; an option of a step's backend is spelled {spelled}")
        issues.append(issue)
    return SpecError(issues)


@dataclass
class StepBackends:
    """The backends of one release, by name; the release's own is ``default``."""

    default: AnyBackend
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_name: dict[str, AnyBackend] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Every backend the command line gave options is made at once: a bad option is an error before any
        step starts, even for a backend no step names."""
        self.by_name.setdefault(self.default.name, self.default)
        for name in self.options:
            self.named(name)

    @classmethod
    def for_release(cls, spec: ReleaseSpec, default: AnyBackend,
                    options: dict[str, dict[str, Any]] | None = None) -> StepBackends:
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
        backends = cls(default, dict(options or {}))
        for step in spec.steps:
            backends.named(step.backend)
        return backends

    def named(self, name: str | None) -> AnyBackend:
        """The backend called ``name`` (``None``: the release's), made once with its config file options and the
        command line's ``<name>.key=value`` ones; a bad one of those is named with its ``<name>.`` prefix."""
        if name is None:
            return self.default
        if name not in self.by_name:
            try:
                self.by_name[name] = get_backend(name, self.options.get(name))
            except SpecError as exc:
                raise SpecError([replace(i, path=f"{name}.{i.path}") if i.file == CLI_SOURCE and i.path else i
                                 for i in exc.issues]) from None
        return self.by_name[name]

    def of(self, step: StepSpec) -> AnyBackend:
        """The backend that runs ``step``."""
        return self.named(step.backend)

    def hybrid(self, spec: ReleaseSpec) -> bool:
        """Whether some step of ``spec`` runs on another backend than the release's."""
        return any(self.of(s) is not self.default for s in spec.steps)
