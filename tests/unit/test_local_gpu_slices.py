"""The local backend's GPU slices with a fake ``nvidia-smi`` reporting 0, 1, 2 and 8 GPUs: one contiguous slice
per node, refusal of what does not fit (exit 2, the arithmetic, the ways out), CPU for steps without GPUs."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from tests.fake_gpus import gpu_env, install_fake_nvidia_smi
from tests.repo import BIN, cli_env

TORCH = "training/pytorchjob-distributed"


def recipe(tmp_path: Path, nnodes: int, nproc: int = 1, gpus: int | None = None, launcher: str = "") -> Path:
    limits = f'  limits: {{"nvidia.com/gpu": {gpus}}}\n' if gpus is not None else ""
    block = (f"launcher:\n  type: {launcher}\n  script: train.py\n" if launcher
             else "train:\n  command: [python3, -c, 'print(1)']\n")
    path = tmp_path / f"r-{nnodes}-{nproc}-{gpus}-{launcher}.yaml"
    path.write_text(f"image: python\nresources:\n  nnodes: {nnodes}\n  nproc_per_node: {nproc}\n{limits}{block}")
    return path


class Machine:
    """The CLI on a machine whose ``nvidia-smi`` reports ``count`` GPUs."""

    def __init__(self, tmp_path: Path, home: Path, count: int | None) -> None:
        self.home = home
        self.env = cli_env(home)
        if count is not None:
            install_fake_nvidia_smi(tmp_path / "fakebin", count)
            self.env = gpu_env(self.env, tmp_path / "fakebin")
        self.leases = tmp_path / "leases"

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "mlrecipe"), *args, "-B", f"gpu_lease_dir={self.leases}"],
                              capture_output=True, text=True, env=self.env, timeout=120)

    def node_envs(self, chart: str, path: Path, *extra: str) -> list[dict[str, str]]:
        """The env of every node of ``template`` (the plan exactly as it would run)."""
        done = self.cli("template", "rel", chart, "-f", str(path), *extra)
        assert done.returncode == 0, done.stderr
        self.last = done.stdout
        return [dict(w.split("=", 1) for w in shlex.split(line.rstrip(" \\"))[1:])
                for line in done.stdout.splitlines() if line.startswith("env ")]


@pytest.fixture
def machine(tmp_path: Path, mlhome: Path):
    return lambda count: Machine(tmp_path, mlhome, count)


@pytest.mark.integration
def test_eight_gpus_two_nodes_of_four_get_contiguous_slices(machine, tmp_path: Path) -> None:
    m = machine(8)
    envs = m.node_envs(TORCH, recipe(tmp_path, 2, 4, gpus=4))
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0,1,2,3", "4,5,6,7"]
    assert all(e["MLRECIPE_DEVICE"] == "cuda" and e["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" for e in envs)
    assert all("ACCELERATE_USE_CPU" not in e and e["MLRECIPE_MIXED_PRECISION"] == "bf16" for e in envs)
    assert "# node 1: devices GPU 4 (NVIDIA H100 80GB HBM3), GPU 5" in m.last
    assert "node 0: GPU 0,1,2,3; node 1: GPU 4,5,6,7" in m.last


@pytest.mark.integration
def test_two_gpus_an_unrequesting_training_step_takes_one_per_process(machine, tmp_path: Path) -> None:
    envs = machine(2).node_envs(TORCH, recipe(tmp_path, 2, 1))
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "1"]


@pytest.mark.integration
def test_one_gpu_an_unrequesting_two_node_step_runs_on_cpu_and_says_so(machine, tmp_path: Path) -> None:
    m = machine(1)
    envs = m.node_envs(TORCH, recipe(tmp_path, 2, 1))
    assert all(e["CUDA_VISIBLE_DEVICES"] == "" and e["MLRECIPE_DEVICE"] == "cpu" for e in envs)
    assert all(e["ACCELERATE_USE_CPU"] == "1" for e in envs)
    assert "would take 2 GPU(s) and fewer are free here: it runs on CPU" in m.last
    assert "# node 0: devices CPU" in m.last


@pytest.mark.integration
def test_a_job_that_asks_for_no_gpu_runs_on_cpu_on_a_gpu_machine(machine, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("image: python\nprocess:\n  command: [python3, -c, 'print(1)']\n")
    m = machine(8)
    envs = m.node_envs("data-prep/data-process", path)
    assert envs[0]["CUDA_VISIBLE_DEVICES"] == "" and envs[0]["MLRECIPE_DEVICE"] == "cpu"
    assert "asks for no GPU: it runs on CPU" in m.last


@pytest.mark.integration
def test_a_request_that_does_not_fit_is_refused_with_the_arithmetic_and_ways_out(machine, tmp_path: Path) -> None:
    m = machine(1)
    path = recipe(tmp_path, 2, 1, gpus=1)
    done = m.cli("validate", str(path), "--chart", TORCH, "-b", "local")
    assert done.returncode == 2
    assert "2 node(s) x 1 GPU(s) per node (nvidia.com/gpu) = 2 GPU(s), but 1 is visible" in done.stderr
    assert "--set resources.nnodes=1" in done.stderr and "share_gpus=true" in done.stderr
    assert "gpus=cpu" in done.stderr
    install = m.cli("install", "rel", TORCH, "-f", str(path))
    assert install.returncode == 2 and "2 GPU(s), but 1 is visible" in install.stderr
    assert not (m.home / "releases").exists(), "nothing started or written"
    too_wide = m.cli("validate", str(recipe(tmp_path, 1, 1, gpus=16)), "--chart", TORCH, "-b", "local")
    assert too_wide.returncode == 2 and "one node alone needs 16" in too_wide.stderr


@pytest.mark.integration
def test_sharing_is_an_explicit_opt_in(machine, tmp_path: Path) -> None:
    envs = machine(1).node_envs(TORCH, recipe(tmp_path, 2, 1, gpus=1), "-B", "share_gpus=true")
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "0"]
    assert all(e["MLRECIPE_SHARED_GPUS"] == "1" for e in envs)


@pytest.mark.integration
def test_no_gpu_machine_runs_requests_on_cpu_unless_strict(machine, tmp_path: Path) -> None:
    m = machine(0)
    path = recipe(tmp_path, 2, 1, gpus=1)
    envs = m.node_envs(TORCH, path)
    assert all(e["MLRECIPE_DEVICE"] == "cpu" and "CUDA_VISIBLE_DEVICES" not in e for e in envs)
    assert "this machine has none: it runs on CPU" in m.last
    strict = m.cli("validate", str(path), "--chart", TORCH, "-b", "local", "-B", "gpus=strict")
    assert strict.returncode == 2 and "but 0 are visible" in strict.stderr


@pytest.mark.integration
def test_gpus_cpu_keeps_every_step_off_the_gpus(machine, tmp_path: Path) -> None:
    envs = machine(8).node_envs(TORCH, recipe(tmp_path, 2, 4, gpus=4), "-B", "gpus=cpu")
    assert all(e["CUDA_VISIBLE_DEVICES"] == "" and e["MLRECIPE_DEVICE"] == "cpu" for e in envs)


@pytest.mark.integration
def test_the_cli_own_cuda_visible_devices_narrows_the_machine(machine, tmp_path: Path) -> None:
    m = machine(8)
    m.env["CUDA_VISIBLE_DEVICES"] = "6,2"
    envs = m.node_envs(TORCH, recipe(tmp_path, 2, 1, gpus=1))
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["6", "2"]
    refused = m.cli("validate", str(recipe(tmp_path, 3, 1, gpus=1)), "--chart", TORCH, "-b", "local")
    assert refused.returncode == 2 and "but 2 are visible" in refused.stderr


@pytest.mark.integration
def test_accelerate_follows_the_slice_and_the_device_precision(machine, tmp_path: Path) -> None:
    m = machine(2)
    (tmp_path / "fakebin" / "nvidia-smi").write_text(
        (tmp_path / "fakebin" / "nvidia-smi").read_text().replace("9.0", "7.0").replace("H100 80GB HBM3", "V100"))
    envs = m.node_envs(TORCH, recipe(tmp_path, 1, 2, gpus=2, launcher="accelerate"))
    assert envs[0]["MLRECIPE_GPU_IDS"] == "0,1" and envs[0]["MLRECIPE_MIXED_PRECISION"] == "fp16"
    assert "--gpu_ids $MLRECIPE_GPU_IDS" in m.last and "--mixed_precision $MLRECIPE_MIXED_PRECISION" in m.last
    expanded = subprocess.run(
        ["bash", "-c", "echo ${MLRECIPE_GPU_IDS:+--gpu_ids $MLRECIPE_GPU_IDS} "
                       "${MLRECIPE_MIXED_PRECISION:+--mixed_precision $MLRECIPE_MIXED_PRECISION}"],
        env={**envs[0], "PATH": "/usr/bin:/bin"}, capture_output=True, text=True).stdout.split()
    assert expanded == ["--gpu_ids", "0,1", "--mixed_precision", "fp16"]


@pytest.mark.integration
def test_mpi_launcher_sees_every_node_slice(machine, tmp_path: Path) -> None:
    path = tmp_path / "mpi.yaml"
    path.write_text("image: python\nresources:\n  nnodes: 2\n  nproc_per_node: 2\n"
                    "  limits: {\"nvidia.com/gpu\": 2}\ntrain:\n  command: [mpirun, hostname]\n")
    m = machine(8)
    if subprocess.run(["sh", "-c", "command -v mpirun"], capture_output=True).returncode:
        pytest.skip("the mpijob chart plans only where Open MPI's mpirun is installed (make system-deps)")
    envs = m.node_envs("training/mpijob", path)
    assert len(envs) == 1 and envs[0]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"


def test_neuron_requests_become_visible_cores_per_node(tmp_path: Path, mlhome: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from mlrecipe.backends.local.devices import plan_devices
    from mlrecipe.backends.local.options import LocalOptions
    from mlrecipe.spec.load import load_step_release

    path = tmp_path / "neuron.yaml"
    path.write_text("image: python\nresources:\n  nnodes: 2\n  limits: {\"aws.amazon.com/neuron\": 1}\n"
                    "train:\n  command: [python3, -c, 'print(1)']\n")
    step = load_step_release("rel", TORCH, [str(path)], [], "default").steps[0]
    plan = plan_devices(step, LocalOptions(), [], lambda gpu: True, 2, neuron_total=4)
    assert [plan.node_env(i)["NEURON_RT_VISIBLE_CORES"] for i in range(2)] == ["0-1", "2-3"]
