"""Static checks of infra/terraform that run without AWS: `terraform fmt`, and python-hcl2 parses of
every .tf file (variables typed and described, optional components behind documented toggles,
pinned module sources and chart versions, no hard-coded account ids or regions).

`terraform validate` cannot run here: `terraform init` cannot download the AWS provider on these
machines (see infra/README.md for the commands a user runs)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

hcl2 = pytest.importorskip("hcl2")

TOGGLES = {
    "kubeflow_platform_enabled": False,
    "kserve_enabled": False,
    "kueue_enabled": False,
    "airflow_enabled": False,
    "dcgm_exporter_enabled": False,
    "ack_sagemaker_enabled": False,
    "slurm_enabled": False,
    "mlflow_enabled": False,
    "prometheus_enabled": True,
}
CONSTRAINED = [
    "region",
    "cluster_name",
    "kubernetes_version",
    "azs",
    "cuda_efa_az",
    "neuron_az",
    "vpc_cidr",
    "system_capacity_type",
    "system_node_min",
    "system_node_max",
    "system_node_desired",
    "karpenter_capacity_types",
    "karpenter_consolidate_after",
    "cuda_efa_capacity_reservation_ids",
    "ml_namespace",
    "efs_performance_mode",
    "efs_throughput_mode",
    "fsx_deployment_type",
    "fsx_storage_capacity",
    "fsx_per_unit_storage_throughput",
    "fsx_data_repository_path",
]
REQUIRED_OUTPUTS = {
    "cluster_name",
    "cluster_endpoint",
    "configure_kubectl",
    "efs_file_system_id",
    "fsx_file_system_id",
}
ACCOUNT_ID = re.compile(r"(?<![0-9])[0-9]{12}(?![0-9])")
REGION = re.compile(
    r"\b(us|eu|ap|sa|ca|me|af|il|mx|cn)(-gov|-iso[a-z]?)?-(north|south|east|west|central|northeast|"
    r"northwest|southeast|southwest)-[0-9]\b"
)


def unquote(value: Any) -> Any:
    """python-hcl2 keeps the quotes of string literals and wraps expressions in ${...}."""
    if isinstance(value, str):
        if len(value) >= 2 and value[0] == value[-1] == '"':
            return value[1:-1]
        if value.startswith("${") and value.endswith("}"):
            return value[2:-1]
    return value


def blocks(parsed: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    """name -> body of the labelled blocks of one kind (variable, output, module)."""
    out: dict[str, dict[str, Any]] = {}
    for entry in parsed.get(kind, []):
        for label, body in entry.items():
            out[unquote(label)] = body
    return out


def resources(parsed: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(type, name, body) of every resource block."""
    out = []
    for entry in parsed.get("resource", []):
        for rtype, named in entry.items():
            for name, body in named.items():
                out.append((unquote(rtype), unquote(name), body))
    return out


@pytest.fixture(scope="module")
def tf_files(infra_paths: SimpleNamespace) -> list[Path]:
    files = sorted(infra_paths.terraform.glob("*.tf"))
    assert len(files) >= 10
    return files


@pytest.fixture(scope="module")
def config(tf_files: list[Path]) -> dict[str, Any]:
    """All .tf files merged: {kind: [entries...]}."""
    merged: dict[str, list[Any]] = {}
    for path in tf_files:
        with path.open() as fh:
            parsed = hcl2.load(fh)
        for kind, entries in parsed.items():
            merged.setdefault(kind, []).extend(entries)
    return merged


