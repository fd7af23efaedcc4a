"""The library's ``mlrecipe.podSpec`` takes one dict of options: each documented above its define, any other
key refused when rendering (a misspelt option would otherwise be ignored and change the pod silently)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from mlrecipe.errors import ChartRenderError
from mlrecipe.helm.render import charts_root, render_chart

LIBRARY = charts_root() / "library" / "mlrecipe-lib"
POD_TPL = LIBRARY / "templates" / "_pod.tpl"


def _sections() -> tuple[str, str]:
    """(the comment block above the define, the define's body)."""
    text = POD_TPL.read_text()
    head, body = text.split('{{- define "mlrecipe.podSpec" -}}', 1)
    return head, body


def test_every_option_read_is_declared_and_documented() -> None:
    doc, body = _sections()
    declared = re.search(r'\$options := list (?P<names>[^-]*?) -}}', body, re.S)
    assert declared is not None, "the define lists its options"
    options = set(re.findall(r'"(\w+)"', declared.group("names")))
    # Options read from the dict: `.name` at the define's top level (not `$x.name`, `$ctx.Values...`).
    read = set(re.findall(r'(?<![\w$)\]])\.([a-z]\w*)', body)) - {"Values"}
    documented = set(re.findall(r"^  (\w+) {2,}\S", doc, re.M)) - {"option"}  # less the table's header
    assert {"container", "extraVolumes", "sidecars", "program"} <= read, "the pattern finds the options read"
    assert read <= options, f"read but not declared: {sorted(read - options)}"
    assert options == documented, f"declared vs documented differ: {sorted(options ^ documented)}"
    assert {"extraVolumes", "extraMounts"} <= documented


def _chart_calling_pod_spec(tmp_path: Path, options: str) -> Path:
    chart = tmp_path / "probe"
    (chart / "templates").mkdir(parents=True)
    (chart / "charts").mkdir()
    shutil.copytree(LIBRARY, chart / "charts" / "mlrecipe-lib")
    (chart / "Chart.yaml").write_text(
        "apiVersion: v2\nname: probe\nversion: 0.1.0\ntype: application\n"
        "dependencies:\n  - name: mlrecipe-lib\n    version: 0.1.0\n    repository: file://../mlrecipe-lib\n"
    )
    (chart / "values.yaml").write_text("image: busybox:1\nresources: {}\n")
    (chart / "templates" / "pod.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: probe\nspec:\n"
        f'  {{{{- include "mlrecipe.podSpec" (dict "ctx" $ {options}) | trim | nindent 2 }}}}\n'
    )
    return chart


def test_a_documented_option_renders(tmp_path: Path) -> None:
    mount = '(list (dict "name" "x" "mountPath" "/x"))'
    chart = _chart_calling_pod_spec(tmp_path, f'"container" "main" "extraMounts" {mount}')
    (pod,) = render_chart(chart, {}, "demo", "ml")
    (container,) = pod["spec"]["containers"]
    assert container["name"] == "main"
    assert container["volumeMounts"][-1] == {"name": "x", "mountPath": "/x"}


def test_an_unknown_option_fails_the_render(tmp_path: Path) -> None:
    chart = _chart_calling_pod_spec(tmp_path, '"container" "main" "extraMount" (list)')
    with pytest.raises(ChartRenderError, match='unknown option "extraMount"'):
        render_chart(chart, {}, "demo", "ml")


def test_the_container_name_is_required(tmp_path: Path) -> None:
    chart = _chart_calling_pod_spec(tmp_path, '"runtime" false')
    with pytest.raises(ChartRenderError, match="needs the option container"):
        render_chart(chart, {}, "demo", "ml")
