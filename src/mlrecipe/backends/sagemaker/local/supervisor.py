"""The detached process that runs one local training job (``python -m <this module> ROOT JOB_NAME``).

It starts the hosts as one node group (:class:`~mlrecipe.backends.host.nodes.NodeGroup`: one process group per
host in its own namespaces, a pidfd each, so the end of a host is seen at once), records their identities in
``pids.json``, waits, and ends the job as SageMaker would: Completed when every host exits 0 (host 1's
``model/`` packed as ``model.tar.gz``), Failed when one does not (the reason from ``/opt/ml/output/failure``,
else the exit status and the log's tail; the other hosts are stopped), Stopped on SIGTERM (StopTrainingJob) or past
``MaxRuntimeInSeconds``. Stopping sends SIGTERM to each host's processes and SIGKILL after the grace.

Before the hosts start it takes their device grant (:mod:`mlrecipe.backends.host.grant`: the machine-wide GPU lease
on the GPUs the job gives its hosts), waiting while another step holds one (the job's status message says for what);
the node group hands the lease to the hosts, so it is dropped when the last of them has ended, however they end.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from mlrecipe.backends.host.devices import Gpu
from mlrecipe.backends.host.grant import DeviceGrant
from mlrecipe.backends.host.nodes import NodeGroup, NodeSpec, identity
from mlrecipe.backends.sagemaker.local.job import JobStatus, JobStore, TrainingJobRecord, fail, set_secondary
from mlrecipe.backends.sagemaker.local.processes import remove_host_temps
from mlrecipe.backends.sagemaker.local.store import write_json

#: How often the wait for the hosts looks at a stop request (a host's end wakes it at once, through its pidfd).
STOP_LOOK_SECONDS = 0.1
LEASE_RETRY_SECONDS = 0.2


class _Stop:
    requested = False

    def __call__(self, _signum: int, _frame: object) -> None:
        self.requested = True


def _start_hosts(local: dict[str, Any], grant: DeviceGrant) -> NodeGroup:
    """The job's hosts as one node group, started: each its own host (namespaces, hostname, ``/opt/ml``; for a job with
    file-system channels a root of its own, where its program makes their mount points (/fsx) without touching this
    machine's)."""
    group = NodeGroup([NodeSpec(argv=list(local["argv"]), env={**os.environ, **host["env"]},
                                log_path=Path(host["log"]), cwd=Path(host["tree"]), hostname=host["name"],
                                mounts=tuple((str(m[0]), str(m[1])) for m in host["mounts"]),
                                fresh_root=host.get("fresh_root", True))
                       for host in local["hosts"]], grant=grant)
    group.start()
    return group


def _failure_reason(local: dict[str, Any], codes: list[int | None]) -> str:
    for host in local["hosts"]:
        failure = Path(host["tree"]) / "output" / "failure"
        if failure.is_file() and failure.read_text().strip():
            return failure.read_text().strip()
    for host, code in zip(local["hosts"], codes, strict=True):
        if code not in (None, 0):
            try:
                tail = Path(host["log"]).read_text(errors="replace").strip().splitlines()[-3:]
            except OSError:
                tail = []
            detail = (": " + " | ".join(tail)) if tail else ""
            return f"AlgorithmError: {host['name']} exited with status {code}{detail}"
    return "AlgorithmError: a host failed"


def _grant(store: JobStore, name: str, local: dict[str, Any], stop: _Stop, deadline: float) -> DeviceGrant | None:
    """The hosts' devices held (the job's GPUs leased), waiting while another step holds one; None when stopped or
    past the deadline first."""
    gpus = tuple(Gpu(int(index), str(uuid), str(model), None) for index, uuid, model in local.get("gpus") or [])
    grant = DeviceGrant(Path(local["lease_dir"]), "sagemaker-local", name, gpus=gpus)
    said = ""
    while (wait := grant.take()) is not None:
        if stop.requested or time.monotonic() > deadline:
            return None
        note = f"Waiting for GPUs: {wait.holders()}"
        if note.split(" (pid")[0] != said.split(" (pid")[0]:
            said = note
            store.update(name, functools.partial(set_secondary, secondary="Starting", message=note))
        time.sleep(LEASE_RETRY_SECONDS)
    return grant


