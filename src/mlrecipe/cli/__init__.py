"""The command line interface (typer); commands import their heavy modules lazily."""
