"""Shared by the harness's tests: render a recipe with the real CLI, plant a defect in the stream, run the harness.

The recipes are tiny CPU stand-ins of the charts' real work; their scripts live on the ``pv-fsx`` claim, given to
the harness as an existing directory (``--pvc pv-fsx=DIR``), as a pre-filled FSx volume would hold them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.repo import BIN, REPO, cli_env

RANK_SCRIPT = """\
import os, socket
print(f"rank {os.environ['OMPI_COMM_WORLD_RANK']} of {os.environ['OMPI_COMM_WORLD_SIZE']} on {socket.gethostname()} "
      f"data-dir={os.environ['DATA_DIR']} node-rank={os.environ['PET_NODE_RANK']}", flush=True)
"""

DDP_SCRIPT = """\
import os, socket
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
print(f"rank {dist.get_rank()}/{dist.get_world_size()} host {socket.gethostname()} "
      f"master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} sum {total.item()}", flush=True)
dist.destroy_process_group()
"""

RECIPES = {
    # over the chart's ci scenario indexed-values.yaml (3 nodes, an ebs volume at /tmp): only the command changes
    "job": ("data-prep/data-process", """\
        process:
          env:
            - name: OUT
              value: "/fsx/{{ .Release.Name }}/out"
          command: [bash, -c]
          args: ['"mkdir -p $OUT && hostname > $OUT/shard-$PET_NODE_RANK', '&& echo node $PET_NODE_RANK of $PET_NNODES',
                 'on $(hostname)"']
        """),
    "pytorchjob": ("training/pytorchjob-distributed", """\
        image: 'nvcr.io/nvidia/pytorch:24.10-py3'
        resources:
          requests: {"nvidia.com/gpu": 1}
          limits: {"nvidia.com/gpu": 1}
          nnodes: 2
          nproc_per_node: 1
        pre_script:
          - >-
            export DISTRIBUTED_ARGS="--nnodes $PET_NNODES --nproc_per_node $PET_NPROC_PER_NODE
            --node_rank $PET_NODE_RANK --master_addr $PET_MASTER_ADDR --master_port $PET_MASTER_PORT"
          - echo "DISTRIBUTED_ARGS=$DISTRIBUTED_ARGS"
        train:
          env:
            - name: HOME
              value: "/efs/home/{{ .Release.Name }}"
          command: [torchrun]
          args: ['$DISTRIBUTED_ARGS', /fsx/ddp.py]
        """),
    "mpijob": ("data-prep/mpijob-data-process", """\
        image: 'mpioperator/openmpi:v0.6.0'
        resources: {nnodes: 2, nproc_per_node: 1}
        process:
          env:
            - name: HOME
              value: "/efs/home/{{ .Release.Name }}"
            - name: DATA_DIR
              value: "/fsx/{{ .Release.Name }}/data"
          command: [python3]
          args: [/fsx/rank.py]
        """),
    "server": ("serving/generic-server", """\
        image: public.ecr.aws/docker/library/python:3.11-slim
        resources: {min_replicas: 1}
        server:
          ports:
            - name: http
              value: 8000
          readiness_probe:
            path: /
            port: 8000
            initial_delay_secs: 0
          startup_probe:
            enabled: false
          command: [python3]
          args: ['-m http.server 8000 --bind $(hostname -i | cut -d" " -f1) --directory /etc/mlrecipe']
        """),
}

#: recipes a stand-in is laid over (``-f`` first)
BASES = {"job": [REPO / "charts/machine-learning/data-prep/data-process/ci/indexed-values.yaml"]}


def fsx(tmp_path: Path) -> Path:
    """The claim ``pv-fsx`` with the stand-in scripts."""
    where = tmp_path / "fsx"
    where.mkdir(exist_ok=True)
    (where / "rank.py").write_text(RANK_SCRIPT)
    (where / "ddp.py").write_text(DDP_SCRIPT)
    return where


def render(tmp_path: Path, kind: str, release: str = "kh") -> list[dict[str, Any]]:
    """The objects ``mlrecipe template`` prints for the stand-in recipe of ``kind``."""
    chart, recipe = RECIPES[kind]
    path = tmp_path / f"{kind}.yaml"
    path.write_text(textwrap.dedent(recipe))
    files = [*BASES.get(kind, []), path]
    values = [word for f in files for word in ("-f", str(f))]
    out = subprocess.run([str(BIN / "mlrecipe"), "template", release, chart, *values, "-b", "kubernetes"],
                         env=cli_env(tmp_path / "mlhome"), capture_output=True, text=True, timeout=120, check=True)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def of_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == kind)


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    """Every container of every pod template of a workload."""
    spec = workload["spec"]
    templates = [spec["template"]] if "template" in spec else [
        r["template"] for key in ("pytorchReplicaSpecs", "mpiReplicaSpecs") for r in (spec.get(key) or {}).values()]
    return [c for t in templates for c in t["spec"]["containers"]]


def run_harness(tmp_path: Path, objects: list[dict[str, Any]], timeout: float = 120,
                edit: Callable[[list[dict[str, Any]]], None] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m tests.kubelet`` over the objects (after ``edit``), logs under ``tmp_path/logs``."""
    if edit is not None:
        edit(objects)
    stream = tmp_path / "stream.yaml"
    stream.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return subprocess.run([sys.executable, "-m", "tests.kubelet", str(stream), "--logs", str(tmp_path / "logs"),
                           "--timeout", str(timeout), "--pvc", f"pv-fsx={fsx(tmp_path)}"],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout + 60)
