"""eksctl manifests: every shipped file under infra/eksctl/ and every generated one validates against
eksctl's ClusterConfig schema (../shared/schemas/eksctl-clusterconfig-v1alpha5.schema.json)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from mlrecipe.cli import cluster_cmd
from mlrecipe.infra.eksctl import ClusterOptions, EksctlConfigError, build_cluster_config, parse_subnets
from mlrecipe.infra.eksctl_examples import EXAMPLES, render_example

Validate = Callable[[dict[str, Any]], None]


def groups(config: dict[str, Any]) -> list[dict[str, Any]]:
    return [*config.get("managedNodeGroups", []), *config.get("nodeGroups", [])]


def gpu_group(config: dict[str, Any]) -> dict[str, Any]:
    (gpu,) = [g for g in groups(config) if g["name"] != "system"]
    return gpu


def test_every_shipped_manifest_validates(infra_paths: SimpleNamespace, validate_clusterconfig: Validate) -> None:
    files = sorted(infra_paths.eksctl.glob("*.yaml"))
    assert {f.name for f in files} == set(EXAMPLES)
    for path in files:
        config = yaml.safe_load(path.read_text())
        validate_clusterconfig(config)
        names = [g["name"] for g in groups(config)]
        assert "system" in names and len(names) == 2, f"{path.name}: {names}"
        assert gpu_group(config)["efaEnabled"] is True, f"{path.name}: GPU group without EFA"
        assert len(gpu_group(config)["availabilityZones"]) == 1, f"{path.name}: EFA group spans AZs"


def test_shipped_manifests_are_what_the_generator_writes(infra_paths: SimpleNamespace) -> None:
    for filename in EXAMPLES:
        assert (infra_paths.eksctl / filename).read_text() == render_example(filename), (
            f"{filename} is stale: run python -m mlrecipe.infra.eksctl_examples infra/eksctl"
        )


def test_reference_cases(infra_paths: SimpleNamespace) -> None:
    load = lambda name: yaml.safe_load((infra_paths.eksctl / name).read_text())  # noqa: E731
    existing = load("g4dn-dev-existing-vpc.yaml")
    assert existing["vpc"]["id"].startswith("vpc-") and "availabilityZones" not in existing
    assert set(existing["vpc"]["subnets"]["private"]) == {"us-west-2a", "us-west-2b"}
    assert "availabilityZones" in load("g4dn-dev-new-vpc.yaml")
    odcr = gpu_group(load("p4de-odcr.yaml"))
    assert odcr["instanceType"] == "p4de.24xlarge"
    assert odcr["capacityReservation"]["capacityReservationTarget"]["capacityReservationID"].startswith("cr-")
    assert "instanceMarketOptions" not in odcr
    block = load("p5-capacity-block.yaml")
    assert gpu_group(block)["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert [g["name"] for g in block["nodeGroups"]] == ["gpu-efa"]
    assert gpu_group(load("g5-auto-repair.yaml"))["nodeRepairConfig"] == {"enabled": True}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"instance_type": "g5.xlarge"},
        {"instance_type": "p5.48xlarge", "nodes": 4, "max_nodes": 8},
        {"instance_type": "p4de.24xlarge", "reservation_id": "cr-0a1b2c3d4e5f60718"},
        {"instance_type": "p5.48xlarge", "reservation_id": "cr-0a1b2c3d4e5f60718", "capacity_block": True},
        {"instance_type": "g6e.48xlarge", "auto_repair": True, "gpu_az": "eu-west-1b"},
        {"instance_type": "trn1.32xlarge", "nodes": 2},
        {"vpc_id": "vpc-0abc", "private_subnets": {"eu-west-1a": "subnet-01", "eu-west-1b": "subnet-02"}},
    ],
)
def test_generated_configs_validate(kwargs: dict[str, Any], validate_clusterconfig: Validate) -> None:
    opts = ClusterOptions(name="gen", region="eu-west-1", azs=["eu-west-1a", "eu-west-1b"], **kwargs)
    config = build_cluster_config(opts)
    validate_clusterconfig(config)
    gpu = gpu_group(config)
    assert gpu["efaEnabled"] is (kwargs.get("instance_type", "g5.48xlarge") != "g5.xlarge")
    assert gpu["availabilityZones"] == [kwargs.get("gpu_az", "eu-west-1a")]
    taint_keys = {t["key"] for t in gpu["taints"]}
    expected = "aws.amazon.com/neuron" if kwargs.get("instance_type", "").startswith("trn") else "nvidia.com/gpu"
    assert expected in taint_keys


def test_schema_validation_catches_a_typo(validate_clusterconfig: Validate) -> None:
    config = build_cluster_config(ClusterOptions(name="x", region="us-west-2", azs=["us-west-2a", "us-west-2b"]))
    config["managedNodeGroups"][1]["efaEnable"] = True
    with pytest.raises(AssertionError, match="efaEnable"):
        validate_clusterconfig(config)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"azs": ["us-west-2a"]}, "at least 2"),
        ({"azs": ["us-west-2a", "us-east-1b"]}, "not in region"),
        ({"efa": True, "instance_type": "g5.xlarge"}, "does not support EFA"),
        ({"reservation_id": "odcr-1"}, "cr-"),
        ({"capacity_block": True}, "needs --reservation-id"),
        ({"vpc_id": "vpc-1"}, "--subnet"),
        ({"gpu_az": "us-west-2c"}, "--gpu-az"),
    ],
)
def test_bad_options_are_refused(kwargs: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {"name": "x", "region": "us-west-2", "azs": ["us-west-2a", "us-west-2b"]}
    with pytest.raises(EksctlConfigError, match=message):
        build_cluster_config(ClusterOptions(**{**base, **kwargs}))


def test_parse_subnets() -> None:
    assert parse_subnets(["us-west-2a=subnet-0abc"]) == {"us-west-2a": "subnet-0abc"}
    with pytest.raises(EksctlConfigError):
        parse_subnets(["us-west-2a:subnet-0abc"])


def cli() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """Test root so `cluster` stays a sub-command."""

    cluster_cmd.register(app)
    return app


BASE_ARGS = ["cluster", "eksctl", "--name", "ml", "--region", "us-west-2", "--az", "us-west-2a", "--az", "us-west-2b"]


def test_cli_writes_a_valid_manifest(tmp_path: Path, validate_clusterconfig: Validate) -> None:
    out = tmp_path / "cluster.yaml"
    result = CliRunner().invoke(
        cli(),
        [
            *BASE_ARGS,
            "--instance-type",
            "p4de.24xlarge",
            "--nodes",
            "2",
            "--reservation-id",
            "cr-0123456789abcdef0",
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    config = yaml.safe_load(out.read_text())
    validate_clusterconfig(config)
    gpu = gpu_group(config)
    assert gpu["desiredCapacity"] == 2 and gpu["efaEnabled"] is True
    assert gpu["capacityReservation"]["capacityReservationTarget"]["capacityReservationID"] == "cr-0123456789abcdef0"


def test_cli_prints_to_stdout_and_rejects_bad_input(validate_clusterconfig: Validate) -> None:
    runner = CliRunner()
    ok = runner.invoke(
        cli(),
        [
            *BASE_ARGS,
            "--no-efa",
            "--auto-repair",
        ],
    )
    assert ok.exit_code == 0, ok.output
    config = yaml.safe_load(ok.stdout)
    validate_clusterconfig(config)
    assert gpu_group(config)["efaEnabled"] is False
    bad = runner.invoke(cli(), ["cluster", "eksctl", "--name", "ml", "--region", "us-west-2", "--az", "us-west-2a"])
    assert bad.exit_code == 2
    assert "at least 2" in bad.output
