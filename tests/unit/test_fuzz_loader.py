"""A bounded fuzz test of the loader and the planner (issue 29): mutated recipes and pipelines, shipped recipes with
a field changed, and ``--set`` expressions, through ``validate``, ``template`` and ``run --dry-run`` on the local,
Slurm and Kubernetes backends.

The property: the command succeeds, or it exits 2 with ``error:`` lines that name where the problem is (the file,
the ``--set`` expression or the step), never a traceback or another exception, and it writes no state. The seed
is fixed (``derandomize``) and the number of examples bounded, so the test takes well under a minute.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is in the dev extra: pip install -e .[dev]")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from mlrecipe.cli.app import app  # noqa: E402
from tests.repo import EXAMPLES  # noqa: E402
from tests.secret_names import REAL_SECRET_NAMES  # noqa: E402

RECIPES = {
    "training/pytorchjob-distributed": """\
image: nvcr.io/nvidia/pytorch:24.10-py3
resources:
  nnodes: 2
  nproc_per_node: 1
  requests:
    cpu: 1
    memory: 1Gi
train:
  env:
    - name: RUN
      value: "{{ .Release.Name }}-x"
    - name: N
      value: 3
  command: [python3]
  args: [-c, "'print(1)'"]
pvc:
  - name: pv-fsx
    mount_path: /fsx
""",
    "training/raytrain": """\
image: rayproject/ray:2.52.1-py311
ray:
  resources:
    requests:
      cpu: 1
resources:
  nnodes: 1
  requests:
    cpu: 1
train:
  command: [python3]
  args: [-c, "'print(1)'"]
""",
    "data-prep/data-process": """\
image: python:3.11
process:
  env:
    - name: OUT
      value: /fsx/{{ .Release.Name }}
  command: [python3]
  args: [-c, "'print(1)'"]
pre_script:
  - echo start
""",
}

PIPELINE = """\
release: fuzz
namespace: default
steps:
  - name: prep
    chart: data-prep/data-process
    recipe:
      image: python:3.11
      process:
        command: [python3]
        args: [-c, "'print(1)'"]
  - name: train
    chart: training/pytorchjob-distributed
    depends_on: [prep]
    matrix:
      resources.nnodes: [1, 2]
    recipe:
      image: nvcr.io/nvidia/pytorch:24.10-py3
      train:
        env:
          - name: RUN
            value: "{{ .Release.Name }}"
        command: [python3]
    values:
      resources:
        nproc_per_node: 1
  - name: evaluate
    chart: data-prep/data-process
    depends_on: train
    recipe:
      image: python:3.11
      process:
        command: [python3]
