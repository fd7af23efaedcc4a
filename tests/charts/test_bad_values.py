"""Values that break a chart's schema fail before rendering, naming the field path."""

from __future__ import annotations

import pytest

from mlrecipe.helm import ChartRenderError, chart_path, render_chart

CASES = [
    ("training/pytorchjob-distributed", {"resources": {"nnodes": "two"}}, "resources.nnodes"),
    ("training/pytorchjob-distributed", {"resources": {"node_typ": "g5.xlarge"}}, "resources.node_typ"),
    ("training/pytorchjob-distributed", {"trian": {"command": ["python3"]}}, "trian"),
    (
        "training/pytorchjob-distributed",
        {"tolerations": [{"key": "a", "effect": "Sometimes"}]},
        "tolerations[0].effect",
    ),
    ("training/pytorchjob-elastic", {"elastic_policy": {"rdzv_port": "x"}}, "elastic_policy.rdzv_port"),
    ("training/pytorchjob-elastic", {"train": {"env": [{"value": "no name"}]}}, "train.env[0]"),
    ("training/mpijob", {"mpirun": {"argz": []}}, "mpirun.argz"),
    ("data-prep/data-process", {"pvc": [{"name": "pv-fsx"}]}, "pvc[0]"),
    ("model-prep/hf-snapshot", {"env": [{"name": "HF_TOKEN", "value": "hf_secret"}]}, "env[0]"),
    ("model-prep/hf-snapshot", {"hf_token": "hf_secret"}, "hf_token"),
    (
        "serving/triton-inference-server",
        {"server": {"ports": [{"name": "http", "value": "eighty"}]}},
        "server.ports",
    ),
    ("serving/triton-inference-server-lws", {"lws": {"worker_mode": "busy"}}, "lws.worker_mode"),
    ("serving/rayserve", {"pre_script": ["echo dropped"]}, "pre_script"),
    ("serving/generic-server", {"step_name": "Not A Label"}, "step_name"),
]


@pytest.mark.parametrize(("chart", "values", "path"), CASES, ids=[c[2] for c in CASES])
def test_schema_error_names_the_field(chart: str, values: dict, path: str) -> None:
    base = {"image": {"name": "img:1"}} if chart.startswith("serving/") and chart != "serving/rayserve" else {}
    with pytest.raises(ChartRenderError) as info:
        render_chart(chart_path(chart), {**base, **values}, "r", "ns")
    paths = [e.path for e in info.value.errors]
    assert any(p == path or p.startswith(path) for p in paths), paths
    assert path in str(info.value)


def test_a_template_check_names_the_value_it_checks() -> None:
    with pytest.raises(ChartRenderError) as info:
        render_chart(chart_path("training/pytorchjob-distributed"), {}, "r", "ns")
    assert "image is required" in info.value.detail, "Helm's own message is kept"
    assert [(e.path, e.message.split(":")[0]) for e in info.value.errors] == [("image", "required")]
    assert "image: required: set image to" in str(info.value)


def test_unknown_catalog_name() -> None:
    with pytest.raises(ChartRenderError, match="no chart"):
        chart_path("training/nope")
