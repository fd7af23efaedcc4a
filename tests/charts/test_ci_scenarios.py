"""Every chart x every ci/ scenario renders through Helm, passes Kubernetes 1.33 strict schemas and
its CRD schemas, and matches its golden file (written only with --update-golden)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlrecipe.helm.render import charts_root, load_values_file, render_chart, render_text
from mlrecipe.helm.validate import validate_manifests
from tests.charts.chart_cases import NAMESPACE, RELEASE, golden_path, scenarios
from tests.golden import check_golden

SCENARIOS = scenarios()
_RUNTIME = re.compile(r'(?m)^(  step_runtime\.py: )".*"$')
_TREE_SCRIPT = re.compile(r'(?m)^(  )([\w.-]+--[\w.-]+): ".*"$')


def _id(item: tuple[str, Path]) -> str:
    return f"{item[0]}:{item[1].name}"


def test_every_chart_has_scenarios() -> None:
    charts = {name for name, _ in SCENARIOS}
    expected = {p.parent.relative_to(charts_root()).as_posix() for p in charts_root().glob("*/*/Chart.yaml")}
    assert charts == expected - {"library/mlrecipe-lib"}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=_id)
def test_renders_and_validates(scenario: tuple[str, Path]) -> None:
    name, values_file = scenario
    objs = render_chart(charts_root() / name, load_values_file(values_file), RELEASE, NAMESPACE)
    assert objs, "nothing rendered"
    assert validate_manifests(objs, kube_version="1.33") == []
    for obj in objs:
        assert len(obj["metadata"]["name"]) <= 63
        labels = obj["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/instance") == RELEASE
        assert labels.get("app.kubernetes.io/managed-by") == "Helm"
        assert "mlrecipe.io/step" in labels


@pytest.mark.parametrize("scenario", SCENARIOS, ids=_id)
def test_golden(scenario: tuple[str, Path], update_golden: bool) -> None:
    name, values_file = scenario
    text = render_text(charts_root() / name, load_values_file(values_file), RELEASE, NAMESPACE)
    # The runtime source is checked by test_vendoring; keep the goldens free of its churn.
    text = _RUNTIME.sub(r'\1"<src/mlrecipe/runtime/step_runtime.py>"', text)
    # So are the framework scripts (test_framework_delivery).
    text = _TREE_SCRIPT.sub(lambda m: f'{m.group(1)}{m.group(2)}: "<scripts/.../{m.group(2).replace("--", "/")}>"',
                            text)
    flat = sorted({p.name for p in (charts_root() / name / "scripts").glob("*/*") if p.is_file()})
    if flat:  # a flat framework folder (serving charts): its files by their base names
        keys = "|".join(re.escape(n) for n in flat)
        text = re.sub(rf'(?m)^(  )({keys}): ".*"$', lambda m: f'{m.group(1)}{m.group(2)}: "<scripts/.../{m.group(2)}>"',
                      text)
    check_golden(golden_path(name, values_file), text, update_golden)
