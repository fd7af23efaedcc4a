"""The LeaderWorkerSet runs' stand-ins (``test_lws.py`` and ``lws_scenarios.py``): the triton-inference-server-lws
chart rendered with a CPU server on the ``pv-fsx`` claim."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.kubelet_runs.ray_cases import render

CHART = "serving/triton-inference-server-lws"
#: the leader (LWS_WORKER_INDEX 0) serves Triton's health routes on its pod address, ready once the group's
#: workers registered (a multi-node server is ready when its workers joined); a worker resolves the leader,
#: registers and stays up
SERVER = """\
import http.server, os, socket, sys, time, urllib.request
print({k: os.environ.get(k) for k in ("LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX", "GROUP_KEY",
      "PET_MASTER_ADDR", "PET_NODE_RANK", "PET_NNODES")}, "host", socket.gethostname(), flush=True)
size, index = int(os.environ["LWS_GROUP_SIZE"]), int(os.environ["LWS_WORKER_INDEX"])
expected = set() if "--idle-workers" in sys.argv else {str(i) for i in range(1, size)}
joined = set()

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/register/"):
            joined.add(self.path.rsplit("/", 1)[1])
            print("registered worker", self.path.rsplit("/", 1)[1], flush=True)
        ok = self.path == "/v2/health/live" or self.path.startswith("/register/") or (
            self.path == "/v2/health/ready" and joined >= expected)
        self.send_response(200 if ok else 503)
        self.end_headers()

    def log_message(self, *args):
        pass

if index == 0:
    address = socket.gethostbyname(socket.gethostname())
    print("leader serving on", address, flush=True)
    http.server.HTTPServer((address, 8000), Health).serve_forever()
leader = os.environ["PET_MASTER_ADDR"]
deadline = time.monotonic() + 15
while True:
    try:
        print("leader", leader, "resolves to", socket.gethostbyname(leader), flush=True)
        urllib.request.urlopen(f"http://{leader}:8000/register/{index}", timeout=2).read()
        break
    except OSError as exc:
        if time.monotonic() > deadline:
            sys.exit(f"worker {index}: cannot reach the leader {leader}:8000: {exc}")
        time.sleep(0.5)
print("worker", index, "joined the leader", leader, flush=True)
while True:
    time.sleep(3600)
"""
RUNTIME_WORKERS = """\
server:
  command: [python3]
  args: [/fsx/lws_server.py]
"""
IDLE_WORKERS = """\
server:
  command: [python3]
  args: [/fsx/lws_server.py, --idle-workers]
"""


def render_lws(tmp_path: Path, scenario: str, stand_in: str) -> list[dict[str, Any]]:
    """The chart's ci SCENARIO rendered with STAND_IN as release ``ci``, the stand-in server on the ``pv-fsx`` claim."""
    objects = render(tmp_path, CHART, scenario, stand_in, release="ci")
    (tmp_path / "fsx" / "lws_server.py").write_text(SERVER)
    return objects


def lws_object(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The LeaderWorkerSet among the rendered objects."""
    return next(o for o in objects if o["kind"] == "LeaderWorkerSet")
