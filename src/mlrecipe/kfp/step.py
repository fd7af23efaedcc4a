"""What a KFP task does (inside its container): ``mlrecipe install`` of one step; the task fails when it fails.

The compiled pipeline holds the step's values without credential values; they come back here from the task's
environment (the pipeline's Secret, mounted as env by kfp-kubernetes), and only into a private temporary file.
A task with typed inputs gives them to ``mlrecipe install`` as ``MLRECIPE_<STEP>_<NAME>`` (an endpoint's URL as
``MLRECIPE_<STEP>_URL``, and an endpoint's ``sagemaker.model_from`` as its ``model_data``); a task with typed outputs
reads them from the release's record (``mlrecipe status -o json``: the step's outputs, a serving step's URL) after the
install.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mlrecipe.backends.kubernetes import ENV_PATHS
from mlrecipe.errors import BackendError, UserError
from mlrecipe.spec.names import step_output_var


def with_credentials(values: dict[str, Any], names: Sequence[str], environ: Mapping[str, str]) -> dict[str, Any]:
    """``values`` whose env entries named in ``names`` (and left without a value) take their value from
    ``environ``. Raises :class:`UserError` naming the variables ``environ`` lacks."""
    missing = sorted(n for n in names if not environ.get(n))
    if missing:
        raise UserError(f"credentials not in this task's environment: {', '.join(missing)} (on a cluster they come "
                        "from the pipeline's Secret, <release>-credentials; with kfp.local, export them)")
    out = copy.deepcopy(values)
    for path in ENV_PATHS:
        node: Any = out
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        for entry in node if isinstance(node, list) else []:
            if isinstance(entry, dict) and entry.get("name") in names and not entry.get("value"):
                entry["value"] = environ[entry["name"]]
    return out


def install_argv(release: str, namespace: str, chart: str, values_file: str, backend: str,
                 backend_opts: str) -> list[str]:
    """The ``mlrecipe install`` command line of one step, run by this interpreter."""
    argv = [sys.executable, "-m", "mlrecipe", "install", release, chart, "-f", values_file,
            "--namespace", namespace, "--backend", backend]
    return [*argv, "--backend-opt", backend_opts] if backend_opts else argv


def inputs_env(source: str, outputs: Mapping[str, str]) -> dict[str, str]:
    """The variables that carry ``source``'s typed outputs into a step: ``MLRECIPE_<SOURCE>_<NAME>``."""
    return {step_output_var(source, name): value for name, value in outputs.items() if value}


def with_model_data(values: dict[str, Any], source: str, model_artifacts: str) -> dict[str, Any]:
    """``values`` whose ``sagemaker.model_from: <source>`` is given as ``sagemaker.model_data`` (the archive's URI,
    from the task's typed input), unless the recipe gives ``model_data`` itself."""
    block = values.get("sagemaker")
    if not isinstance(block, dict) or block.get("model_from") != source or block.get("model_data"):
        return values
    if not model_artifacts:
        return values
    return {**values, "sagemaker": {**block, "model_data": model_artifacts}}


def recorded_outputs(release: str, namespace: str, backend: str, step: str) -> dict[str, str]:
    """The typed outputs ``step`` recorded in its release (``mlrecipe status -o json``), a serving step's ``url``
    among them; empty when none."""
    argv = [sys.executable, "-m", "mlrecipe", "status", release, "--namespace", namespace, "--backend", backend,
            "-o", "json"]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BackendError(f"step {step}: mlrecipe status exited with code {result.returncode}: "
                           f"{result.stderr.strip()[-500:]}")
    for release_doc in json.loads(result.stdout):  # one entry per release of that name
        for entry in release_doc.get("steps", []):
            if entry.get("name") == step:
                url = {"url": entry["url"]} if entry.get("url") else {}
                return {**{str(k): str(v) for k, v in (entry.get("outputs") or {}).items()}, **url}
    return {}


def run_typed_step(release: str, namespace: str, chart: str, values_json: str, secret_env: Sequence[str],
                   backend: str, backend_opts: str, inputs_from: Mapping[str, str], received: Mapping[str, str],
                   outputs: Sequence[str]) -> dict[str, str]:
    """Run one step whose task has typed inputs (``inputs_from``: input name -> the task that gave it; the values in
    ``received``) or outputs; return the values of ``outputs`` that the step recorded."""
    env: dict[str, str] = {}
    values = json.loads(values_json)
    for name, source in inputs_from.items():
        env.update(inputs_env(source, {name: received.get(name, "")}))
        if name == "model_artifacts":
            values = with_model_data(values, source, received.get(name, ""))
    run_step(release, namespace, chart, json.dumps(values), secret_env, backend, backend_opts, env)
    if not outputs:
        return {}
    recorded = recorded_outputs(release, namespace, backend, values.get("step_name", chart))
    missing = [name for name in outputs if not recorded.get(name)]
    if missing:
        raise BackendError(f"step {values.get('step_name', chart)} succeeded but recorded no {', '.join(missing)}")
    return {name: recorded[name] for name in outputs}


def run_step(release: str, namespace: str, chart: str, values_json: str, secret_env: Sequence[str],
             backend: str, backend_opts: str = "", env: Mapping[str, str] | None = None) -> None:
    """Run one step with ``mlrecipe install`` (its environment: this task's and ``env``); raise
    :class:`BackendError` (the task fails) when it fails."""
    values = json.loads(values_json)
    full = with_credentials(values, secret_env, os.environ)
    with tempfile.TemporaryDirectory(prefix="mlrecipe-kfp-") as tmp:
        values_file = Path(tmp) / "values.json"
        values_file.touch(mode=0o600)
        values_file.write_text(json.dumps(full, indent=1), encoding="utf-8")
        argv = install_argv(release, namespace, chart, str(values_file), backend, backend_opts)
        print("+ " + " ".join(argv), flush=True)
        if env:
            print("+ with " + " ".join(f"{k}={v}" for k, v in sorted(env.items())), flush=True)
        code = subprocess.run(argv, env={**os.environ, **(env or {})}, check=False).returncode
    if code != 0:
        step = values.get("step_name", chart)
        raise BackendError(f"step {step} failed: mlrecipe install exited with code {code}")
