"""A Helm expression in a recipe that fails while Helm executes the chart is reported at the recipe's file, line and
field, as every other bad value is, not at the chart's template (issue 41 R8)."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.repo import BIN, cli_env

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("chart", "recipe", "where"), [
    ("data-prep/data-process", """\
        image: python:3.11
        process:
          env:
            - name: GOOD
              value: "{{ .Release.Name }}"
            - name: BAD
              value: '{{ fail "boom" }}'
          command: [echo]
        """, ":7: process.env[1].value: Helm expression failed"),
    ("data-prep/mpijob-data-process", """\
        image: python:3.11
        process:
          command: [echo]
        mpirun:
          args: ["-x", '{{ fail "no such variable" }}']
        """, ":5: mpirun.args[1]: Helm expression failed"),
], ids=["env", "mpirun-args"])
def test_a_failing_expression_names_the_recipe_file_line_and_field(chart: str, recipe: str, where: str,
                                                                   tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(textwrap.dedent(recipe))
    done = subprocess.run([str(BIN / "mlrecipe"), "template", "r", chart, "-f", str(path), "-b", "kubernetes"],
                          env=cli_env(tmp_path / "mlhome"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    first = done.stderr.splitlines()[0]
    assert first.startswith(f"error: {path}{where}"), done.stderr
    assert "templates/" not in first.split("Helm expression failed")[0]
