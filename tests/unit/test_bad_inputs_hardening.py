"""Bad inputs found by fuzzing (issue 29): each is exit 2 with one ``error:`` line naming file, line and field,
never a traceback, and nothing is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlrecipe.cli.app import app
from mlrecipe.spec.yamlfile import parse_yaml

TRAIN = 'train:\n  command: [python3]\n  args: [-c, "print(1)"]\n'
PYTORCH = "training/pytorchjob-distributed"
RAYTRAIN = "training/raytrain"

# (name, recipe text, chart, extra argv, expected substring, line)
CASES = [
    ("nnodes-4301-digits", "resources:\n  nnodes: " + "9" * 4301 + "\n" + TRAIN, PYTORCH, [],
     "resources.nnodes: YAML document refused: cannot read an integer of more than 4,300 digits", 2),
    ("tagged-bool", "image: !!bool maybe\n" + TRAIN, PYTORCH, [], "image: YAML document refused: cannot read !!bool "
     "'maybe'", 1),
    ("tagged-float", TRAIN + "backoff_limit: !!float x\n", PYTORCH, [], "backoff_limit: YAML document refused: "
     "cannot read !!float 'x'", 4),
    ("tagged-int", "resources:\n  nnodes: !!int x\n" + TRAIN, PYTORCH, [], "resources.nnodes: YAML document "
     "refused: cannot read !!int 'x'", 2),
    ("tagged-timestamp", "image: !!timestamp x\n" + TRAIN, PYTORCH, [], "image: YAML document refused: cannot read "
     "!!timestamp 'x'", 1),
    ("image-4000-hex-digits", "image: 0x" + "f" * 4000 + "\n" + TRAIN, PYTORCH, [],
     "image: must be a valid string, got an integer of 16,000 bits", 1),
    ("ray-resources-scalar", "ray: {resources: x}\n" + TRAIN, RAYTRAIN, [], "ray.resources: must be a valid "
     "dictionary", 1),
    ("ray-resources-limits-bool", "ray:\n  resources: {limits: on}\n" + TRAIN, RAYTRAIN, [],
     "ray.resources.limits: must be a valid dictionary", 2),
    ("ray-resources-unknown", "ray:\n  resources: {limitz: {}}\n" + TRAIN, RAYTRAIN, [],
     "ray.resources.limitz", 2),
    ("raytrain-cpu-nan", "resources:\n  requests: {cpu: .nan}\n" + TRAIN, RAYTRAIN, [],
     "resources.requests.cpu: must be a finite number", 2),
    ("slurm-cpu-nan", "resources:\n  requests: {cpu: .nan}\n" + TRAIN, PYTORCH, ["--backend", "slurm"],
     "resources.requests.cpu: must be a finite number", 2),
    ("slurm-cpu-inf", "resources:\n  requests:\n    cpu: .inf\n" + TRAIN, PYTORCH, ["--backend", "slurm"],
     "resources.requests.cpu: must be a finite number", 3),
    ("binary-env-beside-template", "train:\n  command: [python3]\n  env:\n    - {name: A, value: !!binary aGVsbG8=}\n"
     "    - {name: B, value: '{{ .Release.Name }}'}\n", PYTORCH, [],
     "train.env[0].value: YAML document refused: !!binary values are not supported", 4),
    ("set-value", "image: !!set {a, b}\n" + TRAIN, PYTORCH, [], "image: YAML document refused: !!set values", 1),
    ("key-of-another-block", "nnodes: 2\n" + TRAIN, PYTORCH, [],
     "nnodes: unknown key 'nnodes' here (it is a key of another block)", 1),
    ("quantity-unreadable", "resources:\n  limits:\n    nvidia.com/gpu: " + "x" * 300 + "\n" + TRAIN, PYTORCH, [],
     "resources.limits.nvidia.com/gpu: cannot read quantity 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...'", 3),
    ("quantity-negative", "resources:\n  limits: {nvidia.com/gpu: -1}\n" + TRAIN, PYTORCH, ["--backend", "slurm"],
     "resources.limits.nvidia.com/gpu: must not be negative, got -1", 2),
    ("quantity-bool", "resources:\n  requests: {cpu: yes}\n" + TRAIN, PYTORCH, [],
     "resources.requests.cpu: must be a number or a quantity such as 500m, 4 or 16Gi, got True", 2),
    ("quantity-exponent", "resources:\n  requests: {cpu: '1e3'}\n" + TRAIN, PYTORCH, ["--backend", "slurm"],
     "resources.requests.cpu: cannot read quantity '1e3'", 2),
    ("nnodes-beyond-any-cluster", "resources:\n  nnodes: 2147483648\n" + TRAIN, PYTORCH, ["--backend", "slurm"],
     "resources.nnodes: must be less than or equal to 100000, got 2147483648", 2),
    ("probe-port-out-of-range", "server:\n  command: [python3]\n  readiness_probe: {port: 99999}\n",
     "serving/generic-server", [], "server.readiness_probe.port: must be less than or equal to 65535", 3),
    ("probe-period-beyond-int32", "server:\n  command: [python3]\n  readiness_probe:\n    period_secs: "
     + "9" * 20 + "\n", "serving/generic-server", [], "server.readiness_probe.period_secs: must be less than or "
     "equal to 2147483647", 4),
    ("framework-too-long", "framework: " + "x" * 300 + "\n" + TRAIN, PYTORCH, [], "framework: String should have "
     "at most 100 characters", 1),
    ("framework-a-path", "framework: ../../../etc\n" + TRAIN, PYTORCH, [], "framework: String should match pattern",
     1),
    ("kubernetes-inf-value", "image: python:3.11\nkueue: {weight: .inf}\n" + TRAIN, PYTORCH,
     ["--backend", "kubernetes"], "kueue.weight: inf cannot be given to Helm (JSON has no infinity or NaN)", 2),
    ("kubernetes-null-block", "image: python:3.11\nresources: null\n" + TRAIN, PYTORCH, ["--backend", "kubernetes"],
     "resources: the chart reads resources.", 2),
]


def _clean_failure(result, home: Path, expected: str, where: str) -> None:
    out = result.output
    assert result.exit_code == 2, out
    assert "Traceback" not in out, out
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert f"error: {where}: {expected}" in out, out
    assert not (home / "releases").exists(), "state was written for bad input"


@pytest.mark.parametrize("name,text,chart,extra,expected,line", CASES, ids=[c[0] for c in CASES])
def test_bad_recipe_value(tmp_path: Path, mlhome: Path, name: str, text: str, chart: str, extra: list[str],
                          expected: str, line: int) -> None:
    recipe = tmp_path / f"{name}.yaml"
    recipe.write_text(text)
    for argv in (["validate", str(recipe), "--chart", chart, *extra], ["template", "rel", chart, "-f", str(recipe),
                                                                       *extra]):
        _clean_failure(CliRunner().invoke(app, argv), mlhome, expected, f"{recipe}:{line}")


def test_a_timestamp_stays_its_text_as_helm_reads_it() -> None:
    doc = parse_yaml("env:\n  - {name: DAY, value: 2024-01-02}\n  - {name: AT, value: 2024-01-02T10:00:00Z}\n", "r")
    day, at = doc.data["env"]
    assert (day["value"], at["value"]) == ("2024-01-02", "2024-01-02T10:00:00Z")
    json.dumps(doc.data)  # every value Helm can be given


@pytest.mark.parametrize(
    "content,line,column,what",
    [
        (b"image: x\ntrain:\n  command: [a\x01b]\n", 3, 14, "character U+0001 (a control character) is not allowed"),
        (b"image: x\ntrain:\n  command: [a\xffb]\n", 3, 14, "not UTF-8 text: column 14: byte 0xff cannot be decoded"),
    ],
    ids=["control-character", "non-utf8-byte"],
)
def test_bad_characters_located_by_line_and_column(tmp_path: Path, mlhome: Path, content: bytes, line: int,
                                                   column: int, what: str) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_bytes(content)
    result = CliRunner().invoke(app, ["validate", str(recipe), "--chart", PYTORCH])
    assert result.exit_code == 2, result.output
    assert f"{recipe}:{line}: " in result.output and f"column {column}" in result.output, result.output
    assert what in result.output
    assert "position" not in result.output


def test_pipeline_step_without_recipe_names_the_file_and_line(tmp_path: Path, mlhome: Path) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text("release: r\nsteps:\n  - name: a\n    chart: data-prep/data-process\n")
    result = CliRunner().invoke(app, ["validate", str(pipeline)])
    assert result.exit_code == 2, result.output
    assert f"error: {pipeline}:3: steps[0].recipe.process.command: empty command" in result.output
    assert "<input>" not in result.output


@pytest.mark.parametrize(
    "pipeline_text,expected,line",
    [
        ("release: r\nbackend: UPPER\nsteps:\n  - {name: a, chart: data-prep/data-process, recipe: {process: "
         "{command: [x]}}}\n", "backend: unknown backend 'UPPER'; known:", 2),
        ("release: r\nsteps:\n  - name: a\n    chart: data-prep/data-process\n    recipe: /\n",
         "steps[0].recipe: /: is a directory, expected a YAML file", 5),
        ("release: r\nsteps:\n  - name: a\n    chart: data-prep/data-process\n    recipe: [ok.yaml, nope.yaml]\n",
         "steps[0].recipe: {dir}/nope.yaml: file not found", 5),
    ],
    ids=["pipeline-backend-unknown", "recipe-is-a-directory", "recipe-file-missing"],
)
def test_pipeline_problems_are_named_where_the_pipeline_says_them(tmp_path: Path, mlhome: Path, pipeline_text: str,
                                                                  expected: str, line: int) -> None:
    (tmp_path / "ok.yaml").write_text("process: {command: [python3]}\n")
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(pipeline_text)
    for argv in (["validate", str(pipeline)], ["run", str(pipeline), "--dry-run"]):
        _clean_failure(CliRunner().invoke(app, argv), mlhome, expected.format(dir=tmp_path), f"{pipeline}:{line}")
