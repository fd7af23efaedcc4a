from mlrecipe.cli import lifecycle

lifecycle.begin()  # before the CLI's imports (Typer): see lifecycle.begin_if_program

from mlrecipe.cli.app import main  # noqa: E402

main()