@pytest.mark.integration
def test_terraform_fmt_check(infra_paths: SimpleNamespace) -> None:
    terraform = shutil.which("terraform")
    if terraform is None:
        pytest.skip("terraform is not on PATH")
    proc = subprocess.run(
        [terraform, "fmt", "-check", "-recursive", "-diff", str(infra_paths.terraform)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"terraform fmt would change:\n{proc.stdout}{proc.stderr}"


def test_every_variable_is_typed_and_described(config: dict[str, Any]) -> None:
    variables = blocks(config, "variable")
    assert len(variables) >= 30
    for name, body in variables.items():
        assert body.get("type"), f"variable {name} has no type"
        assert len(unquote(body.get("description", ""))) >= 10, f"variable {name} has no description"


def test_constrained_variables_have_validation_blocks(config: dict[str, Any]) -> None:
    variables = blocks(config, "variable")
    for name in CONSTRAINED:
        assert variables[name].get("validation"), f"variable {name} has no validation block"
        for rule in variables[name]["validation"]:
            assert rule.get("condition") and unquote(rule.get("error_message", ""))


def test_optional_components_have_toggles_with_documented_defaults(config: dict[str, Any]) -> None:
    variables = blocks(config, "variable")
    for name, default in TOGGLES.items():
        assert name in variables, f"missing toggle {name}"
        assert unquote(variables[name]["type"]) == "bool"
        assert variables[name]["default"] is default, f"{name} must default to {default}"


def test_every_toggle_gates_something(config: dict[str, Any]) -> None:
    gated: set[str] = set()
    bodies = [body for _, _, body in resources(config)] + list(blocks(config, "module").values())
    for body in bodies:
        for key in ("count", "create", "for_each"):
            gated |= set(re.findall(r"var\.([a-z_]+_enabled)", str(body.get(key, ""))))
    locals_text = str(config.get("locals", ""))
    gated |= set(re.findall(r"var\.([a-z_]+_enabled)", locals_text))
    assert set(TOGGLES) <= gated, f"toggles that gate nothing: {set(TOGGLES) - gated}"


def test_module_sources_are_pinned(config: dict[str, Any]) -> None:
    modules = blocks(config, "module")
    assert {"vpc", "eks", "karpenter"} <= set(modules)
    for name, body in modules.items():
        source = unquote(body["source"])
        if source.startswith(("./", "../")):
            continue
        if source.startswith(("git::", "github.com/")):
            assert re.search(r"\?ref=v?[0-9]+\.[0-9]+\.[0-9]+$", source), f"module {name}: unpinned {source}"
            continue
        version = unquote(body.get("version", ""))
        assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", version), f"module {name}: version {version!r} not exact"
    sources = {unquote(m["source"]) for m in modules.values()}
    assert "terraform-aws-modules/vpc/aws" in sources
    assert "terraform-aws-modules/eks/aws" in sources
    assert "terraform-aws-modules/eks/aws//modules/karpenter" in sources


def test_helm_releases_have_pinned_chart_versions(config: dict[str, Any], infra_paths: SimpleNamespace) -> None:
    releases = [(name, body) for rtype, name, body in resources(config) if rtype == "helm_release"]
    assert len(releases) >= 10
    locals_text = str(config["locals"])
    for name, body in releases:
        chart = unquote(body["chart"])
        if chart.startswith("${path.module}"):
            local = infra_paths.terraform / chart.replace("${path.module}/", "")
            assert (local / "Chart.yaml").exists(), f"helm_release {name}: {local} is not a chart"
            continue
        version = unquote(body.get("version", ""))
        assert version, f"helm_release {name} has no version"
        match = re.fullmatch(r"local\.chart_versions\.([a-z_]+)", version)
        if match:
            assert re.search(rf"'{match.group(1)}': '\"?v?[0-9]+\.[0-9]+\.[0-9]+", locals_text), (
                f"helm_release {name}: no pinned default for {match.group(1)}"
            )


def test_expected_components_are_installed(config: dict[str, Any]) -> None:
    charts = {unquote(body["chart"]) for rtype, _, body in resources(config) if rtype == "helm_release"}
    for chart in [
        "karpenter",
        "cluster-autoscaler",
        "aws-fsx-csi-driver",
        "nvidia-device-plugin",
        "aws-efa-k8s-device-plugin",
        "neuron-helm-chart",
        "kuberay-operator",
        "lws",
    ]:
        assert chart in charts, f"no helm_release installs {chart}"
    types = {rtype for rtype, _, _ in resources(config)}
    assert {"aws_efs_file_system", "aws_fsx_lustre_file_system", "aws_fsx_data_repository_association"} <= types
    eks = blocks(config, "module")["eks"]
    addons = eks["addons"]
    assert {"aws-ebs-csi-driver", "aws-efs-csi-driver"} <= set(addons)
    assert "system" in eks["eks_managed_node_groups"]


def test_data_repository_association_imports_and_exports(config: dict[str, Any]) -> None:
    (dra,) = [b for t, _, b in resources(config) if t == "aws_fsx_data_repository_association"]
    s3 = dra["s3"][0]
    for policy in ("auto_import_policy", "auto_export_policy"):
        events = [unquote(e) for e in s3[policy][0]["events"]]
        assert set(events) == {"NEW", "CHANGED", "DELETED"}


def test_useful_outputs_are_described(config: dict[str, Any]) -> None:
    outputs = blocks(config, "output")
    assert set(outputs) >= REQUIRED_OUTPUTS
    for name, body in outputs.items():
        assert unquote(body.get("description", "")), f"output {name} has no description"
    assert "update-kubeconfig" in str(outputs["configure_kubectl"]["value"])


def test_no_hard_coded_account_ids_or_regions(tf_files: list[Path], infra_paths: SimpleNamespace) -> None:
    kustomize = sorted((infra_paths.infra / "kustomize").rglob("*.yaml"))
    for path in [*tf_files, *kustomize]:
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            assert not ACCOUNT_ID.search(line), f"{path.name}:{lineno}: account id: {line.strip()}"
            assert not REGION.search(line), f"{path.name}:{lineno}: hard-coded region: {line.strip()}"


def test_tfvars_example_sets_only_declared_variables(config: dict[str, Any], infra_paths: SimpleNamespace) -> None:
    examples = sorted(infra_paths.terraform.glob("*.tfvars.example"))
    assert examples
    variables = blocks(config, "variable")
    required = {name for name, body in variables.items() if "default" not in body}
    assert required == {"region", "cluster_name", "azs"}
    for path in examples:
        with path.open() as fh:
            values = {k: v for k, v in hcl2.load(fh).items() if not k.startswith("__")}
        assert set(values) <= set(variables), f"{path.name}: unknown {set(values) - set(variables)}"
        assert required <= set(values), f"{path.name}: missing {required - set(values)}"
        assert REGION.search(unquote(values["region"]))
        for name in TOGGLES:
            if name in values:
                assert values[name] is TOGGLES[name], f"{path.name}: {name} differs from the default"


def test_kustomize_remote_bases_are_pinned(infra_paths: SimpleNamespace) -> None:
    import yaml

    files = sorted((infra_paths.infra / "kustomize").rglob("kustomization.yaml"))
    assert files
    for path in files:
        doc = yaml.safe_load(path.read_text())
        for res in doc.get("resources", []):
            if "://" in res or res.startswith("github.com"):
                assert re.search(r"\?ref=v[0-9]+\.[0-9]+\.[0-9]+$", res), f"{path}: unpinned {res}"
