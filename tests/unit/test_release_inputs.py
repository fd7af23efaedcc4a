"""A release's inputs are typed (``PipelineInputs`` / ``InstallInputs``) and recorded as the same JSON objects as
before: what ``run`` and ``install`` record reads back to the same inputs, older records (no ``given``) and the
recorder's own keys included, and the typed inputs load the release they name."""

from __future__ import annotations

from pathlib import Path

from mlrecipe.cli.app import _install_inputs
from mlrecipe.runner.recorded_inputs import redact, with_backend_opts
from mlrecipe.runner.release import spec_from_inputs
from mlrecipe.runner.release_inputs import InstallInputs, PipelineInputs, release_inputs

CHART = "data-prep/data-process"


def _recipe(tmp_path: Path) -> Path:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("process:\n  command: [echo, hi]\n", encoding="utf-8")
    return recipe


def test_install_inputs_are_recorded_as_the_cli_builds_them(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path)
    recorded = _install_inputs("rel", CHART, [recipe], ["process.env[0].name=GREETING"], None)
    typed = release_inputs(recorded)
    assert typed == InstallInputs("rel", CHART, (str(recipe.resolve()),), (str(recipe),),
                                  ("process.env[0].name=GREETING",), "default")
    assert typed.record() == recorded and list(typed.record()) == list(recorded)
    spec = spec_from_inputs(recorded)
    assert (spec.release, spec.namespace, [s.name for s in spec.steps]) == ("rel", "default", ["data-process"])


def test_pipeline_inputs_round_trip_and_load(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path)
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(f"release: p\nsteps:\n  - name: a\n    chart: {CHART}\n    recipe: {recipe}\n",
                        encoding="utf-8")
    recorded = {"kind": "pipeline", "path": str(pipeline), "sets": []}
    typed = release_inputs(recorded)
    assert typed == PipelineInputs(str(pipeline)) and typed.record() == recorded
    assert [s.name for s in typed.load().steps] == ["a"]


def test_the_recorders_keys_and_older_records_read_back(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path)
    recorded = with_backend_opts(_install_inputs("rel", CHART, [recipe], [], "team"), ["mode=local"])
    recorded = redact(recorded, spec_from_inputs(recorded))
    assert recorded["backend_opts"] == ["mode=local"]
    typed = release_inputs(recorded)
    assert isinstance(typed, InstallInputs) and typed.namespace == "team"
    older = {k: v for k, v in recorded.items() if k not in ("given", "backend_opts")}
    assert release_inputs(older).given is None
    assert spec_from_inputs(older).namespace == "team"
