"""Imports point one way, with no cycle: the rules of docs/architecture.md's "Layers", over ``src/mlrecipe`` and
``src/mlrecipe_scripts``.

The graph (``tests/unit/import_graph.py``) holds every import statement anywhere (module level, functions,
``if TYPE_CHECKING:``), ``import_module("...")`` / ``__import__("...")`` literals, and strings naming a module
(registry entries). Every edge counts for the direction rules; a cycle counts only the imports that run (not
``TYPE_CHECKING``, not a name in a table): those are what make one module need another to load or to work.

- every package of ``mlrecipe`` has a layer (``LAYERS``), and a module imports only its layer or lower ones;
- within one layer, a package imports another only along the edges ``SAME_LAYER`` lists: no backend package imports
  another, shared host code (``backends.host``) imports none, a framework of ``mlrecipe_scripts`` imports no other;
- ``runner/`` and ``cli/`` reach backends through the contract only (``CONTRACT``); ``kfp/``, ``infra/`` and
  ``serve/`` through the contract and each backend package's ``__init__``, never a module inside one;
- ``mlrecipe`` and ``mlrecipe_scripts`` never import each other (the scripts run where mlrecipe is not installed);
- no import cycles;
- ``runtime/step_runtime.py`` imports the standard library only, anywhere in it; the rest of ``runtime/`` at import
  time (the Ray launcher imports ``ray`` in its functions). The integration tests below also run the runtime with
  ``python -S -I``.

Each rule proves itself: a planted import (text added to a file, or a new file) makes it fail, naming the file, the
line and the edge.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.import_graph import Graph, How, find_cycles

SRC = Path(__file__).resolve().parents[2] / "src"

#: A unit's layer: a unit is a package or module directly in ``mlrecipe`` (``mlrecipe.spec``), in
#: ``mlrecipe.backends`` (``mlrecipe.backends.slurm``) or in ``mlrecipe_scripts`` (``mlrecipe_scripts.core``).
LAYERS = {
    "mlrecipe": 0, "mlrecipe.errors": 0, "mlrecipe.credentials": 0, "mlrecipe.logtail": 0, "mlrecipe.metrics": 0,
    "mlrecipe.states": 0, "mlrecipe.data": 0, "mlrecipe.ports": 0, "mlrecipe.process_identity": 0,
    "mlrecipe.runtime": 0,
    "mlrecipe.spec": 1, "mlrecipe.helm": 1, "mlrecipe.config": 1, "mlrecipe.serve": 1, "mlrecipe.notebook": 1,
    "mlrecipe.integrations": 1, "mlrecipe.nccl_network": 1,
    "mlrecipe.backends.base": 2,
    "mlrecipe.backends": 3,  # and every unit below it: backends.host, backends.<name>, the contract's modules
    "mlrecipe.runner": 4, "mlrecipe.kfp": 4,
    "mlrecipe.infra": 5, "mlrecipe.cli": 5, "mlrecipe.__main__": 5,
    # mlrecipe_scripts: its docstring's map; every other subpackage is a framework (2).
    "mlrecipe_scripts": 0, "mlrecipe_scripts.core": 0,
    "mlrecipe_scripts.hf_trainer": 1, "mlrecipe_scripts.lightning_core": 1,
    "mlrecipe_scripts.layout": 3, "mlrecipe_scripts.generate": 3,
}
FRAMEWORK_LAYER = 2
#: (importer, imported): the imports between different units of one layer that are allowed; both sides are module
#: prefixes, ``<backend>`` is any backend package (a folder of ``backends/`` but ``host``).
SAME_LAYER = {
    ("mlrecipe.spec", "mlrecipe.config"), ("mlrecipe.spec", "mlrecipe.helm.tpl"),
    ("mlrecipe.config", "mlrecipe.spec.yamlfile"), ("mlrecipe.helm", "mlrecipe.spec.yamlfile"),
    ("mlrecipe.backends.<backend>", "mlrecipe.backends.host"),
    ("mlrecipe.backends.registry", "mlrecipe.backends.<backend>"),
    ("mlrecipe.backends.registry", "mlrecipe.backends.options"),
    ("mlrecipe.backends.config_schema", "mlrecipe.backends.registry"),
    ("mlrecipe.cli", "mlrecipe.infra"), ("mlrecipe.__main__", "mlrecipe.cli"),
    ("mlrecipe_scripts.generate", "mlrecipe_scripts.layout"),
}
CONTRACT = {"mlrecipe.backends", "mlrecipe.backends.base", "mlrecipe.backends.registry", "mlrecipe.backends.options",
            "mlrecipe.backends.config_schema"}
CONTRACT_ONLY = ("mlrecipe.runner", "mlrecipe.cli")
PUBLIC_ONLY = ("mlrecipe.kfp", "mlrecipe.infra", "mlrecipe.serve")
STDLIB_ONLY = "mlrecipe.runtime.step_runtime"


def under(module: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def unit(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:3] if parts[:2] == ["mlrecipe", "backends"] else parts[:2])


def layer(module: str) -> int | None:
    name = unit(module)
    if name in LAYERS:
        return LAYERS[name]
    if under(name, "mlrecipe.backends"):
        return LAYERS["mlrecipe.backends"]
    return FRAMEWORK_LAYER if under(name, "mlrecipe_scripts") else None


def backend_package(graph: Graph, module: str) -> str | None:
    name = unit(module)
    is_package = graph.paths.get(name, "").endswith("__init__.py")
    return name if under(name, "mlrecipe.backends") and is_package and name != "mlrecipe.backends.host" else None


def _matches(graph: Graph, module: str, pattern: str) -> bool:
    if pattern == "mlrecipe.backends.<backend>":
        return backend_package(graph, module) is not None
    return under(module, pattern)


def unplaced(graph: Graph) -> list[str]:
    first = {unit(m): m for m in sorted(graph.paths, reverse=True) if layer(m) is None}
    return [f"{graph.display_path(m)}: {name} has no layer: add it to LAYERS (tests/unit/test_layers.py) and to "
            "docs/architecture.md" for name, m in sorted(first.items())]


def reverse_imports(graph: Graph) -> list[str]:
    return [f"{e} upward: layer {layer(e.importer)} -> layer {layer(e.imported)}"
            for e in graph.all_edges() if (layer(e.imported) or 0) > (layer(e.importer) or 0)]


def same_layer(graph: Graph) -> list[str]:
    """Imports between different units of one layer that ``SAME_LAYER`` does not list."""
    out = []
    for e in graph.all_edges():
        if unit(e.importer) == unit(e.imported) or layer(e.importer) != layer(e.imported):
            continue
        if any(_matches(graph, e.importer, a) and _matches(graph, e.imported, b) for a, b in SAME_LAYER):
            continue
        hint = ""
        if backend_package(graph, e.imported):
            hint = ("; share through backends.host" if backend_package(graph, e.importer) else
                    "; shared host code serves every backend and imports none"
                    if unit(e.importer) == "mlrecipe.backends.host" else "")
        out.append(f"{e}: both in layer {layer(e.importer)}, an edge SAME_LAYER does not allow{hint}")
    return out


def beyond_contract(graph: Graph) -> list[str]:
    return [f"{e}: a backend internal; use the contract ({', '.join(sorted(CONTRACT))})"
            for e in graph.all_edges() if under(e.importer, CONTRACT_ONLY)
            and under(e.imported, "mlrecipe.backends") and e.imported not in CONTRACT]


def beyond_public(graph: Graph) -> list[str]:
    public = CONTRACT | {name for name in map(unit, graph.paths) if backend_package(graph, name)}
    return [f"{e}: a backend internal; import what the contract or mlrecipe.backends.<name> exports"
            for e in graph.all_edges() if under(e.importer, PUBLIC_ONLY)
            and under(e.imported, "mlrecipe.backends") and e.imported not in public]


def across_packages(graph: Graph) -> list[str]:
    return [f"{e}: mlrecipe and mlrecipe_scripts never import each other"
            for e in graph.all_edges() if e.importer.split(".")[0] != e.imported.split(".")[0]]


#: The imports that make a cycle: those that run (not ``TYPE_CHECKING``, not a module named in a table).
CYCLE_EDGES = frozenset(h for h in How if h.runs)


def cycles(graph: Graph) -> list[str]:
    return ["import cycle: " + "; ".join(str(e) for e in cycle) for cycle in find_cycles(graph, CYCLE_EDGES)]


def non_stdlib_runtime_imports(graph: Graph) -> list[str]:
    """Imports of ``runtime/`` outside the standard library: in ``step_runtime.py`` anywhere, elsewhere at import
    time (the Ray launcher imports ``ray`` inside its functions, checked where it runs)."""
    out = []
    for module in (m for m in graph.paths if under(m, "mlrecipe.runtime")):
        for e in graph.edges(module, outside=True):
            if (module == STDLIB_ONLY or e.how is How.MODULE) and e.imported.split(".")[0] not in (
                    *sys.stdlib_module_names, "__future__") and not under(e.imported, "mlrecipe.runtime"):
                out.append(f"{e}: not the standard library")
    return out


RULES: dict[str, Callable[[Graph], list[str]]] = {
    "every package placed": unplaced,
    "layers": reverse_imports,
    "same layer": same_layer,
    "contract only": beyond_contract,
    "public only": beyond_public,
    "mlrecipe apart from its scripts": across_packages,
    "no cycles": cycles,
    "stdlib runtime": non_stdlib_runtime_imports,
}


@pytest.fixture(scope="module")
def graph() -> Graph:
    return Graph(SRC)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_the_tree_keeps_the_rule(rule: str, graph: Graph) -> None:
    broken = RULES[rule](graph)
    assert not broken, "\n".join(broken)


def _last_line(text: str, marker: str) -> int:
    return max(n for n, line in enumerate(text.splitlines(), 1) if marker in line)


#: rule (, case) -> (file below src -> text added, the edge the complaint names, its marker in the added text)
PLANTS: dict[str, tuple[dict[str, str], str, str]] = {
    "every package placed": ({"mlrecipe/planted.py": "X = 1\n"}, "mlrecipe.planted has no layer", ""),
    "layers": ({"mlrecipe/backends/base.py": "def _planted():\n    from mlrecipe.runner.release import x\n"},
               "mlrecipe.backends.base imports mlrecipe.runner.release (inside a function) upward: layer 2 -> "
               "layer 4", "runner.release"),
    "layers, under TYPE_CHECKING": (
        {"mlrecipe/spec/pipeline.py": "if TYPE_CHECKING:\n    from mlrecipe.backends.base import Plan\n"},
        "mlrecipe.spec.pipeline imports mlrecipe.backends.base (under TYPE_CHECKING) upward", "backends.base"),
    "layers, import_module string": (
        {"mlrecipe/spec/pipeline.py": "import importlib\n_planted = importlib.import_module('mlrecipe.cli.app')\n"},
        "mlrecipe.spec.pipeline imports mlrecipe.cli.app (by import_module) upward", "import_module"),
    "layers, __import__ string": (
        {"mlrecipe/errors.py": "_planted = __import__('mlrecipe.spec.load', fromlist=['x'])\n"},
        "mlrecipe.errors imports mlrecipe.spec.load (by import_module) upward", "__import__"),
    "layers, registry string": ({"mlrecipe/backends/base.py": "_PLANTED = {'x': 'mlrecipe.runner.release:Release'}\n"},
                                "mlrecipe.backends.base imports mlrecipe.runner.release (by name in a string) upward",
                                "_PLANTED"),
    "layers, scripts": ({"mlrecipe_scripts/core/script_core.py": "def _planted():\n"
                         "    from mlrecipe_scripts.hf_trainer import common_base\n"},
                        "mlrecipe_scripts.core.script_core imports mlrecipe_scripts.hf_trainer.common_base (inside a "
                        "function) upward: layer 0 -> layer 1", "hf_trainer"),
    "same layer, backends": ({"mlrecipe/backends/slurm/plan.py": "def _planted():\n"
                              "    from mlrecipe.backends.local.options import LocalOptions\n"},
                             "mlrecipe.backends.slurm.plan imports mlrecipe.backends.local.options (inside a function)"
                             ": both in layer 3, an edge SAME_LAYER does not allow; share through backends.host",
                             "local.options"),
    "same layer, shared host code": (
        {"mlrecipe/backends/host/volumes.py": "def _planted():\n    from mlrecipe.backends.slurm import options\n"},
        "mlrecipe.backends.host.volumes imports mlrecipe.backends.slurm.options (inside a function): both in layer 3"
        ", an edge SAME_LAYER does not allow; shared host code", "slurm import"),
    "same layer, a program inside a step": (
        {"mlrecipe/serve/placement.py": "from mlrecipe.spec.recipe import Resources\n"},
        "mlrecipe.serve.placement imports mlrecipe.spec.recipe (at module level): both in layer 1", "spec.recipe"),
    "same layer, helm": ({"mlrecipe/helm/render.py": "from mlrecipe.spec.load import StepSpec\n"},
                         "mlrecipe.helm.render imports mlrecipe.spec.load (at module level): both in layer 1",
                         "spec.load"),
    "same layer, infra": ({"mlrecipe/infra/eksctl.py": "def _planted():\n    from mlrecipe.cli import app\n"},
                          "mlrecipe.infra.eksctl imports mlrecipe.cli.app (inside a function): both in layer 5",
                          "cli import"),
    "same layer, frameworks": ({"mlrecipe_scripts/nemo2/fine_tune.py": "def _planted():\n"
                                "    from mlrecipe_scripts.accelerate import common\n"},
                               "mlrecipe_scripts.nemo2.fine_tune imports mlrecipe_scripts.accelerate.common (inside a "
                               "function): both in layer 2", "accelerate import"),
    "contract only": ({"mlrecipe/runner/state.py": "def _planted():\n"
                       "    from mlrecipe.backends.local.handle import LocalHandle\n"},
                      "mlrecipe.runner.state imports mlrecipe.backends.local.handle (inside a function): a backend "
                      "internal", "local.handle"),
    "public only": ({"mlrecipe/kfp/tasks.py": "from mlrecipe.backends.kubernetes.plan import KubernetesPlan\n"},
                    "mlrecipe.kfp.tasks imports mlrecipe.backends.kubernetes.plan (at module level): a backend "
                    "internal", "kubernetes.plan"),
    "public only, host code": ({"mlrecipe/infra/doctor/base.py": "def _planted():\n"
                                "    from mlrecipe.backends.host import x\n"},
                               "mlrecipe.infra.doctor.base imports mlrecipe.backends.host (inside a function): a "
                               "backend internal", "backends.host"),
    "mlrecipe apart from its scripts": (
        {"mlrecipe/spec/frameworks.py": "def _planted():\n    from mlrecipe_scripts.layout import TREES\n"},
        "mlrecipe.spec.frameworks imports mlrecipe_scripts.layout (inside a function): mlrecipe and "
        "mlrecipe_scripts never import each other", "mlrecipe_scripts.layout"),
    "mlrecipe apart from its scripts, the other way": (
        {"mlrecipe_scripts/core/script_core.py": "import mlrecipe.metrics\n"},
        "mlrecipe_scripts.core.script_core imports mlrecipe.metrics (at module level): mlrecipe and", "import mlrec"),
    "no cycles": ({"mlrecipe/spec/planted_a.py": "def f():\n    from mlrecipe.spec import planted_b\n",
                   "mlrecipe/spec/planted_b.py": "import mlrecipe.spec.planted_a\n"},
                  "import cycle: src/mlrecipe/spec/planted_a.py:3: mlrecipe.spec.planted_a imports "
                  "mlrecipe.spec.planted_b (inside a function); src/mlrecipe/spec/planted_b.py:2: "
                  "mlrecipe.spec.planted_b imports mlrecipe.spec.planted_a (at module level)", ""),
    "no cycles, in the scripts": (
        {"mlrecipe_scripts/core/planted.py": "from . import script_core\n",
         "mlrecipe_scripts/core/script_core.py": "def _planted():\n    from mlrecipe_scripts.core import planted\n"},
        "import cycle: src/mlrecipe_scripts/core/planted.py:2: mlrecipe_scripts.core.planted imports "
        "mlrecipe_scripts.core.script_core (at module level); src/mlrecipe_scripts/core/script_core.py:", ""),
    "stdlib runtime": ({"mlrecipe/runtime/step_runtime.py": "def _planted():\n    import yaml\n"},
                       "mlrecipe.runtime.step_runtime imports yaml (inside a function): not the standard library",
                       "import yaml"),
    "stdlib runtime, the Ray launcher": ({"mlrecipe/runtime/ray_cluster.py": "import ray\n"},
                                         "mlrecipe.runtime.ray_cluster imports ray (at module level)", "import ray"),
}


@pytest.mark.parametrize("case", sorted(PLANTS))
def test_each_rule_fails_on_a_planted_import(case: str, graph: Graph) -> None:
    rule = case.split(",")[0]
    plants, complaint, marker = PLANTS[case]
    assert not [c for c in RULES[rule](graph) if complaint in c]
    planted = Graph(SRC, extra=plants)
    found = [c for c in RULES[rule](planted) if complaint in c]
    assert found, "\n".join(RULES[rule](planted))
    if marker:  # the complaint starts with the planted line
        relpath = next(iter(plants))
        line = _last_line(planted.texts[planted_module(planted, relpath)], marker)
        assert found[0].startswith(f"src/{relpath}:{line}: "), found


def planted_module(graph: Graph, relpath: str) -> str:
    return next(m for m, p in graph.paths.items() if p == relpath)


def test_the_graph_reads_every_kind_of_import(tmp_path: Path) -> None:
    """A small tree: relative imports, ``from pkg import submodule``, functions, ``TYPE_CHECKING``, a string."""
    package = tmp_path / "src" / "mlrecipe"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__.py", "sub/__init__.py", "sub/leaf.py", "other.py"):
        (package / name).write_text("")
    (package / "sub" / "user.py").write_text(
        "from typing import TYPE_CHECKING\nfrom . import leaf\nfrom .. import other\n"
        "if TYPE_CHECKING:\n    from mlrecipe.sub.leaf import Thing\n"
        "class C:\n    def m(self):\n        import mlrecipe.other\n"
        "TABLE = {'a': 'mlrecipe.other:Name', 'b': 'mlrecipe'}\n")
    edges = Graph(tmp_path / "src").edges("mlrecipe.sub.user")
    assert [(e.imported, e.line, e.how) for e in edges] == [
        ("mlrecipe.sub.leaf", 2, How.MODULE), ("mlrecipe.other", 3, How.MODULE), ("mlrecipe.sub.leaf", 5, How.TYPE),
        ("mlrecipe.other", 8, How.FUNCTION), ("mlrecipe.other", 9, How.NAME)]
    assert str(edges[3]) == "src/mlrecipe/sub/user.py:8: mlrecipe.sub.user imports mlrecipe.other (inside a function)"


def test_a_cycle_counts_the_imports_that_run() -> None:
    """Through a function's import it is a cycle (the sagemaker client -> local mode -> client one was); through
    ``TYPE_CHECKING`` or a table of names it is not: neither runs."""
    a, b = "mlrecipe/spec/planted_a.py", "mlrecipe/spec/planted_b.py"
    for text, is_cycle in [("def f():\n    import mlrecipe.spec.planted_a\n", True),
                           ("if TYPE_CHECKING:\n    import mlrecipe.spec.planted_a\n", False),
                           ("TABLE = ['mlrecipe.spec.planted_a:f']\n", False)]:
        found = [c for c in cycles(Graph(SRC, extra={a: "from mlrecipe.spec import planted_b\n", b: text}))
                 if "planted" in c]
        assert bool(found) is is_cycle, (text, found)


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


def _runtime_modules(src: Path) -> list[str]:
    return sorted(m for m in Graph(src).paths if under(m, "mlrecipe.runtime"))


def _run_runtime_stdlib_only(src: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    """Import every runtime module and run the step runtime on a tiny step program, both with ``python -S -I``;
    the runtime gets only ``mlrecipe/__init__.py`` and ``mlrecipe/runtime/`` beside it."""
    alone = tmp_path / "alone"
    (alone / "mlrecipe").mkdir(parents=True)
    shutil.copy(src / "mlrecipe" / "__init__.py", alone / "mlrecipe")
    shutil.copytree(src / "mlrecipe" / "runtime", alone / "mlrecipe" / "runtime",
                    ignore=shutil.ignore_patterns("__pycache__"))
    runtime = _runtime_modules(alone)
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
    assert imported.strip() == f"imported {len(_runtime_modules(SRC))}"
    assert ran.stdout.splitlines() == ["pre", "hello s"]
    assert (tmp_path / "home" / "logs" / "s" / "node-0.log").read_text() == "pre\nhello s\n"


@pytest.mark.integration
def test_runtime_check_fails_on_a_planted_import(tmp_path: Path) -> None:
    planted = tmp_path / "planted"
    shutil.copytree(SRC / "mlrecipe" / "runtime", planted / "mlrecipe" / "runtime",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(SRC / "mlrecipe" / "__init__.py", planted / "mlrecipe")
    with (planted / "mlrecipe" / "runtime" / "ray_cluster.py").open("a", encoding="utf-8") as f:
        f.write("\nimport yaml\n")
    ran, _ = _run_runtime_stdlib_only(planted, tmp_path)
    assert ran.returncode != 0 and "No module named 'yaml'" in ran.stderr

