"""Golden files: compare a rendered text with its stored file.

Only ``--update-golden`` writes a golden file; a missing one fails, saying how to create it. Texts are
normalized first so that goldens do not depend on the machine (paths, the interpreter's name).
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_DIFF_LINES = 80


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def check_golden(path: Path, text: str, update: bool) -> None:
    """``text`` must equal the golden file at ``path``; with ``update`` (``--update-golden``) it is written
    instead. A missing golden file fails: nothing is written without ``--update-golden``."""
    shown = _shown(path)
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"golden file {shown} is missing: create it with `pytest <this test> --update-golden`, "
                    "review it and commit it", pytrace=False)
    expected = path.read_text(encoding="utf-8")
    if text == expected:
        return
    diff = list(difflib.unified_diff(expected.splitlines(), text.splitlines(), f"{shown} (golden)", "rendered now",
                                     lineterm=""))
    if len(diff) > MAX_DIFF_LINES:
        diff = [*diff[:MAX_DIFF_LINES], f"... {len(diff) - MAX_DIFF_LINES} more diff lines"]
    pytest.fail(f"{shown} differs from what is rendered now; if the change is intended, rerun with "
                "--update-golden and review the diff:\n" + "\n".join(diff), pytrace=False)


def interpreter_replacements() -> list[tuple[str, str]]:
    """``sys.executable`` -> ``$PYTHON``, then its directory -> ``$PYTHON_BIN``: plans put the interpreter
    in argv, and its name (python, python3, python3.11) differs between machines."""
    return [(sys.executable, "$PYTHON"), (str(Path(sys.executable).parent), "$PYTHON_BIN")]


def normalize(text: str, replacements: Iterable[tuple[str, str]]) -> str:
    """Replace each machine-specific string by its placeholder, in order (empty strings are skipped).
    ``sys.executable`` is only replaced where it ends (``/bin/python`` is not a prefix of ``/bin/python3``)."""
    for old, new in replacements:
        if not old:
            continue
        if old == sys.executable:
            text = re.sub(re.escape(old) + r"(?![\w-]|\.\w)", lambda _, new=new: new, text)
        else:
            text = text.replace(old, new)
    return text
