"""Serving steps on the local backend with a plain HTTP server (fast, no engine): readiness, the URL handed to
later steps, servers outliving the CLI, readiness timeout with the last log lines, crashes, uninstall."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.integration.helpers import release_processes
from tests.serve.serving import NEVER_READY_RECIPE, run_cli, write

pytestmark = pytest.mark.integration

HTTP_SERVER = """
    server:
      command: [python3, -m, http.server]
      args: ["$PORT", --bind 127.0.0.1, --directory {root}]
      readiness_probe: {{path: /ready.txt, period_secs: 1}}
      startup_probe: {{path: /ready.txt, period_secs: 1, failure_threshold: 30}}
"""


def test_server_step_url_reaches_later_steps_and_outlives_the_cli(tmp_path: Path) -> None:
    home = tmp_path / "mlhome"
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "ready.txt").write_text("ok")
    (tmp_path / "www" / "answer.txt").write_text("42")
    write(tmp_path / "web.yaml", HTTP_SERVER.format(root=tmp_path / "www"))
    (tmp_path / "get.py").write_text("import os, urllib.request\n"
                                     "url = os.environ['MLRECIPE_MY_WEB_URL'] + '/answer.txt'\n"
                                     "print('got', urllib.request.urlopen(url).read().decode())\n")
    write(tmp_path / "client.yaml", f"""
        process:
          command: [python3, {tmp_path / "get.py"}]
        """)
    pipeline = write(tmp_path / "pipeline.yaml", """
        release: websrv
        steps:
          - {name: my-web, chart: serving/generic-server, recipe: web.yaml}
          - {name: client, chart: data-prep/data-process, recipe: client.yaml}
        """)
    dry = run_cli(home, "run", str(pipeline), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "MLRECIPE_MY_WEB_URL=http://127.0.0.1:" in dry.stdout and "# server: http://127.0.0.1:" in dry.stdout
    try:
        result = run_cli(home, "run", str(pipeline), timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        state = json.loads((home / "releases/local/default/websrv/state.json").read_text())
        url = state["steps"]["my-web"]["url"]
        assert state["state"] == "serving" and state["steps"]["my-web"]["state"] == "serving"
        assert f"ready at {url}" in result.stdout and "mlrecipe uninstall websrv" in result.stdout
        assert "got 42" in run_cli(home, "logs", "websrv", "client").stdout
        assert httpx.get(url + "/answer.txt").text == "42"  # the CLI is gone, the server is not
        again = run_cli(home, "run", str(pipeline))
        assert again.returncode == 0 and f"still serving at {url}" in again.stdout
    finally:
        run_cli(home, "uninstall", "websrv")
    assert release_processes("websrv", home) == []


def test_readiness_timeout_fails_with_the_last_log_lines(tmp_path: Path) -> None:
    home = tmp_path / "mlhome"
    recipe = write(tmp_path / "never.yaml", NEVER_READY_RECIPE)
    result = run_cli(home, "install", "never", "serving/generic-server", "-f", str(recipe), timeout=60)
    assert result.returncode == 1, result.stdout
    assert "was not ready after" in result.stdout and "/health" in result.stdout
    assert "loading weights..." in result.stdout  # the server's last log lines
    assert release_processes("never", home) == []
    state = json.loads((home / "releases/local/default/never/state.json").read_text())
    assert state["state"] == "failed"


def test_server_that_exits_before_ready_fails(tmp_path: Path) -> None:
    home = tmp_path / "mlhome"
    recipe = write(tmp_path / "crash.yaml", """
        server:
          command: [python3, -c]
          args: ["'import sys; print(\\"cannot bind\\"); sys.exit(3)'"]
        """)
    result = run_cli(home, "install", "crash", "serving/generic-server", "-f", str(recipe), timeout=60)
    assert result.returncode == 1
    assert "exited with status 3" in result.stdout and "cannot bind" in result.stdout


def test_rayserve_without_a_serve_config_is_refused_before_anything_starts(tmp_path: Path) -> None:
    recipe = write(tmp_path / "r.yaml", "engine: {config: {model: /fsx/m}}\n")
    result = run_cli(tmp_path / "mlhome", "install", "rs", "serving/rayserve", "-f", str(recipe))
    assert result.returncode == 2
    assert "ray.serve_config_v2 needs 'applications'" in result.stderr + result.stdout
    assert not (tmp_path / "mlhome" / "releases").exists()
