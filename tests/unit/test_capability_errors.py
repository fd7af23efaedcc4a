"""A step its backend cannot run is refused where the user fixes it: the pipeline's file, line and field of the
step's chart (or the command line's chart argument for an install), before anything starts (issue 41 R8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlrecipe.backends.local.backend import LocalBackend
from mlrecipe.backends.local.options import LocalOptions
from mlrecipe.cli import execute
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs

PIPELINE = """\
release: r8
steps:
  - name: first
    chart: data-prep/data-process
    recipe: {image: python:3.11, process: {command: [echo]}}
  - name: ep
    chart: serving/sagemaker-endpoint
    recipe: {image: python:3.11}
"""


def test_a_pipeline_step_is_refused_at_its_chart_line(tmp_path: Path, mlhome: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE)
    spec = spec_from_inputs({"kind": "pipeline", "path": str(path), "sets": []})
    problems = ReleaseRunner(spec, LocalBackend(LocalOptions()), {}, QuietDisplay()).problems()
    assert [str(p) for p in problems] == [
        f"{path}:7: steps[1].chart: step ep: chart serving/sagemaker-endpoint (endpoint) is not supported on "
        "backend local"]


def test_run_prints_the_located_refusal_and_starts_nothing(tmp_path: Path, mlhome: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE)
    code = execute.run_inputs({"kind": "pipeline", "path": str(path), "sets": []}, "local", [], dry_run=True,
                              force=False, out="text")
    assert code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"error: {path}:7: steps[1].chart: step ep: chart serving/sagemaker-endpoint")
    assert not (mlhome / "releases").exists()
