"""Write a :class:`~mlrecipe.kfp.tasks.PipelinePlan` as a KFP v2 pipeline with the kfp SDK's compiler.

One task per step, named after it, ``after`` the tasks of its dependencies, with the recipe's retries, its
``pvc`` claims mounted and its credentials taken from the pipeline's Secret (both through kfp-kubernetes). The
pipeline's parameters are ``backend`` (default ``kubernetes``) and ``backend_opts`` (``-B`` of ``mlrecipe
install``, Helm ``--set`` syntax), and ``sagemaker_opts`` (``-B`` of the SageMaker steps' ``mlrecipe install -b
sagemaker``: ``mode=local``, ``region=...``); no credential is a parameter. A SageMaker step's task gets its AWS
credentials from the run's service account (IRSA), never from the file. No ``from __future__ import annotations`` here:
kfp reads the pipeline's parameter types from the signature."""

from pathlib import Path
from typing import Any

from mlrecipe import __version__
from mlrecipe.kfp.component import make_component
from mlrecipe.kfp.tasks import TYPED_OUTPUTS, PipelinePlan

#: The image of every task: mlrecipe[kfp,kubernetes] installed (the package carries the charts).
DEFAULT_IMAGE = f"mlrecipe:{__version__}"
DEFAULT_BACKEND = "kubernetes"


def build_pipeline(plan: PipelinePlan, image: str = DEFAULT_IMAGE, sagemaker_default: str = "") -> Any:
    """The ``@dsl.pipeline`` of ``plan`` (a kfp GraphComponent); ``sagemaker_default``: the default of its
    ``sagemaker_opts`` parameter."""
    from kfp import dsl, kubernetes

    def tasks_of(backend: Any, backend_opts: Any, sagemaker_opts: Any) -> None:
        tasks: dict[str, Any] = {}
        for step in plan.tasks:
            component = make_component(image, step.name, typed=step.typed)
            own = {"backend": step.backend, "backend_opts": sagemaker_opts} if step.backend else {}
            args = {"release": plan.release, "namespace": plan.namespace, "chart": step.chart,
                    "values": step.values_json, "secret_env": list(step.secret_env), "backend": backend,
                    "backend_opts": backend_opts, **own}
            if step.typed:
                sources = dict(step.inputs)
                args.update(inputs_from=sources, outputs=list(step.outputs),
                            **{name: tasks[sources[name]].outputs[name] if name in sources else ""
                               for name in TYPED_OUTPUTS})
            task = component(**args)
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

    def pipeline(backend: str = DEFAULT_BACKEND, backend_opts: str = ""):
        tasks_of(backend, backend_opts, None)

    def hybrid_pipeline(backend: str = DEFAULT_BACKEND, backend_opts: str = "",
                        sagemaker_opts: str = sagemaker_default):
        tasks_of(backend, backend_opts, sagemaker_opts)

    hybrid = any(step.backend for step in plan.tasks)  # only then the pipeline has the sagemaker_opts parameter
    return dsl.pipeline(name=plan.release, description=plan.description)(hybrid_pipeline if hybrid else pipeline)


def compile_pipeline(plan: PipelinePlan, output: Path, image: str = DEFAULT_IMAGE, sagemaker_default: str = "") -> None:
    """Write ``plan`` to ``output`` as KFP v2 pipeline YAML (the pipeline spec, then the Kubernetes platform spec)."""
    from kfp import compiler

    compiler.Compiler().compile(build_pipeline(plan, image, sagemaker_default), str(output))
