"""``mlrecipe status`` follows a server's health, not only its processes: a local serving step whose health URL
answers 503 while its process runs is ``unhealthy`` with its log's last error line (text and ``-o json``), and one
whose process ended is ``gone`` with that line. A real stdlib HTTP server, no engine."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx
import pytest

from tests.integration.helpers import release_processes
from tests.serve.serving import run_cli, write

pytestmark = pytest.mark.integration

#: A server whose engine "dies" when /kill is asked: its /health then answers 503 and it logs the engine's error.
SERVER = '''
import http.server, os, sys

dead = []

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/kill":
            dead.append(1)
            print("RuntimeError: Unsupported CPU attention configuration: head_dim=16", file=sys.stderr, flush=True)
            print("EngineDeadError: EngineCore encountered an issue.", file=sys.stderr, flush=True)
        code = 503 if dead and self.path == "/health" else 200
        self.send_response(code)
        self.end_headers()
        self.wfile.write(b"dead" if code == 503 else b"ok")

    def log_message(self, *args):
        pass

print(f"serving on {os.environ['PORT']}, pid {os.getpid()}", flush=True)
http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
'''


def status(home: Path) -> tuple[str, dict]:
    text = run_cli(home, "status", "dying")
    doc = run_cli(home, "status", "dying", "-o", "json")
    assert text.returncode == 0 and doc.returncode == 0, text.stderr + doc.stderr
    (step,) = json.loads(doc.stdout)[0]["steps"]
    return text.stdout, step


def test_status_shows_a_dead_engine_unhealthy_then_gone_with_the_logged_reason(tmp_path: Path) -> None:
    home = tmp_path / "mlhome"
    (tmp_path / "server.py").write_text(SERVER)
    recipe = write(tmp_path / "dying.yaml", f"""
        server:
          command: [python3, {tmp_path / "server.py"}]
          readiness_probe: {{path: /health, period_secs: 1}}
        """)
    try:
        result = run_cli(home, "install", "dying", "serving/generic-server", "-f", str(recipe), timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
        text, step = status(home)
        assert "[server up]" in text and step["server"] == "up" and "server_reason" not in step

        url = step["url"]
        assert httpx.get(url + "/kill").status_code == 200 and httpx.get(url + "/health").status_code == 503
        text, step = status(home)
        assert "[server up]" not in text
        assert f"[server unhealthy (GET {url}/health answered 503: EngineDeadError: " in text
        assert step["server"] == "unhealthy"
        assert step["server_reason"] == (f"GET {url}/health answered 503: "
                                         "EngineDeadError: EngineCore encountered an issue.")

        procs = release_processes("dying", home)
        assert procs
        for proc in procs:
            os.kill(proc.pid, signal.SIGKILL)
        for proc in procs:
            proc.wait(10)
        text, step = status(home)
        assert step["server"] == "gone" and step["server_reason"].startswith("EngineDeadError: ")
        assert "[server gone (EngineDeadError: EngineCore encountered an issue.)]" in text
    finally:
        run_cli(home, "uninstall", "dying")
    assert release_processes("dying", home) == []
