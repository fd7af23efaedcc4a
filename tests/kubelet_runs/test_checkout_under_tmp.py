"""A checkout under /tmp (``git clone ... /tmp/x && make test``): every pod gets a fresh /tmp, which would hide the
checkout's environments, ``image_bin/`` and the ``src/`` its editable installs point to ("torchrun: command not
found"). The harness mounts the checkout back over the fresh /tmp, after any volume mounted at /tmp itself."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.kubelet.container import Mount
from tests.kubelet.harness import Cluster
from tests.kubelet.pods import Pod, kept_under_layer, parents_first
from tests.kubelet.store import Store

MARKER = "checkout_marker"


def fake_checkout(root: Path) -> Path:
    """A checkout with one environment ``.venv`` (this interpreter's base Python, no packages) whose editable
    install points at the checkout's ``src/``, as ``make venv`` leaves one."""
    base = Path(sys.base_prefix)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    venv = root / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(base / "bin" / version)
    (venv / "pyvenv.cfg").write_text(f"home = {base / 'bin'}\ninclude-system-site-packages = false\n")
    site = venv / "lib" / version / "site-packages"
    site.mkdir(parents=True)
    (root / "src").mkdir()
    (root / "src" / f"{MARKER}.py").write_text("WHERE = 'the checkout under /tmp'\n")
    (site / "__editable__.checkout.pth").write_text(f"{root / 'src'}\n")
    return root


def test_a_checkout_under_tmp_is_mounted_back_writable(tmp_path: Path) -> None:
    repo = fake_checkout(tmp_path / "checkout")
    assert Path("/tmp") in repo.parents
    kept = kept_under_layer(repo)
    assert Mount(repo, str(repo), False) in kept, kept
    assert all(m.readonly for m in kept if m.source != repo)


def test_a_checkout_outside_the_layer_is_not_mounted() -> None:
    assert all(m.source != Path("/work/elsewhere") for m in kept_under_layer(Path("/work/elsewhere")))


def test_a_volume_at_tmp_is_mounted_before_the_checkout_under_it() -> None:
    repo = Mount(Path("/tmp/x"), "/tmp/x")
    volume = Mount(Path("/var/lib/vol"), "/tmp")
    hosts = Mount(Path("/run/h"), "/etc/hosts")
    assert parents_first([hosts, repo, volume]) == [volume, hosts, repo]


@pytest.mark.integration
def test_a_pod_runs_the_environment_of_a_checkout_under_tmp(tmp_path: Path) -> None:
    """One pod of two containers run from a checkout under /tmp: ``python`` on ``PATH`` is the checkout's
    environment and imports from its ``src/``, also in the container with an ``emptyDir`` at /tmp."""
    repo = fake_checkout(tmp_path / "checkout")
    command = ["python", "-c", f"import {MARKER}, sys; print(sys.prefix, {MARKER}.WHERE)"]
    pod_obj = {"metadata": {"name": "under-tmp", "namespace": "default", "labels": {}},
               "spec": {"containers": [{"name": "plain", "image": "python:3.11", "command": command},
                                       {"name": "tmp-volume", "image": "python:3.11", "command": command,
                                        "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}]}],
                        "volumes": [{"name": "scratch", "emptyDir": {}}]},
               "status": {"podIP": "127.0.0.2"}}
    cluster = Cluster(Store(), tmp_path / "work", tmp_path / "logs", {}, 0, repo=repo)
    pod = Pod(pod_obj, cluster)
    pod.start()
    deadline = time.monotonic() + 60  # bounds the wait only
    while not pod.done.wait(1) and time.monotonic() < deadline:
        pass
    pod.stop()
    logs = {c: pod.log_tail(c) for c in ("plain", "tmp-volume")}
    assert pod.phase == "Succeeded", (pod.failure, logs)
    for text in logs.values():
        assert f"{repo / '.venv'} the checkout under /tmp" in text, logs
