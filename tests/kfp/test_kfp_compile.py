"""``mlrecipe compile kfp``: the compiled YAML (golden files and its structure), bad input, a missing kfp."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.golden import REPO, check_golden
from tests.kfp.kfp_env import PIPELINES, compile_kfp, kfp_python

pytestmark = pytest.mark.integration  # starts real processes

GOLDEN = REPO / "tests" / "golden" / "kfp"
SECRET = "hf_golden_secret_value_42"
SECRET_SETS = {
    "fanout": f"data.process.env[0].name=HF_TOKEN,data.process.env[0].value={SECRET}",
    "local": f"square.process.env[0].name=HF_TOKEN,square.process.env[0].value={SECRET}",
}


def _compiled(mlhome: Path, tmp_path: Path, name: str) -> tuple[str, list[dict[str, Any]]]:
    out = tmp_path / f"{name}.yaml"
    result = compile_kfp(mlhome, PIPELINES / f"{name}.yaml", out, "--set", SECRET_SETS[name])
    assert result.returncode == 0, result.stderr
    assert "kubectl create secret generic" in result.stdout and SECRET not in result.stdout + result.stderr
    text = out.read_text(encoding="utf-8")
    return text, list(yaml.safe_load_all(text))


@pytest.mark.parametrize("name", ["fanout", "local"])
def test_compiled_pipeline_matches_golden(name: str, mlhome: Path, tmp_path: Path, update_golden: bool) -> None:
    text, _ = _compiled(mlhome, tmp_path, name)
    assert SECRET not in text
    check_golden(GOLDEN / f"{name}.yaml", text, update_golden)


def test_compiled_pipeline_structure(mlhome: Path, tmp_path: Path) -> None:
    _, (spec, platform) = _compiled(mlhome, tmp_path, "fanout")
    tasks = spec["root"]["dag"]["tasks"]
    assert sorted(tasks) == ["data", "evaluate", "train-nnodes-1", "train-nnodes-2"]
    assert tasks["evaluate"]["dependentTasks"] == ["train-nnodes-1", "train-nnodes-2"]
    assert "dependentTasks" not in tasks["data"]
    assert tasks["train-nnodes-2"]["retryPolicy"]["maxRetryCount"] == 3 and "retryPolicy" not in tasks["data"]
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert sorted(params) == ["backend", "backend_opts"] and params["backend"]["defaultValue"] == "kubernetes"
    for task in tasks.values():
        inputs = task["inputs"]["parameters"]
        assert inputs["backend"] == {"componentInputParameter": "backend"}
        assert inputs["release"]["runtimeValue"]["constant"] == "kfp-golden"
    executors = spec["deploymentSpec"]["executors"]
    assert {e["container"]["image"] for e in executors.values()} == {"registry.example.com/mlrecipe:test"}
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert [(m["constant"], m["mountPath"]) for m in k8s["exec-data"]["pvcMount"]] == [("pv-fsx", "/fsx"),
                                                                                       ("pv-efs", "/efs")]
    (secret,) = k8s["exec-data"]["secretAsEnv"]
    assert secret["secretName"] == "kfp-golden-credentials"
    assert secret["keyToEnv"] == [{"envVar": "HF_TOKEN", "secretKey": "HF_TOKEN"}]
    assert "secretAsEnv" not in k8s["exec-evaluate"]


def test_bad_input_exits_2_with_file_line_and_field(mlhome: Path, tmp_path: Path) -> None:
    pipeline = tmp_path / "bad.yaml"
    pipeline.write_text("release: bad\nsteps:\n  - name: a\n    chart: data-prep/data-process\n    values:\n"
                        "      resources: {nnodes: 0}\n      process: {command: [echo]}\n")
    out = tmp_path / "out.yaml"
    result = compile_kfp(mlhome, pipeline, out)
    assert result.returncode == 2
    assert f"{pipeline}:6: steps[0].values.resources.nnodes: must be greater than or equal to 1" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("process: {command: [echo]}\n")
    result = compile_kfp(mlhome, recipe, out)
    assert result.returncode == 2 and f"{recipe}:1: not a pipeline" in result.stderr and not out.exists()
    result = compile_kfp(mlhome, tmp_path / "missing.yaml", out)
    assert result.returncode == 2 and "missing.yaml" in result.stderr and "Traceback" not in result.stderr


def test_missing_kfp_names_the_install_command(mlhome: Path, tmp_path: Path) -> None:
    if kfp_python() == sys.executable:
        pytest.skip("this interpreter has kfp: the message for a missing kfp cannot show here")
    out = tmp_path / "out.yaml"
    for python in (sys.executable, str(tmp_path / "no-such-python")):  # an interpreter without kfp; none at all
        result = compile_kfp(mlhome, PIPELINES / "local.yaml", out, env={"MLRECIPE_KFP_PYTHON": python})
        assert result.returncode == 2, result.stderr
        assert "pip install 'mlrecipe[kfp]'" in result.stderr and "make kfp-env" in result.stderr
        assert "Traceback" not in result.stderr and not out.exists()


def test_cli_help_stays_fast_without_importing_kfp() -> None:
    code = ("import sys; from typer.testing import CliRunner; from mlrecipe.cli.app import app; "
            "r = CliRunner().invoke(app, ['--help']); assert 'compile' in r.output, r.output; "
            "r = CliRunner().invoke(app, ['compile', 'kfp', '--help']); assert '--image' in r.output, r.output; "
            "assert 'kfp' not in sys.modules; print('ok')")
    result = subprocess.run([kfp_python(), "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.stdout.strip() == "ok", result.stderr
