"""Run a Ray Serve config on this machine, as KubeRay runs a RayService's ``serveConfigV2`` on a cluster.

    python -m mlrecipe.serve.rayserve --serve-config serve.yaml [--code-dir DIR ...] [--host H] [--port P]

Starts a Ray instance owned by this process (no dashboard), Serve's HTTP proxy on ``--host``/``--port``
(default ``$MLRECIPE_SERVER_HOST`` / ``$PORT``, else 127.0.0.1:8000), deploys the config's
applications (import paths, ``runtime_env``, deployment options: Serve's own schema) and runs until
SIGTERM or SIGINT, which shut Serve and Ray down. ``--code-dir`` directories (the chart's engine code)
come first on ``PYTHONPATH``. The reference recipes' ``openai_api:deployment`` comes from where the recipe puts
it, as on Kubernetes: ``PYTHONPATH=/etc/framework-scripts`` in an application's ``runtime_env`` with
``framework: vllm-<version>`` (the chart's ``openai_api.py``). A recipe that names no such directory, and no code
dir with an ``openai_api.py``, gets an ``openai_api`` module that imports the same file as
:mod:`mlrecipe.serve.ray_openai`. With no NVIDIA GPU, vLLM's CPU build gets a 1 GiB KV cache unless
``VLLM_CPU_KVCACHE_SPACE`` says otherwise.
Each application's module is imported first, as Serve's build step will import it, so a bad application stops
the server before its health check passes.
Exit status: 2 for a bad config (an application's module failing to import among them), 1 when an application
fails to deploy.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

OPENAI_API_SHIM = ('"""The rayserve chart\'s openai_api.py, as installed with mlrecipe."""\n'
                   'from mlrecipe.serve.ray_openai import deployment  # noqa: F401\n')
POLL_SECONDS = 1.0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mlrecipe.serve.rayserve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--serve-config", required=True, help="Serve config YAML (applications: [...])")
    p.add_argument("--code-dir", action="append", default=[], help="directory put first on PYTHONPATH")
    p.add_argument("--host", default=os.environ.get("MLRECIPE_SERVER_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(os.environ.get("PORT") or os.environ.get("MLRECIPE_SERVER_PORT")
                                                   or 8000))
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs Ray may schedule (default: all)")
    return p


def serve_config_data(value: Any) -> Any:
    """A Serve config in any of the chart's forms (``{serveConfigV2: <YAML>}``, YAML text, a map) as data."""
    if isinstance(value, dict) and "serveConfigV2" in value:
        value = value["serveConfigV2"]
    return yaml.safe_load(value) if isinstance(value, str) else value


def load_serve_config(path: str) -> dict[str, Any]:
    """The Serve config in ``path`` (any form); ``ValueError`` with the reason when bad."""
    with open(path, encoding="utf-8") as fh:
        data = serve_config_data(yaml.safe_load(fh))
    if not isinstance(data, dict) or not isinstance(data.get("applications"), list) or not data["applications"]:
        raise ValueError(f"{path}: a Serve config needs 'applications' (a non-empty list)")
    for i, app in enumerate(data["applications"]):
        if not isinstance(app, dict) or not app.get("import_path"):
            raise ValueError(f"{path}: applications[{i}].import_path is required (module:attribute)")
    return data


def declared_python_path(config: dict[str, Any]) -> list[str]:
    """The ``PYTHONPATH`` entries the applications' ``runtime_env.env_vars`` declare."""
    found: list[str] = []
    for app in config["applications"]:
        env_vars = (app.get("runtime_env") or {}).get("env_vars") or {}
        found += [d for d in str(env_vars.get("PYTHONPATH") or "").split(os.pathsep) if d]
    return found


def python_path(code_dirs: list[str], declared: Sequence[str] = ()) -> list[str]:
    """The code dirs, then a directory holding the ``openai_api`` module unless a code dir or a ``declared``
    directory (an application's own ``PYTHONPATH``) has one."""
    dirs = [str(Path(d).resolve()) for d in code_dirs]
    if not any((Path(d) / "openai_api.py").exists() for d in [*dirs, *declared]):
        shim = Path(tempfile.mkdtemp(prefix="mlrecipe-rayserve-"))
        (shim / "openai_api.py").write_text(OPENAI_API_SHIM, encoding="utf-8")
        dirs.append(str(shim))
    return dirs


