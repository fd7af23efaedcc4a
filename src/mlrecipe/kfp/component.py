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
    inputs_from: str,
    model_artifacts: str,
    job_name: str,
    outputs: list,
) -> NamedTuple("Outputs", [("model_artifacts", str), ("job_name", str)]):
    """Run one step of an mlrecipe pipeline whose task has typed inputs (``inputs_from``'s ``model_artifacts``
    and ``job_name``) or outputs (its recorded ``model_artifacts`` and ``job_name``)."""
    from collections import namedtuple

    from mlrecipe.kfp.step import run_typed_step

    got = dict(zip(outputs, run_typed_step(release, namespace, chart, values, secret_env, backend, backend_opts,
                                           inputs_from, model_artifacts, job_name, outputs), strict=True))
    return namedtuple("Outputs", ["model_artifacts", "job_name"])(got.get("model_artifacts", ""),
                                                                   got.get("job_name", ""))


def make_component(image: str, name: str, typed: bool = False) -> Any:
    """The component of :func:`mlrecipe_step` for ``image``, named ``name``: KFP names a task after its component,
    so each step's task (and its component and executor) carries the step's name."""
    import dataclasses

    from kfp import dsl
    from kfp.dsl.python_component import PythonComponent

    func = mlrecipe_typed_step if typed else mlrecipe_step
    base = dsl.component(func, base_image=image, install_kfp_package=False)
    return PythonComponent(dataclasses.replace(base.component_spec, name=name), func)
