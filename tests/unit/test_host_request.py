"""The host step request the local and Slurm backends share: built once from a step, rendered by each backend."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mlrecipe.backends.base import ReleaseContext
from mlrecipe.backends.host.images import ImageEnvironments
from mlrecipe.backends.host.mount_points import MOUNT_SCRIPT_PATH
from mlrecipe.backends.host.nodes import unshare
from mlrecipe.backends.host.request import HostPlacement, HostStepRequest
from mlrecipe.backends.registry import get_backend
from mlrecipe.spec.catalog import CATALOG
from mlrecipe.spec.load import StepSpec, load_pipeline

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
PER_NODE = {"PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_RDZV_ENDPOINT"}


def quickstart_step(name: str) -> StepSpec:
    spec = load_pipeline(EXAMPLES / "quickstart" / "pipeline.yaml")
    return next(s for s in spec.steps if s.name == name)


def context(tmp_path: Path, backend: str) -> ReleaseContext:
    return ReleaseContext("quickstart", "default", backend, tmp_path / "state")


def placement(bind: bool) -> HostPlacement:
    return HostPlacement(ImageEnvironments({}), lambda pvc: Path("/volumes") / pvc, bind, "test.mounts")


def test_contract_env_is_what_every_node_shares_and_node_env_adds_the_rest(tmp_path: Path) -> None:
    request = HostStepRequest.from_step(quickstart_step("train"), context(tmp_path, "local"), placement(True))
    assert not PER_NODE & set(request.contract_env), "no placeholder per-node keys to delete later"
    assert request.contract_env["PET_RDZV_BACKEND"] == "c10d" and request.contract_env["MLRECIPE_STEP"] == "train"
    assert request.node_env(1, "10.0.0.5", 29400) == {
        "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "10.0.0.5", "PET_MASTER_PORT": "29400",
        "PET_RDZV_ENDPOINT": "10.0.0.5:29400"}


def test_mounts_come_from_the_placement_and_are_dropped_when_it_binds_none(tmp_path: Path) -> None:
    step = quickstart_step("train")
    bound = HostStepRequest.from_step(step, context(tmp_path, "local"), placement(True))
    assert bound.mounts and all(str(m.source).startswith("/volumes/") for m in bound.mounts if m.fill_from is None)
    argv = bound.runtime_argv(["wrap"], "python3", Path("/rt.py"))
    assert argv[:2] == ["unshare", "--mount"] and argv[-4:] == ["wrap", "python3", "/rt.py",
                                                               str(bound.program_path)]
    unbound = HostStepRequest.from_step(step, context(tmp_path, "local"), placement(False))
    assert unbound.mounts == () and unbound.runtime_argv([], "python3", Path("/rt.py"))[0] == "python3"


@pytest.mark.parametrize("euid", [0, 1000])
def test_mounts_run_in_the_one_namespace_wrapper(tmp_path: Path, euid: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step's bind mounts are set up behind ``nodes.unshare(mount=True)``, as root and not (in a user namespace)."""
    monkeypatch.setattr("os.geteuid", lambda: euid)
    request = HostStepRequest.from_step(quickstart_step("train"), context(tmp_path, "local"), placement(True))
    prefix = unshare(mount=True)
    assert ("--map-root-user" in prefix) == (euid != 0)
    # The mount script is a file run by path (the package's, or the copy a backend names), not embedded text.
    assert request.runtime_argv([], "python3", Path("/rt.py"))[:len(prefix) + 2] == [*prefix, "sh",
                                                                                     str(MOUNT_SCRIPT_PATH)]
    assert request.runtime_argv([], "python3", Path("/rt.py"), Path("/step/mount_points.sh"))[len(prefix):][:2] == [
        "sh", "/step/mount_points.sh"]


@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_each_backend_renders_the_same_request(tmp_path: Path, mlhome: Path, backend: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The step program, the recipe's and the contract's env reach both renderings alike; only the local one knows
    each node's rank and master address when it plans."""
    monkeypatch.setattr("mlrecipe.backends.local.backend.visible_gpus", lambda: [])
    step, ctx = quickstart_step("train"), context(tmp_path, backend)
    impl = get_backend(backend, {"master_port": 29500})
    request = HostStepRequest.from_step(step, ctx, impl.placement())
    plan = impl.plan(step, ctx)
    assert plan.program == request.program
    if backend == "local":
        for node in plan.nodes:
            assert node.env.items() >= {**request.contract_env, **request.recipe_env}.items()
            assert node.env["PET_NODE_RANK"] == str(node.rank) and node.env["PET_MASTER_PORT"] == "29500"
    else:
        for key, value in {**request.contract_env, **request.recipe_env}.items():
            assert f"export {key}=" in plan.script and value in plan.script
        assert "export PET_NODE_RANK=" not in plan.script and "PET_MASTER_PORT=0" not in plan.script


def test_host_code_names_no_chart() -> None:
    """Chart-specific host behaviour is declared on the chart catalog, not in name lists in backends/host."""
    names = set(CATALOG)
    for path in (REPO / "src" / "mlrecipe" / "backends" / "host").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef) and node.body
                      and isinstance(node.body[0], ast.Expr)}
        literals = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                    and isinstance(node.value, str) and id(node) not in docstrings}
        assert not literals & names, f"{path.name} names charts {sorted(literals & names)}: use a catalog attribute"
