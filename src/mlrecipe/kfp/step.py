"""What a KFP task does (inside its container): ``mlrecipe install`` of one step; the task fails when it fails.

The compiled pipeline holds the step's values without credential values; they come back here from the task's
environment (the pipeline's Secret, mounted as env by kfp-kubernetes), and only into a private temporary file.
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


def run_step(release: str, namespace: str, chart: str, values_json: str, secret_env: Sequence[str],
             backend: str, backend_opts: str = "") -> None:
    """Run one step with ``mlrecipe install``; raise :class:`BackendError` (the task fails) when it fails."""
    values = json.loads(values_json)
    full = with_credentials(values, secret_env, os.environ)
    with tempfile.TemporaryDirectory(prefix="mlrecipe-kfp-") as tmp:
        values_file = Path(tmp) / "values.json"
        values_file.touch(mode=0o600)
        values_file.write_text(json.dumps(full, indent=1), encoding="utf-8")
        argv = install_argv(release, namespace, chart, str(values_file), backend, backend_opts)
        print("+ " + " ".join(argv), flush=True)
        code = subprocess.run(argv, check=False).returncode
    if code != 0:
        step = values.get("step_name", chart)
        raise BackendError(f"step {step} failed: mlrecipe install exited with code {code}")
