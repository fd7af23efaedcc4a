"""``mlrecipe doctor``: check that a backend has what a recipe needs, and say how to fix what is missing."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def doctor(
    backend: Annotated[
        str, typer.Option("--backend", "-b", help="local (default), slurm, kubernetes or sagemaker")
    ] = "local",
    recipe: Annotated[
        Path | None,
        typer.Option("--file", "-f", help="Recipe or pipeline: check for its framework, resources and claims"),
    ] = None,
    context: Annotated[str | None, typer.Option("--context", help="kubeconfig context (kubernetes)")] = None,
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Namespace of ML workloads (kubernetes)")
    ] = "kubeflow-user-example-com",
    output: Annotated[str, typer.Option("--output", "-o", help="text or json")] = "text",
    backend_opts: Annotated[
        list[str] | None,
        typer.Option("--backend-opt", "-B", help="sagemaker: option key=value over the config file's "
                     "(-B role_arn=... -B s3_prefix=s3://..., -B mode=local); see 'mlrecipe options sagemaker'"),
    ] = None,
) -> None:
    """Preflight a backend: exit 0 when every blocking check passes, 1 when one fails, 2 for bad input.

    local: Python packages of the recipe's framework, GPUs, the volume root. slurm: controller,
    partitions, GPUs per node. kubernetes: context, operator CRDs, device plugins, allocatable
    accelerators, storage classes, pv-* claims bound. sagemaker: boto3, credentials, the execution role and
    its trust, the bucket of s3_prefix (options from its config file section, then -B; mode local needs none).
    """
    from mlrecipe.infra.doctor.runner import run_doctor

    raise typer.Exit(run_doctor(backend, recipe, context=context, namespace=namespace, output=output,
                                backend_opts=backend_opts))


def register(app: typer.Typer) -> None:
    """Add the ``doctor`` command to the ``mlrecipe`` app."""
    app.command("doctor")(doctor)
