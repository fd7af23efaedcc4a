"""A pod as the kubelet runs it: volumes set up, init containers one by one to success, then every container at
once, each in its own namespaces with the pod's hostname, ``/etc/hosts`` and volumes. Its phase follows the
containers (Running once started; Succeeded when all exit 0; Failed with the first failing container)."""

from __future__ import annotations

import copy
import re
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.kubelet import images, mountpoints
from tests.kubelet.container import ContainerProcess, Mount
from tests.kubelet.envvars import ContainerConfigError, container_env, expand
from tests.kubelet.volumes import MountError, materialize

if TYPE_CHECKING:
    from tests.kubelet.harness import Cluster

#: resources this machine has none of: requests and limits of them are dropped (and said)
DEVICE_RESOURCES = re.compile(r"^(nvidia\.com/|amd\.com/gpu|vpc\.amazonaws\.com/efa|aws\.amazon\.com/neuron)")
#: the image's own writable directories: a fresh tmpfs in every container, unless a volume is mounted there
#: (/var/tmp too: programs keep caches there, e.g. Neuron's compile cache, that a pod never shares with another)
LAYER = ["/tmp", "/var/tmp", "/root"]


def kept_under_layer(repo: Path) -> list[Mount]:
    """What of this machine a pod sees as its image but that lies under the fresh /tmp or /root, mounted back over it
    (an image's own files are not part of its writable layer): the Python installations this checkout's environments
    run on (pyenv's, under /root: read-only), and the checkout itself when it lies there (a clone under /tmp): the
    environments and ``image_bin/`` the image table puts on ``PATH`` and the ``src/`` their editable installs point
    to, writable as a checkout elsewhere is."""
    homes = {Path(sys.base_prefix)}
    for cfg in repo.glob(".venv*/pyvenv.cfg"):
        for line in cfg.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home":
                homes.add(Path(value.strip()).parent)
    kept = [Mount(h, str(h), True) for h in sorted(homes) if _under_layer(h) and h.is_dir()]
    if _under_layer(repo) and not any(repo.is_relative_to(m.source) for m in kept):
        kept.append(Mount(repo, str(repo)))
    return kept


def _under_layer(path: Path) -> bool:
    return any(path.is_relative_to(p) for p in LAYER)


def parents_first(mounts: list[Mount]) -> list[Mount]:
    """``mounts`` in the order to make them: a shallower target first (stable otherwise), so that a volume mounted at
    /tmp or /root does not hide what is kept under it."""
    return sorted(mounts, key=lambda m: m.target.rstrip("/").count("/"))


@dataclass
class Failure:
    """Why a pod failed: the container, its exit code (None: it never started) and the reason."""

    container: str
    exit_code: int | None
    reason: str


