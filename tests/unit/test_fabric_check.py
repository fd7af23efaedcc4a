"""The step runtime's fabric check, in process: NCCL's transport lines, the baselines, the program block, EFA
readiness with a fake ``fi_info`` and a plugin file (the runs across nodes: tests/integration/test_fabric_check.py).
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from mlrecipe import nccl_network
from mlrecipe.runtime import step_runtime as rt

SOCKET_LOG = """\
node0:123:456 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>
node0:123:456 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation
node0:123:456 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
node0:123:456 [0] NCCL INFO Using network Socket
"""
EFA_LOG = """\
node0:1:2 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)
node0:1:2 [0] NCCL INFO Using network AWS Libfabric
"""


def test_planted_nccl_log_with_net_socket_is_socket() -> None:
    assert rt.nccl_transport(SOCKET_LOG) == "socket"
    assert rt.nccl_transport(EFA_LOG) == "efa"
    assert rt.nccl_transport("x NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\n") == "ib"
    assert rt.nccl_transport("no nccl here") == "unknown"
    assert nccl_network.SOCKETS is rt.NCCL_SOCKETS  # one source of truth for the after-run warning


def test_baselines_by_instance_type() -> None:
    assert rt.baseline_gbps("p4d.24xlarge") == 400.0
    assert rt.baseline_gbps("ml.p5.48xlarge") == 3200.0
    assert rt.baseline_gbps("p5en.48xlarge") == 3200.0
    assert rt.baseline_gbps("trn1n.32xlarge") == 1600.0
    assert rt.baseline_gbps("m5.large") is None and rt.baseline_gbps(None) is None


def test_program_block() -> None:
    assert rt.FabricSettings.from_program({}) is None
    assert rt.FabricSettings.from_program({"network_check": True}) == rt.FabricSettings()
    got = rt.FabricSettings.from_program({"network_check": {"min_ratio": 0.5, "node_type": "p5.48xlarge",
                                                           "efa": True}})
    assert got == rt.FabricSettings(0.5, "p5.48xlarge", True)


def fake_fi_info(directory: Path, status: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    tool = directory / "fi_info"
    tool.write_text(f'#!/bin/sh\n[ "$1 $2" = "-p efa" ] || exit 9\necho "provider: efa"\nexit {status}\n')
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return directory


@pytest.mark.integration
@pytest.mark.parametrize(("fi_status", "plugin", "ready"), [(0, True, True), (0, False, False), (1, True, False)])
def test_efa_readiness_with_a_fake_fi_info_and_plugin(tmp_path: Path, fi_status: int, plugin: bool,
                                                      ready: bool) -> None:
    bin_dir = fake_fi_info(tmp_path / "bin", fi_status)
    lib = tmp_path / "lib"
    lib.mkdir()
    if plugin:
        (lib / "libnccl-net-ofi.so").write_bytes(b"")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LD_LIBRARY_PATH": str(lib), "FI_PROVIDER": "efa"}
    reason = rt.efa_readiness(env)
    if ready:
        assert reason is None
        return
    assert reason is not None and "EFA is not ready" in reason and "FI_PROVIDER=efa" in reason
    assert ("no aws-ofi-nccl plugin" in reason) == (not plugin)
    assert ("fi_info -p efa" in reason) == (fi_status != 0)


@pytest.mark.integration
def test_efa_step_fails_before_the_command_when_the_image_is_not_ready(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    env = {"PATH": f"{tmp_path / 'none'}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "FI_PROVIDER": "efa",
           "PET_NNODES": "2", "PET_NODE_RANK": "0", "LD_LIBRARY_PATH": str(tmp_path)}
    program = {"step": "s", "command": ["touch", str(marker)], "network_check": {"efa": True}}
    assert rt.run(program, env) == 1
    assert not marker.exists()
    log = (tmp_path / "home" / "logs" / "s" / "node-0.log").read_text()
    assert "EFA is not ready in this image: fi_info (libfabric) is not on PATH" in log
    assert "security group" in log


@pytest.mark.integration
def test_an_image_without_torch_skips_the_check_in_one_line_and_runs_the_command(tmp_path: Path) -> None:
    """The runtime under a python3 without torch (the system's): the step is not failed for it."""
    import json
    import shutil
    import subprocess

    system_python = shutil.which("python3", path="/usr/bin:/bin")
    if system_python is None or subprocess.run([system_python, "-c", "import torch"],
                                               capture_output=True).returncode == 0:
        pytest.skip("no python3 without torch on this machine")
    program = tmp_path / "step.json"
    marker = tmp_path / "ran"
    program.write_text(json.dumps({"step": "s", "command": ["touch", str(marker)], "network_check": {}}))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "PET_NNODES": "2", "PET_NODE_RANK": "0",
           "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": "1"}
    done = subprocess.run([system_python, rt.__file__, str(program)], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("fabric check: skipped (torch is not installed in the image)") == 1, done.stdout
    assert marker.exists()
