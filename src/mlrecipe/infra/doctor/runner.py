"""Run the doctor for one backend: build its checks, run them, print, return the exit code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

from mlrecipe.errors import ExitCode, SpecError, SpecIssue
from mlrecipe.infra.doctor.base import Check, exit_code, run_checks
from mlrecipe.infra.doctor.report import to_json, write_plain, write_table
from mlrecipe.infra.doctor.requirements import RecipeInputError, Requirements, load_requirements

BACKENDS = ("local", "slurm", "kubernetes", "sagemaker")
OUTPUTS = ("text", "json")


def backend_overrides(backend: str, expressions: list[str] | None) -> dict[str, Any]:
    """The ``-B key=value`` (or ``-B BACKEND.key=value``) options of the checked backend; :class:`SpecError` for
    options the checks would not read (another backend's, or any for a backend whose checks take none)."""
    if not expressions:
        return {}
    from mlrecipe.backends.options import CLI_SOURCE, parse_backend_opts
    from mlrecipe.runner.step_backends import split_options

    own, others = split_options(backend, parse_backend_opts(expressions))
    issues = [SpecIssue(CLI_SOURCE, None, name, f"options of backend {name}: doctor checks one backend, "
                        f"{backend} (--backend {name} to check that one)") for name in others]
    if own and backend not in ("sagemaker", "slurm"):
        issues.append(SpecIssue(CLI_SOURCE, None, ", ".join(own), f"the {backend} checks take no backend options "
                                "(kubernetes: --context and --namespace)"))
    if issues:
        raise SpecError(issues)
    return own


def build_checks(backend: str, req: Requirements, context: str | None, namespace: str,
                 overrides: dict[str, Any] | None = None) -> list[Check]:
    """The checks of ``backend`` (one module per backend, imported on demand); ``overrides``: the SageMaker or
    Slurm options from the command line, over the config file's."""
    if backend == "local":
        from mlrecipe.infra.doctor import local

        return local.checks(req)
    if backend == "slurm":
        from mlrecipe.backends.options import load_options
        from mlrecipe.backends.slurm import SlurmOptions
        from mlrecipe.infra.doctor import slurm

        return slurm.checks(req, load_options(SlurmOptions, "slurm", overrides))
    if backend == "sagemaker":
        from mlrecipe.backends.options import load_options
        from mlrecipe.infra.doctor import sagemaker

        return sagemaker.checks(load_options(sagemaker.SageMakerOptions, "sagemaker", overrides))
    from mlrecipe.backends.kubernetes import KubernetesOptions
    from mlrecipe.backends.options import load_options
    from mlrecipe.infra.doctor import kubernetes

    options = load_options(KubernetesOptions, "kubernetes")
    return kubernetes.checks(req, context=context, namespace=namespace, training_api=options.training_api)


def run_doctor(
    backend: str,
    recipe: Path | None = None,
    context: str | None = None,
    namespace: str = "kubeflow-user-example-com",
    output: str = "text",
    stream: TextIO | None = None,
    err: TextIO | None = None,
    backend_opts: list[str] | None = None,
) -> int:
    """Run the preflight; 0 when every blocking check passes, 1 when one fails, 2 for bad input."""
    stream = stream or sys.stdout
    err = err or sys.stderr
    if backend not in BACKENDS:
        err.write(f"error: unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}\n")
        return ExitCode.USAGE
    if output not in OUTPUTS:
        err.write(f"error: unknown output {output!r}; choose text or json\n")
        return ExitCode.USAGE
    try:
        req = load_requirements(recipe) if recipe is not None else Requirements()
        checks = build_checks(backend, req, context, namespace, backend_overrides(backend, backend_opts))
    except RecipeInputError as exc:
        err.write(f"error: {exc}\n")
        return ExitCode.USAGE
    except SpecError as exc:
        err.writelines(f"error: {issue}\n" for issue in exc.issues)
        return ExitCode.USAGE
    outcomes = run_checks(checks)
    if output == "json":
        stream.write(to_json(backend, outcomes) + "\n")
    elif stream.isatty():
        write_table(backend, outcomes, stream)
    else:
        write_plain(backend, outcomes, stream)
    return exit_code(outcomes)
