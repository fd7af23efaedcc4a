"""The step runtime inside a SageMaker training container: SageMaker's contract mapped onto PET_*."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlrecipe.runtime import RUNTIME_PATH, step_runtime


def _resource_config(tmp_path: Path, current: str, hosts: list[str]) -> str:
    path = tmp_path / "resourceconfig.json"
    path.write_text(json.dumps({"current_host": current, "hosts": hosts, "network_interface_name": "eth0"}))
    return str(path)


def test_resourceconfig_maps_onto_the_env_contract(tmp_path: Path) -> None:
    config = _resource_config(tmp_path, "algo-2", ["algo-3", "algo-1", "algo-2"])
    env = step_runtime.map_env_contract({"SM_NUM_GPUS": "4"}, config)
    assert env["PET_NNODES"] == "3"
    assert env["PET_NODE_RANK"] == "1"
    assert env["PET_MASTER_ADDR"] == "algo-1"
    assert env["PET_MASTER_PORT"] == step_runtime.DEFAULT_MASTER_PORT
    assert env["PET_NPROC_PER_NODE"] == "4"


def test_sm_hosts_without_resourceconfig(tmp_path: Path) -> None:
    env = step_runtime.map_env_contract(
        {"SM_HOSTS": '["algo-2","algo-1"]', "SM_CURRENT_HOST": "algo-1", "SM_NUM_GPUS": "0"},
        str(tmp_path / "absent.json"))
    assert (env["PET_NNODES"], env["PET_NODE_RANK"], env["PET_MASTER_ADDR"]) == ("2", "0", "algo-1")
    assert env["PET_NPROC_PER_NODE"] == "1"


def test_values_already_present_win(tmp_path: Path) -> None:
    config = _resource_config(tmp_path, "algo-2", ["algo-1", "algo-2"])
    env = step_runtime.map_env_contract({"PET_NPROC_PER_NODE": "2", "PET_MASTER_PORT": "1234"}, config)
    assert "PET_NPROC_PER_NODE" not in env and "PET_MASTER_PORT" not in env
    assert env["PET_NODE_RANK"] == "1"


def test_elastic_steps_get_their_rendezvous_endpoint(tmp_path: Path) -> None:
    config = _resource_config(tmp_path, "algo-1", ["algo-1", "algo-2"])
    env = step_runtime.map_env_contract({"PET_RDZV_BACKEND": "c10d", "PET_MASTER_PORT": "29400"}, config)
    assert env["PET_RDZV_ENDPOINT"] == "algo-1:29400"


def test_outside_sagemaker_nothing_changes(tmp_path: Path) -> None:
    env = step_runtime.map_env_contract({"SM_CURRENT_HOST": "algo-9"}, str(tmp_path / "absent.json"))
    assert (env["PET_NNODES"], env["PET_NODE_RANK"], env["PET_MASTER_ADDR"]) == ("1", "0", "127.0.0.1")


def test_host_resolution_is_retried_then_bounded() -> None:
    calls: list[str] = []

    def late(host: str, _port: object) -> list:
        calls.append(host)
        if len(calls) < 3:
            raise OSError("Name or service not known")
        return []

    assert step_runtime.wait_for_host("algo-1", timeout=5, interval=0.01, resolve=late) is None
    assert calls == ["algo-1"] * 3

    def never(host: str, _port: object) -> list:
        raise OSError("Name or service not known")

    assert "not known" in (step_runtime.wait_for_host("algo-1", timeout=0.05, interval=0.01, resolve=never) or "")


@pytest.mark.integration
def test_unresolvable_master_fails_with_a_clear_message(tmp_path: Path) -> None:
    step = tmp_path / "step.json"
    step.write_text(json.dumps({"version": 1, "release": "r", "step": "s", "command": ["true"]}))
    env = {"PATH": "/usr/bin:/bin", "SM_HOSTS": '["no-such-host.invalid","x"]', "SM_CURRENT_HOST": "x",
           "MLRECIPE_RESOLVE_TIMEOUT": "0"}
    out = subprocess.run([sys.executable, str(RUNTIME_PATH), str(step)], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1
    assert "master host no-such-host.invalid did not resolve" in out.stderr


def test_runtime_uses_the_standard_library_only() -> None:
    tree = ast.parse(Path(step_runtime.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}
