"""``mlrecipe VERB --help`` without importing Typer: the help of each verb of :mod:`mlrecipe.cli.app`, as Typer prints
it, kept in ``help_texts.json`` next to this module.

``make docs`` (:mod:`mlrecipe.cli.reference`) writes the file from the Typer app and ``tests/unit/test_docs.py``
fails when it differs from a fresh generation, as for the reference pages. A kept text is printed only where Typer
would print the same: the program is ``mlrecipe`` (Click names it in the usage line) and the terminal is at least
:data:`WIDTH` columns wide (Click wraps help to a narrower one); the listing of every verb (``mlrecipe --help``) and
the verbs of command modules are not kept (they show a module that cannot be imported as such). Anything else is
Typer's to print.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

HELP_FILE = Path(__file__).with_name("help_texts.json")
WIDTH = 80  #: Click's widest help (``max_content_width``); a terminal at least this wide gets the same text


def kept(args: list[str], program: str) -> str | None:
    """The kept help for the command line ``args`` of ``program`` (``sys.argv[0]``), or None where Typer prints it."""
    if len(args) != 2 or args[1] != "--help" or os.path.basename(program) != "mlrecipe":
        return None
    import shutil

    if shutil.get_terminal_size().columns < WIDTH:
        return None
    try:
        texts = json.loads(HELP_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    text = texts.get(args[0])
    return text if isinstance(text, str) else None


def typer_help(verb: str) -> str:
    """``mlrecipe VERB --help`` as the Typer app prints it to this process's terminal width (run in this process as
    the program runs it: Typer's test runner forces a width of its own)."""
    import contextlib
    import io

    import typer.main

    from mlrecipe.cli.app import app_for

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.suppress(SystemExit):
        typer.main.get_command(app_for([verb, "--help"]))([verb, "--help"], prog_name="mlrecipe")
    return printed.getvalue()


def generate() -> str:
    """The file's text: each verb's help as the Typer app prints it to a terminal :data:`WIDTH` columns wide."""
    from unittest import mock

    from mlrecipe.cli.app import COMMAND_MODULES, _verb, app

    verbs = [_verb(info) for info in app.registered_commands if _verb(info) not in COMMAND_MODULES]
    with mock.patch.dict(os.environ, {"COLUMNS": str(WIDTH)}):
        texts = {verb: typer_help(verb) for verb in verbs}
    return json.dumps(texts, indent=1, sort_keys=True) + "\n"
