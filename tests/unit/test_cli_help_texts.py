"""``mlrecipe VERB --help`` printed from the kept texts (:mod:`mlrecipe.cli.help_texts`) is what Typer prints, at
every terminal width the kept text is used for, and Typer prints it wherever it could differ (``test_docs.py``
checks that the file is a fresh generation)."""

from __future__ import annotations

import json

import pytest

from mlrecipe.cli.app import COMMAND_MODULES, _verb, app
from mlrecipe.cli.help_texts import HELP_FILE, WIDTH, kept, typer_help

PROGRAM = "/venv/bin/mlrecipe"
VERBS = [_verb(info) for info in app.registered_commands if _verb(info) not in COMMAND_MODULES]


def test_the_file_keeps_every_verb_of_the_app_but_the_command_modules() -> None:
    assert sorted(json.loads(HELP_FILE.read_text(encoding="utf-8"))) == sorted(VERBS)
    assert len(VERBS) >= 12


@pytest.mark.parametrize("columns", [WIDTH, 81, 200])
@pytest.mark.parametrize("verb", VERBS)
def test_a_kept_help_is_what_typer_prints_at_that_width(verb: str, columns: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    assert kept([verb, "--help"], PROGRAM) == typer_help(verb)


@pytest.mark.parametrize(("args", "program", "columns"), [
    (["status", "--help"], PROGRAM, WIDTH - 1),  # Click wraps to a narrower terminal
    (["status", "--help"], "/usr/lib/python3/mlrecipe/__main__.py", WIDTH),  # Click names it 'python -m mlrecipe'
    (["--help"], PROGRAM, WIDTH),  # the listing shows a command module that cannot be imported as such
    (["doctor", "--help"], PROGRAM, WIDTH),
    (["nosuch", "--help"], PROGRAM, WIDTH),
    (["status"], PROGRAM, WIDTH),
    (["status", "x", "--help"], PROGRAM, WIDTH),
    (["status", "--help", "x"], PROGRAM, WIDTH),
], ids=lambda value: " ".join(value) if isinstance(value, list) else str(value))
def test_typer_prints_the_help_where_it_could_differ(args: list[str], program: str, columns: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    assert kept(args, program) is None


def test_a_narrower_terminal_would_get_other_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Why the width matters: the kept text is not what Typer prints at fewer columns."""
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    wide = typer_help("status")
    monkeypatch.setenv("COLUMNS", "60")
    assert typer_help("status") != wide
