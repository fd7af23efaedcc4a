"""validate_manifests catches unknown fields in core kinds, custom resources and pod templates."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from mlrecipe.helm import chart_path, render_chart
from mlrecipe.helm.validate import crds_dir, validate_manifests


@pytest.fixture(scope="module")
def objs() -> list[dict]:
    return render_chart(chart_path("training/pytorchjob-distributed"), {"image": "i"}, "r", "ns")


def test_clean_manifests_pass(objs: list[dict]) -> None:
    assert validate_manifests(objs) == []


def test_custom_resource_typo(objs: list[dict]) -> None:
    bad = copy.deepcopy(objs)
    job = next(o for o in bad if o["kind"] == "PyTorchJob")
    job["spec"]["runPolicy"]["backofLimit"] = 3
    errors = validate_manifests(bad)
    assert any("PyTorchJob/pytorchjob-r.spec.runPolicy" in e and "backofLimit" in e for e in errors), errors


def test_pod_template_typo_inside_custom_resource(objs: list[dict]) -> None:
    bad = copy.deepcopy(objs)
    job = next(o for o in bad if o["kind"] == "PyTorchJob")
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "x"
    assert any("imagePullPolicyy" in e for e in validate_manifests(bad))


def test_core_kind_typo(objs: list[dict]) -> None:
    bad = copy.deepcopy(objs)
    cm = next(o for o in bad if o["kind"] == "ConfigMap")
    cm["dataa"] = {}
    errors = validate_manifests(bad)
    assert any(e.startswith("ConfigMap/step-r") and "dataa" in e for e in errors), errors


def test_invalid_label_value(objs: list[dict]) -> None:
    bad = copy.deepcopy(objs)
    bad[0]["metadata"]["labels"]["x"] = "not a label value!"
    assert any("metadata.labels.x" in e for e in validate_manifests(bad))


def test_unknown_kind_is_reported() -> None:
    errors = validate_manifests([{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}])
    assert errors and "no schema" in errors[0]


def test_crds_dir_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, objs: list[dict]) -> None:
    assert (crds_dir() / "kubeflow.org_pytorchjobs.yaml").is_file()
    monkeypatch.setenv("MLRECIPE_CRDS_DIR", str(tmp_path))
    assert crds_dir() == tmp_path
    assert any("no schema for kubeflow.org/v1 PyTorchJob" in e for e in validate_manifests(objs))
