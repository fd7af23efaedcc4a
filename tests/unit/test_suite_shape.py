"""The suite's shape: test modules share helpers through plain modules, never by importing each other.

A test module is a ``test_*.py`` or a ``conftest.py``; the helpers they share live in plain modules
(``tests/repo.py``, ``tests/golden.py``, ``tests/serve/serving.py``, ``tests/unit/fake_backend.py``, ...).
Importing a test module runs its module-level code a second time under another name and hides which file owns
a helper; importing a conftest does the same to pytest's plugin. Which tests start processes (``integration``)
and which skips fail in CI is enforced by ``tests/conftest.py`` itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
#: Folders being rewritten elsewhere (issue 26, point 1): checked once the rewrite lands.
NOT_YET = ("frameworks",)


def is_test_module(module: str) -> bool:
    name = module.rpartition(".")[2]
    return name.startswith("test_") or name == "conftest"


def imported_test_modules(path: Path) -> list[str]:
    """The test modules (and conftests) that the module at ``path`` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found += [n for n in names if n.startswith("tests.") and is_test_module(n)]
    return sorted(set(found))


def test_no_test_module_imports_another() -> None:
    wrong = {}
    for path in sorted(TESTS.rglob("*.py")):
        relative = path.relative_to(TESTS)
        if relative.parts[0] in NOT_YET:
            continue
        if imported := imported_test_modules(path):
            wrong[str(relative)] = imported
    assert not wrong, f"test modules importing test modules or conftests (move the helper to a plain module): {wrong}"


def test_the_check_sees_an_import_of_a_test_module(tmp_path: Path) -> None:
    planted = tmp_path / "test_planted.py"
    planted.write_text("from tests.unit.test_layers import Tree\nfrom tests.conftest import mlhome\n"
                       "import tests.golden\n")
    assert imported_test_modules(planted) == ["tests.conftest", "tests.unit.test_layers"]
