"""Library features seen in rendered manifests: names, Kueue, HyperPod, volumes, env contract."""

from __future__ import annotations

import json
from typing import Any

from mlrecipe.helm import chart_path, render_chart
from mlrecipe.helm.validate import validate_manifests


def _render(chart: str, values: dict[str, Any], release: str = "r") -> list[dict[str, Any]]:
    objs = render_chart(chart_path(chart), values, release, "ns")
    assert validate_manifests(objs) == []
    return objs


def _kind(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == kind)


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_names_are_cut_to_63_characters() -> None:
    release = "a" * 53
    for obj in _render("training/pytorchjob-distributed", {"image": "i"}, release):
        assert len(obj["metadata"]["name"]) <= 63
    job = _kind(_render("data-prep/data-process", {"image": "i", "resources": {"nnodes": 2}}, release), "Job")
    assert len(job["metadata"]["name"]) <= 56  # room for the "-<index>" of Indexed Job hostnames


def test_kueue_hyperpod_and_scheduling() -> None:
    values = {
        "image": "i",
        "resources": {"node_type": "p5.48xlarge", "nnodes": 1},
        "kueue": {"queue_name": "team-a", "priority_class": "high"},
        "hyperpod": {"enabled": True, "auto_restart": True},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "scheduler_name": "custom",
    }
    job = _kind(_render("training/pytorchjob-elastic", values), "PyTorchJob")
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    assert job["metadata"]["annotations"]["sagemaker.amazonaws.com/enable-job-auto-resume"] == "true"
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    assert pod["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    assert pod["spec"]["nodeSelector"]["node.kubernetes.io/instance-type"] == "ml.p5.48xlarge"
    assert pod["spec"]["schedulerName"] == "custom"
    keys = [t["key"] for t in pod["spec"]["tolerations"]]
    assert keys == ["nvidia.com/gpu", "sagemaker.amazonaws.com/node-health-status"]


def test_volumes() -> None:
    values = {"image": "i", "ebs": {"storage": "50Gi", "mount_path": "/scratch", "storage_class": "gp3"},
              "shm_size": "8Gi", "pvc": [{"name": "data", "mount_path": "/data"}]}  # fmt: skip
    pod = _kind(_render("data-prep/data-process", values), "Job")["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["shm"] == {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}
    claim = vols["ebs"]["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == "gp3" and claim["resources"]["requests"]["storage"] == "50Gi"
    assert vols["pv-1"]["persistentVolumeClaim"]["claimName"] == "data"
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts == {"shm": "/dev/shm", "mlrecipe": "/etc/mlrecipe", "pv-1": "/data", "ebs": "/scratch"}


def test_indexed_job_env_contract() -> None:
    objs = _render("data-prep/data-process", {"image": "i", "resources": {"nnodes": 3, "nproc_per_node": 2}})
    job, svc = _kind(objs, "Job"), _kind(objs, "Service")
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 3
    pod = job["spec"]["template"]["spec"]
    assert svc["spec"]["clusterIP"] == "None" and pod["subdomain"] == svc["metadata"]["name"]
    env = _env(pod["containers"][0])
    assert env["PET_NNODES"] == "3" and env["PET_NPROC_PER_NODE"] == "2"
    assert env["PET_MASTER_ADDR"] == f"{job['metadata']['name']}-0.{svc['metadata']['name']}"
    assert env["PET_MASTER_PORT"] == "29500"
    single = _kind(_render("data-prep/data-process", {"image": "i"}), "Job")
    assert "completionMode" not in single["spec"]


def test_mpijob_launcher_runs_mpirun_over_the_runtime() -> None:
    args = ["--allow-run-as-root", "--output-filename", "$LOG_ROOT/{{ .Release.Name }}"]
    values = {"image": "i", "resources": {"num_nodes": 2, "procs_per_node": 4}, "mpirun": {"args": args}}
    job = _kind(_render("training/mpijob", values), "MPIJob")
    assert job["spec"]["slotsPerWorker"] == 4
    assert job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    line = launcher["args"][0]
    assert line.startswith("exec mpirun -np 8 ")
    assert "--output-filename $LOG_ROOT/r " in line
    assert line.endswith("python3 /etc/mlrecipe/step_runtime.py /etc/mlrecipe/step.json")


def test_hf_snapshot_token_from_secret() -> None:
    objs = _render("model-prep/hf-snapshot", {"hf_model_id": "org/model", "hf_secret_name": "hf"})
    env = _env(_kind(objs, "Job")["spec"]["template"]["spec"]["containers"][0])
    assert env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert env["HF_MODEL_ID"] == "org/model"
    cm = _kind(objs, "ConfigMap")
    assert "hf_snapshot.py" in cm["data"]
    assert json.loads(cm["data"]["step.json"])["command"] == ["python3", "/etc/mlrecipe/hf_snapshot.py"]


def test_serving_keeps_post_script_and_scales() -> None:
    values = {"image": {"name": "i"}, "post_script": ["echo bye"], "server": {"command": ["srv"]},
              "resources": {"min_replicas": 2, "max_replicas": 5}}  # fmt: skip
    objs = _render("serving/generic-server", values)
    assert json.loads(_kind(objs, "ConfigMap")["data"]["step.json"])["post_script"] == ["echo bye"]
    assert _kind(objs, "Deployment")["spec"]["replicas"] == 2
    hpa = _kind(objs, "HorizontalPodAutoscaler")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 5)


def test_lws_workers_run_the_runtime() -> None:
    objs = _render("serving/triton-inference-server-lws", {"image": {"name": "i"}, "lws": {"size": 3}})
    lws = _kind(objs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    assert lws["size"] == 3
    worker = lws["workerTemplate"]["spec"]["containers"][0]
    assert worker["command"][-1] == "/etc/mlrecipe/step-worker.json"
    programs = _kind(objs, "ConfigMap")["data"]
    assert json.loads(programs["step-worker.json"])["command"] == ["sleep", "infinity"]
    assert _kind(objs, "Service")["spec"]["selector"]["mlrecipe.io/role"] == "leader"


def test_rayjob_entrypoint_is_the_runtime() -> None:
    job = _kind(_render("training/raytrain", {"image": "i", "ray": {"runtime_env_yaml": "pip: [x]"}}), "RayJob")
    assert job["spec"]["entrypoint"] == "python3 /etc/mlrecipe/step_runtime.py /etc/mlrecipe/step.json"
    assert job["spec"]["runtimeEnvYAML"] == "pip: [x]"
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert "command" not in head  # KubeRay starts Ray
    assert {"name": "mlrecipe", "mountPath": "/etc/mlrecipe", "readOnly": True} in head["volumeMounts"]


def test_rayserve_engine_config() -> None:
    values = {"image": "i", "engine": {"config": {"model": "/fsx/m", "tensor_parallel_size": 2,
                                                  "disable_log_stats": False}},
              "ray": {"serve_config_v2": {"serveConfigV2": "applications: []\n"}}}  # fmt: skip
    objs = _render("serving/rayserve", values)
    cm = _kind(objs, "ConfigMap")
    assert json.loads(cm["data"]["engine-config.json"]) == {  # the chart's defaults under the recipe's keys
        "model": "/fsx/m", "tensor_parallel_size": 2, "disable_log_stats": False, "enable_log_requests": False}
    svc = _kind(objs, "RayService")
    assert svc["spec"]["serveConfigV2"] == "applications: []\n"


def _head_ports(obj: dict[str, Any], cluster: str) -> list[dict[str, Any]]:
    return obj["spec"][cluster]["headGroupSpec"]["template"]["spec"]["containers"][0].get("ports", [])


def test_ray_head_ports_keep_the_dashboard_kuberay_reaches() -> None:
    """KubeRay builds the head Service from the head's named ports when any are named, and submits RayJobs and
    Serve applications through its "dashboard" port: a list without one gets Ray's 8265; none named keeps
    KubeRay's defaults; a named one is kept as given."""
    serve = {"image": "i", "ray": {"ports": [{"name": "gcs", "port": 6379}, {"name": "serve", "port": 8000}]}}
    assert {"name": "dashboard", "containerPort": 8265} in _head_ports(
        _kind(_render("serving/rayserve", serve), "RayService"), "rayClusterConfig")
    job = {"image": "i", "ray": {"ports": [{"name": "gcs", "port": 6379}, {"name": "dashboard", "port": 9265}]}}
    ports = _head_ports(_kind(_render("training/raytrain", job), "RayJob"), "rayClusterSpec")
    assert [p for p in ports if p["name"] == "dashboard"] == [{"name": "dashboard", "containerPort": 9265}]
    assert _head_ports(_kind(_render("training/raytrain", {"image": "i"}), "RayJob"), "rayClusterSpec") == []
