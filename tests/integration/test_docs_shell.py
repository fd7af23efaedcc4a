"""Every shell snippet of the docs marked ``<!-- runnable: shell -->`` runs, as printed, from the checkout."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.doc_snippets import REPO, Snippet, snippets
from tests.repo import cli_env

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("snippet", snippets("shell"), ids=str)
def test_shell_snippet_runs(snippet: Snippet, mlhome: Path) -> None:
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", snippet.text], cwd=REPO, env=cli_env(mlhome),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{snippet}:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
