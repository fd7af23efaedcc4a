"""What doctor derives from recipes and pipelines (framework, command words, resources, claims)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mlrecipe.infra.doctor.requirements import (
    DEFAULT_PVCS,
    RecipeInputError,
    load_requirements,
    requirements_of_recipe,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("recipe", "packages", "binaries"),
    [
        ({"framework": "pytorch"}, ["torch"], []),
        ({"train": {"command": ["torchrun"], "args": ["--nproc_per_node=8", "train.py"]}}, ["torch"], []),
        ({"train": {"command": ["accelerate", "launch"], "args": ["train.py"]}}, ["torch", "accelerate"], []),
        (
            {"train": {"command": ["/opt/amazon/openmpi/bin/mpirun"], "args": ["-np 16 python t.py"]}},
            ["mpi4py"],
            ["mpirun"],
        ),
        ({"process": {"command": ["ray", "job", "submit"], "args": ["-- python p.py"]}}, ["ray"], []),
        ({"server": {"command": ["python3", "-m", "vllm.entrypoints.openai.api_server"]}}, ["vllm"], []),
        ({"server": {"command": ["vllm", "serve", "model"]}}, ["vllm"], []),
        ({"launcher": {"type": "accelerate", "script": "t.py"}}, ["torch", "accelerate"], []),
        ({"launcher": {"type": "mpirun", "script": "t.py"}}, ["mpi4py"], ["mpirun"]),
        ({"ray": {"head": {}}}, ["ray"], []),
        ({"engine": {"name": "vllm"}}, ["vllm"], []),
        ({"inline_script": ["deepspeed --num_gpus 8 train.py"]}, ["torch", "deepspeed"], []),
        ({"train": {"command": ["python"], "args": ["train.py 2>&1 | tee $LOG"]}}, [], []),
    ],
)
def test_packages_from_framework_and_command(recipe: dict, packages: list[str], binaries: list[str]) -> None:
    req = requirements_of_recipe(recipe)
    assert req.packages == packages
    assert req.binaries == binaries


def test_resources_node_type_and_claims() -> None:
    req = requirements_of_recipe(
        {
            "resources": {
                "node_type": "p4d.24xlarge",
                "nnodes": 2,
                "nproc_per_node": 8,
                "requests": {"nvidia.com/gpu": 8, "cpu": "90"},
                "limits": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": 4},
            },
            "pvc": [{"name": "pv-fsx", "mount_path": "/fsx"}],
            "ebs": {"storage": "200Gi", "mount_path": "/tmp"},
        }
    )
    assert req.resources == {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 4}
    assert (req.node_types, req.nnodes, req.nproc_per_node) == (["p4d.24xlarge"], 2, 8)
    assert req.pvcs == [("pv-fsx", "/fsx")]
    assert req.ebs
    assert requirements_of_recipe({}).pvcs == list(DEFAULT_PVCS)


@pytest.mark.parametrize(
    ("chart", "recipe", "operators"),
    [
        ("training/pytorchjob-distributed", {}, ["pytorchjob"]),
        ("training/mpijob-deepspeed", {}, ["mpijob"]),
        ("training/raytrain", {}, ["rayjob"]),
        ("serving/rayservice-vllm", {}, ["rayservice"]),
        ("serving/triton-inference-server-lws", {}, ["lws"]),
        (None, {"launcher": {"type": "torchrun", "script": "t.py"}}, ["pytorchjob"]),
    ],
)
def test_operators(chart: str | None, recipe: dict, operators: list[str]) -> None:
    assert requirements_of_recipe(recipe, chart).operators == operators


def test_pipeline_merges_steps(tmp_path: Path) -> None:
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "train.yaml").write_text(
        yaml.safe_dump(
            {
                "launcher": {"type": "torchrun", "script": "t.py"},
                "resources": {"nnodes": 2, "requests": {"nvidia.com/gpu": 4}},
            }
        )
    )
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        yaml.safe_dump(
            {
                "release": "r",
                "steps": [
                    {"name": "train", "chart": "training/pytorchjob-elastic", "recipe": "recipes/train.yaml"},
                    {
                        "name": "serve",
                        "chart": "serving/rayservice-vllm",
                        "recipe": {"engine": {"name": "vllm"}, "resources": {"requests": {"nvidia.com/gpu": 8}}},
                    },
                ],
            }
        )
    )
    req = load_requirements(pipeline)
    assert req.source == pipeline
    assert req.packages == ["torch", "vllm"]
    assert req.resources == {"nvidia.com/gpu": 8}
    assert req.nnodes == 2
    assert req.operators == ["pytorchjob", "rayservice"]


def test_shipped_quickstart_pipeline() -> None:
    pipeline = REPO / "examples" / "quickstart" / "pipeline.yaml"
    if not pipeline.exists():
        pytest.skip("examples/quickstart/pipeline.yaml is not in this checkout")
    req = load_requirements(pipeline)
    assert "torch" in req.packages  # its training step launches with torchrun
    assert req.pvcs


def test_bad_inputs_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(RecipeInputError, match=r"nope\.yaml"):
        load_requirements(missing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("resources: [unclosed\n")
    with pytest.raises(RecipeInputError, match=r"broken\.yaml"):
        load_requirements(broken)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just text\n")
    with pytest.raises(RecipeInputError, match=r"scalar\.yaml"):
        load_requirements(scalar)
