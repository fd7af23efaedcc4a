"""Imports point one way: spec -> backends.base -> backends.* -> runner -> cli (functions' own imports too).

What is checked, over every module of ``src/mlrecipe``:

- layers: a module imports only its own layer or lower ones (``LAYERS``);
- backend packages (every folder of ``backends/`` but ``host``) import no other backend package;
- shared host code (``backends.host``, ``backends.common``) imports no backend package;
- ``runner/`` and ``cli/`` reach backends through the contract only: ``backends.base``, ``backends.registry``,
  ``backends.options``, ``backends.config_schema`` (``CONTRACT``);
- ``kfp/``, ``infra/`` and ``serve/`` import from backends only their public modules: the contract, and each
  backend package's ``__init__`` (``mlrecipe.backends.<name>``, which lists that backend's public names in
  ``__all__``), never a module inside a backend package or ``backends.host``;
- string imports count as imports of the module that holds the string: ``importlib.import_module("...")``,
  ``__import__("...")`` and any other string constant naming an mlrecipe module (``"pkg.mod"``, ``"pkg.mod:Name"``,
  ``"pkg.mod.Name"``: the registry's entries and the host launches' table);
- no import cycles among top-level imports (those outside functions and ``if TYPE_CHECKING:``);
- ``runtime/`` uses the standard library only: statically, and by running it with an interpreter without
  site-packages (``python -S -I``): every runtime module imports and the step runtime runs a tiny step program.

Each rule proves itself: a reverse import planted in a temporary copy of the tree makes it fail.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

#: (prefix, layer): the longest matching prefix names a module's layer; a module imports only its layer or below.
LAYERS = [
    ("mlrecipe.errors", 0), ("mlrecipe.credentials", 0), ("mlrecipe.logtail", 0), ("mlrecipe.runtime", 0),
    ("mlrecipe.spec", 1), ("mlrecipe.helm", 1), ("mlrecipe.config", 1), ("mlrecipe.serve", 1),
    ("mlrecipe.backends.base", 2),
    ("mlrecipe.backends", 3),
    ("mlrecipe.runner", 4), ("mlrecipe.kfp", 4),
    ("mlrecipe.infra", 5), ("mlrecipe.cli", 5), ("mlrecipe.__main__", 5),
    ("mlrecipe", 0),
]
CONTRACT = {"mlrecipe.backends", "mlrecipe.backends.base", "mlrecipe.backends.registry", "mlrecipe.backends.options",
            "mlrecipe.backends.config_schema"}
#: Shared code of the backends: it serves every backend package and imports none.
SHARED = ("mlrecipe.backends.host", "mlrecipe.backends.common")
CONTRACT_ONLY = ("mlrecipe.runner", "mlrecipe.cli")
PUBLIC_ONLY = ("mlrecipe.kfp", "mlrecipe.infra", "mlrecipe.serve")
STRING_IMPORT = re.compile(r"mlrecipe(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*)?")


def layer(module: str) -> int:
    best = max((p for p, _ in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return dict(LAYERS)[best]


def under(module: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@dataclass
class Tree:
    """The modules of one source tree (``root/mlrecipe``) and what each imports."""

    root: Path
    paths: dict[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for path in sorted((self.root / "mlrecipe").rglob("*.py")):
            parts = list(path.relative_to(self.root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            self.paths[".".join(parts)] = path

    @cached_property
    def backend_packages(self) -> list[str]:
        return sorted(p.name for p in (self.root / "mlrecipe" / "backends").iterdir()
                      if p.is_dir() and p.name not in ("host", "__pycache__"))

    def backend_package(self, module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and parts[1] == "backends" and parts[2] in self.backend_packages else None

    def imports(self, module: str, top_level: bool = False) -> set[str]:
        """Every mlrecipe module ``module`` imports: statements at the top or inside functions (only those run at
        import time with ``top_level``) and, unless ``top_level``, string imports."""
        path = self.paths[module]
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found: set[str] = set()
        for node in (_import_time_nodes(tree) if top_level else ast.walk(tree)):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                submodules = {f"{base}.{a.name}" for a in node.names} & self.paths.keys()
                found |= submodules | ({base} if len(submodules) < len(node.names) else set())
            elif not top_level and isinstance(node, ast.Constant) and isinstance(node.value, str):
                named = self.string_import(node.value)
                if named:
                    found.add(named)
        return {m for m in found if under(m, "mlrecipe") and m != module}

    def string_import(self, text: str) -> str | None:
        """The module a string names (``pkg.mod``, ``pkg.mod:Name``, ``pkg.mod.Name``), if any."""
        if not STRING_IMPORT.fullmatch(text):
            return None
        dotted = text.partition(":")[0].split(".")
        for end in range(len(dotted), 1, -1):
            if ".".join(dotted[:end]) in self.paths:
                return ".".join(dotted[:end])
        return None


def _import_time_nodes(tree: ast.Module):
    """The nodes that run when the module is imported: not function bodies, not ``if TYPE_CHECKING:`` blocks."""
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def reverse_imports(tree: Tree) -> list[str]:
    return [f"{m} (layer {layer(m)}) imports {i} (layer {layer(i)})"
            for m in tree.paths for i in sorted(tree.imports(m)) if layer(i) > layer(m)]


def cross_backend_imports(tree: Tree) -> list[str]:
    return [f"{m} imports another backend's {i}; share through backends.host"
            for m in tree.paths if tree.backend_package(m)
            for i in sorted(tree.imports(m)) if tree.backend_package(i) not in (None, tree.backend_package(m))]


def shared_code_backend_imports(tree: Tree) -> list[str]:
    return [f"{m} (shared by every backend) imports the backend module {i}"
            for m in tree.paths if under(m, SHARED) for i in sorted(tree.imports(m)) if tree.backend_package(i)]


def beyond_contract(tree: Tree) -> list[str]:
    return [f"{m} imports the backend internal {i}; use the contract ({', '.join(sorted(CONTRACT))})"
            for m in tree.paths if under(m, CONTRACT_ONLY)
            for i in sorted(tree.imports(m)) if under(i, "mlrecipe.backends") and i not in CONTRACT]


def beyond_public(tree: Tree) -> list[str]:
    public = CONTRACT | {f"mlrecipe.backends.{p}" for p in tree.backend_packages}
    return [f"{m} imports the backend internal {i}; import what the contract or mlrecipe.backends.<name> exports"
            for m in tree.paths if under(m, PUBLIC_ONLY)
            for i in sorted(tree.imports(m)) if under(i, "mlrecipe.backends") and i not in public]


def cycles(tree: Tree) -> list[str]:
    """Import cycles among top-level imports (strongly connected components of more than one module)."""
    graph = {m: sorted(i for i in tree.imports(m, top_level=True) if i in tree.paths) for m in tree.paths}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[str] = []

    def visit(start: str) -> None:  # Tarjan's algorithm, iterative
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(" <-> ".join(sorted(component)))
            elif nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                work.append((nxt, iter(graph[nxt])))
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])

    for module in graph:
        if module not in index:
            visit(module)
    return [f"import cycle: {c}" for c in found]


def non_stdlib_runtime_imports(tree: Tree) -> list[str]:
    """Top-level imports of ``runtime/`` outside the standard library (``ray`` inside functions is the one
    exception the Ray host launcher has, checked where it runs)."""
    out = []
    for module in (m for m in tree.paths if under(m, "mlrecipe.runtime")):
        for node in _import_time_nodes(ast.parse(tree.paths[module].read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            out += [f"{module} imports {n}" for n in names
                    if n.split(".")[0] not in sys.stdlib_module_names and n != "__future__"
                    and not under(n, "mlrecipe.runtime")]
    return out


RULES: dict[str, Callable[[Tree], list[str]]] = {
    "layers": reverse_imports,
    "backends apart": cross_backend_imports,
    "shared code": shared_code_backend_imports,
    "contract only": beyond_contract,
    "public only": beyond_public,
    "no cycles": cycles,
    "stdlib runtime": non_stdlib_runtime_imports,
}


@pytest.fixture(scope="module")
def tree() -> Tree:
    return Tree(SRC)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_the_tree_keeps_the_rule(rule: str, tree: Tree) -> None:
    broken = RULES[rule](tree)
    assert not broken, "\n".join(broken)


def _planted_copy(tmp_path: Path, plants: dict[str, str]) -> Tree:
    root = tmp_path / "src"
    shutil.copytree(SRC / "mlrecipe", root / "mlrecipe", ignore=shutil.ignore_patterns("__pycache__"))
    for relpath, text in plants.items():
        target = root / "mlrecipe" / relpath
        before = target.read_text(encoding="utf-8") if target.exists() else ""
        target.write_text(before + "\n" + text, encoding="utf-8")
    return Tree(root)


#: rule -> (file -> planted text, what the complaint names)
PLANTS = {
    "layers": ({"backends/base.py": "def _planted():\n    from mlrecipe.runner.release import ReleaseRunner\n"},
               "mlrecipe.backends.base (layer 2) imports mlrecipe.runner.release"),
    "layers, import_module string": (
        {"spec/pipeline.py": "import importlib\n_planted = importlib.import_module('mlrecipe.cli.app')\n"},
        "mlrecipe.spec.pipeline (layer 1) imports mlrecipe.cli.app"),
    "layers, __import__ string": ({"errors.py": "_planted = __import__('mlrecipe.spec.load', fromlist=['x'])\n"},
                                  "mlrecipe.errors (layer 0) imports mlrecipe.spec.load"),
    "layers, registry string": ({"backends/base.py": "_PLANTED = {'x': 'mlrecipe.runner.release:ReleaseRunner'}\n"},
                                "mlrecipe.backends.base (layer 2) imports mlrecipe.runner.release"),
    "backends apart": ({"backends/slurm/plan.py": "from mlrecipe.backends.local.options import LocalOptions\n"},
                       "mlrecipe.backends.slurm.plan imports another backend's mlrecipe.backends.local.options"),
    "shared code": ({"backends/host/volumes.py": "def _planted():\n    from mlrecipe.backends.slurm import options\n"},
                    "mlrecipe.backends.host.volumes (shared by every backend) imports the backend module "
                    "mlrecipe.backends.slurm.options"),
    "contract only": ({"runner/state.py": "from mlrecipe.backends.local.handle import LocalHandle\n"},
                      "mlrecipe.runner.state imports the backend internal mlrecipe.backends.local.handle"),
    "public only": ({"kfp/tasks.py": "from mlrecipe.backends.kubernetes.plan import KubernetesPlan\n"},
                    "mlrecipe.kfp.tasks imports the backend internal mlrecipe.backends.kubernetes.plan"),
    "public only, host code": ({"infra/doctor/base.py": "def _planted():\n    from mlrecipe.backends.host import x\n"},
                               "mlrecipe.infra.doctor.base imports the backend internal mlrecipe.backends.host"),
    "no cycles": ({"spec/planted_a.py": "from mlrecipe.spec import planted_b\n",
                   "spec/planted_b.py": "import mlrecipe.spec.planted_a\n"},
                  "import cycle: mlrecipe.spec.planted_a <-> mlrecipe.spec.planted_b"),
    "stdlib runtime": ({"runtime/step_runtime.py": "import yaml\n"}, "mlrecipe.runtime.step_runtime imports yaml"),
}


@pytest.mark.parametrize("case", sorted(PLANTS))
def test_each_rule_fails_on_a_planted_import(case: str, tmp_path: Path) -> None:
    rule = case.split(",")[0]
    plants, complaint = PLANTS[case]
    assert not [c for c in RULES[rule](Tree(SRC)) if complaint in c]
    assert [c for c in RULES[rule](_planted_copy(tmp_path, plants)) if complaint in c]


def test_top_level_means_import_time(tmp_path: Path) -> None:
    """A cycle through a function's import or a ``TYPE_CHECKING`` block is no cycle (Python resolves it)."""
    plants = {"spec/planted_a.py": "from mlrecipe.spec import planted_b\n",
              "spec/planted_b.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                    "    import mlrecipe.spec.planted_a\n"
                                    "def f():\n    import mlrecipe.spec.planted_a\n")}
    assert not [c for c in cycles(_planted_copy(tmp_path, plants)) if "planted" in c]


