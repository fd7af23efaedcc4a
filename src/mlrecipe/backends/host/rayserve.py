"""``serving/rayserve`` outside Kubernetes: the RayService's parts as files, and the command that runs them.

On a cluster KubeRay deploys ``ray.serve_config_v2`` and the chart mounts ``engine.config`` as
``/etc/engine-config/engine-config.json`` and ``engine.code`` under ``/etc/engine-code``. Here the same
files are written into the step directory and bind-mounted at those paths, and the step's command is
``python3 -m mlrecipe.serve.rayserve`` (:mod:`mlrecipe.serve.rayserve`), so a recipe runs unchanged.

The server is healthy while the chart's OpenAI application answers its own ``/health`` (503 at once when its vLLM
engine died, :mod:`mlrecipe.serve.ray_openai`), not merely while Serve's proxy answers ``/-/healthz``: Serve itself
takes about 30 s of failed replica health checks to mark the application unhealthy. A config without that
application keeps the proxy's check.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from mlrecipe.backends.host.launches import HostLaunch
from mlrecipe.backends.host.volumes import Mount
from mlrecipe.serve.rayserve import serve_config_data
from mlrecipe.spec.load import StepSpec

ENGINE_CONFIG_DIR = "/etc/engine-config"
ENGINE_CODE_DIR = "/etc/engine-code"
COMMAND = ["python3", "-m", "mlrecipe.serve.rayserve"]
#: What the chart puts under the recipe's ``engine.config`` (the reference chart's defaults).
ENGINE_DEFAULTS = {"disable_log_stats": True, "enable_log_requests": False}
OPENAI_APP = "openai_api:deployment"  #: the chart's vLLM OpenAI application (:mod:`mlrecipe.serve.ray_openai`)


def serve_config(ray: Mapping[str, Any]) -> Any:
    """``ray.serve_config_v2`` as data, whatever form the recipe gives it in."""
    return serve_config_data(ray.get("serve_config_v2"))


def app_health_path(config: Any) -> str | None:
    """``/health`` under the route prefix of the config's first chart OpenAI application, if it has one."""
    apps = config.get("applications") if isinstance(config, dict) else None
    for app in apps if isinstance(apps, list) else []:
        if isinstance(app, dict) and app.get("import_path") == OPENAI_APP:
            return str(app.get("route_prefix") or "/").rstrip("/") + "/health"
    return None


def problems(step: StepSpec) -> list[str]:
    """What stops a rayserve step from running here (no Serve config)."""
    config = serve_config(step.recipe.ray or {})
    if not isinstance(config, dict) or not config.get("applications"):
        return [f"chart {step.chart.name}: ray.serve_config_v2 needs 'applications' (the Serve config to deploy)"]
    return []


def launch(step: StepSpec, step_dir: Path) -> HostLaunch:
    """The files, mounts and command of a rayserve step whose state lives in ``step_dir``."""
    engine = step.recipe.engine or {}
    launch = HostLaunch(command=list(COMMAND))
    launch.notes.append(f"step {step.name} runs Ray Serve on this machine (python -m mlrecipe.serve.rayserve); "
                        f"engine config and code are mounted at {ENGINE_CONFIG_DIR}, {ENGINE_CODE_DIR}")
    config_path = step_dir / "ray" / "serve-config.yaml"
    config = serve_config(step.recipe.ray or {})
    launch.files[config_path] = yaml.safe_dump(config, sort_keys=False)
    launch.health_path = app_health_path(config)
    launch.args = ["--serve-config", str(config_path)]
    if engine.get("config"):
        source = step_dir / "engine-config"
        launch.files[source / "engine-config.json"] = json.dumps({**ENGINE_DEFAULTS, **engine["config"]}, indent=2)
        launch.mounts.append(Mount(source, ENGINE_CONFIG_DIR))
    code = engine.get("code")
    if code:
        source = step_dir / "engine-code"
        for name, text in (code.items() if isinstance(code, dict) else [("engine.py", code)]):
            launch.files[source / name] = str(text)
        launch.mounts.append(Mount(source, ENGINE_CODE_DIR))
        launch.args += ["--code-dir", ENGINE_CODE_DIR]
    return launch
