"""Two local releases do not fight over GPUs: a machine-wide lease, released when its holder ends or dies
(``kill -9`` included); a second release waits for the GPUs (saying for what) or is refused, by choice.
The GPUs are a fake ``nvidia-smi``'s; the processes, locks and CLI runs are real."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlrecipe.backends.host.devices import Gpu
from mlrecipe.backends.host.gpu_lease import GpuLease, is_free
from tests.fake_gpus import gpu_env, install_fake_nvidia_smi
from tests.repo import BIN, cli_env

pytestmark = pytest.mark.integration
TORCH = "training/pytorchjob-distributed"

HOLDER = """
import sys, time
from pathlib import Path
from mlrecipe.backends.host.devices import Gpu
from mlrecipe.backends.host.gpu_lease import GpuLease
lease = GpuLease(Path(sys.argv[1]), (Gpu(0, "GPU-lease-test-0", "fake", 9.0),), "first", "train")
assert lease.acquire() == []
print("held", flush=True)
time.sleep(120)
"""


def test_the_lease_is_released_when_its_holder_is_killed(tmp_path: Path) -> None:
    gpu = Gpu(0, "GPU-lease-test-0", "fake", 9.0)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        second = GpuLease(tmp_path, (gpu,), "second", "train")
        busy = second.acquire()
        assert [g for g, _ in busy] == [gpu] and busy[0][1] is not None
        assert busy[0][1].release == "first" and busy[0][1].pid == holder.pid
        assert not is_free(tmp_path, gpu)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
        assert is_free(tmp_path, gpu)
        assert second.acquire() == [], "a dead holder's lease is gone"
        second.close()
    finally:
        holder.kill()


def _recipe(tmp_path: Path, name: str, command: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text("image: python\nresources:\n  limits: {\"nvidia.com/gpu\": 1}\n"
                    f"train:\n  command: [{command}]\n")
    return path


def test_a_second_release_waits_for_the_gpu_or_is_refused(tmp_path: Path, mlhome: Path) -> None:
    install_fake_nvidia_smi(tmp_path / "fakebin", 1)
    env = gpu_env(cli_env(mlhome), tmp_path / "fakebin")
    leases = tmp_path / "leases"

    def cli(*args: str) -> list[str]:
        return [str(BIN / "mlrecipe"), *args, "-B", f"gpu_lease_dir={leases}"]

    first = subprocess.Popen(cli("install", "first", TORCH, "-f", str(_recipe(tmp_path, "first", "sleep, '120'"))),
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    second = None
    try:
        deadline = time.monotonic() + 60
        while not list(leases.glob("*.json")) or all(is_free(leases, Gpu(0, p.stem, "", None))
                                                     for p in leases.glob("*.json")):
            assert time.monotonic() < deadline and first.poll() is None, "the first release never took its GPU"
            time.sleep(0.2)
        recipe = _recipe(tmp_path, "second", "echo, 'ran on GPU $CUDA_VISIBLE_DEVICES'")
        refused = subprocess.run(cli("install", "second", TORCH, "-f", str(recipe), "-B", "gpu_busy=refuse"),
                                 env=env, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1
        assert "GPU 0 (NVIDIA H100 80GB HBM3) held by release first step pytorchjob-distributed" in refused.stdout
        assert "gpu_busy=wait" in refused.stdout
        second = subprocess.Popen(cli("install", "second", TORCH, "-f", str(recipe), "--force"), env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert second.stdout is not None
        waiting = ""
        while "waiting" not in waiting:
            waiting = second.stdout.readline()
            assert waiting, "the second release ended without saying what it waits for"
        assert "held by release first" in waiting
        first.send_signal(signal.SIGKILL)  # its node processes die with it, and their hold with them
        first.wait(timeout=10)
        rest = second.communicate(timeout=90)[0]
        assert second.returncode == 0, rest
        log = (mlhome / "releases" / "local" / "default" / "second" / "steps" / "pytorchjob-distributed"
               / "node-0.log").read_text()
        assert "ran on GPU 0" in log
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
        subprocess.run(cli("uninstall", "first"), env=env, capture_output=True, timeout=60)
