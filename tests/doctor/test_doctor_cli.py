"""`mlrecipe doctor` as a command: options, exit codes (0 ready, 1 blocking failure, 2 bad input),
plain text when not on a terminal, and --output json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from mlrecipe.cli import doctor_cmd


def app() -> typer.Typer:
    root = typer.Typer()

    @root.callback()
    def _root() -> None:
        """Test root so `doctor` stays a sub-command."""

    doctor_cmd.register(root)
    return root


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app(), ["doctor", *args])


@pytest.mark.integration
def test_local_preflight_plain_text(mlrecipe_home: Path) -> None:
    result = invoke()
    assert result.exit_code == 0, result.output
    assert "mlrecipe doctor --backend local" in result.stdout
    assert "[  ok] volume root writable" in result.stdout
    assert "ready:" in result.stdout


@pytest.mark.integration
def test_json_output(mlrecipe_home: Path) -> None:
    result = invoke("--output", "json")
    report = json.loads(result.stdout)
    assert report["backend"] == "local" and report["ok"] is True
    names = [c["name"] for c in report["checks"]]
    assert "volume root writable" in names
    assert {"name", "blocking", "status", "ok", "detail", "fix_hint"} <= set(report["checks"][0])


@pytest.mark.integration
def test_blocking_failure_exits_1_and_shows_the_fix(mlrecipe_home: Path, tmp_path: Path) -> None:
    recipe = tmp_path / "gpu.yaml"
    recipe.write_text(yaml.safe_dump({"resources": {"requests": {"nvidia.com/gpu": 64}}, "pvc": []}))
    result = invoke("-f", str(recipe))
    assert result.exit_code == 1
    assert "[FAIL] GPUs" in result.stdout and "fix:" in result.stdout


def test_bad_input_exits_2_naming_the_file(mlrecipe_home: Path, tmp_path: Path) -> None:
    missing = tmp_path / "missing-recipe.yaml"
    result = invoke("-f", str(missing))
    assert result.exit_code == 2
    assert f"recipe file not found: {missing}" in result.output
    assert invoke("--backend", "mesos").exit_code == 2
    assert invoke("--output", "xml").exit_code == 2
    options = invoke("-B", "cpus=2")  # the local checks read no backend options: refused, not ignored
    assert options.exit_code == 2 and "the local checks take no backend options" in options.output


def test_kubernetes_backend_options_reach_the_checks(fake_kube: Any, tmp_path: Path) -> None:
    recipe = tmp_path / "train.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "launcher": {"type": "torchrun", "script": "t.py"},
                "resources": {"node_type": "p4de.24xlarge", "nnodes": 2, "requests": {"nvidia.com/gpu": 8}},
            }
        )
    )
    result = invoke(
        "--backend",
        "kubernetes",
        "--context",
        "ml-dev",
        "--namespace",
        "kubeflow-user-example-com",
        "-f",
        str(recipe),
        "-o",
        "json",
    )
    report = json.loads(result.stdout)
    assert result.exit_code == 0, result.stdout
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["allocatable nvidia.com/gpu"]["status"] == "ok"
    assert by_name["context reachable"]["detail"].endswith("(context ml-dev)")


def test_rich_table_and_crash_safety() -> None:
    import io

    from mlrecipe.infra.doctor import Check, CheckResult, exit_code, run_checks
    from mlrecipe.infra.doctor.report import write_table

    def boom() -> CheckResult:
        raise RuntimeError("probe exploded")

    outcomes = run_checks(
        [
            Check("fine", True, lambda: CheckResult.passed("all good")),
            Check("broken probe", True, boom),
            Check("optional", False, lambda: CheckResult.failed("missing", "install it")),
        ]
    )
    assert [o.status for o in outcomes] == ["ok", "FAIL", "warn"]
    assert "probe exploded" in outcomes[1].result.detail
    assert exit_code(outcomes) == 1
    buffer = io.StringIO()
    write_table("local", outcomes, buffer)
    text = buffer.getvalue()
    assert "broken probe" in text and "install it" in text and "1 failed (blocking)" in text
