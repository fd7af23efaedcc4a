"""Local doctor checks, run for real on this machine (packages, binaries, GPUs, volume root)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mlrecipe.infra.doctor import exit_code, run_checks
from mlrecipe.infra.doctor import local as local_checks
from mlrecipe.infra.doctor.probes import parse_nvidia_smi_list
from mlrecipe.infra.doctor.requirements import GPU, Requirements, requirements_of_recipe


def run(req: Requirements) -> dict[str, object]:
    outcomes = run_checks(local_checks.checks(req))
    return {"code": exit_code(outcomes), **{o.check.name: o for o in outcomes}}


def from_recipe(recipe: dict) -> Requirements:
    req = requirements_of_recipe(recipe)
    req.source = Path("recipe.yaml")
    return req


@pytest.mark.integration
def test_general_preflight_passes_with_a_fresh_home(mlrecipe_home: Path) -> None:
    result = run(Requirements())
    assert result["code"] == 0
    assert result["volume root writable"].result.ok
    assert (mlrecipe_home / "volumes").is_dir()
    assert not list((mlrecipe_home / "volumes").iterdir()), "the probe file must be removed"
    assert not result["python package torch"].check.blocking


@pytest.mark.integration
def test_package_checks_agree_with_the_interpreter(mlrecipe_home: Path) -> None:
    result = run(from_recipe({"framework": "pytorch", "pvc": []}))
    torch = result["python package torch"]
    assert torch.check.blocking
    assert torch.result.ok is (importlib.util.find_spec("torch") is not None)


@pytest.mark.integration
def test_missing_package_blocks_with_a_pip_hint(mlrecipe_home: Path) -> None:
    absent = next((m for m in ("jax", "tensorflow", "vllm") if importlib.util.find_spec(m) is None), None)
    if absent is None:
        pytest.skip("jax, tensorflow and vllm are all installed here")
    result = run(from_recipe({"framework": absent, "pvc": []}))
    outcome = result[f"python package {absent}"]
    assert result["code"] == 1 and outcome.status == "FAIL"
    assert f"-m pip install '{absent}'" in outcome.result.fix_hint


@pytest.mark.integration
def test_mpirun_binary_check_agrees_with_path(mlrecipe_home: Path) -> None:
    result = run(from_recipe({"launcher": {"type": "mpirun", "script": "t.py"}, "pvc": []}))
    assert result["binary mpirun"].result.ok is (shutil.which("mpirun") is not None)
    if shutil.which("mpirun") is None:
        assert "openmpi-bin" in result["binary mpirun"].result.fix_hint


@pytest.mark.integration
def test_gpu_requirement_agrees_with_nvidia_smi(mlrecipe_home: Path) -> None:
    result = run(from_recipe({"resources": {"requests": {GPU: 1}}, "pvc": []}))
    gpus = result["GPUs"]
    assert gpus.check.blocking
    has_gpu = False
    if shutil.which("nvidia-smi"):
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout
        has_gpu = bool(parse_nvidia_smi_list(listing))
    assert gpus.result.ok is has_gpu
    if not has_gpu:
        assert result["code"] == 1 and "asks for 1" in gpus.result.detail


def test_parse_nvidia_smi_list() -> None:
    # The documented `nvidia-smi -L` line format (written here; no GPU on CI machines).
    text = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5f0c8a8e-2b61-4d4c-9d0b-0c6d8a1e7f11)\n"
        "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-7a1d9b9f-3c72-4e5d-8e1c-1d7e9b2f8a22)\n"
    )
    assert parse_nvidia_smi_list(text) == ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"]
    assert parse_nvidia_smi_list("No devices were found\n") == []


@pytest.mark.integration
def test_unwritable_volume_root_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where MLRECIPE_HOME should be")
    monkeypatch.setenv("MLRECIPE_HOME", str(blocker))
    result = run(Requirements())
    outcome = result["volume root writable"]
    assert result["code"] == 1 and outcome.status == "FAIL"
    assert "MLRECIPE_HOME" in outcome.result.fix_hint


@pytest.mark.integration
def test_image_mapped_environment_is_the_one_checked(mlrecipe_home: Path, tmp_path: Path) -> None:
    system_python = shutil.which("python3", path="/usr/bin")
    if system_python is None:
        pytest.skip("no /usr/bin/python3 to stand in for another environment")
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    wrapper = prefix / "bin" / "python"
    wrapper.write_text(f'#!/bin/sh\nexec {system_python} "$@"\n')
    wrapper.chmod(0o755)
    mlrecipe_home.mkdir(parents=True)
    (mlrecipe_home / "config.yaml").write_text(yaml.safe_dump({"local": {"images": {"my/image:1": str(prefix)}}}))
    result = run(from_recipe({"image": "my/image:1", "framework": "pytorch", "pvc": []}))
    assert str(wrapper) in result["python interpreter"].result.detail
    truth = subprocess.run(
        [str(wrapper), "-c", "import importlib.util; print(importlib.util.find_spec('torch') is not None)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert result["python package torch"].result.ok is (truth == "True")
    assert str(wrapper) in result["python package torch"].result.detail
    assert sys.executable not in result["python package torch"].result.detail


@pytest.mark.integration
def test_oversubscription_is_a_warning(mlrecipe_home: Path) -> None:
    result = run(from_recipe({"resources": {"nnodes": 64, "nproc_per_node": 8}, "pvc": []}))
    cpu = result["CPU cores"]
    assert cpu.status == "warn" and "512 processes" in cpu.result.detail
