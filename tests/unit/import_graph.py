"""The import graph of the source tree, read with :mod:`ast` only (nothing is imported or run).

Every import statement anywhere in a module is an edge: at module level, inside functions and methods, under
``if TYPE_CHECKING:``; ``from pkg import name`` is an edge to ``pkg.name`` when that is a module (a submodule), else
to ``pkg``; relative imports are resolved against the module's package; ``import a.b.c`` is an edge to ``a.b.c``
alone (not to the packages ``a`` and ``a.b`` that Python loads first). Two kinds of strings are edges too: the
literal argument of ``importlib.import_module("...")`` / ``__import__("...")`` (an import that runs), and any other
string constant that names a module of the tree (``"pkg.mod"``, ``"pkg.mod:Name"``, ``"pkg.mod.Name"``: a
registry's entries, a table of launches), which is a lookup by name. Each edge keeps its file, line and how it
imports (:class:`How`), so that a rule may choose the edges it counts and name where each one is.
"""

from __future__ import annotations

import ast
import enum
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

#: The top-level packages of ``src/`` that the graph reads.
ROOTS = ("mlrecipe", "mlrecipe_scripts")
_MODULE_NAME = re.compile(rf"(?:{'|'.join(ROOTS)})(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*)?")


class How(enum.Enum):
    """How a module imports another."""

    MODULE = "at module level"  # runs when the module is imported
    FUNCTION = "inside a function"  # runs when the function is called
    CALL = "by import_module"  # importlib.import_module / __import__ with a literal name
    TYPE = "under TYPE_CHECKING"  # never runs: names a type for the type checker
    NAME = "by name in a string"  # a string naming the module (a registry entry), looked up later

    @property
    def runs(self) -> bool:
        """Whether the import runs: the edges that can make an import cycle."""
        return self in (How.MODULE, How.FUNCTION, How.CALL)


@dataclass(frozen=True)
class Edge:
    """``importer`` imports ``imported`` at ``path``:``line``."""

    importer: str
    imported: str
    path: str  # below the repository root: src/mlrecipe/...
    line: int
    how: How

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.importer} imports {self.imported} ({self.how.value})"


@dataclass(frozen=True)
class _Raw:
    """One import as written: candidates are tried in order, the first that is a module of the tree wins."""

    line: int
    how: How
    candidates: tuple[str, ...]


@dataclass
class Graph:
    """The modules under ``root`` (``src/``: the packages of :data:`ROOTS`) and their import edges.

    ``extra`` adds text to files (a path below ``root`` -> text appended, or the whole text of a new file): the
    plants that prove each rule, without copying the tree.
    """

    root: Path
    extra: dict[str, str] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)  # module -> path below root
    texts: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        files = {p.relative_to(self.root).as_posix(): p for name in ROOTS for p in (self.root / name).rglob("*.py")
                 if "__pycache__" not in p.parts}
        for relpath in sorted(set(files) | set(self.extra)):
            before = files[relpath].read_text(encoding="utf-8") if relpath in files else ""
            parts = relpath.removesuffix(".py").split("/")
            if parts[-1] == "__init__":
                parts.pop()
            module = ".".join(parts)
            self.paths[module] = relpath
            self.texts[module] = before + ("\n" + self.extra[relpath] if relpath in self.extra else "")

    def display_path(self, module: str) -> str:
        """The module's file as the repository names it (``src/mlrecipe/spec/load.py``)."""
        return f"{self.root.name}/{self.paths[module]}"

    def edges(self, module: str, outside: bool = False) -> list[Edge]:
        """Every edge from ``module`` to another module of the tree, as written; with ``outside``, its imports of
        other packages too (the standard library, third parties)."""
        is_package = self.paths[module].endswith("__init__.py")
        package = module if is_package else module.rpartition(".")[0]
        out = []
        for raw in _raw_imports(self.texts[module], package):
            target = next((c for c in raw.candidates if c in self.paths), None)
            if target is None and raw.how is not How.NAME:
                target = raw.candidates[-1]
            if target and (outside or target.split(".")[0] in ROOTS) and target != module:
                out.append(Edge(module, target, self.display_path(module), raw.line, raw.how))
        return out

    def all_edges(self) -> Iterator[Edge]:
        for module in self.paths:
            yield from self.edges(module)


@cache
def _raw_imports(text: str, package: str) -> tuple[_Raw, ...]:
    """The imports ``text`` writes (cached by text: the plants reread the same files)."""
    found: list[_Raw] = []

    def visit(node: ast.AST, how: How) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            how = How.TYPE if how is How.TYPE else How.FUNCTION
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, How.TYPE)
            for child in node.orelse:
                visit(child, how)
            return
        if isinstance(node, ast.Import):
            found.extend(_Raw(node.lineno, how, (a.name,)) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.extend(_Raw(node.lineno, how, (f"{base}.{a.name}", base)) for a in node.names)
        elif isinstance(node, ast.Call) and _is_import_call(node):
            found.append(_Raw(node.lineno, How.TYPE if how is How.TYPE else How.CALL, _named(node.args[0].value)))
            for child in node.args[1:] + [k.value for k in node.keywords]:
                visit(child, how)
            return
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_NAME.fullmatch(node.value):
            # not the root package alone: a bare "mlrecipe" in a string is a program's or a logger's name
            found.append(_Raw(node.lineno, How.NAME, _named(node.value)[:-1]))
        for child in ast.iter_child_nodes(node):
            visit(child, how)

    visit(ast.parse(text), How.MODULE)
    return tuple(found)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _is_import_call(node: ast.Call) -> bool:
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    return (name in ("import_module", "__import__") and bool(node.args) and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str))


def _named(text: str) -> tuple[str, ...]:
    """The modules a name may mean, longest first: ``pkg.mod.Name`` -> ``pkg.mod.Name``, ``pkg.mod``, ``pkg``."""
    dotted = text.partition(":")[0].split(".")
    return tuple(".".join(dotted[:end]) for end in range(len(dotted), 0, -1))


def find_cycles(graph: Graph, counts: frozenset[How]) -> list[list[Edge]]:
    """One cycle per strongly connected component of more than one module (the edges of kinds ``counts``), as its
    edges in order, starting at the component's first module by name."""
    out: dict[str, list[Edge]] = {}
    for module in graph.paths:
        for e in graph.edges(module):
            if e.how in counts and e.imported in graph.paths:
                out.setdefault(module, []).append(e)
    components = _components({m: [e.imported for e in es] for m, es in out.items()}, list(graph.paths))
    cycles = []
    for members in components:
        start = min(members)
        cycles.append(_cycle_through(start, members, out))
    return sorted(cycles, key=lambda c: c[0].importer)


def _components(graph: dict[str, list[str]], nodes: list[str]) -> list[set[str]]:
    """Strongly connected components of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(graph.get(start, [])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(component)
            elif nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                on_stack.add(nxt)
                work.append((nxt, iter(graph.get(nxt, []))))
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
    return found


def _cycle_through(start: str, members: set[str], edges: dict[str, list[Edge]]) -> list[Edge]:
    """The shortest cycle from ``start`` back to itself inside one component (breadth first)."""
    came: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for module in frontier:
            for e in edges.get(module, []):
                if e.imported not in members:
                    continue
                if e.imported == start:
                    path = [e]
                    while path[0].importer != start:
                        path.insert(0, came[path[0].importer])
                    return path
                if e.imported not in came:
                    came[e.imported] = e
                    nxt.append(e.imported)
        frontier = nxt
    raise AssertionError(f"no cycle through {start}")  # a component of more than one module has one
