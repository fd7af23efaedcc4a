"""Run the doctor for one backend: build its checks, run them, print, return the exit code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from mlrecipe.errors import ExitCode
from mlrecipe.infra.doctor.base import Check, exit_code, run_checks
from mlrecipe.infra.doctor.report import to_json, write_plain, write_table
from mlrecipe.infra.doctor.requirements import RecipeInputError, Requirements, load_requirements

BACKENDS = ("local", "slurm", "kubernetes", "sagemaker")
OUTPUTS = ("text", "json")


def build_checks(backend: str, req: Requirements, context: str | None, namespace: str) -> list[Check]:
    """The checks of ``backend`` (one module per backend, imported on demand)."""
    if backend == "local":
        from mlrecipe.infra.doctor import local

        return local.checks(req)
    if backend == "slurm":
        from mlrecipe.infra.doctor import slurm

        return slurm.checks(req)
    if backend == "sagemaker":
        from mlrecipe.backends.options import load_options
        from mlrecipe.infra.doctor import sagemaker

        return sagemaker.checks(load_options(sagemaker.SageMakerOptions, "sagemaker"))
    from mlrecipe.infra.doctor import kubernetes

    return kubernetes.checks(req, context=context, namespace=namespace)


def run_doctor(
    backend: str,
    recipe: Path | None = None,
    context: str | None = None,
    namespace: str = "kubeflow-user-example-com",
    output: str = "text",
    stream: TextIO | None = None,
    err: TextIO | None = None,
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
    except RecipeInputError as exc:
        err.write(f"error: {exc}\n")
        return ExitCode.USAGE
    outcomes = run_checks(build_checks(backend, req, context, namespace))
    if output == "json":
        stream.write(to_json(backend, outcomes) + "\n")
    elif stream.isatty():
        write_table(backend, outcomes, stream)
    else:
        write_plain(backend, outcomes, stream)
    return exit_code(outcomes)
