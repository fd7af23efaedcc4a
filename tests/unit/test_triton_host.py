"""Triton on hosts without a server: the launcher's argv and which Triton recipes a host can run."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlrecipe.backends.host import images, triton
from mlrecipe.serve import tritonserver
from mlrecipe.spec.catalog import lookup


def test_launcher_binds_loopback_and_takes_the_plans_port() -> None:
    home = Path("/opt/pytriton/tritonserver")
    argv, ports = tritonserver.server_argv(
        ["--model-repository=/m", "--http-port=8000", "--grpc-port", "8001", "--http-address=0.0.0.0"], home,
        {"MLRECIPE_SERVER_PORT": "18000", "MLRECIPE_TRITON_GRPC_PORT": "18001",
         "MLRECIPE_TRITON_METRICS_PORT": "18002"})
    assert argv[0] == str(home / "bin" / "tritonserver")
    assert "--http-address=0.0.0.0" not in argv and "--http-port=8000" not in argv and "8001" not in argv
    for opt in ("--http-address", "--grpc-address", "--metrics-address"):
        assert f"{opt}=127.0.0.1" in argv
    assert ports == {"--http-port": 18000, "--grpc-port": 18001, "--metrics-port": 18002}
    assert f"--backend-directory={home / 'backends'}" in argv and "--model-repository=/m" in argv


def test_launcher_keeps_the_recipes_ports_outside_mlrecipe() -> None:
    argv, ports = tritonserver.server_argv(["--http-port=9000"], Path("/x"), {})
    assert "--http-port=9000" in argv and ports["--http-port"] == 9000 and ports["--grpc-port"] == 8001


def test_triton_chart_is_ready_on_kserve_health() -> None:
    assert lookup("serving/triton-inference-server").health_path == "/v2/health/ready"


@pytest.mark.integration
def test_triton_images_map_to_the_triton_environment(tmp_path: Path, monkeypatch) -> None:
    for name in (".venv-triton", ".venv-vllm"):
        (tmp_path / name / "bin").mkdir(parents=True)
        (tmp_path / name / "bin" / "python").touch()
    monkeypatch.setattr("sys.prefix", str(tmp_path / ".venv"))
    monkeypatch.delenv(images.IMAGES_VAR, raising=False)
    known = images.ImageEnvironments({}, known=images.known_images())
    for image in ("nvcr.io/nvidia/tritonserver:24.08-py3", "1234.dkr.ecr.aws/tritonserver-neuronx:1"):
        assert known.resolve(image)[0].prefix == tmp_path / ".venv-triton"
    assert known.resolve("vllm/vllm-openai:latest")[0].prefix == tmp_path / ".venv-vllm"
    problem = images.environment_problems(images.PythonEnvironment(tmp_path / ".venv-triton"), ("pytriton",), "x")
    assert "make triton-env" in problem[0] and "nvidia-pytriton" in problem[0]


def test_unsupported_backend_reasons() -> None:
    assert triton._CONFIG.search('backend: "vllm"') and triton._CONFIG.search("backend: 'tensorrtllm'")
    assert not triton._CONFIG.search('backend: "python"')
    assert triton._IMAGE.search("nvcr.io/nvidia/tritonserver:24.08-trtllm-python-py3")
    assert triton._IMAGE.search("nvcr.io/nvidia/tritonserver:24.08-vllm-python-py3")
    assert not triton._IMAGE.search("nvcr.io/nvidia/tritonserver:24.08-py3")
