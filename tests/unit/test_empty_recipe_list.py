"""A pipeline step with ``recipe: []`` (issue 41 R14) is refused at its own line, not at ``<input>:``."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from mlrecipe.cli.app import app


def test_an_empty_recipe_list_is_refused_at_its_line(tmp_path: Path, mlhome: Path) -> None:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("release: r\nsteps:\n  - name: a\n    chart: data-prep/data-process\n    recipe: []\n",
                        encoding="utf-8")
    result = CliRunner().invoke(app, ["validate", str(pipeline)])
    assert result.exit_code == 2, result.output
    assert f"error: {pipeline}:5: steps[0].recipe: an empty list names no recipe" in result.output
    assert "<input>" not in result.output
