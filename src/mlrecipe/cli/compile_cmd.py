"""``mlrecipe compile kfp``: a pipeline file as a Kubeflow Pipelines v2 pipeline, one task per step.

kfp is imported only by this command. Where the running environment lacks it (in a checkout, ``.venv``: kfp pins
an older kubernetes client), the command runs again in ``$MLRECIPE_KFP_PYTHON`` or the checkout's ``.venv-kfp``
(``make kfp-env``); without either it says how to install kfp.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path
from typing import Annotated

import typer

KFP_PYTHON_VAR = "MLRECIPE_KFP_PYTHON"  #: an interpreter with mlrecipe[kfp], used when this one lacks kfp
_AGAIN_VAR = "MLRECIPE_KFP_AGAIN"  #: set in the re-run, so that it never runs the command again itself
INSTALL_HINT = ("mlrecipe compile kfp needs the kfp SDK: pip install 'mlrecipe[kfp]' (in a checkout: make kfp-env, "
                "which the CLI then uses)")

compile_app = typer.Typer(
    name="compile",
    help="Compile a pipeline for Kubeflow Pipelines v2 (compile kfp).",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


def _kfp_python() -> str | None:
    """An interpreter that has kfp, when this one has not: ``$MLRECIPE_KFP_PYTHON``, else the checkout's
    ``.venv-kfp``; None in a re-run or when there is none."""
    if os.environ.get(_AGAIN_VAR):
        return None
    named = os.environ.get(KFP_PYTHON_VAR)
    if named:
        return named if Path(named).is_file() else None
    import mlrecipe

    checkout = Path(mlrecipe.__file__).resolve().parents[2]
    python = checkout / ".venv-kfp" / "bin" / "python"
    return str(python) if (checkout / "pyproject.toml").is_file() and python.is_file() else None


def _run_elsewhere(python: str, pipeline: Path, output: Path, image: str | None, sets: list[str],
                   sagemaker_opts: list[str]) -> int:
    argv = [python, "-m", "mlrecipe", "compile", "kfp", str(pipeline), "--output", str(output)]
    argv += ["--image", image] if image else []
    for expr in sets:
        argv += ["--set", expr]
    for expr in sagemaker_opts:
        argv += ["-B", expr]
    return subprocess.run(argv, env={**os.environ, _AGAIN_VAR: "1"}, check=False).returncode


def sagemaker_default(opts: list[str]) -> str:
    """The default of the pipeline's ``sagemaker_opts`` parameter from ``-B sagemaker.KEY=VALUE`` (or ``KEY=VALUE``)
    options, comma-joined. Raises :class:`UserError` for a credential-like key or value: a SageMaker task's AWS
    credentials come from the run's service account (IRSA), never from the compiled file."""
    from mlrecipe.credentials import is_secret_name, is_secret_value
    from mlrecipe.errors import UserError

    out = []
    for expr in opts:
        for item in (part.strip() for part in expr.split(",") if part.strip()):
            key, sep, value = item.partition("=")
            key = key.strip().removeprefix("sagemaker.")
            if not sep or not key:
                raise UserError(f"-B {item}: expected sagemaker.KEY=VALUE")
            if is_secret_name(key) or is_secret_value(value):
                raise UserError(f"-B {item}: a credential is never written into a compiled pipeline; SageMaker tasks "
                                "get AWS credentials from the run's service account (IRSA: AWS_ROLE_ARN and "
                                "AWS_WEB_IDENTITY_TOKEN_FILE)")
            out.append(f"{key}={value}")
    return ",".join(out)


