"""An address that names a step the release does not have (issue 41 R2): ``uninstall`` and ``status`` refuse it
with exit 2 naming the release's steps, as ``logs`` does, and ``uninstall`` removes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlrecipe.backends.base import StepState
from mlrecipe.cli.app import app
from mlrecipe.runner.state import ReleaseRecord, StepRecord


def _plant(mlhome: Path) -> Path:
    record = ReleaseRecord("rel", "default", "local", {}, state=StepState.SUCCEEDED, order=["prep", "train"],
                           steps={n: StepRecord(n, "data-prep/data-process", state=StepState.SUCCEEDED)
                                  for n in ("prep", "train")})
    record.save()
    return mlhome / "releases" / "local" / "default" / "rel"


@pytest.mark.parametrize("verb", ["uninstall", "status", "logs"])
def test_an_unknown_step_is_exit_2_naming_the_steps(mlhome: Path, verb: str) -> None:
    directory = _plant(mlhome)
    result = CliRunner().invoke(app, [verb, "local://default/rel/trian"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    assert "has no step 'trian' (steps: prep, train)" in result.output
    assert (directory / "state.json").exists()


def test_status_of_a_known_step_answers(mlhome: Path) -> None:
    _plant(mlhome)
    result = CliRunner().invoke(app, ["status", "local://default/rel/train"])
    assert result.exit_code == 0 and "local://default/rel" in result.output, result.output