# The runtime in an interpreter without site-packages: -S (no site module), -I (no PYTHONPATH, no user site).
_STDLIB_ONLY = """
import importlib, importlib.util, json, sys
assert not [p for p in sys.path if "-packages" in p], sys.path
for outside in ("yaml", "pydantic", "typer", "pytest"):
    assert importlib.util.find_spec(outside) is None, f"{outside} is importable"
sys.path.insert(0, sys.argv[1])
for module in json.loads(sys.argv[2]):
    importlib.import_module(module)
print("imported", len(json.loads(sys.argv[2])))
"""


def _run_runtime_stdlib_only(src: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    """Import every runtime module and run the step runtime on a tiny step program, both with ``python -S -I``;
    the runtime gets only ``mlrecipe/__init__.py`` and ``mlrecipe/runtime/`` beside it."""
    alone = tmp_path / "alone"
    (alone / "mlrecipe").mkdir(parents=True)
    shutil.copy(src / "mlrecipe" / "__init__.py", alone / "mlrecipe")
    shutil.copytree(src / "mlrecipe" / "runtime", alone / "mlrecipe" / "runtime",
                    ignore=shutil.ignore_patterns("__pycache__"))
    runtime = sorted(m for m in Tree(alone).paths if under(m, "mlrecipe.runtime"))
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home")}
    imported = subprocess.run([sys.executable, "-S", "-I", "-c", _STDLIB_ONLY, str(alone), json.dumps(runtime)],
                              capture_output=True, text=True, env=clean, timeout=60, check=False)
    if imported.returncode != 0:
        return imported, ""
    program = tmp_path / "step.json"
    program.write_text(json.dumps({"version": 1, "release": "r", "namespace": "n", "step": "s", "chart": "c",
                                   "git": None, "inline_script": [], "pre_script": ["echo pre"],
                                   "command": ["echo"], "args": ["hello", "$MLRECIPE_STEP"], "post_script": []}))
    ran = subprocess.run([sys.executable, "-S", "-I", str(alone / "mlrecipe" / "runtime" / "step_runtime.py"),
                          str(program)], capture_output=True, text=True, env=clean, timeout=60, check=False)
    return ran, imported.stdout


@pytest.mark.integration
def test_runtime_runs_without_site_packages(tmp_path: Path) -> None:
    ran, imported = _run_runtime_stdlib_only(SRC, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert imported.strip() == f"imported {len([m for m in Tree(SRC).paths if under(m, 'mlrecipe.runtime')])}"
    assert ran.stdout.splitlines() == ["pre", "hello s"]
    assert (tmp_path / "home" / "logs" / "s" / "node-0.log").read_text() == "pre\nhello s\n"


@pytest.mark.integration
def test_runtime_check_fails_on_a_planted_import(tmp_path: Path) -> None:
    planted = _planted_copy(tmp_path, {"runtime/ray_cluster.py": "import yaml\n"})
    ran, _ = _run_runtime_stdlib_only(planted.root, tmp_path)
    assert ran.returncode != 0 and "No module named 'yaml'" in ran.stderr
