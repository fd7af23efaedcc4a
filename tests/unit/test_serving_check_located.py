"""A serving step the local backend cannot run because of one recipe value is refused at that value's file and line
(issue 41 R14: the serving chart's check errors named only the chart)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlrecipe.backends.local.backend import LocalBackend
from mlrecipe.backends.local.options import LocalOptions
from mlrecipe.runner.progress import QuietDisplay
from mlrecipe.runner.release import ReleaseRunner, spec_from_inputs

PIPELINE = """\
release: r14
steps:
  - name: serve
    chart: serving/generic-server
    recipe:
      image: python:3.11
      resources: {{nnodes: {nnodes}}}
      server: {{command: {command}}}
"""


@pytest.mark.parametrize(("nnodes", "command", "where"), [
    (1, "[]", "8: steps[0].recipe.server.command: step serve: chart serving/generic-server: server.command is empty"),
    (2, "[python3]", "7: steps[0].recipe.resources.nnodes: step serve: chart serving/generic-server: multi-node "
                     "serving (nnodes > 1) is not supported on backend local"),
])
def test_the_refusal_names_the_recipe_value(tmp_path: Path, mlhome: Path, nnodes: int, command: str,
                                            where: str) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE.format(nnodes=nnodes, command=command))
    spec = spec_from_inputs({"kind": "pipeline", "path": str(path), "sets": []})
    problems = [str(p) for p in ReleaseRunner(spec, LocalBackend(LocalOptions()), {}, QuietDisplay()).problems()]
    assert len(problems) == 1 and problems[0].startswith(f"{path}:{where}"), problems
