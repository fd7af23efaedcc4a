"""A plain values file in the reference style renders unchanged for the PyTorchJob charts."""

from __future__ import annotations

import json

import pytest
import yaml

from mlrecipe.helm import chart_path, render_chart
from mlrecipe.helm.validate import validate_manifests

RECIPE = """
image: 'nvcr.io/nvidia/pytorch:24.10-py3'
backoff_limit: 2000
resources:
  requests:
    "nvidia.com/gpu": 4
  limits:
    "nvidia.com/gpu": 4
  nnodes: 2
  nproc_per_node: 4
  node_type: 'g5.12xlarge'
tolerations:
  - key: "nvidia.com/gpu"
    operator: "Exists"
    effect: "NoSchedule"
elastic_policy:
  rdzv_backend: c10d
  rdzv_port: 44000
  min_replicas: 1
  max_replicas: 2
git:
  repo_url: 'https://github.com/huggingface/accelerate.git'
  branch: main
  commit: 74e08e5205501826c0d4bae5abb7c25cb3da5e15
pre_script:
  - pip3 install -e ./
  - export LOGS_DIR=$HOME/logs/$HOSTNAME
  - mkdir -p $LOGS_DIR
  - export OUTPUT_LOG=$LOGS_DIR/pretrain.log
  - export DISTRIBUTED_ARGS="--nnodes $PET_NNODES --nproc_per_node $PET_NPROC_PER_NODE
      --master_addr $PET_MASTER_ADDR --master_port $PET_MASTER_PORT --node_rank $PET_NODE_RANK"
train:
  env:
    - name: HOME
      value: "/efs/home/{{ .Release.Name }}"
  command:
    - accelerate
  args:
    - launch
    - $DISTRIBUTED_ARGS
    - 'examples/complete_nlp_example.py'
    - '--mixed_precision fp16'
    - '2>&1 | tee $OUTPUT_LOG'
"""


@pytest.mark.parametrize("chart", ["training/pytorchjob-distributed", "training/pytorchjob-elastic"])
def test_reference_accelerate_recipe(chart: str) -> None:
    values = yaml.safe_load(RECIPE)
    if chart.endswith("distributed"):
        values.pop("elastic_policy")  # the reference distributed chart has no elastic_policy key
    objs = render_chart(chart_path(chart), values, "bert", "kubeflow-user-example-com")
    assert validate_manifests(objs) == []
    job = next(o for o in objs if o["kind"] == "PyTorchJob")
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert job["spec"]["nprocPerNode"] == "4"
    if chart.endswith("distributed"):
        assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 1
    else:
        assert set(specs) == {"Worker"} and specs["Worker"]["replicas"] == 2
        assert job["spec"]["elasticPolicy"]["maxReplicas"] == 2
    for spec in specs.values():
        pod = spec["template"]["spec"]
        container = pod["containers"][0]
        assert container["name"] == "pytorch"
        assert container["command"] == ["python3", "/etc/mlrecipe/step_runtime.py", "/etc/mlrecipe/step.json"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["HOME"] == "/efs/home/bert"
        assert env["MLRECIPE_RELEASE"] == "bert" and env["MLRECIPE_STEP"] == chart.split("/")[1]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
        assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "g5.12xlarge"}
        assert {"name": "shm", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
        assert not any("hostPath" in v for v in pod["volumes"])
    cm = next(o for o in objs if o["kind"] == "ConfigMap")
    program = json.loads(cm["data"]["step.json"])
    assert program["git"] == {
        "repo_url": "https://github.com/huggingface/accelerate.git",
        "branch": "main",
        "commit": "74e08e5205501826c0d4bae5abb7c25cb3da5e15",
    }
    assert program["pre_script"] == values["pre_script"]
    assert program["command"] == ["accelerate"]
    assert program["args"][-1] == "2>&1 | tee $OUTPUT_LOG"
    assert program["step"] == chart.split("/")[1] and program["chart"] == chart
