"""Imports point one way: spec -> backends.base -> backends.* -> runner -> cli (functions' own imports too).

Also: no backend package imports another, shared host code lives in ``backends.host``, the runner reads
only the backend contract, and the CLI reaches backends through the registry.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

#: (prefix, layer): the longest matching prefix names a module's layer; a module imports only its layer or below.
LAYERS = [
    ("mlrecipe.errors", 0), ("mlrecipe.secrets", 0), ("mlrecipe.logtail", 0), ("mlrecipe.runtime", 0),
    ("mlrecipe.spec", 1), ("mlrecipe.helm", 1), ("mlrecipe.config", 1), ("mlrecipe.serve", 1),
    ("mlrecipe.backends.base", 2),
    ("mlrecipe.backends", 3),
    ("mlrecipe.runner", 4), ("mlrecipe.kfp", 4),
    ("mlrecipe.infra", 5), ("mlrecipe.cli", 5), ("mlrecipe.__main__", 5),
    ("mlrecipe", 0),
]
BACKEND_PACKAGES = ("local", "slurm", "kubernetes")
CONTRACT = {"mlrecipe.backends.base", "mlrecipe.backends.registry", "mlrecipe.backends.options",
            "mlrecipe.backends.config_schema"}


def layer(module: str) -> int:
    best = max((p for p, _ in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return dict(LAYERS)[best]


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / "mlrecipe").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(path: Path, module: str) -> set[str]:
    """Every mlrecipe module ``path`` imports, at the top or inside functions."""
    found = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base
                                                                                              else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in ALL}
    return {m for m in found if m == "mlrecipe" or m.startswith("mlrecipe.")}


ALL = modules()


def _backend_package(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "backends" and parts[2] in BACKEND_PACKAGES else None


@pytest.mark.parametrize("module", sorted(ALL))
def test_imports_point_one_way(module: str) -> None:
    mine = layer(module)
    wrong = sorted(m for m in imports(ALL[module], module) if layer(m) > mine)
    assert not wrong, f"{module} (layer {mine}) imports higher layers: {wrong}"


@pytest.mark.parametrize("module", sorted(m for m in ALL if _backend_package(m)))
def test_no_backend_imports_another(module: str) -> None:
    mine = _backend_package(module)
    others = sorted(m for m in imports(ALL[module], module) if _backend_package(m) not in (None, mine))
    assert not others, f"{module} imports another backend's internals: {others}; share through backends.host"


@pytest.mark.parametrize("module", sorted(m for m in ALL if m.startswith(("mlrecipe.runner", "mlrecipe.cli"))))
def test_runner_and_cli_use_the_contract_only(module: str) -> None:
    internals = sorted(m for m in imports(ALL[module], module)
                       if m.startswith("mlrecipe.backends.") and m not in CONTRACT)
    assert not internals, f"{module} imports backend internals {internals}; use the contract in backends.base"


def test_the_checker_sees_a_reverse_import(tmp_path: Path) -> None:
    bad = tmp_path / "base.py"
    bad.write_text("def f():\n    from mlrecipe.runner.release import ReleaseRunner\n")
    assert "mlrecipe.runner.release" in imports(bad, "mlrecipe.backends.base")
    assert layer("mlrecipe.runner.release") > layer("mlrecipe.backends.base")
