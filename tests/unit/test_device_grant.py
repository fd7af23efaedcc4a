"""One device grant (``backends/host/grant.py``) over the machine-wide GPU lease and the CPU slots: every GPU asked
for or none, any one of them (an endpoint), the holders named when it must wait, the GPUs kept while it waits for
CPUs, everything given back. The lease is real (``flock`` on files in a temporary directory); no process starts."""

from __future__ import annotations

from pathlib import Path

from mlrecipe.backends.host.cpus import CpuSlots
from mlrecipe.backends.host.devices import Gpu
from mlrecipe.backends.host.gpu_lease import GpuLease, is_free
from mlrecipe.backends.host.grant import DeviceGrant

GPU0 = Gpu(0, "GPU-grant-test-0", "fake", 9.0)
GPU1 = Gpu(1, "GPU-grant-test-1", "fake", 9.0)


def test_a_grant_holds_every_gpu_or_none_and_names_who_holds_them(tmp_path: Path) -> None:
    other = GpuLease(tmp_path, (GPU1,), "other", "train")
    assert other.acquire() == []
    grant = DeviceGrant(tmp_path, "rel", "step", gpus=(GPU0, GPU1))
    wait = grant.take()
    assert wait is not None and [gpu for gpu, _ in wait.busy] == [GPU1]
    assert "GPU 1" in wait.holders() and "held by release other step train" in wait.holders()
    assert wait.note(3).startswith("waiting 3 s for its GPUs: GPU 1")
    assert is_free(tmp_path, GPU0), "a grant that waits holds none of its GPUs"
    assert grant.fds == [] and grant.granted_gpus == ()
    other.close()
    assert grant.take() is None
    assert grant.granted_gpus == (GPU0, GPU1) and len(grant.fds) == 2
    assert not is_free(tmp_path, GPU0) and not is_free(tmp_path, GPU1)
    grant.handed_over()
    assert grant.fds == [] and is_free(tmp_path, GPU0), "handed over: only the nodes hold it (none here)"
    assert grant.take() is None and is_free(tmp_path, GPU0), "a grant handed over is not taken again"


def test_any_one_gpu_takes_the_first_free_one_or_names_every_holder(tmp_path: Path) -> None:
    first = GpuLease(tmp_path, (GPU0,), "first", "serve")
    assert first.acquire() == []
    grant = DeviceGrant(tmp_path, "sagemaker-local", "ep", gpus=(GPU0, GPU1), any_one_gpu=True)
    assert grant.take() is None and grant.granted_gpus == (GPU1,) and len(grant.fds) == 1
    full = DeviceGrant(tmp_path, "sagemaker-local", "ep2", gpus=(GPU0, GPU1), any_one_gpu=True)
    wait = full.take()
    assert wait is not None and [gpu for gpu, _ in wait.busy] == [GPU0, GPU1]
    assert "release first step serve" in wait.holders() and "release sagemaker-local step ep" in wait.holders()
    grant.give_back()
    first.close()
    assert is_free(tmp_path, GPU0) and is_free(tmp_path, GPU1)


def test_cpu_slots_are_waited_for_with_the_gpus_held_and_given_back(tmp_path: Path) -> None:
    slots = CpuSlots(2)
    assert slots.take("running", 2)
    grant = DeviceGrant(tmp_path, "rel", "step", gpus=(GPU0,), cpus=slots, ranks=1, cpu_holder="run-1")
    wait = grant.take()
    assert wait is not None and wait.busy == () and wait.ranks == 1
    assert "waiting 4 s for CPUs: its 1 rank(s) and the 2 of the running steps" in wait.note(4)
    assert not is_free(tmp_path, GPU0), "its GPUs stay held while it waits for CPUs"
    slots.release("running")
    assert grant.take() is None and slots.holders == {"run-1": 1}
    grant.give_back()
    grant.give_back()
    assert slots.used == 0 and is_free(tmp_path, GPU0)


def test_a_grant_that_asks_for_nothing_is_held_at_once(tmp_path: Path) -> None:
    grant = DeviceGrant(tmp_path / "never-made", "rel", "step")
    assert grant.take() is None and grant.fds == [] and grant.granted_gpus == ()
    assert not (tmp_path / "never-made").exists()
