"""The lightweight Python component every task of a compiled pipeline runs.

KFP copies :func:`mlrecipe_step`'s source into the pipeline; it runs in an image that has ``mlrecipe[kfp]``
(and the charts, which the package carries), so its body only calls :func:`mlrecipe.kfp.step.run_step`. The
step's values are JSON text: a KFP struct would turn every integer into a float. No ``from __future__ import
annotations`` here: kfp reads the parameter types from the signature.
"""

from typing import Any, NamedTuple


def mlrecipe_step(
    release: str,
    namespace: str,
    chart: str,
    values: str,
    secret_env: list,
    backend: str,
    backend_opts: str,
):
    """Run one step of an mlrecipe pipeline with ``mlrecipe install``; the task fails when the step fails."""
    from mlrecipe.kfp.step import run_step

    run_step(release, namespace, chart, values, secret_env, backend, backend_opts)


def mlrecipe_typed_step(
    release: str,
    namespace: str,
    chart: str,
    values: str,
    secret_env: list,
    backend: str,
    backend_opts: str,
    inputs_from: dict,
    model_artifacts: str,
    job_name: str,
    endpoint_name: str,
    url: str,
    outputs: list,
) -> NamedTuple("Outputs", [("model_artifacts", str), ("job_name", str), ("endpoint_name", str), ("url", str)]):
    """Run one step of an mlrecipe pipeline whose task has typed inputs (``inputs_from``: input name -> the task
    that gave it) or outputs (those of ``outputs`` its step recorded; ``""`` for the others)."""
    from collections import namedtuple

    from mlrecipe.kfp.step import run_typed_step

    received = {"model_artifacts": model_artifacts, "job_name": job_name, "endpoint_name": endpoint_name, "url": url}
    got = run_typed_step(release, namespace, chart, values, secret_env, backend, backend_opts, inputs_from, received,
                         outputs)
    names = ["model_artifacts", "job_name", "endpoint_name", "url"]
    return namedtuple("Outputs", names)(*(got.get(name, "") for name in names))


def make_component(image: str, name: str, typed: bool = False) -> Any:
    """The component of :func:`mlrecipe_step` for ``image``, named ``name``: KFP names a task after its component,
    so each step's task (and its component and executor) carries the step's name."""
    import dataclasses

    from kfp import dsl
    from kfp.dsl.python_component import PythonComponent

    func = mlrecipe_typed_step if typed else mlrecipe_step
    base = dsl.component(func, base_image=image, install_kfp_package=False)
    return PythonComponent(dataclasses.replace(base.component_spec, name=name), func)
