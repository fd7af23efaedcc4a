"""The library chart and the step runtime reach every chart through links that stay identical to
their sources, and every chart ships its documentation, schema and scenarios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlrecipe.helm import render_chart
from mlrecipe.helm.render import charts_root
from mlrecipe.helm.schemas import CATALOG, schema_text

REPO = charts_root().parents[1]
LIB = charts_root() / "library" / "mlrecipe-lib"
RUNTIME = REPO / "src" / "mlrecipe" / "runtime" / "step_runtime.py"


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", CATALOG)
def test_vendored_library_is_the_source(name: str) -> None:
    vendored = charts_root() / name / "charts" / "mlrecipe-lib"
    assert vendored.is_symlink(), "charts/mlrecipe-lib must link to the library chart"
    assert vendored.resolve() == LIB.resolve()
    assert _tree(vendored) == _tree(LIB)


@pytest.mark.parametrize("name", CATALOG)
def test_runtime_link_is_the_source(name: str) -> None:
    link = charts_root() / name / "files" / "step_runtime.py"
    assert link.is_symlink()
    assert link.resolve() == RUNTIME.resolve()
    assert link.read_bytes() == RUNTIME.read_bytes()


@pytest.mark.parametrize("name", [n for n in CATALOG if n != "serving/rayserve"])
def test_configmap_carries_the_runtime(name: str) -> None:
    values = {"image": {"name": "img:1"}} if name.startswith("serving/") else {"image": "img:1"}
    objs = render_chart(charts_root() / name, values, "r", "ns")
    cms = [o for o in objs if o["kind"] == "ConfigMap" and "step_runtime.py" in o.get("data", {})]
    assert len(cms) == 1
    assert cms[0]["data"]["step_runtime.py"] == RUNTIME.read_text(encoding="utf-8")
    program = json.loads(cms[0]["data"]["step.json"])
    assert set(program) == {
        "version", "release", "namespace", "step", "chart", "git",
        "inline_script", "pre_script", "command", "args", "post_script",
    }  # fmt: skip
    assert program["chart"] == name and program["release"] == "r" and program["namespace"] == "ns"


@pytest.mark.parametrize("name", CATALOG)
def test_chart_files(name: str) -> None:
    chart = charts_root() / name
    for required in ("Chart.yaml", "values.yaml", "values.schema.json", "README.md"):
        assert (chart / required).is_file(), required
    assert list((chart / "ci").glob("*-values.yaml"))
    assert "helm install" in (chart / "README.md").read_text(encoding="utf-8")
    assert f"mlrecipe.io/catalog-name: {name}" in (chart / "Chart.yaml").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", CATALOG)
def test_schema_file_is_generated(name: str) -> None:
    text = (charts_root() / name / "values.schema.json").read_text(encoding="utf-8")
    assert text == schema_text(name), "run: PYTHONPATH=src python -m mlrecipe.helm.schemas"


@pytest.mark.parametrize("name", CATALOG)
def test_chart_defaults_satisfy_the_schema(name: str) -> None:
    import helm_python

    chart = helm_python.Chart.load(charts_root() / name)
    chart.validate_schema(chart.values)
