"""``mlrecipe VERB ...`` runs through an app holding only that verb, and ``mlrecipe [--help]`` through one holding
the verbs without their options (:func:`mlrecipe.cli.app.app_for`, which spares Typer building every verb's command
line): what they print and their exit codes are the whole app's, for help, good and bad arguments; command lines
that name no verb of the app run the whole app."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlrecipe.cli.app import app, app_for
from tests.repo import EXAMPLES

QUICKSTART = str(EXAMPLES / "quickstart" / "pipeline.yaml")
LINES = [
    [], ["--help"], ["list", "--help"], ["list", "--bogus"], ["list", "-o", "json"], ["status", "a", "b", "c"],
    ["status", "--help"],
    ["validate"], ["validate", "--help"], ["validate", QUICKSTART], ["validate", QUICKSTART, "-o", "json"],
    ["install", "--help"], ["install", "x"], ["run", "--help"], ["doctor", "--help"], ["schema", "pipeline"],
    ["logs", "nosuch"], ["options", "--help"], ["uninstall"],
]


@pytest.mark.parametrize("args", LINES, ids=lambda args: " ".join(args) or "no arguments")
def test_a_verb_alone_answers_as_the_whole_app(args: list[str], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLRECIPE_HOME", str(tmp_path / "mlhome"))
    alone = app_for(args)
    verbs = len(app.registered_commands) if args in ([], ["--help"]) else 1  # the app's help lists every verb
    assert alone is not app and len(alone.registered_commands) == verbs
    whole, one = CliRunner().invoke(app, args), CliRunner().invoke(alone, args)
    assert (one.exit_code, one.output) == (whole.exit_code, whole.output)
    assert whole.output  # every line prints something: help, a result or an error


@pytest.mark.parametrize("args", [["cluster", "--help"], ["compile"], ["nosuch"], ["-o", "list"], ["--help", "list"]],
                         ids=" ".join)
def test_a_line_that_names_no_verb_of_the_app_runs_the_whole_app(args: list[str]) -> None:
    assert app_for(args) is app
