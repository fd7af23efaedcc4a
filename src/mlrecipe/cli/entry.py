"""The ``mlrecipe`` program's entry point: a plain command line of a verb people run in loops (``status``, ``list``,
``logs``, ``validate``: :mod:`mlrecipe.cli.plain_lines`) runs without importing Typer, and ``mlrecipe VERB --help``
prints the help Typer printed for it (:mod:`mlrecipe.cli.help_texts`); every other line runs through the Typer app
(:func:`mlrecipe.cli.app.main`), which prints the rest of the help and the usage errors.
"""

from __future__ import annotations

import sys

from mlrecipe.cli import lifecycle


def main() -> None:
    """Console entry point: exits with the command's exit code."""
    lifecycle.begin()
    from mlrecipe.cli.help_texts import kept

    help_text = kept(sys.argv[1:], sys.argv[0])
    if help_text is not None:
        sys.stdout.write(help_text)
        sys.exit(0)
    from mlrecipe.cli.plain_lines import parse

    plain = parse(sys.argv[1:])
    if plain is None:
        from mlrecipe.cli.app import main as typer_main

        typer_main()
        return
    function, arguments = plain
    sys.exit(run_guarded(function, arguments))


def run_guarded(function: str, arguments: dict[str, object]) -> int:
    """Run :mod:`mlrecipe.cli.read_verbs`'s ``function`` as the Typer app runs a command
    (:func:`mlrecipe.cli.output.guarded`)."""
    from mlrecipe.cli import output, read_verbs

    return output.guarded(lambda: getattr(read_verbs, function)(**arguments))
