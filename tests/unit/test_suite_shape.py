"""The suite's shape: test modules share helpers through plain modules, never by importing each other.

A test module is a ``test_*.py`` or a ``conftest.py``; the helpers they share live in plain modules
(``tests/repo.py``, ``tests/golden.py``, ``tests/serve/serving.py``, ``tests/unit/fake_backend.py``, ...).
Importing a test module runs its module-level code a second time under another name and hides which file owns
a helper; importing a conftest does the same to pytest's plugin. ``tests/conftest.py`` enforces the other two rules
(a test that starts processes is marked ``integration``; with CI=true a skip for a missing tool fails); the last
test here runs it over a planted module.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


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
        if imported := imported_test_modules(path):
            wrong[str(path.relative_to(TESTS))] = imported
    assert not wrong, f"test modules importing test modules or conftests (move the helper to a plain module): {wrong}"


def test_the_check_sees_an_import_of_a_test_module(tmp_path: Path) -> None:
    planted = tmp_path / "test_planted.py"
    planted.write_text("from tests.unit.test_layers import Tree\nfrom tests.conftest import mlhome\n"
                       "import tests.golden\n")
    assert imported_test_modules(planted) == ["tests.conftest", "tests.unit.test_layers"]


PLANTED = '''
import subprocess, sys
import pytest

def test_starts_a_process_unmarked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

@pytest.mark.integration
def test_starts_a_process_marked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_pure():
    assert True

def test_needs_a_tool():
    pytest.skip("the zz tool is not installed")

def test_needs_a_gpu():
    pytest.skip("needs an NVIDIA GPU (nvidia-smi lists none here)")

@pytest.fixture(scope="session")
def cluster():
    yield
    subprocess.run([sys.executable, "-c", "pass"], check=True)  # stops a test cluster when the session ends

@pytest.mark.integration
def test_uses_the_cluster(cluster):
    assert True

def test_pure_and_last():
    assert True
'''


@pytest.mark.integration
@pytest.mark.parametrize("ci", ["", "true"])
def test_the_suite_rules_fail_a_planted_test(ci: str, tmp_path: Path) -> None:
    """tests/conftest.py as a plugin over a planted module: an unmarked test that starts a process fails, and with
    CI=true so does a skip for a missing tool (a GPU skip stays a skip). The session's fixtures end in the last
    test's teardown: what they start is not that test's (an unmarked test that happens to run last passes)."""
    (tmp_path / "test_planted.py").write_text(PLANTED)
    env = {**os.environ, "CI": ci}
    result = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "tests.conftest", "-p", "no:cacheprovider",
                             "--rootdir", str(tmp_path), str(tmp_path / "test_planted.py")],
                            cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=120, check=False)
    outcomes = dict(re.findall(r"test_planted\.py::(\w+) (PASSED|FAILED|SKIPPED)", result.stdout))
    assert outcomes == {"test_starts_a_process_unmarked": "FAILED", "test_starts_a_process_marked": "PASSED",
                        "test_pure": "PASSED", "test_needs_a_tool": "FAILED" if ci else "SKIPPED",
                        "test_needs_a_gpu": "SKIPPED", "test_uses_the_cluster": "PASSED",
                        "test_pure_and_last": "PASSED"}, result.stdout
    assert "starts real processes but is not marked integration" in result.stdout
    assert "ERROR at teardown" not in result.stdout, result.stdout