class Pod:
    """One pod object (``metadata``, ``spec``, ``status.podIP``) run on this machine."""

    def __init__(self, obj: dict[str, Any], cluster: Cluster, extra_mounts: list[Mount] | None = None) -> None:
        self.obj = copy.deepcopy(obj)
        self.cluster = cluster
        self.name: str = self.obj["metadata"]["name"]
        self.ip: str = self.obj["status"]["podIP"]
        self.extra_mounts = extra_mounts or []
        self.phase = "Pending"
        self.failure: Failure | None = None
        self.containers: dict[str, ContainerProcess] = {}
        self.running = threading.Event()
        self.done = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.dir = cluster.work_dir / "pods" / self.name

    @property
    def hostname(self) -> str:
        return str(self.obj["spec"].get("hostname") or self.name)[:63]

    def log_path(self, container: str) -> Path:
        return self.cluster.logs_dir / self.name / f"{container}.log"

    def _drop_devices(self, container: dict[str, Any]) -> None:
        resources = container.get("resources") or {}
        for section in ("requests", "limits"):
            for key in [k for k in (resources.get(section) or {}) if DEVICE_RESOURCES.match(k)]:
                value = resources[section].pop(key)
                self.cluster.note(f"{key} {section} of {value} rewritten to none (no such device here)")

    def _prepare(self, container: dict[str, Any], volumes: dict[str, Path]) -> tuple[list[str], dict[str, str],
                                                                                      list[Mount], list[str]]:
        image = images.resolve(str(container.get("image", "")), self.cluster.repo)
        base = {"PATH": image.path(), "HOME": "/root", "HOSTNAME": self.hostname}
        env = container_env(container, self.obj, self.cluster.store, base)
        try:
            argv = images.argv_for(image, container.get("command"), container.get("args"))
        except LookupError as exc:
            raise ContainerConfigError(str(exc)) from None
        argv = [expand(str(word), env) for word in argv]
        mounts = [Mount(self.dir / "etc-hosts", "/etc/hosts"), Mount(self.dir / "etc-hostname", "/etc/hostname")]
        mounts += kept_under_layer(self.cluster.repo)
        mounts += self.extra_mounts
        for vm in sorted(container.get("volumeMounts") or [], key=lambda m: str(m["mountPath"]).count("/")):
            source = volumes.get(vm["name"])
            if source is None:
                raise ContainerConfigError(f'volumeMount {vm["mountPath"]}: no volume named "{vm["name"]}" in the pod')
            if vm.get("subPath"):
                source = source / vm["subPath"]
                source.mkdir(parents=True, exist_ok=True)
            mounts.append(Mount(source, str(vm["mountPath"]), bool(vm.get("readOnly"))))
        mounts = parents_first(mounts)
        targets = [m.target for m in mounts]
        layer = [p for p in LAYER if p not in targets]
        mountpoints.ensure([m.target for m in mounts if m.source.is_dir()], layer)
        return argv, env, mounts, layer

    def _run_container(self, container: dict[str, Any], volumes: dict[str, Path]) -> ContainerProcess:
        name = container["name"]
        self._drop_devices(container)
        argv, env, mounts, layer = self._prepare(container, volumes)
        process = ContainerProcess.start(name, self.hostname, argv, env, mounts, layer,
                                         str(container.get("workingDir") or "/"), self.dir, self.log_path(name))
        self.containers[name] = process
        return process

    def _fail(self, container: str, code: int | None, reason: str) -> None:
        if self.failure is None:
            self.failure = Failure(container, code, reason)
        self.phase = "Failed"

    def _life(self) -> None:
        spec = self.obj["spec"]
        current = "(pod)"
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            own = [self.hostname, *self.cluster.pod_dns_names(self.obj)]
            (self.dir / "etc-hosts").write_text(self.cluster.addresses.hosts_file(self.ip, own))
            (self.dir / "etc-hostname").write_text(self.hostname + "\n")
            volumes = materialize(self.obj, self.cluster.store, self.dir, self.cluster.claim_dir)
            for init in spec.get("initContainers") or []:
                current = init["name"]
                process = self._run_container(init, volumes)
                while process.poll() is None and not self._stopping.is_set():
                    time.sleep(0.1)
                if self._stopping.is_set():
                    return
                if process.exit_code() != 0:
                    self._fail(current, process.exit_code(), "init container failed (Init:Error)")
                    return
            for container in spec["containers"]:
                current = container["name"]
                self._run_container(container, volumes)
            self.phase = "Running"
            self.running.set()
            main = [self.containers[c["name"]] for c in spec["containers"]]
            while not self._stopping.is_set():
                codes = [c.poll() for c in main]
                bad = next((c for c in main if c.poll() is not None and c.exit_code() != 0), None)
                if bad is not None:
                    self._fail(bad.name, bad.exit_code(), "Error")
                    return
                if all(code is not None for code in codes):
                    self.phase = "Succeeded"
                    return
                time.sleep(0.1)
        except (ContainerConfigError, MountError, OSError) as exc:
            reason = "CreateContainerConfigError" if isinstance(exc, ContainerConfigError) else "FailedMount"
            self._fail(current, None, f"{reason}: {exc}")
        finally:
            self.done.set()

    def start(self) -> None:
        """Start the pod's life in a thread of its own (returns at once)."""
        self._thread = threading.Thread(target=self._life, name=f"pod-{self.name}", daemon=True)
        self._thread.start()

    def exited_containers(self) -> list[str]:
        return [name for name, c in self.containers.items() if c.poll() is not None]

    def stop(self, grace: float = 3.0) -> None:
        """Stop every container (SIGTERM, then SIGKILL after ``grace``) and wait for the pod's thread."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        for process in self.containers.values():
            process.stop(grace)

    def log_tail(self, container: str, lines: int = 20) -> str:
        path = self.log_path(container)
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def remove_dir(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
