"""The ``-B`` options a release was started with are recorded (without credentials) and apply again to ``resume``,
``uninstall``, ``status`` and ``logs`` (issue 41 R11: ``-B mode=local`` had to be repeated, exit 2 until it was)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlrecipe.cli import execute
from mlrecipe.cli.execute import record_backends, run_inputs
from mlrecipe.errors import ExitCode
from mlrecipe.runner.recorded_inputs import BACKEND_OPTS_KEY, redact
from mlrecipe.runner.state import load_record
from mlrecipe.spec.load import load_pipeline

pytestmark = pytest.mark.usefixtures("fake_backend")


def _pipeline(tmp_path: Path, command: str) -> dict[str, Any]:
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"release: rel\nsteps:\n  - name: a\n    chart: data-prep/data-process\n    values:\n"
                    f"      pvc: []\n      process: {{command: [{command}]}}\n")
    return {"kind": "pipeline", "path": str(path), "sets": []}


def test_options_are_recorded_and_apply_to_the_commands_that_follow(tmp_path: Path, mlhome: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_inputs(_pipeline(tmp_path, "fail"), "fake", ["flaky_polls=0"], False, False, "text") == ExitCode.FAILED
    state = json.loads((mlhome / "releases/fake/default/rel/state.json").read_text(encoding="utf-8"))
    assert state["inputs"][BACKEND_OPTS_KEY] == ["flaky_polls=0"]
    record = load_record("fake", "default", "rel")
    assert record is not None
    assert record_backends(record, []).default.options.flaky_polls == 0  # uninstall, status, logs
    assert record_backends(record, ["flaky_polls=5"]).default.options.flaky_polls == 5  # the command line wins

    seen: list[list[str]] = []
    real = execute._backends

    def spy(name: str | None, spec_backend: str | None, opts: list[str], *rest: Any) -> Any:
        seen.append(list(opts))
        return real(name, spec_backend, opts, *rest)

    monkeypatch.setattr(execute, "_backends", spy)
    assert execute.resume("rel", None, "fake", "text", ["retry_seconds=7"]) == ExitCode.FAILED
    assert seen[0] == ["flaky_polls=0", "retry_seconds=7"]
    state = json.loads((mlhome / "releases/fake/default/rel/state.json").read_text(encoding="utf-8"))
    assert state["inputs"][BACKEND_OPTS_KEY] == ["flaky_polls=0", "retry_seconds=7"]


def test_options_that_carry_a_credential_are_not_recorded(tmp_path: Path) -> None:
    inputs = {**_pipeline(tmp_path, "ok"), BACKEND_OPTS_KEY: [
        "sagemaker.mode=local", "tags.HF_TOKEN=hf_x", "endpoint_url=http://u:pw@h:9000", "tags.ROUTER_KEY=a",
        "kubeconfig=/home/me/.kube/config,sagemaker.tags.GH_TOKEN=ghp_y"]}
    spec = load_pipeline(inputs["path"])
    assert redact(inputs, spec)[BACKEND_OPTS_KEY] == ["sagemaker.mode=local"]
