"""The step runtime (stdlib only), shipped as a file into every node on every backend."""

from pathlib import Path

RUNTIME_PATH = Path(__file__).with_name("step_runtime.py")
#: Runs a RayJob's entrypoint on a Ray cluster started on one host (host backends; needs ``ray``).
RAY_CLUSTER_PATH = Path(__file__).with_name("ray_cluster.py")
