"""Shared by the RayJob harness runs (``test_ray.py``, ``ray_scenarios.py``): render a Ray chart's ci scenario with
a stand-in entrypoint, and the stand-in scripts (a probe of the cluster KubeRay started; ``examples/eks/ray``'s
``preprocess.py`` and ``ray_train_sft.py``, which the pipeline expects under ``$HOME/code`` on the EFS claim)."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path
from typing import Any

import yaml

from tests.repo import BIN, REPO, cli_env

#: the entrypoint (the step runtime on the head) runs this: a task on every node, the env KubeRay gave the head
#: the ray-data-process chart's RayJob running the probe on the ``pv-fsx`` claim as its one process
RAYJOB_STAND_IN = """\
resources: {nnodes: 1}
process:
  command: [python3]
  args: [/fsx/ray_probe.py]
"""
PROBE = """\
import os, socket, sys
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init()
nodes = [n for n in ray.nodes() if n["Alive"]]

@ray.remote(num_cpus=1)
def where():
    return socket.gethostname()

hosts = ray.get([where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
                 for n in nodes])
print("ray nodes", sorted(n["NodeManagerAddress"] for n in nodes), "hosts", sorted(hosts), flush=True)
for name in ("RAY_CLUSTER_NAME", "RAY_PORT", "RAY_USAGE_STATS_KUBERAY_IN_USE", "KUBERAY_GEN_RAY_START_CMD"):
    print(f"{name}={os.environ.get(name)}", flush=True)
"""
#: ``examples/eks/ray``'s preprocess step: 4 shards written by Ray tasks to ``--out``
PREPROCESS = """\
import argparse, os, socket
import ray
parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
out = parser.parse_args().out
ray.init()

@ray.remote(num_cpus=1)
def shard(i):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"shard-{i}.txt"), "w") as f:
        f.write(f"{i * i}\\n")
    return socket.gethostname()

hosts = ray.get([shard.remote(i) for i in range(4)])
print(f"preprocess wrote 4 shards to {out} on {len(ray.nodes())} Ray nodes", flush=True)
"""
#: ``examples/eks/ray``'s train step: Ray tasks read the shards, in the job's runtime env (its pip transformers)
TRAIN = """\
import os
import ray
ray.init()
data = os.path.join("/fsx", os.environ["MLRECIPE_RELEASE"], "data")

@ray.remote(num_cpus=1)
def read(name):
    import transformers
    with open(os.path.join(data, name)) as f:
        return int(f.read()), transformers.__version__

got = ray.get([read.remote(n) for n in sorted(os.listdir(data))])
print(f"train read {len(got)} shards, sum {sum(v for v, _ in got)}, transformers {sorted({t for _, t in got})}",
      flush=True)
"""
#: a Ray Serve application for the RayService runs (``import_path: hello:app`` with ``/fsx`` on ``PYTHONPATH``)
HELLO = """\
import socket
from ray import serve


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Hello:
    def __call__(self, request):
        return f"hello from {socket.gethostname()}"


app = Hello.bind()
"""


def render(tmp_path: Path, chart: str, scenario: str, stand_in: str, release: str = "kh") -> list[dict[str, Any]]:
    """``mlrecipe template RELEASE CHART -f ci/SCENARIO -f stand-in``; :data:`PROBE` and :data:`HELLO` put on the
    ``pv-fsx`` claim
    (``tmp_path/fsx``, the directory ``scenarios.run_harness`` gives the harness)."""
    overlay = tmp_path / "stand-in.yaml"
    overlay.write_text(textwrap.dedent(stand_in))
    ci = REPO / "charts" / "machine-learning" / chart / "ci" / scenario
    out = subprocess.run([str(BIN / "mlrecipe"), "template", release, chart, "-f", str(ci), "-f", str(overlay),
                          "-b", "kubernetes"], env=cli_env(tmp_path / "mlhome"), capture_output=True, text=True,
                         timeout=120, check=True)
    (tmp_path / "fsx").mkdir(exist_ok=True)
    (tmp_path / "fsx" / "ray_probe.py").write_text(PROBE)
    (tmp_path / "fsx" / "hello.py").write_text(HELLO)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def logs(tmp_path: Path, pattern: str) -> str:
    """The logs ``tmp_path/logs/PATTERN`` (a glob), concatenated; at least one must exist."""
    found = sorted((tmp_path / "logs").glob(pattern))
    assert found, f"no log {pattern}"
    return "".join(p.read_text() for p in found)
