"""The megatron example's EKS plan (examples/frameworks/megatron/pipeline-eks.yaml) has the source system's shape:
MPIJob data preparation with CPU/memory requests spread over nodes on the FSx claim, a PyTorchJob on 2 x p4de with
8 GPUs, 4 EFA interfaces, the EFA/NCCL environment and shared memory; the export on a CPU node writes the Hugging
Face folder on FSx that the vLLM serving chart's RayService serves in float32; object names follow the release, so
two releases in one namespace never collide. (Goldens and CRD validity: tests/unit/test_framework_example_plans.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from mlrecipe.backends.registry import get_backend
from mlrecipe.helm.validate import validate_manifests
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
from tests.repo import EXAMPLES

EXAMPLE = EXAMPLES / "frameworks" / "megatron"


def _objects(path: Path) -> list[dict]:
    inputs = {"kind": "pipeline", "path": str(path), "sets": []}
    runner = ReleaseRunner(spec_from_inputs(inputs), get_backend("kubernetes", {}), inputs, QuietDisplay())
    return [o for o in yaml.safe_load_all(runner.materialize()) if o]


def _container(template: dict) -> dict:
    return template["spec"]["containers"][0]


def test_data_workers_request_cpu_and_memory_spread_over_nodes_on_fsx(mlhome: Path) -> None:
    objects = _objects(EXAMPLE / "pipeline-eks.yaml")
    assert validate_manifests(objects) == []
    (mpijob,) = [o for o in objects if o["kind"] == "MPIJob"]
    worker = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    requests = _container(worker["template"])["resources"]["requests"]
    assert requests["cpu"] and requests["memory"]
    (spread,) = worker["template"]["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["maxSkew"] == 1
    assert spread["labelSelector"]["matchLabels"] == {"app.kubernetes.io/instance": "megatron-gpt",
                                                      "mlrecipe.io/step": "data", "mlrecipe.io/role": "worker"}
    claims = {v["persistentVolumeClaim"]["claimName"] for v in worker["template"]["spec"]["volumes"]
              if "persistentVolumeClaim" in v}
    assert claims == {"pv-fsx"}
    launcher = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    assert "topologySpreadConstraints" not in launcher


def test_pretraining_runs_on_two_p4de_with_efa_nccl_env_and_shared_memory(mlhome: Path) -> None:
    (job,) = [o for o in _objects(EXAMPLE / "pipeline-eks.yaml")
              if o["kind"] == "PyTorchJob" and o["metadata"]["labels"]["mlrecipe.io/step"] == "pretrain"]
    groups = job["spec"]["pytorchReplicaSpecs"]
    assert sum(g.get("replicas", 1) for g in groups.values()) == 2
    for group in groups.values():
        spec = group["template"]["spec"]
        container = _container(group["template"])
        assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "p4de.24xlarge"}
        for kind in ("requests", "limits"):
            assert container["resources"][kind]["nvidia.com/gpu"] == "8"
            assert container["resources"][kind]["vpc.amazonaws.com/efa"] == "4"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1" and env["NCCL_DEBUG"] == "INFO"
        shm = [v for v in spec["volumes"] if v["name"] == "shm"]
        assert shm == [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}]
        assert "pv-fsx" in {v.get("persistentVolumeClaim", {}).get("claimName") for v in spec["volumes"]}


def test_the_export_runs_on_a_cpu_node_and_ray_serve_with_vllm_serves_it_from_fsx(mlhome: Path) -> None:
    objects = _objects(EXAMPLE / "pipeline-eks.yaml")
    (export,) = [o for o in objects if o["kind"] == "PyTorchJob" and o["metadata"]["labels"]["mlrecipe.io/step"]
                 == "export"]
    for group in export["spec"]["pytorchReplicaSpecs"].values():
        assert "nvidia.com/gpu" not in str(_container(group["template"])["resources"])
    (step,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "step-megatron-gpt-export"]
    program = str(step["data"])
    assert "gpt/export_hf.py" in program and "--load $RESULTS/checkpoints" in program and "--output $RESULTS/hf" \
        in program
    (service,) = [o for o in objects if o["kind"] == "RayService"]
    (config,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("engine-config")]
    engine = json.loads(config["data"]["engine-config.json"])
    assert (engine["model"], engine["dtype"]) == ("/fsx/megatron-gpt/results/hf", "float32")
    assert "import_path: openai_api:deployment" in service["spec"]["serveConfigV2"]
    worker = service["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]
    assert _container(worker)["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "pv-fsx" in {v.get("persistentVolumeClaim", {}).get("claimName") for v in worker["spec"]["volumes"]}


def test_two_releases_in_one_namespace_never_share_an_object_name(mlhome: Path, tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "ex")
    second = tmp_path / "ex" / "pipeline-eks.yaml"
    second.write_text(second.read_text().replace("release: megatron-gpt", "release: megatron-gpt-2"))
    first = {(o["kind"], o["metadata"]["name"]) for o in _objects(EXAMPLE / "pipeline-eks.yaml")}
    other = {(o["kind"], o["metadata"]["name"]) for o in _objects(second)}
    assert len(first) == len(other) and not first & other
    assert all("megatron-gpt-2" in name for _, name in other)
