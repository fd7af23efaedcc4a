"""Every place that lists the backends names each one the registry has (issue 37: SageMaker was missing from
``-b``'s help, the package docstring and the pipeline's ``backend`` field)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

import mlrecipe
import mlrecipe.backends
from mlrecipe.backends.registry import BACKENDS
from mlrecipe.cli.app import app
from mlrecipe.spec.pipeline import Pipeline, PipelineStep


def _missing(text: str) -> list[str]:
    words = re.findall(r"[a-z]+", text.lower())
    return [name for name in BACKENDS if not any(word.startswith(name) for word in words)]


@pytest.mark.parametrize(("verb", "option"), [
    ("run", "--backend"), ("install", "--backend"), ("template", "--backend"), ("doctor", "--backend"),
    ("options", r"^\s+backend"),
])
def test_the_cli_help_lists_every_backend(verb: str, option: str) -> None:
    result = CliRunner().invoke(app, [verb, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if re.search(rf"{option}\b(?!-)", line))
    assert not _missing(line), line


@pytest.mark.parametrize("text", [
    pytest.param(mlrecipe.__doc__ or "", id="mlrecipe"),
    pytest.param(mlrecipe.backends.__doc__ or "", id="mlrecipe.backends"),
    pytest.param(Pipeline.model_fields["backend"].description or "", id="pipeline.backend"),
    pytest.param(PipelineStep.model_fields["backend"].description or "", id="steps[].backend"),
])
def test_descriptions_list_every_backend(text: str) -> None:
    assert not _missing(text), text
