"""helm lint (strict, Kubernetes 1.33) finds no warning or error in any chart."""

from __future__ import annotations

import pytest

from mlrecipe.helm._engine import _quiet_stderr
from mlrecipe.helm.render import charts_root, load_values_file
from mlrecipe.helm.schemas import CATALOG


@pytest.mark.parametrize("name", CATALOG)
def test_helm_lint_strict(name: str) -> None:
    import helm_python

    chart = charts_root() / name
    values = load_values_file(sorted((chart / "ci").glob("*-values.yaml"))[0])
    with _quiet_stderr():
        report = helm_python.lint(str(chart), values, strict=True, kube_version="v1.33.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == []
