"""Credentials in a recipe's env never appear in a printed plan."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from mlrecipe.cli.app import app
from mlrecipe.credentials import redact_env


def test_redact_env_masks_credential_names_only() -> None:
    env = {"HF_TOKEN": "hf_x", "AWS_SECRET_ACCESS_KEY": "k", "MLRECIPE_API_KEY": "s", "MODE": "fast", "EMPTY_TOKEN": ""}
    assert redact_env(env) == {"HF_TOKEN": "******", "AWS_SECRET_ACCESS_KEY": "******", "MLRECIPE_API_KEY": "******",
                               "MODE": "fast", "EMPTY_TOKEN": ""}


def test_printed_local_plan_masks_credentials(tmp_path: Path, mlhome: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("process:\n  env:\n    - {name: HF_TOKEN, value: hf_abcdef123}\n    - {name: MODE, value: fast}\n"
                      "  command: [echo, hi]\n")
    result = CliRunner().invoke(app, ["template", "rel", "data-prep/data-process", "-f", str(recipe)])
    assert result.exit_code == 0, result.output
    assert "hf_abcdef123" not in result.output
    assert "HF_TOKEN='******'" in result.output and "MODE=fast" in result.output
