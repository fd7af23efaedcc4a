"""Training jobs of local SageMaker mode: CreateTrainingJob, DescribeTrainingJob, StopTrainingJob, ListTrainingJobs.

``create_training_job`` validates the request with botocore's SageMaker service model (as the boto3 client would),
builds each host's ``/opt/ml`` tree, stages the channels, and starts the job's supervisor (:mod:`.supervisor`) as a
node of the host layer that outlives its starter (:mod:`mlrecipe.backends.host.nodes`: a group of one node in its own
session, its log never written through a link), so the job outlives the calling process and any client on the same
root can describe or stop it: they know the supervisor by its identity in ``pids.json`` (``[pid, start ticks]``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from mlrecipe.backends.host.devices import Gpu, visible_gpus
from mlrecipe.backends.host.mount_points import user_namespaces_problem
from mlrecipe.backends.host.nodes import (
    NodeGroup,
    NodeSpec,
    alive,
    kill_host,
    node_exit_fd,
    signal_group,
    still_running,
)
from mlrecipe.backends.sagemaker.local.channels import (
    S3ClientFactory,
    StagingError,
    file_system_mounts,
    stage_channels,
)
from mlrecipe.backends.sagemaker.local.job import (
    JobStatus,
    JobStore,
    TrainingJobRecord,
    describe,
    fail,
    new_record,
    set_secondary,
    summary,
)
from mlrecipe.backends.sagemaker.local.processes import host_temp_env, remove_host_temps
from mlrecipe.backends.sagemaker.local.store import arn, client_error, not_found, write_json
from mlrecipe.backends.sagemaker.local.tree import OPT_ML, host_names, hosts_file, make_tree, sm_env
from mlrecipe.backends.sagemaker.service_model import validate_request
from mlrecipe.errors import LinkedPathError
from mlrecipe.ports import free_port

DEFAULT_MAX_RUN = 86400
CONTRACT_PREFIXES = ("PET_", "SM_", "SLURM_", "OMPI_", "PMI_", "PMIX_", "LWS_", "TORCHELASTIC_", "MLRECIPE_RUN_ID")
CONTRACT_NAMES = {"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                  "GROUP_RANK", "JOB_COMPLETION_INDEX", "CUDA_VISIBLE_DEVICES", "TRAINING_JOB_NAME", "CURRENT_HOST"}
OK = {"ResponseMetadata": {"HTTPStatusCode": 200}}


def _gpu_slices(hosts: int) -> list[list[Gpu]]:
    """Every visible GPU, split evenly among the hosts (each host gets one round the ring when they are fewer)."""
    gpus = visible_gpus()
    if not gpus:
        return [[] for _ in range(hosts)]
    if len(gpus) < hosts:
        return [[gpus[i % len(gpus)]] for i in range(hosts)]
    per = len(gpus) // hosts
    return [gpus[i * per:(i + 1) * per] for i in range(hosts)]


def _leased(slices: list[list[Gpu]]) -> list[list[Any]]:
    """The distinct GPUs of ``slices`` as the job record keeps them, ``[index, uuid, name]``: its supervisor leases
    them (:mod:`mlrecipe.backends.host.gpu_lease`) before the hosts start."""
    seen: dict[str, Gpu] = {g.uuid: g for gpus in slices for g in gpus}
    return [[g.index, g.uuid, g.name] for g in seen.values()]


def _scrubbed_env() -> dict[str, str]:
    """The caller's environment without another launcher's contract variables (the job sets its own)."""
    return {k: v for k, v in os.environ.items()
            if k not in CONTRACT_NAMES and not k.startswith(CONTRACT_PREFIXES)}


def _local_path(uri: str) -> Path | None:
    return Path(unquote(urlparse(uri).path)) if uri.startswith("file://") else None


class LocalTraining:
    """The training-job half of :class:`~.client.LocalSageMakerClient`."""

    root: Path
    python_bin_dir: Path | None
    stop_grace_s: float
    file_systems_root: Path
    s3_client_factory: S3ClientFactory | None
    gpu_lease_dir: Path

    @property
    def _jobs(self) -> JobStore:
        return JobStore(self.root)

    def _plan_local(self, request: dict[str, Any]) -> dict[str, Any]:
        name = request["TrainingJobName"]
        home = self._jobs.home(name)
        algo = request["AlgorithmSpecification"]
        argv = [*algo.get("ContainerEntrypoint", []), *algo.get("ContainerArguments", [])]
        names = host_names(int(request["ResourceConfig"]["InstanceCount"]))
        path = os.environ.get("PATH", "/usr/bin:/bin")
        if self.python_bin_dir is not None:
            path = f"{self.python_bin_dir}{os.pathsep}{path}"
        output = _local_path((request.get("OutputDataConfig") or {}).get("S3OutputPath", ""))
        model_dest = (output / name / "output" if output else home / "output") / "model.tar.gz"
        mounts = [[str(src), dst] for src, dst in file_system_mounts(request.get("InputDataConfig") or [],
                                                                       self.file_systems_root)]
        fresh_root = bool(mounts)  # the step program makes its file systems' mount points (/fsx) in its own root
        checkpoint = request.get("CheckpointConfig")
        if checkpoint:
            source = _local_path(checkpoint.get("S3Uri", "")) or home / "checkpoints"
            mounts.append([str(source), checkpoint.get("LocalPath") or f"{OPT_ML}/checkpoints"])
        port = str(free_port())
        hosts = []
        slices = _gpu_slices(len(names))
        for i, (host, gpus) in enumerate(zip(names, slices, strict=True)):
            env = sm_env(request, host, names, len(gpus), os.cpu_count() or 1)
            env.update({"PATH": path, "PET_MASTER_PORT": port, "TRAINING_JOB_ARN": arn("training-job", name),
                        **host_temp_env(self.root, name, host)})
            if gpus:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g.index) for g in gpus)
            env.update(request.get("Environment") or {})
            tree = home / "hosts" / host / "opt-ml"
            hosts.append({"name": host, "tree": str(tree), "env": env, "log": str(self.log_path(name, i)),
                          "mounts": [[str(tree), OPT_ML], [str(home / "hosts.txt"), "/etc/hosts"], *mounts],
                          "fresh_root": fresh_root})
        max_run = (request.get("StoppingCondition") or {}).get("MaxRuntimeInSeconds", DEFAULT_MAX_RUN)
        return {"argv": argv, "hosts": hosts, "max_run": max_run, "stop_grace": self.stop_grace_s,
                "model_dest": str(model_dest), "gpus": _leased(slices), "lease_dir": str(self.gpu_lease_dir)}

    def _check_local(self, request: dict[str, Any]) -> None:
        op = "CreateTrainingJob"
        if not request["AlgorithmSpecification"].get("ContainerEntrypoint"):
            raise client_error("ValidationException", "local mode runs AlgorithmSpecification.ContainerEntrypoint "
                               "(no container images): set it", op)
        if not request["ResourceConfig"].get("InstanceCount"):
            raise client_error("ValidationException", "local mode needs ResourceConfig.InstanceCount (instance "
                               "groups are not supported locally)", op)
        if shutil.which("unshare") is None:
            raise client_error("ValidationException", "local mode needs 'unshare' (util-linux)", op)
        userns = user_namespaces_problem()
        if userns:
            raise client_error("ValidationException", f"local mode's hosts need a user namespace when not run as "
                               f"root, and {userns}: enable them or run as root", op)

    def _prepare(self, name: str, request: dict[str, Any], local: dict[str, Any]) -> None:
        home = self._jobs.home(name)
        (home / "logs").mkdir(parents=True, exist_ok=True)
        base = Path("/etc/hosts").read_text() if Path("/etc/hosts").is_file() else ""
        (home / "hosts.txt").write_text(hosts_file(len(local["hosts"]), base))
        names = [h["name"] for h in local["hosts"]]
        trees = [make_tree(home / "hosts" / h, request, h, names) for h in names]
        for host in local["hosts"]:
            for source, _target in host["mounts"][2:]:
                Path(source).mkdir(parents=True, exist_ok=True)
        self._jobs.update(name, lambda r: set_secondary(r, "Downloading", "Downloading input data"))
        stage_channels(request.get("InputDataConfig") or [], trees, self.s3_client_factory)

    def create_training_job(self, **request: Any) -> dict[str, Any]:
        """CreateTrainingJob: the job starts at once; ``ResourceInUse`` when the name exists."""
        validate_request("CreateTrainingJob", request)
        self._check_local(request)
        name = request["TrainingJobName"]
        record = new_record(request, self._plan_local(request))
        if not self._jobs.create(record):
            raise client_error("ResourceInUse", f"Training job names must be unique within an AWS account and "
                               f"region, and a training job with this name already exists ({record.arn})",
                               "CreateTrainingJob")
        try:
            self._prepare(name, request, record.local)
        except (StagingError, OSError) as exc:
            reason = str(exc) if isinstance(exc, StagingError) else f"ClientError: staging failed: {exc}"
            self._jobs.update(name, lambda r: fail(r, reason))
            return {"TrainingJobArn": record.arn, **OK}
        home = self._jobs.home(name)
        supervisor = NodeGroup([NodeSpec(
            argv=[sys.executable, "-m", "mlrecipe.backends.sagemaker.local.supervisor", str(self.root), name],
            env=_scrubbed_env(), log_path=home / "supervisor.log", outlives_starter=True)])
        try:
            supervisor.start()
        except (OSError, LinkedPathError) as exc:
            reason = f"InternalServerError: the local job's supervisor cannot start: {exc}"[:1024]
            self._jobs.update(name, lambda r: fail(r, reason))
            return {"TrainingJobArn": record.arn, **OK}
        [ident] = supervisor.identities()
        with self._jobs.locked():  # the supervisor may have written it already, with its hosts
            if not (home / "pids.json").exists():
                write_json(home / "pids.json", {"supervisor": ident, "hosts": []})
        self._supervisors.append(supervisor)
        return {"TrainingJobArn": record.arn, **OK}

    @property
    def _supervisors(self) -> list[NodeGroup]:
        """The supervisors this client started that still run (those that ended reaped, their pidfds closed)."""
        if not hasattr(self, "_supervisor_groups"):
            self._supervisor_groups: list[NodeGroup] = []
        return still_running(self._supervisor_groups)

    def _pids(self, name: str) -> dict[str, Any]:
        try:
            return json.loads((self._jobs.home(name) / "pids.json").read_text())
        except (OSError, ValueError):
            return {}

    def _reconcile(self, name: str, record: TrainingJobRecord) -> TrainingJobRecord:
        """A job whose supervisor is gone while it runs ends now (Stopped if stopping, else Failed)."""
        if not record.status.running:
            return record
        pids = self._pids(name)
        if "supervisor" not in pids or alive(pids["supervisor"]):
            return record
        for ident in pids.get("hosts", []):
            kill_host(ident)
        remove_host_temps(record.local["hosts"], pids.get("hosts", []))

        def end(r: TrainingJobRecord) -> None:
            if r.status is JobStatus.STOPPING:
                set_secondary(r, "Stopped", "Training job stopped", JobStatus.STOPPED)
            elif r.status is JobStatus.IN_PROGRESS:
                fail(r, f"InternalServerError: the local job's supervisor ended (see "
                        f"{self._jobs.home(name) / 'supervisor.log'})")

        return self._jobs.update(name, end) or record

    def describe_training_job(self, TrainingJobName: str) -> dict[str, Any]:
        """DescribeTrainingJob; ``ValidationException`` for an unknown job."""
        record = self._jobs.read(TrainingJobName)
        if record is None:
            raise not_found("DescribeTrainingJob")
        return describe(self._reconcile(TrainingJobName, record))

    def stop_training_job(self, TrainingJobName: str) -> dict[str, Any]:
        """StopTrainingJob: the job goes Stopping, then Stopped once its hosts have ended (SIGTERM, then SIGKILL
        after the grace)."""
        op = "StopTrainingJob"
        states: list[JobStatus] = []

        def stopping(r: TrainingJobRecord) -> None:
            states.append(r.status)
            if r.status is JobStatus.IN_PROGRESS:
                set_secondary(r, "Stopping", "Stopping the training job", JobStatus.STOPPING)

        if self._jobs.update(TrainingJobName, stopping) is None:
            raise not_found(op)
        if not states[0].running:
            raise client_error("ValidationException", f"The request was rejected because the training job is in "
                               f"status {states[0].value}.", op)
        supervisor = self._pids(TrainingJobName).get("supervisor")
        if supervisor is not None and alive(supervisor):  # it stops the hosts and records Stopped
            signal_group(supervisor, signal.SIGTERM)
        elif (record := self._jobs.read(TrainingJobName)) is not None:
            self._reconcile(TrainingJobName, record)
        return dict(OK)

    def remove_job_tree(self, TrainingJobName: str, timeout: float = 30.0) -> bool:
        """Local-only (``uninstall``): forget an ended job and remove its directory (record, logs, every host's
        ``/opt/ml`` tree with its copy of each channel); a job still running after ``timeout`` seconds (stop it
        first) is kept: False."""
        deadline = time.monotonic() + timeout
        while True:
            record = self._jobs.read(TrainingJobName)
            if record is None:
                return False
            if self._reconcile(TrainingJobName, record).status.ended:
                break
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        with self._jobs.locked():
            shutil.rmtree(self._jobs.home(TrainingJobName), ignore_errors=True)
        return True

    def list_training_jobs(self, NameContains: str | None = None, StatusEquals: str | None = None,
                           MaxResults: int = 100, SortBy: str = "CreationTime", SortOrder: str = "Descending",
                           NextToken: str | None = None, **_filters: Any) -> dict[str, Any]:
        """ListTrainingJobs with ``NameContains``, ``StatusEquals``, sorting, and pages of ``MaxResults``
        (``NextToken`` while more remain)."""
        records = [r for n in self._jobs.names() if (not NameContains or NameContains in n)
                   and (r := self._jobs.read(n)) is not None]  # a job's directory is named after it
        found = [summary(self._reconcile(r.name, r)) for r in records]
        if StatusEquals:
            found = [s for s in found if s["TrainingJobStatus"] == StatusEquals]
        key = {"Name": "TrainingJobName", "Status": "TrainingJobStatus"}.get(SortBy, "CreationTime")
        found.sort(key=lambda s: s[key], reverse=SortOrder == "Descending")
        start = int(NextToken or 0)
        page: dict[str, Any] = {"TrainingJobSummaries": found[start:start + MaxResults], **OK}
        if start + MaxResults < len(found):
            page["NextToken"] = str(start + MaxResults)
        return page

    def job_end_fd(self, TrainingJobName: str) -> int | None:
        """Local-only: a pidfd of the job's supervisor, readable once it has ended (the job's status is final
        then), so that a watcher learns of the end at once instead of at its next DescribeTrainingJob. The caller
        closes it. None when the job has no running supervisor, or this kernel has no pidfds."""
        return node_exit_fd(self._pids(TrainingJobName).get("supervisor"))

    def log_path(self, job_name: str, host_index: int) -> Path:
        """Local-only: the log file of host ``host_index`` (0 is ``algo-1``) of a training job."""
        return self._jobs.home(job_name) / "logs" / f"algo-{host_index + 1}.log"