"""

#: Scalars found to break loaders: tags their text cannot satisfy, huge numbers, non-finite floats, aliases,
#: control characters, malformed Helm expressions (none that would spend seconds evaluating).
NASTY = [
    "!!bool maybe", "!!float x", "!!int x", "!!timestamp x", "!!binary aGVsbG8=", "!!set {a, b}", "!!str 1",
    "!!python/object:os.system x", "9" * 4301, "0x" + "f" * 4000, ".nan", ".inf", "-.inf", "~", "[]", "{}",
    "[1, [2, {a: b}]]", "{a: {b: c}}", "-1", "0", "99999999999999999999", "1e400", "true", "on", "2024-01-01",
    "'{{ .Release.Name'", "'{{ nosuch 1 }}'", "'{{ .Values.a.b.c }}'", "'{{ }}'", '"\\x01"', '"\\u0000"',
    "*undefined", "&anchor x", "'x' 'y'", ":", "- a", "|\n  block", "? [a]\n  : b", "<<: {a: 1}", '"\\ud800"',
    "x" * 300, "{{ .Release.Name }}", "-", "'", "[", "{",
]
RAW = [b"\x00", b"\x01", b"\xff", b"\xc3", b"\t", b"\r", b"\x1b[31m", b"\xef\xbb\xbf", b"\n  ", b": ", b"- "]
SET_ALPHABET = "abnr.[]=,{}\\0129-_ XTRAINtrain"
BACKENDS = ["local", "slurm", "kubernetes"]

def _mutate(text: str, data: st.DataObject) -> bytes:
    """One or two mutations of ``text`` (a value replaced by a nasty scalar, a line deleted or duplicated, a key
    added), and sometimes raw bytes inserted."""
    lines = text.splitlines()
    for _ in range(data.draw(st.integers(1, 2), label="mutations")):
        i = data.draw(st.integers(0, len(lines) - 1), label="line")
        op = data.draw(st.sampled_from(["value", "value", "value", "delete", "duplicate", "key"]), label="op")
        if op == "value" and ":" in lines[i]:
            head = lines[i].split(":", 1)[0]
            lines[i] = f"{head}: {data.draw(st.sampled_from(NASTY), label='nasty')}"
        elif op == "value" and lines[i].lstrip().startswith("- "):
            lines[i] = lines[i][: len(lines[i]) - len(lines[i].lstrip())] + "- " + data.draw(st.sampled_from(NASTY))
        elif op == "delete" and len(lines) > 1:
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "key":
            indent = len(lines[i]) - len(lines[i].lstrip())
            lines.insert(i, " " * indent + data.draw(st.sampled_from(["imagee", "nnodes", "env", "x"])) + ": 1")
    raw = ("\n".join(lines) + "\n").encode()
    if data.draw(st.integers(0, 4), label="raw bytes") == 0:
        at = data.draw(st.integers(0, len(raw)), label="at")
        raw = raw[:at] + data.draw(st.sampled_from(RAW), label="byte") + raw[at:]
    return raw


def _check(result, file: Path, home: Path) -> None:
    """Success, or exit 2 with located ``error:`` lines; never another exception; no state for bad input."""
    out = result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}\n{out}\n--- input:\n{file.read_bytes()[:2000]!r}")
    assert "Traceback" not in out, out
    assert result.exit_code in (0, 2), f"exit {result.exit_code}\n{out}\n--- input:\n{file.read_bytes()[:2000]!r}"
    if result.exit_code == 2:
        errors = [line for line in out.splitlines() if line.startswith("error: ") and "nothing was started" not in
                  line]
        assert errors, out
        for line in errors:
            located = str(file) in line or line.startswith(("error: --set: ", "error: step ", "error: <command line>",
                                                            "error: --backend-opt: "))
            assert located, f"not located: {line}\n--- input:\n{file.read_bytes()[:2000]!r}"
        assert not (home / "releases").exists() or not any((home / "releases").rglob("state.json")), out


FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@FUZZ
@given(data=st.data())
def test_mutated_recipes(tmp_path: Path, mlhome: Path, data: st.DataObject) -> None:
    chart = data.draw(st.sampled_from(sorted(RECIPES)), label="chart")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_bytes(_mutate(RECIPES[chart], data))
    backend = data.draw(st.sampled_from(BACKENDS), label="backend")
    runner = CliRunner()
    _check(runner.invoke(app, ["validate", str(recipe), "--chart", chart]), recipe, mlhome)
    _check(runner.invoke(app, ["template", "rel", chart, "-f", str(recipe), "--backend", backend]), recipe, mlhome)


@FUZZ
@given(data=st.data())
def test_mutated_pipelines(tmp_path: Path, mlhome: Path, data: st.DataObject) -> None:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_bytes(_mutate(PIPELINE, data))
    backend = data.draw(st.sampled_from(BACKENDS), label="backend")
    runner = CliRunner()
    _check(runner.invoke(app, ["validate", str(pipeline)]), pipeline, mlhome)
    _check(runner.invoke(app, ["run", str(pipeline), "--dry-run", "--backend", backend]), pipeline, mlhome)


@FUZZ
@given(data=st.data())
def test_set_expressions(tmp_path: Path, mlhome: Path, data: st.DataObject) -> None:
    chart = "training/pytorchjob-distributed"
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPES[chart])
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(PIPELINE)
    known = st.sampled_from(["resources.nnodes=2", "train.env[0].name=A", "train.env[0].value=x", "a[=1", "=1",
                             "train.resources.nnodes=1", "trian.x=1", "image=x", "resources.requests.cpu=.nan"])
    sets = data.draw(st.lists(st.one_of(known, st.text(SET_ALPHABET, max_size=24)), min_size=1, max_size=3),
                     label="sets")
    argv = [arg for expr in sets for arg in ("--set", expr)]
    runner = CliRunner()
    result = runner.invoke(app, ["template", "rel", chart, "-f", str(recipe), *argv])
    _check(result, recipe, mlhome)
    result = runner.invoke(app, ["run", str(pipeline), "--dry-run", *argv])
    _check(result, pipeline, mlhome)
    if result.exit_code == 0:  # every expression set something in a step the pipeline has
        steps = {"prep", "train", "evaluate"}
        assert all(re.split(r"[.\[=]", expr, maxsplit=1)[0] in steps for expr in sets), (sets, result.output)


#: Python values that shipped recipes' fields are set to (after YAML: what a mistyped file gives the loader).
VALUES = [10**40, -1, 0, float("nan"), float("inf"), "", "x" * 300, [], {}, None, True, "{{ .Values.nope.x }}",
          "a\nb", [1, 2], {"a": {"b": 1}}, "UPPER", "/abs", [None], [{}], {"name": "X"}, "lots", "16Gi", "500m"]


@pytest.fixture(scope="module")
def shipped_steps() -> list[tuple[str, dict]]:
    """(chart, values) of every step of the shipped example pipelines that load."""
    from mlrecipe.spec.load import load_pipeline

    steps: list[tuple[str, dict]] = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        try:
            steps += [(s.chart.name, s.values) for s in load_pipeline(path).steps]
        except Exception:  # a recipe file, or a pipeline needing what this machine lacks
            continue
    return steps


def _paths(value: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        out += _paths(item, (*prefix, key))
    return out


@FUZZ
@given(data=st.data())
def test_shipped_recipes_with_a_field_changed(tmp_path: Path, mlhome: Path, shipped_steps: list[tuple[str, dict]],
                                              data: st.DataObject) -> None:
    import copy

    import yaml

    chart, values = data.draw(st.sampled_from(shipped_steps), label="step")
    values = copy.deepcopy(values)
    for _ in range(data.draw(st.integers(1, 2), label="changes")):
        path = data.draw(st.sampled_from(_paths(values) or [("image",)]), label="path")
        parent = values
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = copy.deepcopy(data.draw(st.sampled_from(VALUES), label="value"))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(values, sort_keys=False))
    backend = data.draw(st.sampled_from(BACKENDS), label="backend")
    _check(CliRunner().invoke(app, ["template", "rel", chart, "-f", str(recipe), "--backend", backend]), recipe, mlhome)


#: Where a credential-like name goes: a recipe's env entry, a --set env entry, a SageMaker tag (-B tags.NAME=...).
CREDENTIAL_PLACES = ["recipe", "set", "tag"]
#: Names beside the real ones: plain names that look like credentials, ambiguous ones, and odd spellings.
ODD_NAMES = ["TOKENIZER_MODEL", "MAX_TOKENS", "ROUTER_KEY", "SORT_KEY", "PWD", "pgPassword", "hf-token", "X_PASS"]
SECRET_VALUE = "s3cr3t-v4lue-41"
HUGE = "9" * 4400


@FUZZ
@given(data=st.data())
def test_credential_names_and_huge_numbers(tmp_path: Path, mlhome: Path, data: st.DataObject) -> None:
    """A credential-like name from the list of real ones (or an odd one) with a value, or a huge number, in a recipe,
    a --set or a SageMaker tag, on every backend (SageMaker in both modes): planned, or exit 2 with located errors;
    the credential's value is never printed, and nothing is written."""
    name = data.draw(st.sampled_from(REAL_SECRET_NAMES + ODD_NAMES), label="name")
    value = data.draw(st.sampled_from([SECRET_VALUE, f"postgres://ml:{SECRET_VALUE}@db/x", HUGE]), label="value")
    place = data.draw(st.sampled_from(CREDENTIAL_PLACES), label="place")
    backend = data.draw(st.sampled_from([*BACKENDS, "sagemaker-local", "sagemaker-aws"]), label="backend")
    recipe = tmp_path / "recipe.yaml"
    env = f"    - name: {name}\n      value: '{value}'\n" if place == "recipe" else "    - name: MODE\n      value: x\n"
    recipe.write_text("image: python:3.11\npvc: []\ntrain:\n  env:\n" + env + "  command: [python3]\n")
    args = ["template", "rel", "training/pytorchjob-distributed", "-f", str(recipe)]
    if backend.startswith("sagemaker"):
        args += ["--backend", "sagemaker", "-B", "region=us-west-2"]
        args += ["-B", "mode=local"] if backend == "sagemaker-local" else [
            "-B", "role_arn=arn:aws:iam::123456789012:role/x", "-B", "s3_prefix=s3://b/p",
            "--set", "image=123456789012.dkr.ecr.us-west-2.amazonaws.com/x:1"]
    else:
        args += ["--backend", backend]
    if place == "set":
        args += ["--set", f"train.env[1].name={name}", "--set", f"train.env[1].value={value}"]
    elif place == "tag":
        args += ["--backend", "sagemaker", "-B", "mode=local", "-B", f"tags.{name}={value}"]
    result = CliRunner().invoke(app, args)
    _check(result, recipe, mlhome)
    plain = name in ("TOKENIZER_MODEL", "MAX_TOKENS", "SORT_KEY", "PWD") and value == SECRET_VALUE
    if value != HUGE and not plain:
        assert SECRET_VALUE not in result.output, result.output[-3000:]