def _compile(pipeline: Path, output: Path, image: str | None, sets: list[str], sagemaker_opts: list[str]) -> int:
    from mlrecipe.cli.lifecycle import skip_pydantic_plugins
    from mlrecipe.cli.output import print_error
    from mlrecipe.errors import MlrecipeError, SpecError
    from mlrecipe.kfp.compiler import DEFAULT_BACKEND, DEFAULT_IMAGE, compile_pipeline
    from mlrecipe.kfp.tasks import plan_pipeline
    from mlrecipe.spec.load import is_pipeline_file, load_pipeline

    skip_pydantic_plugins()
    try:
        if not is_pipeline_file(pipeline):
            raise SpecError.single(str(pipeline), "not a pipeline (no 'steps'): compile kfp takes a pipeline file; "
                                   "for one recipe write a pipeline with one step", 1)
        default = sagemaker_default(sagemaker_opts)
        plan = plan_pipeline(load_pipeline(pipeline, sets))
        compile_pipeline(plan, output, image or DEFAULT_IMAGE, default)
    except MlrecipeError as exc:
        return print_error(exc)
    print(f"wrote {output}: pipeline {plan.release}, {len(plan.tasks)} tasks "
          f"({', '.join(t.name for t in plan.tasks)}), image {image or DEFAULT_IMAGE}, "
          f"parameter backend (default {DEFAULT_BACKEND})")
    sagemaker = [t.name for t in plan.tasks if t.backend == "sagemaker"]
    if sagemaker:
        print(f"SageMaker steps ({', '.join(sagemaker)}) run mlrecipe install -b sagemaker with the parameter "
              f"sagemaker_opts (default '{default}'); their AWS credentials come from the run's service account "
              "(IRSA: annotate it with eks.amazonaws.com/role-arn; start the run with that service account; KFP v2 "
              "sets one per run, not per task, so every task of the run may assume that role)")
    if plan.secret_keys:
        literals = " ".join(f"--from-literal={key}=..." for key in plan.secret_keys)
        print(f"credentials are not in it: before a run, create Secret {plan.secret_name} in the run's namespace:\n"
              f"  kubectl create secret generic {plan.secret_name} {literals}")
    return 0


@compile_app.command("kfp")
def kfp(
    pipeline: Annotated[Path, typer.Argument(help="Pipeline file (release, namespace, steps)")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the KFP pipeline YAML")],
    image: Annotated[
        str | None, typer.Option("--image", help="Image of every task: mlrecipe[kfp,kubernetes] installed "
                                 "(default: mlrecipe:VERSION)")
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a value of one step: STEP.key=value (Helm syntax)")
    ] = None,
    backend_opt: Annotated[
        list[str] | None, typer.Option("--backend-opt", "-B", help="Default of the SageMaker steps' options (the "
                                       "sagemaker_opts parameter): sagemaker.KEY=VALUE; credentials are refused")
    ] = None,
) -> None:
    """Write a Kubeflow Pipelines v2 pipeline: one task per step, each running 'mlrecipe install' of its step.

    Tasks wait for the steps in depends_on (file order without it; matrix steps expanded), retry
    backoff_limit times, mount the recipe's pvc claims, and take credential-like env values (HF_TOKEN,
    ..._SECRET_...) from the Secret RELEASE-credentials, never from the file or a parameter. A failed step
    fails its task and the run. Parameters: backend (default kubernetes; local runs each step inside its
    task's pod) and backend_opts (mlrecipe install -B, Helm --set syntax).

    A step with backend: sagemaker runs mlrecipe install -b sagemaker with the parameter sagemaker_opts
    (default: the -B sagemaker.KEY=VALUE options given here); its AWS credentials come from the run's
    service account (IRSA), never from the file. A SageMaker training task outputs model_artifacts and
    job_name; the endpoint task (or any later task reading them) gets them as MLRECIPE_<STEP>_MODEL_ARTIFACTS.

    Example: mlrecipe compile kfp pipeline.yaml -o pipeline-kfp.yaml --image registry/mlrecipe:0.1.0
    """
    sets = list(set_ or [])
    sagemaker_opts = list(backend_opt or [])
    if importlib.util.find_spec("kfp") is None:
        python = _kfp_python()
        if python is None:
            from mlrecipe.cli.output import fail

            raise typer.Exit(fail(INSTALL_HINT))
        raise typer.Exit(_run_elsewhere(python, pipeline, output, image, sets, sagemaker_opts))
    raise typer.Exit(_compile(pipeline, output, image, sets, sagemaker_opts))


def register(app: typer.Typer) -> None:
    """Add the ``compile`` command group to the ``mlrecipe`` app."""
    app.add_typer(compile_app, name="compile")
