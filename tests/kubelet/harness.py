"""The run: objects into the store, one controller per workload in document order (a server stays up, ready, until
the run ends), every pod stopped at the end, on a timeout or on Ctrl-C."""

from __future__ import annotations

import contextlib
import copy
import fcntl
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.kubelet import mountpoints
from tests.kubelet.controllers import COVERED, IGNORED, NOT_COVERED, Controller
from tests.kubelet.images import REPO
from tests.kubelet.network import AddressBook, dns_forms
from tests.kubelet.pods import Pod
from tests.kubelet.report import Outcome
from tests.kubelet.store import Store

RUN_LOCK = Path("/tmp/mlrecipe-kubelet-run.lock")


class Cluster:
    """What every controller and pod shares: the store, the addresses, the work and log directories, the notes."""

    def __init__(self, store: Store, work_dir: Path, logs_dir: Path, claims: dict[str, Path], max_restarts: int,
                 repo: Path = REPO) -> None:
        self.store = store
        self.addresses = AddressBook()
        self.work_dir = work_dir
        self.logs_dir = logs_dir
        self.claims = claims
        self.max_restarts = max_restarts
        self.repo = repo
        self.notes: list[str] = []
        self.pods: list[Pod] = []

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def claim_dir(self, claim: str) -> Path:
        """A PVC's directory: the one given with ``--pvc CLAIM=DIR``, else one under the work directory."""
        path = self.claims.get(claim) or self.work_dir / "pvc" / claim
        path.mkdir(parents=True, exist_ok=True)
        return path

    def pod_dns_names(self, pod: dict[str, Any]) -> list[str]:
        """``<hostname>.<subdomain>.<ns>.svc[.cluster.local]`` when a headless Service named the subdomain exists."""
        spec, namespace = pod["spec"], pod["metadata"]["namespace"]
        sub = spec.get("subdomain")
        if not sub or (("Service", namespace, sub) not in self.store.objects):
            return []
        hostname = str(spec.get("hostname") or pod["metadata"]["name"])
        return dns_forms(f"{hostname}.{sub}", namespace)[1:]

    def new_pod(self, template: dict[str, Any], name: str, namespace: str, labels: dict[str, str] | None = None,
                **spec_fields: Any) -> dict[str, Any]:
        """A pod object from a pod template, with its own address (``status.podIP``)."""
        meta = copy.deepcopy(template.get("metadata") or {})
        pod_labels = {**(meta.get("labels") or {}), **(labels or {})}
        spec = copy.deepcopy(template["spec"])
        spec.update(spec_fields)
        return {"metadata": {"name": name, "namespace": namespace, "labels": pod_labels,
                             "annotations": meta.get("annotations") or {}},
                "spec": spec, "status": {"podIP": self.addresses.allocate()}}

    def register(self, pod: Pod) -> None:
        """Make the pod's names resolve (its hostname and subdomain names; Services selecting it)."""
        self.pods.append(pod)
        self.addresses.add(pod.ip, self.pod_dns_names(pod.obj))
        self.refresh_services()

    def refresh_services(self) -> None:
        for svc in self.store.of_kind("Service"):
            selector = (svc.get("spec") or {}).get("selector") or {}
            namespace = self.store.namespace_of(svc)
            chosen = [p for p in self.pods if selector and p.obj["metadata"]["namespace"] == namespace
                      and all(p.obj["metadata"]["labels"].get(k) == v for k, v in selector.items())]
            if chosen:
                self.addresses.add(chosen[0].ip, dns_forms(svc["metadata"]["name"], namespace))
                ports = (svc.get("spec") or {}).get("ports") or []
                if any(p.get("targetPort") not in (None, p.get("port")) for p in ports):
                    self.note(f"Service {svc['metadata']['name']}: its name resolves to one pod's address; a port "
                              "other than its targetPort is not forwarded (no kube-proxy here)")


def _workloads(objects: list[dict[str, Any]], store: Store) -> tuple[list[dict[str, Any]], list[str]]:
    workloads, problems = [], []
    for obj in objects:
        kind = obj["kind"]
        if kind in COVERED:
            workloads.append(obj)
        elif kind in NOT_COVERED:
            problems.append(f"kind {kind} not covered by the harness ({obj['metadata']['name']}): {NOT_COVERED[kind]}")
        elif kind not in IGNORED:
            store.add(obj)
    return workloads, problems


def run(objects: list[dict[str, Any]], *, namespace: str, timeout: float, logs_dir: Path | None,
        claims: dict[str, Path], max_restarts: int) -> tuple[int, list[str], list[Outcome]]:
    """Run the stream; the exit status (0: every workload succeeded or became ready), notes and outcomes."""
    store = Store(default_namespace=namespace)
    workloads, problems = _workloads(objects, store)
    ignored = sorted({o["kind"] for o in objects if o["kind"] in IGNORED})
    if problems:
        return 1, [], [Outcome(False, "stream", p) for p in problems]
    if not workloads:
        return 1, [], [Outcome(False, "stream", "no workload of a covered kind in the stream")]
    with one_run_at_a_time():
        return _run(workloads, ignored, store, timeout=timeout, logs_dir=logs_dir, claims=claims,
                    max_restarts=max_restarts)


@contextlib.contextmanager
def one_run_at_a_time() -> Iterator[None]:
    """Harness runs on one machine take turns (an exclusive lock on :data:`RUN_LOCK`): their pods share its network,
    the same addresses 127.0.0.N and the ports servers bind on every address (a PyTorchJob master's 23456)."""
    fd = os.open(RUN_LOCK, os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _run(workloads: list[dict[str, Any]], ignored: list[str], store: Store, *, timeout: float,
         logs_dir: Path | None, claims: dict[str, Path], max_restarts: int) -> tuple[int, list[str], list[Outcome]]:
    work_dir = Path(tempfile.mkdtemp(prefix="mlrecipe-kubelet-"))
    cluster = Cluster(store, work_dir, logs_dir or work_dir / "logs", claims, max_restarts)
    for kind in ignored:
        cluster.note(f"{kind} objects are not acted on (no controller for them here)")
    controllers: list[Controller] = []
    outcomes: list[Outcome] = []
    deadline = time.monotonic() + timeout
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        with mountpoints.held():
            for obj in workloads:
                controller = COVERED[obj["kind"]](obj, cluster)
                controllers.append(controller)
                controller.start()
                outcome = None
                while outcome is None:
                    outcome = controller.poll()
                    if outcome is None and time.monotonic() > deadline:
                        outcome = controller.timed_out(timeout)
                    if outcome is None:
                        time.sleep(0.2)
                outcomes.append(outcome)
                if not outcome.ok:
                    break
            for controller in reversed(controllers):
                controller.stop()
    except KeyboardInterrupt:
        outcomes.append(Outcome(False, "run", "interrupted: every pod stopped"))
    finally:
        for pod in cluster.pods:
            pod.stop()
        signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(work_dir, ignore_errors=True)
    status = 0 if outcomes and all(o.ok for o in outcomes) and len(outcomes) == len(workloads) else 1
    return status, cluster.notes, outcomes
