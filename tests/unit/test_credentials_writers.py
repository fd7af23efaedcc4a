"""Every place values are written applies the one credential rule (issue 41 R3): printed local, Slurm and Kubernetes
plans, the Kubernetes Secret split, the recorded ``--set`` inputs and the CLI's error lines; an ambiguous env name is
refused at the recipe's line on every backend, with the way out, and written as given once declared plain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from mlrecipe.backends.kubernetes.secrets import split_values
from mlrecipe.cli.app import app
from mlrecipe.runner.recorded_inputs import SECRETS_KEY, redact
from mlrecipe.spec.load import load_step_release

CHART = "data-prep/data-process"
#: (name, value): names outside the old whole-word rule, and a password carried by a URL under a plain name.
CREDENTIALS = [("PGPASSWORD", "pg-s3cret-1"), ("MYSQL_PWD", "my-s3cret-2"), ("KAGGLE_KEY", "kg-s3cret-3"),
               ("SECRETS", "all-s3cret-4"), ("DATABASE_URL", "postgres://ml:db-s3cret-5@db/x")]
PLAIN = [("TOKENIZER_MODEL", "/fsx/tok"), ("DATABASE_HOST", "db.internal")]


def _recipe(tmp_path: Path, env: list[tuple[str, str]]) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({"image": "python:3.11", "pvc": [], "process": {
        "env": [{"name": n, "value": v} for n, v in env], "command": ["echo", "hi"]}}, sort_keys=False))
    return path


def _template(recipe: Path, *args: str) -> Any:
    return CliRunner().invoke(app, ["template", "rel", CHART, "-f", str(recipe), *args])


@pytest.mark.parametrize("backend", ["local", "slurm", "kubernetes"])
def test_printed_plans_hold_no_credential(tmp_path: Path, mlhome: Path, backend: str) -> None:
    result = _template(_recipe(tmp_path, CREDENTIALS + PLAIN), "--backend", backend)
    assert result.exit_code == 0, result.output
    for name, value in CREDENTIALS:
        assert value not in result.output and "s3cret" not in result.output, (name, result.output)
        assert name in result.output
    for _, value in PLAIN:
        assert value in result.output


def test_kubernetes_moves_them_into_the_secret() -> None:
    values = {"process": {"env": [{"name": n, "value": v} for n, v in CREDENTIALS + PLAIN]}}
    plain, secret = split_values(values)
    assert secret == dict(CREDENTIALS)
    assert [e for e in plain["process"]["env"] if "value" in e] == [{"name": n, "value": v} for n, v in PLAIN]


def test_recorded_inputs_hold_no_credential(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, [])
    sets = [f"process.env[{i}].{k}={v}" for i, (n, val) in enumerate(CREDENTIALS) for k, v in (("name", n),
                                                                                                ("value", val))]
    spec = load_step_release("rel", CHART, [str(recipe)], sets)
    recorded = redact({"sets": sets}, spec)
    assert "s3cret" not in str(recorded["sets"])
    assert {m["env"] for m in recorded[SECRETS_KEY]} == {n for n, _ in CREDENTIALS}


@pytest.mark.parametrize("backend", ["local", "slurm", "kubernetes", "sagemaker"])
def test_an_ambiguous_name_is_refused_at_its_line_with_the_way_out(tmp_path: Path, mlhome: Path, backend: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = _recipe(tmp_path, [("MODE", "fast"), ("ROUTER_KEY", "rk-v4lue")])
    args = ["--backend", backend] + (["-B", "mode=local"] if backend == "sagemaker" else [])
    result = _template(recipe, *args)
    assert result.exit_code == 2, result.output
    assert f"{recipe}:7: process.env[1].name: ROUTER_KEY may hold a credential" in result.output
    assert "MLRECIPE_PLAIN_NAMES=ROUTER_KEY" in result.output and "MLRECIPE_SECRET_NAMES=ROUTER_KEY" in result.output
    assert "rk-v4lue" not in result.output and not any(mlhome.rglob("state.json"))
    monkeypatch.setenv("MLRECIPE_PLAIN_NAMES", "ROUTER_KEY")
    declared = _template(recipe, *args)
    assert declared.exit_code == 0 and "rk-v4lue" in declared.output, declared.output


def test_declared_secret_is_masked(tmp_path: Path, mlhome: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLRECIPE_SECRET_NAMES", "ROUTER_KEY")
    result = _template(_recipe(tmp_path, [("ROUTER_KEY", "rk-v4lue")]))
    assert result.exit_code == 0 and "rk-v4lue" not in result.output and "ROUTER_KEY='******'" in result.output


def test_error_lines_do_not_echo_a_credential(tmp_path: Path, mlhome: Path) -> None:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("release: r\nsteps:\n  - name: a\n    chart: data-prep/data-process\n"
                        "    recipe: {image: python:3.11, process: {command: [echo]}}\n")
    result = CliRunner().invoke(app, ["run", str(pipeline), "--dry-run", "--set",
                                      "nosuch.process.env[0].value=postgres://ml:db-s3cret-6@db/x"])
    assert result.exit_code == 2 and "no step 'nosuch'" in result.output, result.output
    assert "db-s3cret-6" not in result.output and "postgres://ml:******@db/x" in result.output
