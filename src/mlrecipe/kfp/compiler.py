"""Write a :class:`~mlrecipe.kfp.tasks.PipelinePlan` as a KFP v2 pipeline with the kfp SDK's compiler.

One task per step, named after it, ``after`` the tasks of its dependencies, with the recipe's retries, its
``pvc`` claims mounted and its credentials taken from the pipeline's Secret (both through kfp-kubernetes). The
pipeline's parameters are ``backend`` (default ``kubernetes``) and ``backend_opts`` (``-B`` of ``mlrecipe
install``, Helm ``--set`` syntax); no credential is a parameter. No ``from __future__ import annotations`` here:
kfp reads the pipeline's parameter types from the signature."""

from pathlib import Path
from typing import Any

from mlrecipe import __version__
from mlrecipe.kfp.component import make_component
from mlrecipe.kfp.tasks import PipelinePlan

#: The image of every task: mlrecipe[kfp,kubernetes] installed (the package carries the charts).
DEFAULT_IMAGE = f"mlrecipe:{__version__}"
DEFAULT_BACKEND = "kubernetes"


def build_pipeline(plan: PipelinePlan, image: str = DEFAULT_IMAGE) -> Any:
    """The ``@dsl.pipeline`` of ``plan`` (a kfp GraphComponent)."""
    from kfp import dsl, kubernetes

    def pipeline(backend: str = DEFAULT_BACKEND, backend_opts: str = ""):
        tasks: dict[str, Any] = {}
        for step in plan.tasks:
            component = make_component(image, step.name)
            task = component(release=plan.release, namespace=plan.namespace, chart=step.chart, values=step.values_json,
                             secret_env=list(step.secret_env), backend=backend, backend_opts=backend_opts)
            if step.depends_on:
                task.after(*(tasks[name] for name in step.depends_on))
            if step.retries:
                task.set_retry(num_retries=step.retries)
            if step.secret_env:
                kubernetes.use_secret_as_env(task, secret_name=plan.secret_name,
                                             secret_key_to_env={name: name for name in step.secret_env})
            for volume in step.volumes:
                kubernetes.mount_pvc(task, pvc_name=volume.claim, mount_path=volume.mount_path)
            tasks[step.name] = task

    return dsl.pipeline(name=plan.release, description=plan.description)(pipeline)


def compile_pipeline(plan: PipelinePlan, output: Path, image: str = DEFAULT_IMAGE) -> None:
    """Write ``plan`` to ``output`` as KFP v2 pipeline YAML (the pipeline spec, then the Kubernetes platform spec)."""
    from kfp import compiler

    compiler.Compiler().compile(build_pipeline(plan, image), str(output))