def import_module_of(app: dict[str, Any]) -> str | None:
    """The module an application's ``import_path`` names, unless its ``runtime_env`` brings code from elsewhere."""
    runtime_env = app.get("runtime_env") or {}
    if runtime_env.get("working_dir") or runtime_env.get("py_modules"):
        return None
    path = str(app["import_path"])
    return path.split(":", 1)[0] if ":" in path else path.rsplit(".", 1)[0]


def preflight(config: dict[str, Any]) -> None:
    """Import each application's module as Serve's build step does, with its ``runtime_env.env_vars`` in effect, so
    a bad application (an unknown engine argument) fails here, before Serve's proxy answers the health check."""
    for app in config["applications"]:
        module = import_module_of(app)
        if module is None:
            continue
        env_vars = {k: str(v) for k, v in ((app.get("runtime_env") or {}).get("env_vars") or {}).items()}
        saved_env, saved_path = dict(os.environ), list(sys.path)
        os.environ.update(env_vars)
        sys.path[:0] = [d for d in env_vars.get("PYTHONPATH", "").split(os.pathsep) if d]
        try:
            importlib.import_module(module)
        finally:
            os.environ.clear()
            os.environ.update(saved_env)
            sys.path[:] = saved_path
            sys.modules.pop(module, None)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        config = load_serve_config(args.serve_config)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"mlrecipe.serve.rayserve: {exc}", file=sys.stderr)
        return 2
    dirs = python_path(args.code_dir, declared_python_path(config))
    os.environ["PYTHONPATH"] = os.pathsep.join([*dirs, *filter(None, [os.environ.get("PYTHONPATH")])])
    sys.path[:0] = dirs
    config["http_options"] = {**(config.get("http_options") or {}), "host": args.host, "port": args.port}
    try:
        preflight(config)
    except Exception as exc:  # whatever the application's import raises stops the server
        print(f"mlrecipe.serve.rayserve: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2

    from mlrecipe.serve.cli import set_cpu_env

    set_cpu_env()  # before Ray starts: its workers, vLLM's among them, inherit this environment
    import ray
    from ray import serve
    from ray.serve._private.api import serve_start
    from ray.serve.schema import ServeDeploySchema

    stop = {"now": False}

    def on_signal(signum: int, _frame: Any) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # "local": a new instance, never one found in /tmp/ray/ray_current_cluster (perhaps long gone)
    ray.init(address="local", num_cpus=args.num_cpus, include_dashboard=False, namespace="serve")
    try:
        client = serve_start(http_options=config["http_options"])
        client.deploy_apps(ServeDeploySchema.parse_obj(config))  # Serve keeps the pydantic v1 API
        names = [app.get("name", "default") for app in config["applications"]]
        print(f"mlrecipe.serve.rayserve: deploying {', '.join(names)} on http://{args.host}:{args.port}", flush=True)
        return watch(serve, names, stop)
    finally:
        serve.shutdown()
        ray.shutdown()


def watch(serve: Any, names: list[str], stop: dict[str, bool]) -> int:
    """Report application states until a signal (0) or a failed deployment (1)."""
    seen: dict[str, str] = {}
    while not stop["now"]:
        apps = serve.status().applications
        for name in names:
            app = apps.get(name)
            state = str(getattr(app.status, "value", app.status)) if app is not None else "NOT_STARTED"
            if seen.get(name) != state:
                seen[name] = state
                print(f"mlrecipe.serve.rayserve: application {name}: {state}", flush=True)
                if state.endswith("DEPLOY_FAILED") or state.endswith("UNHEALTHY"):
                    print(app.message, file=sys.stderr, flush=True)
                    return 1
        time.sleep(POLL_SECONDS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
