"""``testing/jupyter`` on this machine: Jupyter Lab and TensorBoard behind TLS and a password.

On a cluster the chart runs Jupyter Lab (TLS, token), TensorBoard and nginx (TLS, htpasswd) in one pod. Here the
step's command is ``python3 -m mlrecipe.notebook`` (:mod:`mlrecipe.notebook`): a self-signed certificate made at
start, Jupyter Lab on the step's port with a token, TensorBoard behind mlrecipe's TLS + basic-auth proxy checking
``nginx.htpasswd``'s hash; everything is bound to 127.0.0.1 (``global.source_cidr`` applies to the Service on
Kubernetes).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from mlrecipe.backends.host.launches import HostLaunch
from mlrecipe.notebook.htpasswd import Htpasswd, HtpasswdError
from mlrecipe.ports import free_port
from mlrecipe.spec.load import StepSpec

COMMAND = ["python3", "-m", "mlrecipe.notebook"]


def _section(step: StepSpec, key: str) -> dict[str, Any]:
    value = step.recipe.helm_global if key == "global" else getattr(step.recipe, key)
    return dict(value or {})


def paths(step: StepSpec) -> tuple[str, str]:
    """(TensorBoard's log directory, Jupyter's root directory) as the chart computes them."""
    mount = "/" + str(_section(step, "global").get("shared_fs") or "fsx")
    log_dir = str(_section(step, "global").get("log_dir") or "").strip("/")
    root = str(_section(step, "jupyter").get("root_dir") or mount)
    return (f"{mount}/{log_dir}" if log_dir else mount), root


def htpasswd_line(step: StepSpec) -> str:
    """``user:hash`` from ``nginx.user`` and ``nginx.htpasswd``."""
    nginx = _section(step, "nginx")
    return f"{nginx.get('user') or 'tensorboard'}:{nginx.get('htpasswd') or ''}\n"


def problems(step: StepSpec) -> list[str]:
    """What stops the step here: TensorBoard's password hash missing or unreadable."""
    if not _section(step, "nginx").get("htpasswd"):
        return [f"chart {step.chart.name}: nginx.htpasswd is required here: the hash of TensorBoard's password, e.g. "
                "--set nginx.htpasswd=$(openssl passwd -apr1) (nginx.htpasswd_secret is read on Kubernetes only)"]
    try:
        Htpasswd.parse(htpasswd_line(step))
    except HtpasswdError as exc:
        return [f"chart {step.chart.name}: nginx.htpasswd: {exc}"]
    return []


def launch(step: StepSpec, step_dir: Path) -> HostLaunch:
    """The files and command of a testing/jupyter step whose state lives in ``step_dir``."""
    state = step_dir / "notebook"
    log_dir, root = paths(step)
    tb_port = int(_section(step, "tensorboard").get("port") or 0) or free_port()
    launch = HostLaunch(command=list(COMMAND))
    launch.files[state / "htpasswd"] = htpasswd_line(step)
    launch.args = ["--port", "$PORT", "--tensorboard-port", str(tb_port), "--logdir", shlex.quote(log_dir),
                   "--root-dir", shlex.quote(root), "--htpasswd", shlex.quote(str(state / "htpasswd")),
                   "--state-dir", shlex.quote(str(state))]
    launch.notes.append(f"step {step.name} runs Jupyter Lab (TLS, token in {state / 'jupyter-token'}) and "
                        f"TensorBoard on {log_dir} behind a TLS + password proxy at https://127.0.0.1:{tb_port}/, "
                        "bound to 127.0.0.1 (python -m mlrecipe.notebook)")
    return launch
