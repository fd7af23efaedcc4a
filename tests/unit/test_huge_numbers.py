"""Numbers past Python's 4,300-digit int-string limit in ``--set``, ``-B`` and quantities (issue 41 R4): one
``error:`` line and exit 2, or a string where Helm gives one; never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlrecipe.cli.app import app
from mlrecipe.spec.values import parse_sets

HUGE = "9" * 4400
CHART = "training/pytorchjob-distributed"


@pytest.mark.parametrize("text", [HUGE, "-" + HUGE, "99999999999999999999", "-9223372036854775809"])
def test_the_fast_path_gives_what_helm_gives(text: str) -> None:
    from helm_python import parse_set_string

    assert parse_sets([f"a.b={text}"]) == parse_set_string(f"a.b={text}") == {"a": {"b": text}}


@pytest.mark.parametrize(("args", "said"), [
    (["--set", f"resources.nnodes={HUGE}"], "error: --set: resources.nnodes:"),
    (["--set", f"resources.nnodes={HUGE},image=python:3.11"], "error: --set: resources.nnodes:"),
    (["-B", f"max_ranks={HUGE}"], "error: --backend-opt: max_ranks:"),
    (["-b", "slurm", "--set", f"resources.requests.cpu={HUGE}"], "resources cpu: quantity too large"),
    (["-b", "slurm", "--set", f"resources.requests.memory={HUGE}Gi"], "resources memory: quantity too large"),
    (["--set", f"resources.requests.nvidia\\.com/gpu={HUGE}"], "resources nvidia.com/gpu: quantity too large"),
])
def test_a_huge_number_is_one_error(tmp_path: Path, mlhome: Path, args: list[str], said: str) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("image: python:3.11\npvc: []\ntrain:\n  command: [python3, -c, 'print(1)']\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["template", "rel", CHART, "-f", str(recipe), *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, result.output[-2000:]
    errors = [line for line in result.output.splitlines()
              if line.startswith("error: ") and "nothing was started" not in line]
    assert len(errors) == 1 and said in errors[0], result.output[-2000:]
    assert len(errors[0]) < 400  # the number is not echoed whole