def _pack(directory: Path, archive: Path) -> None:
    import tarfile  # only once the job has ended: not on the way to the hosts' start

    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(archive.name + ".partial")
    with tarfile.open(tmp, "w:gz") as tar:
        for path in sorted(directory.iterdir()):
            tar.add(path, arcname=path.name)
    os.replace(tmp, archive)


def run(root: Path, name: str) -> int:
    """Run job ``name`` to its end; the exit status is 0 unless the job could not be run at all."""
    store = JobStore(root)
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    record = store.read(name)
    if record is None:
        return 2
    local = record.local
    home = store.home(name)
    deadline = time.monotonic() + float(local["max_run"])
    grant = _grant(store, name, local, stop, deadline)
    if grant is None:
        store.update(name, lambda r: set_secondary(r, "Stopped", "Training job stopped", JobStatus.STOPPED))
        return 0

    def training(r: TrainingJobRecord) -> None:
        if r.status is JobStatus.IN_PROGRESS:
            r.started = time.time()
            set_secondary(r, "Training", "Training image download completed. Training in progress.")

    current = store.update(name, training)
    if current is None:
        return 2
    if current.status is not JobStatus.IN_PROGRESS:  # stopped before it started
        store.update(name, lambda r: set_secondary(r, "Stopped", "Training job stopped", JobStatus.STOPPED))
        return 0
    hosts = _start_hosts(local, grant)
    idents = hosts.identities()
    with store.locked():  # not overwritten by the starter's record of the supervisor alone (training.py)
        write_json(home / "pids.json", {"supervisor": identity(os.getpid()), "hosts": idents})
    ending = None
    while ending is None:
        codes = hosts.codes()
        if all(c is not None for c in codes):
            ending = "exited"
        elif any(c not in (None, 0) for c in codes):
            ending = "failed"
        elif stop.requested:
            ending = "stopped"
        elif time.monotonic() > deadline:
            ending = "max-runtime"
        else:
            hosts.wait_any(min(STOP_LOOK_SECONDS, max(0.0, deadline - time.monotonic())))
    if ending != "exited":
        hosts.stop(float(local["stop_grace"]))
    hosts.close()
    remove_host_temps(local["hosts"], idents)  # what a killed host's runtime could not remove
    codes = hosts.codes()
    if ending == "stopped":
        store.update(name, lambda r: set_secondary(r, "Stopped", "Training job stopped", JobStatus.STOPPED))
    elif ending == "max-runtime":
        store.update(name, lambda r: set_secondary(
            r, "MaxRuntimeExceeded", "Training job stopped: MaxRuntimeInSeconds exceeded", JobStatus.STOPPED))
    elif any(c != 0 for c in codes):
        reason = _failure_reason(local, codes)
        store.update(name, lambda r: fail(r, reason))
    else:
        store.update(name, lambda r: set_secondary(r, "Uploading", "Uploading generated training model"))
        first = Path(local["hosts"][0]["tree"])
        archive = Path(local["model_dest"])
        _pack(first / "model", archive)
        output = first / "output" / "data"
        if any(output.iterdir()):
            _pack(output, archive.with_name("output.tar.gz"))

        def completed(r: TrainingJobRecord) -> None:
            r.model_artifacts = archive.as_uri()
            set_secondary(r, "Completed", "Training job completed", JobStatus.COMPLETED)

        store.update(name, completed)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        sys.stderr.write("usage: python -m mlrecipe.backends.sagemaker.local.supervisor ROOT JOB_NAME\n")
        return 2
    try:
        return run(Path(args[0]), args[1])
    except Exception as exc:  # the job must end with a reason whatever went wrong here
        reason = f"InternalServerError: local supervisor: {type(exc).__name__}: {exc}"
        JobStore(Path(args[0])).update(args[1], lambda r: fail(r, reason))
        sys.stderr.write(json.dumps({"error": reason}) + "\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
