"""Every pod template carries the release keys as labels and as annotations: Kubeflow Pipelines' helm
component looks a release's pods up by the annotations (without them it finds no pod and uninstalls)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlrecipe.helm.render import charts_root, load_values_file, render_chart
from mlrecipe.spec.catalog import CATALOG, StepKind
from tests.charts.chart_cases import NAMESPACE, RELEASE, pod_templates, scenarios

#: Charts with pods (a SageMaker endpoint's chart renders only a ConfigMap describing it).
WITH_PODS = [s for s in scenarios() if CATALOG[s[0]].kind is not StepKind.ENDPOINT]


@pytest.mark.parametrize("scenario", WITH_PODS, ids=lambda s: f"{s[0]}:{s[1].name}")
def test_pod_templates_carry_the_release_keys(scenario: tuple[str, Path]) -> None:
    name, values_file = scenario
    objs = render_chart(charts_root() / name, load_values_file(values_file), RELEASE, NAMESPACE)
    templates = [t for obj in objs if obj.get("kind") != "Pod" for t in pod_templates(obj.get("spec"))]
    assert templates, f"{name}: no pod template found"
    for template in templates:
        meta = template["metadata"]
        for where in ("labels", "annotations"):
            keys = meta.get(where) or {}
            assert keys.get("app.kubernetes.io/instance") == RELEASE, (name, where)
            assert keys.get("app.kubernetes.io/managed-by") == "Helm", (name, where)
