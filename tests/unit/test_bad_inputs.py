"""A corpus of bad inputs: each gives exit code 2, one clear message naming file, line and field,
no traceback, and nothing started or written."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlrecipe.cli.app import app

GOOD_TRAIN = """\
resources:
  nnodes: 1
train:
  command: [python3]
  args: [-c, "'print(1)'"]
"""

# (name, recipe text, chart, expected substring, expected line or None)
RECIPE_CASES = [
    ("pvc-name-a-path", GOOD_TRAIN + "pvc:\n  - name: ../../etc\n    mount_path: /fsx\n",
     "training/pytorchjob-distributed", "pvc[0].name: String should match pattern", 7),
    ("yaml-syntax", "resources:\n  nnodes: [1,\n", "training/pytorchjob-distributed", "YAML syntax error", None),
    ("unknown-top-key", GOOD_TRAIN + "imagee: x\n", "training/pytorchjob-distributed",
     "unknown key 'imagee' (did you mean 'image'?)", 6),
    ("unknown-resource-key", GOOD_TRAIN.replace("nnodes: 1", "nnodes: 1\n  nproc_per_nod: 2"),
     "training/pytorchjob-distributed", "resources.nproc_per_nod: unknown key", 3),
    ("nnodes-zero", GOOD_TRAIN.replace("nnodes: 1", "nnodes: 0"), "training/pytorchjob-distributed",
     "resources.nnodes: must be greater than or equal to 1, got 0", 2),
    ("nnodes-negative", GOOD_TRAIN.replace("nnodes: 1", "nnodes: -3"), "training/pytorchjob-distributed",
     "resources.nnodes", 2),
    ("nnodes-string", GOOD_TRAIN.replace("nnodes: 1", "nnodes: two"), "training/pytorchjob-distributed",
     "resources.nnodes: must be a valid integer", 2),
    ("nproc-zero", GOOD_TRAIN.replace("nnodes: 1", "nproc_per_node: 0"), "training/pytorchjob-distributed",
     "resources.nproc_per_node", 2),
    ("empty-command", "train:\n  command: []\n", "training/pytorchjob-distributed", "empty command", 2),
    ("missing-command-block", "resources:\n  nnodes: 1\n", "data-prep/data-process", "empty command", None),
    ("wrong-block", GOOD_TRAIN.replace("train:", "process:"), "training/pytorchjob-distributed",
     "reads its command from 'train', not 'process'", 3),
    ("env-not-list", GOOD_TRAIN + "  env: {HOME: /x}\n", "training/pytorchjob-distributed", "train.env", 6),
    ("env-missing-name", GOOD_TRAIN + "  env:\n    - value: x\n", "training/pytorchjob-distributed",
     "train.env[0].name: required field is missing", 7),
    ("env-bad-name", GOOD_TRAIN + "  env:\n    - name: 'A B'\n      value: x\n", "training/pytorchjob-distributed",
     "train.env[0].name", 7),
    ("toleration-operator", GOOD_TRAIN + "tolerations:\n  - key: a\n    operator: Maybe\n",
     "training/pytorchjob-distributed", "tolerations[0].operator", 8),
    ("toleration-effect", GOOD_TRAIN + "tolerations:\n  - key: a\n    effect: NoRun\n",
     "training/pytorchjob-distributed", "tolerations[0].effect", 8),
    ("pvc-relative-path", GOOD_TRAIN + "pvc:\n  - name: pv-fsx\n    mount_path: fsx\n",
     "training/pytorchjob-distributed", "pvc[0].mount_path", 8),
    ("pvc-missing-name", GOOD_TRAIN + "pvc:\n  - mount_path: /fsx\n", "training/pytorchjob-distributed",
     "pvc[0].name: required field is missing", 7),
    ("elastic-on-static", GOOD_TRAIN + "elastic_policy:\n  max_restarts: 1\n", "training/pytorchjob-distributed",
     "'elastic_policy' is not used by chart training/pytorchjob-distributed", 6),
    ("elastic-bad-backend", GOOD_TRAIN + "elastic_policy:\n  rdzv_backend: zk\n", "training/pytorchjob-elastic",
     "elastic_policy.rdzv_backend", 7),
    ("elastic-min-gt-max", GOOD_TRAIN + "elastic_policy:\n  min_replicas: 3\n  max_replicas: 2\n",
     "training/pytorchjob-elastic", "min_replicas must be <= max_replicas", 6),
    ("launcher-and-command", GOOD_TRAIN + "launcher:\n  type: torchrun\n  script: t.py\n",
     "training/pytorchjob-distributed", "give either 'launcher' or a command", 4),
    ("launcher-bad-type", "launcher:\n  type: deepspeedx\n  script: t.py\n", "training/pytorchjob-distributed",
     "launcher.type", 2),
    ("launcher-no-script", "launcher:\n  type: torchrun\n", "training/pytorchjob-distributed",
     "launcher.script: required field is missing", 1),
    ("recipe-is-list", "- a\n- b\n", "training/pytorchjob-distributed", "a recipe must be a mapping", 1),
    ("duplicate-key", GOOD_TRAIN + "resources:\n  nnodes: 2\n", "training/pytorchjob-distributed",
     "resources: duplicate key", 6),
    ("backoff-negative", GOOD_TRAIN + "backoff_limit: -1\n", "training/pytorchjob-distributed", "backoff_limit", 6),
    ("git-unknown", GOOD_TRAIN + "git:\n  repo: https://x\n", "training/pytorchjob-distributed",
     "git.repo: unknown key 'repo'", 7),
    ("mpirun-on-torch", GOOD_TRAIN + "mpirun:\n  args: [-np, '2']\n", "training/pytorchjob-distributed",
     "'mpirun' is not used by chart", 6),
]

# (name, pipeline text, expected substring, expected line or None)
PIPELINE_CASES = [
    ("no-steps", "release: r\nsteps: []\n", "steps: List should have at least 1 item", 2),
    ("release-bad-name", "release: My_Release\nsteps:\n  - {name: a, chart: data-prep/data-process}\n",
     "release: String should match pattern", 1),
    ("unknown-chart", "release: r\nsteps:\n  - name: a\n    chart: training/pytorchjob-distributd\n"
     "    recipe: {train: {command: [x]}}\n",
     "unknown chart 'training/pytorchjob-distributd' (did you mean 'training/pytorchjob-distributed'?)", 4),
    ("duplicate-step", "release: r\nsteps:\n"
     "  - {name: a, chart: data-prep/data-process, recipe: {process: {command: [x]}}}\n"
     "  - {name: a, chart: data-prep/data-process, recipe: {process: {command: [y]}}}\n",
     "duplicate step name 'a'", 4),
    ("cycle", "release: r\nsteps:\n"
     "  - {name: a, chart: data-prep/data-process, recipe: {process: {command: [x]}}, depends_on: [b]}\n"
     "  - {name: b, chart: data-prep/data-process, recipe: {process: {command: [y]}}, depends_on: [a]}\n",
     "dependency cycle among steps: a -> b", 3),
    ("unknown-dependency", "release: r\nsteps:\n"
     "  - {name: a, chart: data-prep/data-process, recipe: {process: {command: [x]}}, depends_on: [zz]}\n",
     "unknown step 'zz'", 3),
    ("missing-recipe-file", "release: r\nsteps:\n  - {name: a, chart: data-prep/data-process, recipe: nope.yaml}\n",
     "nope.yaml: file not found", None),
    ("inline-nnodes-zero", "release: r\nsteps:\n  - name: a\n    chart: data-prep/data-process\n    recipe:\n"
     "      resources: {nnodes: 0}\n      process: {command: [x]}\n",
     "steps[0].recipe.resources.nnodes: must be greater than or equal to 1, got 0", 6),
    ("values-override-bad", "release: r\nsteps:\n  - name: a\n    chart: data-prep/data-process\n"
     "    recipe: {process: {command: [x]}}\n    values:\n      resources: {nnodes: 0}\n",
     "steps[0].values.resources.nnodes", 7),
    ("step-unknown-key", "release: r\nsteps:\n  - name: a\n    chart: data-prep/data-process\n    recipie: {}\n",
     "steps[0].recipie: unknown key 'recipie' (did you mean 'recipe'?)", 5),
]


def _assert_clean_failure(result, home: Path, expected: str, line: int | None, file: Path | None) -> None:
    out = result.output
    assert result.exit_code == 2, out
    assert expected in out, out
    assert "Traceback" not in out
    if file is not None and line is not None:
        assert f"{file}:{line}:" in out, out
    assert not (home / "releases").exists(), "state was written for bad input"


@pytest.mark.parametrize("name,text,chart,expected,line", RECIPE_CASES, ids=[c[0] for c in RECIPE_CASES])
def test_bad_recipe(tmp_path: Path, mlhome: Path, name: str, text: str, chart: str, expected: str,
                    line: int | None) -> None:
    recipe = tmp_path / f"{name}.yaml"
    recipe.write_text(text)
    for argv in (["validate", str(recipe), "--chart", chart], ["install", "rel", chart, "-f", str(recipe)]):
        result = CliRunner().invoke(app, argv)
        _assert_clean_failure(result, mlhome, expected, line, recipe)


@pytest.mark.parametrize("name,text,expected,line", PIPELINE_CASES, ids=[c[0] for c in PIPELINE_CASES])
def test_bad_pipeline(tmp_path: Path, mlhome: Path, name: str, text: str, expected: str, line: int | None) -> None:
    pipeline = tmp_path / f"{name}.yaml"
    pipeline.write_text(textwrap.dedent(text))
    for argv in (["validate", str(pipeline)], ["run", str(pipeline)]):
        result = CliRunner().invoke(app, argv)
        _assert_clean_failure(result, mlhome, expected, line, pipeline)


def test_all_errors_of_a_file_at_once(tmp_path: Path, mlhome: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("imagee: x\nresources:\n  nnodes: 0\n  node_typ: p4d\ntrain:\n  command: [x]\n")
    result = CliRunner().invoke(app, ["validate", str(recipe), "--chart", "training/pytorchjob-distributed"])
    assert result.exit_code == 2
    for expected in (f"{recipe}:1: imagee", f"{recipe}:3: resources.nnodes", f"{recipe}:4: resources.node_typ"):
        assert expected in result.output
    assert "3 errors; nothing was started" in result.output


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["install", "rel", "training/pytorchjob-distributed", "-f", "/nonexistent/r.yaml"],
         "/nonexistent/r.yaml: file not found"),
        (["install", "rel", "training/nope", "-f", "{recipe}"], "unknown chart 'training/nope'"),
        (["install", "rel", "training/pytorchjob-distributed", "-f", "{recipe}", "--set", "resources.nnodes"],
         "--set: resources.nnodes: cannot parse"),
        (["install", "Bad_Name", "training/pytorchjob-distributed", "-f", "{recipe}"], "invalid release name"),
        (["install", "rel", "training/pytorchjob-distributed", "-f", "{recipe}", "--set", "resources.nnodes=0"],
         "resources.nnodes: must be greater than or equal to 1"),
        (["install", "rel", "training/pytorchjob-distributed", "-f", "{recipe}", "--backend", "nomad"],
         "unknown backend 'nomad'"),
        (["install", "rel", "serving/rayserve", "-f", "{server}"], "ray.serve_config_v2 needs 'applications'"),
        (["install", "rel", "training/raytrain", "-f", "{recipe}", "--set", "resources.requests.cpu=lots"],
         "cannot read quantity 'lots'"),
        (["validate", "{recipe}"], "this is a recipe: name its chart with --chart CHART"),
    ],
)
def test_bad_command_line(tmp_path: Path, mlhome: Path, argv: list[str], expected: str) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(GOOD_TRAIN)
    server = tmp_path / "s.yaml"
    server.write_text("server:\n  command: [python3, -m, http.server]\n")
    argv = [a.replace("{recipe}", str(recipe)).replace("{server}", str(server)) for a in argv]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert expected in result.output, result.output
    assert "Traceback" not in result.output
    assert not (mlhome / "releases").exists()
