"""Kubernetes plans: golden manifest streams, manifest validation, the CLI, and schema errors.

Refresh the golden files with ``pytest tests/kubernetes --update-golden`` and review the diff (only that
flag writes them; a missing golden file fails).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mlrecipe.backends.base import ReleaseContext
from mlrecipe.backends.kubernetes.plan import KubernetesPlan, helm_release_name
from mlrecipe.backends.kubernetes.static_chart import escape_template
from mlrecipe.backends.registry import get_backend
from mlrecipe.cli.app import app
from mlrecipe.helm.validate import validate_manifests
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs
from mlrecipe.spec.errors import SpecError
from mlrecipe.spec.load import StepSpec
from tests.golden import check_golden, normalize
from tests.repo import EXAMPLES, REPO

GOLDEN = REPO / "tests" / "golden" / "kubernetes"
DDP = EXAMPLES / "reference-style" / "pretrain-ddp.yaml"

CASES: dict[str, dict[str, Any]] = {
    "quickstart": {"kind": "pipeline", "path": str(EXAMPLES / "quickstart" / "pipeline.yaml"), "sets": []},
    "reference-style-ddp": {
        "kind": "install", "release": "raw-ddp", "chart": "training/pytorchjob-distributed",
        "files": [str(DDP)], "sets": [], "namespace": "default",
    },
}


def _runner(name: str) -> ReleaseRunner:
    return ReleaseRunner(spec_from_inputs(CASES[name]), get_backend("kubernetes"), CASES[name], QuietDisplay())


@pytest.mark.parametrize("name", sorted(CASES))
def test_kubernetes_plan_golden(name: str, mlhome: Path, update_golden: bool) -> None:
    text = normalize(_runner(name).materialize(), [(str(REPO), "$REPO")])
    check_golden(GOLDEN / f"{name}.yaml", text, update_golden)
    assert text.startswith("# step ") and "on backend kubernetes\n---\n# Source: " in text
    assert not (mlhome / "releases").exists(), "materializing a plan writes nothing"


@pytest.mark.parametrize("name", sorted(CASES))
def test_rendered_objects_validate(name: str, mlhome: Path) -> None:
    runner = _runner(name)
    backend, ctx = runner.backend, runner.context
    for step in runner.spec.steps:
        plan = backend.plan(step, ctx)
        assert isinstance(plan, KubernetesPlan)
        assert plan.objects, f"step {step.name} renders nothing"
        assert validate_manifests(plan.objects) == []
        assert plan.workload() is not None
        if CASES[name]["kind"] == "install":  # one step: the reference's names (helm install REL CHART)
            assert plan.helm_release == ctx.release
            assert plan.workload()["metadata"]["name"] == f"pytorchjob-{ctx.release}"
        else:  # a pipeline: every step its own Helm release and object names
            assert plan.helm_release == f"{ctx.release}-{step.name}"


def test_cli_template_prints_manifests(mlhome: Path) -> None:
    result = CliRunner().invoke(
        app, ["template", "raw-ddp", "training/pytorchjob-distributed", "-f", str(DDP), "--backend", "kubernetes"]
    )
    assert result.exit_code == 0, result.output
    assert "kind: PyTorchJob" in result.stdout
    assert result.stdout.startswith("# step pytorchjob-distributed (training/pytorchjob-distributed) on backend")


def test_cli_helm_schema_error_exits_2(mlhome: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A value only the chart's values.schema.json rejects reaches Helm; the CLI prints its field path."""
    original = StepSpec.chart_values

    def bad(self: StepSpec) -> dict[str, Any]:
        values = original(self)
        values["resources"] = {**values["resources"], "nnodes": "two"}
        return values

    monkeypatch.setattr(StepSpec, "chart_values", bad)
    result = CliRunner().invoke(
        app, ["template", "raw-ddp", "training/pytorchjob-distributed", "-f", str(DDP), "--backend", "kubernetes"]
    )
    assert result.exit_code == 2
    assert "resources.nnodes" in result.stderr and "kind: PyTorchJob" not in result.stdout


def test_cli_spec_error_exits_2(mlhome: Path) -> None:
    result = CliRunner().invoke(
        app, ["template", "raw-ddp", "training/pytorchjob-distributed", "-f", str(DDP), "--backend", "kubernetes",
              "--set", "resources.nnodes=0"],
    )
    assert result.exit_code == 2
    assert "resources.nnodes" in result.stderr


def test_plan_schema_error_is_spec_error(mlhome: Path) -> None:
    runner = _runner("reference-style-ddp")
    step = runner.spec.steps[0]
    bad = dataclasses.replace(step, values={**step.values, "image_pull_policy": "Sometimes"})
    with pytest.raises(SpecError) as info:
        runner.backend.plan(bad, runner.context)
    assert [i.path for i in info.value.issues] == ["image_pull_policy"]


def test_helm_release_name_fits_helm() -> None:
    name = helm_release_name("a" * 40, "evaluate-the-model-on-held-out-data")
    assert len(name) <= 53 and not name.endswith("-")


def test_escape_template_roundtrips_through_helm(tmp_path: Path) -> None:
    from mlrecipe.helm.render import render_text

    chart = tmp_path / "c"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: c\nversion: 0.1.0\n")
    body = 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: "{{ .Release.Name }} }}"\n'
    (chart / "templates" / "m.yaml").write_text(escape_template(body))
    assert render_text(chart, {}, "r", "default").endswith(body)


def test_backend_registered_with_every_kind() -> None:
    from mlrecipe.spec.catalog import StepKind

    backend = get_backend("kubernetes")  # every kind but a SageMaker endpoint, which has no Kubernetes workload
    assert backend.name == "kubernetes" and backend.kinds == frozenset(StepKind) - {StepKind.ENDPOINT}
    ctx = ReleaseContext("r", "default", "kubernetes", Path("/state"))
    assert backend.log_path(ctx, "train", 3) == Path("/state/steps/train/rank-3.log")
