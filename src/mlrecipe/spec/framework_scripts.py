"""The framework scripts a chart ships (``scripts/<framework>/``), which a recipe selects with ``framework:``.

Every backend puts them at :data:`SCRIPTS_DIR` for the step: Kubernetes through the chart (a ConfigMap, rebuilt
into a writable directory by an init container in a *tree* chart), the host backends by a per-step copy bound at
that path. A tree chart (``Chart.yaml`` annotation ``mlrecipe.io/framework-scripts: tree``) delivers the whole
nested folder; any other chart only the folder's top-level files, found by the exact name or by the name up to
its first ``-`` (``vllm-0.15.0`` may use ``scripts/vllm/``), as its templates do.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from mlrecipe.data import data_dir
from mlrecipe.spec.catalog import ChartInfo

SCRIPTS_DIR = "/etc/framework-scripts"
TREE_ANNOTATION = "mlrecipe.io/framework-scripts"
_SCRIPTS_REF = re.compile(r"(?:\$\{?SCRIPTS_DIR\}?|/etc/framework-scripts)/")
_PY_WORD = re.compile(r"^(?:(?:\$\{?SCRIPTS_DIR\}?|/etc/framework-scripts)/)?([\w.-]+(?:/[\w.-]+)*\.py)$")


@dataclass(frozen=True)
class FrameworkScripts:
    """The scripts of one ``framework:`` in one chart: the source folder and the files delivered from it."""

    framework: str
    source: Path
    tree: bool

    def files(self) -> list[str]:
        """Paths below :attr:`source` that reach :data:`SCRIPTS_DIR` (compiled Python left out)."""
        found = self.source.rglob("*") if self.tree else self.source.glob("*")
        return sorted(str(p.relative_to(self.source)) for p in found
                      if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def chart_dir(chart: ChartInfo) -> Path:
    """The chart's folder in the chart library."""
    return data_dir("charts") / "machine-learning" / chart.name


@cache
def is_tree_chart(chart: ChartInfo) -> bool:
    """True when the chart delivers nested framework trees (its Chart.yaml annotation says ``tree``)."""
    try:
        text = (chart_dir(chart) / "Chart.yaml").read_text(encoding="utf-8")
    except OSError:
        return False
    return re.search(rf"^\s+{re.escape(TREE_ANNOTATION)}:\s*[\"']?tree[\"']?\s*$", text, re.MULTILINE) is not None


def shipped_frameworks(chart: ChartInfo) -> list[str]:
    """The ``framework:`` values the chart ships scripts for."""
    root = chart_dir(chart) / "scripts"
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def framework_scripts(chart: ChartInfo, framework: str | None) -> FrameworkScripts | None:
    """The scripts ``framework`` selects in ``chart``, or ``None`` when it names none (or the chart ships none)."""
    if not framework:
        return None
    root, tree = chart_dir(chart) / "scripts", is_tree_chart(chart)
    candidates = [framework] if tree else [framework, framework.split("-", 1)[0]]
    for name in candidates:
        found = FrameworkScripts(framework, root / name, tree)
        if found.source.is_dir() and found.files():
            return found
    return None


def missing_scripts(command_line: list[str], shipped: list[str], pre_script: Sequence[str] = ()) -> list[str]:
    """Scripts a command runs from :data:`SCRIPTS_DIR` that are not among ``shipped``.

    A step that uses the folder (``cd $SCRIPTS_DIR`` in its pre_script or command, ``$SCRIPTS_DIR/x.py``,
    ``/etc/framework-scripts/x.py``) names its scripts as relative ``.py`` words (``text/peft_accelerate.py``) or
    under that folder.
    """
    text = " ".join(command_line)
    context = " ".join([*pre_script, text])
    if not _SCRIPTS_REF.search(context) and "SCRIPTS_DIR" not in context:
        return []
    try:
        words = shlex.split(text.replace(";", " ").replace("&&", " "), posix=True)
    except ValueError:
        words = text.split()
    missing: list[str] = []
    for word in words:
        match = None if word.startswith("-") else _PY_WORD.match(word)
        if match and match.group(1) not in shipped and match.group(1) not in missing:
            missing.append(match.group(1))
    return missing


def framework_warnings(chart: ChartInfo, framework: str | None, command_line: list[str], command_loc: tuple[str, ...],
                       pre_script: Sequence[str] = ()) -> list[tuple[tuple[str, ...], str]]:
    """(value location, message) for a ``framework:`` the chart does not ship, or scripts missing from it."""
    if not framework:
        return []
    found = framework_scripts(chart, framework)
    if found is None:
        ships = shipped_frameworks(chart)
        close = difflib.get_close_matches(framework, ships, n=1, cutoff=0.6)
        hint = (f"did you mean '{close[0]}'? " if close else "") + \
            (f"it ships: {', '.join(ships)}" if ships else "it ships no framework scripts")
        return [(("framework",), f"chart {chart.name} has no scripts/{framework}/ ({hint}); "
                 f"{SCRIPTS_DIR} will not exist in the step")]
    shipped = found.files()
    missing = missing_scripts(command_line, shipped, pre_script)
    if not missing:
        return []
    named = []
    for script in missing:
        close = difflib.get_close_matches(script, shipped, n=1, cutoff=0.6)
        named.append(f"{script} (did you mean {close[0]}?)" if close else script)
    return [(command_loc, f"{', '.join(named)}: not among the {len(shipped)} script file(s) chart {chart.name} "
             f"ships in scripts/{found.source.name}/")]
