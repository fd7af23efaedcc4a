"""Helm expressions in recipe values are bounded and located (issue 29, point 6)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlrecipe.cli.app import app
from mlrecipe.errors import TemplateError
from mlrecipe.helm import tpl
from mlrecipe.helm.tpl import expand_templates, is_bounded, syntax_errors
from tests.repo import BIN, cli_env

CHART = "training/pytorchjob-distributed"


def _recipe(tmp_path: Path, value: str, extra: str = "") -> Path:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"{extra}train:\n  command: [python3]\n  env:\n    - name: PLAIN\n      value: x\n"
                      f"    - name: EXPR\n      value: '{value}'\n")
    return recipe


#: Expands one expression in a fresh interpreter and prints the peak memory of its children (the evaluator): this
#: test process's own children (every earlier test's servers and trainers) would otherwise count in RUSAGE_CHILDREN.
_MEASURE = """
import resource, sys
from mlrecipe.errors import TemplateError
from mlrecipe.helm.tpl import expand_templates
try:
    expand_templates(["a", sys.argv[1]], {}, "r", "n")
except TemplateError as err:
    print(err.index, str(err).replace("\\n", " "))
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""


@pytest.mark.integration
@pytest.mark.parametrize("expression", ["{{ until 20000000 }}", "{{ until 100000000 }}"])
def test_a_huge_expression_is_refused_within_bounds(expression: str) -> None:
    done = subprocess.run([str(BIN / "python"), "-c", _MEASURE, expression], capture_output=True, text=True,
                          timeout=tpl.TIME_LIMIT + 30, check=True)
    error, peak = done.stdout.strip().splitlines()
    assert error.startswith("1 ") and "needs more memory than the bound" in error, done.stdout
    assert 0 < int(peak) < tpl.MEMORY_LIMIT


@pytest.mark.integration
def test_an_endless_expression_is_stopped_at_the_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tpl, "TIME_LIMIT", 1.0)
    with pytest.raises(TemplateError, match="took longer than 1 s"):
        expand_templates(["{{ range until 100000 }}{{ range until 100000 }}x{{ end }}{{ end }}"], {}, "r", "n")


@pytest.mark.integration
def test_unbounded_words_still_evaluate_in_the_child() -> None:
    assert not is_bounded("{{ len (until 1000) }}") and is_bounded("{{ mul .Values.a 2 | quote }}")
    assert not is_bounded('{{ printf "%01000000000d" 1 }}')
    values = {"a": 3}
    assert expand_templates(["{{ len (until 1000) }}", "{{ mul .Values.a 2 }}"], values, "r", "n") == ["1000", "6"]


def test_an_infinite_value_elsewhere_does_not_break_expressions() -> None:
    values = {"kueue": {"weight": float("inf"), "nan": float("nan")}, "resources": {"nnodes": 2}}
    assert expand_templates(["{{ .Release.Name }}-{{ .Values.resources.nnodes }}"], values, "r", "n") == ["r-2"]
    assert expand_templates(["{{ .Values.kueue.weight }}"], values, "r", "n") == [".inf"]


def test_malformed_expressions_are_found_without_evaluating() -> None:
    problems = dict(syntax_errors(["{{ .Release.Name", "ok", "{{ nosuch 1 }}", "{{ .Release.Name }}",
                                   "{{ until 100000000 }}"]))
    assert set(problems) == {0, 2}
    assert "without a closing" in problems[0] and 'function "nosuch" not defined' in problems[2]
    assert "strings.json" not in str(problems)


def test_validate_refuses_a_malformed_expression_at_its_line(tmp_path: Path, mlhome: Path) -> None:
    recipe = _recipe(tmp_path, "{{ .Release.Name")
    for argv in (["validate", str(recipe), "--chart", CHART], ["template", "rel", CHART, "-f", str(recipe)]):
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 2, result.output
        assert f"error: {recipe}:7: train.env[1].value: malformed Helm expression" in result.output, result.output
        assert "strings.json" not in result.output and "mlrecipe-tpl" not in result.output


@pytest.mark.integration
def test_template_names_the_value_that_exceeds_the_bounds(tmp_path: Path, mlhome: Path) -> None:
    recipe = _recipe(tmp_path, "{{ until 20000000 }}")
    result = CliRunner().invoke(app, ["template", "rel", CHART, "-f", str(recipe)])
    assert result.exit_code == 2, result.output
    assert f"error: {recipe}:7: train.env[1].value: Helm expression failed: needs more memory" in result.output


def test_template_with_an_inf_value_elsewhere(tmp_path: Path, mlhome: Path) -> None:
    recipe = _recipe(tmp_path, "{{ .Release.Name }}-ok", extra="kueue: {weight: .inf}\n")
    result = CliRunner().invoke(app, ["template", "rel", CHART, "-f", str(recipe)])
    assert result.exit_code == 0, result.output
    assert "EXPR=rel-ok" in result.output


@pytest.mark.integration
def test_no_temporary_directory_is_left_behind(tmp_path: Path, mlhome: Path) -> None:
    recipe = _recipe(tmp_path, "{{ .Release.Name }}-ok")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**cli_env(mlhome), "TMPDIR": str(scratch)}
    done = subprocess.run([str(BIN / "mlrecipe"), "template", "rel", CHART, "-f", str(recipe)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "EXPR=rel-ok" in done.stdout
    assert [p.name for p in scratch.iterdir() if p.name.startswith("mlrecipe-tpl")] == []
