"""``logs`` of a node that printed nothing says so on stderr (exit 0, nothing on stdout), so that an empty answer
is not mistaken for a wrong rank or a lost log; a node that printed shows its lines and no note."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.helpers import bash_recipe, cli

pytestmark = pytest.mark.integration


def test_an_empty_log_is_named_and_a_full_one_is_printed(tmp_path: Path, mlhome: Path) -> None:
    recipe = bash_recipe(tmp_path, 'if [ "$PET_NODE_RANK" = 0 ]; then echo rank zero spoke; fi\n')
    done = cli(mlhome, "install", "quiet", "data-prep/data-process", "-f", str(recipe))
    assert done.returncode == 0, done.stdout + done.stderr

    spoke = cli(mlhome, "logs", "quiet", "--rank", "0")
    assert (spoke.returncode, spoke.stdout, spoke.stderr) == (0, "rank zero spoke\n", "")
    silent = cli(mlhome, "logs", "quiet", "--rank", "1")
    assert (silent.returncode, silent.stdout) == (0, "")
    assert "note: the log of step 'data-process' rank 1 is empty: it printed nothing" in silent.stderr
