"""The SageMaker backend: each step is one training job (boto3 ``create_training_job``).

The plan is the request (:mod:`.request`), checked against botocore's service model before anything is
uploaded (:mod:`.validate`). ``submit`` first looks for the step's job by its tags (a re-run, ``resume`` or a
retried task): one that runs or completed with the same plan is adopted, never created twice; otherwise the
step program and the runtime go to the ``mlrecipe`` channel's URI and the next attempt is created. The job's
statuses map onto step states in one table (:mod:`.status`). A ``serving/sagemaker-endpoint`` step is a Model,
an EndpointConfig and an Endpoint instead (:mod:`.endpoint`). ``mode: local`` talks to the local mode's client,
which offers the same calls and answers (:mod:`.local_client`).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from mlrecipe.backends.base import (
    AdoptsSubmitted,
    Backend,
    CollectsDebugRecords,
    DebugRecord,
    ReleaseContext,
    RemovesByRelease,
    issues_at_chart,
)
from mlrecipe.backends.sagemaker import debug, names, status, tagged
from mlrecipe.backends.sagemaker.api import CreateTrainingJob, Tag
from mlrecipe.backends.sagemaker.client import ClientProvider, call, sdk_region
from mlrecipe.backends.sagemaker.endpoint import (
    EndpointPlan,
    EndpointRunningStep,
    build_endpoint,
    create_endpoint,
    delete_endpoint,
    describe_endpoint,
)
from mlrecipe.backends.sagemaker.handle import SageMakerHandle
from mlrecipe.backends.sagemaker.logs import fetch_stream
from mlrecipe.backends.sagemaker.options import SageMakerOptions
from mlrecipe.backends.sagemaker.plan import SageMakerPlan
from mlrecipe.backends.sagemaker.request import TrainingRequest, build_request, register_local_file_system
from mlrecipe.backends.sagemaker.running import SageMakerRunningStep, stop_job
from mlrecipe.backends.sagemaker.validate import OPTION_SOURCE, issues_of
from mlrecipe.errors import BackendError, MlrecipeError, SpecError, SpecIssue
from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.load import StepSpec

HANDLE_FILE = "sagemaker-job.json"
LOCAL_FILE_SYSTEMS = "file-systems"  #: under the local mode's root: its file systems (LocalSageMakerClient's default)
#: Jobs that a re-run adopts (the same plan, running or done); a failed or stopped one gets a new attempt.
ADOPTABLE = frozenset({"InProgress", "Completed"})


class SageMakerBackend(AdoptsSubmitted, RemovesByRelease, CollectsDebugRecords,
                       Backend[SageMakerPlan | EndpointPlan, SageMakerHandle, SageMakerOptions]):
    """Runs each step as one SageMaker training job; see the module docstring.

    ``clients`` maps a service name (sagemaker, s3, logs) to a client object that replaces the one the
    options describe (tests inject botocore-stubbed clients here).
    """

    name = "sagemaker"
    kinds = frozenset({StepKind.TORCH, StepKind.TORCH_ELASTIC, StepKind.JOB, StepKind.ENDPOINT})
    options_type = SageMakerOptions
    handle_type = SageMakerHandle

    def __init__(self, options: SageMakerOptions, clients: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self.clients: dict[str, Any] = dict(clients or {})
        self._arns: dict[str, str] = {}

    def _provider(self, handle: SageMakerHandle | None = None) -> ClientProvider:
        """Where the API is: the handle's (a step of an earlier CLI process), else the options'."""
        o = self.options
        if handle is None:
            return ClientProvider(o.mode, o.region, o.endpoint_url, o.local_dir())
        root = Path(handle.local_root) if handle.local_root else o.local_dir()
        return ClientProvider(handle.mode, handle.region, handle.endpoint_url, root)

    def _client(self, service: str, handle: SageMakerHandle | None = None) -> Any:
        if service not in self.clients:
            self.clients[service] = self._provider(handle).client(service)
        return self.clients[service]

    def _option_issues(self) -> list[SpecIssue]:
        o = self.options
        issues = []
        if o.max_wait is not None and o.max_wait < o.max_run:
            issues.append(SpecIssue(OPTION_SOURCE, None, "max_wait", f"must be >= max_run ({o.max_run} s): spot "
                                    f"training waits for capacity within it, got {o.max_wait}"))
        if o.mode == "local":
            return issues
        if not o.region and not sdk_region():
            issues.append(SpecIssue(OPTION_SOURCE, None, "region", "mode aws needs an AWS region and none is set: "
                                    "-B sagemaker.region=us-west-2 (or the config file's sagemaker section, "
                                    "AWS_REGION, or a region in ~/.aws/config)"))
        missing = [n for n in ("role_arn", "s3_prefix") if not getattr(o, n)]
        return issues + [SpecIssue(OPTION_SOURCE, None, n, f"required in mode aws (set it in the config file's "
                                   f"sagemaker section or with -B sagemaker.{n}=...; or use -B sagemaker.mode=local)")
                         for n in missing]

    def check(self, step: StepSpec) -> list[str]:
        """Capabilities, then the whole request as the service would check it (nothing is uploaded yet)."""
        return [str(issue) for issue in self.check_issues(step)]

    def check_issues(self, step: StepSpec) -> list[SpecIssue]:
        """:meth:`check`'s problems: the capability one where the step names its chart, the request's at their
        values' files and lines."""
        capability = super().check(step)
        if capability:
            return issues_at_chart(step, capability)
        ctx = ReleaseContext("release", "default", self.name, Path("/nonexistent"))
        if step.chart.kind is StepKind.ENDPOINT:
            return self._endpoint_issues(step, ctx)[1]
        return self._issues(step, build_request(step, ctx, self.options))

    def _endpoint_issues(self, step: StepSpec, ctx: ReleaseContext,
                         env: dict[str, str] | None = None) -> tuple[EndpointPlan, list[SpecIssue]]:
        plan, found = build_endpoint(step, ctx, self.options, env)
        missing = [i for i in self._option_issues() if i.path != "s3_prefix"]  # an endpoint uploads nothing
        return plan, missing + found

    def _issues(self, step: StepSpec, request: TrainingRequest) -> list[SpecIssue]:
        """Missing options, then the request's problems (those of a missing option said once)."""
        missing = self._option_issues()
        said = {i.path for i in missing}
        found = issues_of(step, request, local=self.options.mode == "local")
        if not request.job.image:
            found.insert(0, step.issue("image", "required on the sagemaker backend: an image SageMaker can pull (an "
                                       "ECR URI), or map the recipe's image with "
                                       "-B sagemaker.images.<image>=<ECR URI>"))
        return missing + [i for i in found if not (i.file == OPTION_SOURCE and i.path in said)]

    def plan(self, step: StepSpec, ctx: ReleaseContext,
             env: dict[str, str] | None = None) -> SageMakerPlan | EndpointPlan:
        if step.chart.kind is StepKind.ENDPOINT:
            endpoint, issues = self._endpoint_issues(step, ctx, env)
            if issues:
                raise SpecError(issues)
            return endpoint
        request = build_request(step, ctx, self.options, env)
        issues = self._issues(step, request)
        if issues:
            raise SpecError(issues)
        return SageMakerPlan(
            step=step.name, chart=step.chart.name, request=request.job, program=request.program,
            job_prefix=request.job.training_job_name.rpartition("-")[0], digest=request.digest,
            step_dir=ctx.step_dir(step.name), notes=request.notes, local_file_systems=request.local_file_systems)

    def _handle(self, job_name: str, adopted: bool = False, endpoint_name: str | None = None) -> SageMakerHandle:
        o = self.options
        return SageMakerHandle(job_name=job_name, mode=o.mode, region=o.region, endpoint_url=o.endpoint_url,
                               local_root=str(o.local_dir()) if o.mode == "local" else None, adopted=adopted,
                               endpoint_name=endpoint_name)

    def submit(self, plan: SageMakerPlan | EndpointPlan,
               ctx: ReleaseContext) -> SageMakerRunningStep | EndpointRunningStep:
        """Adopt the step's job or create the next attempt; a transient error reaches the runner, which submits
        again (the next submit finds the job a lost create may have made, by its tags, and adopts it). An endpoint
        step: adopt its live endpoint or create the model, config and endpoint."""
        if isinstance(plan, EndpointPlan):
            return self._submit_endpoint(plan)
        return self._submit_training(plan, ctx)

    def _submit_training(self, plan: SageMakerPlan, ctx: ReleaseContext) -> SageMakerRunningStep:
        client = self._client("sagemaker")
        listed = self._listed(plan)
        found = self.find_jobs(plan, ctx, listed)
        if found and found[0][1].get("TrainingJobStatus") in ADOPTABLE:
            handle = self._handle(found[0][0], adopted=True)
        else:  # the next attempt after every name taken, ours or not (SageMaker never reuses a job name)
            attempt = 1 + max((names.attempt_of(n, plan.job_prefix) or 0 for n in listed), default=0)
            request = self._attempt_request(plan, ctx, attempt)
            self._upload(plan)
            for fs_id, directory in plan.local_file_systems.items():
                register_local_file_system(self.options.local_dir() / LOCAL_FILE_SYSTEMS, fs_id, Path(directory))
            call(f"CreateTrainingJob {request.training_job_name}", client.create_training_job, **request.kwargs())
            handle = self._handle(request.training_job_name)
        self._save_handle(plan.step_dir, handle)
        running = SageMakerRunningStep(client, handle, self.options.poll_seconds,
                                       on_end=lambda: self._fetch_all_logs(handle, plan))
        return running

    def _submit_endpoint(self, plan: EndpointPlan) -> EndpointRunningStep:
        if not plan.model_ready:
            raise BackendError(f"step {plan.step}: no model archive: {plan.notes[0] if plan.notes else ''}; only a "
                               "training step that ran on SageMaker records model_artifacts: does sagemaker.model_from "
                               "name one? Else give the model with sagemaker.model_data (mode local also takes a "
                               "file:// directory, e.g. the model a local training step left on a volume)")
        client = self._client("sagemaker")
        handle = self._handle("", endpoint_name=plan.endpoint_name)
        self._save_handle(plan.step_dir, handle)  # before creating: uninstall finds what a lost CLI created
        handle.adopted = create_endpoint(client, plan)
        self._save_handle(plan.step_dir, handle)
        return EndpointRunningStep(client, handle, self.options.poll_seconds)

    @staticmethod
    def _attempt_request(plan: SageMakerPlan, ctx: ReleaseContext, attempt: int) -> CreateTrainingJob:
        tags = tuple(t for t in plan.request.tags if t.key != names.TAG_ATTEMPT)
        return replace(plan.request, training_job_name=names.job_name(plan.job_prefix, attempt),
                       tags=(*tags, Tag(names.TAG_ATTEMPT, str(attempt))))

    def _listed(self, plan: SageMakerPlan) -> list[str]:
        """The names of the jobs of ``plan``'s prefix (ListTrainingJobs, every page)."""
        client = self._client("sagemaker")
        summaries: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"NameContains": plan.job_prefix, "MaxResults": 100}
        while True:
            page = call("ListTrainingJobs", client.list_training_jobs, **kwargs)
            summaries += page.get("TrainingJobSummaries", [])
            if not page.get("NextToken"):
                break
            kwargs["NextToken"] = page["NextToken"]
        self._arns = {s["TrainingJobName"]: s["TrainingJobArn"] for s in summaries}
        return [s["TrainingJobName"] for s in summaries if names.attempt_of(s["TrainingJobName"], plan.job_prefix)]

    def find_jobs(self, plan: SageMakerPlan, ctx: ReleaseContext,
                  listed: list[str] | None = None) -> list[tuple[str, dict[str, Any]]]:
        """The step's earlier jobs with this plan, newest attempt first, as (name, DescribeTrainingJob): listed by
        name and confirmed by their release, namespace, step and digest tags."""
        client = self._client("sagemaker")
        listed = self._listed(plan) if listed is None else listed
        want = {names.TAG_RELEASE: ctx.release, names.TAG_NAMESPACE: ctx.namespace, names.TAG_STEP: plan.step,
                names.TAG_DIGEST: plan.digest}
        out = []
        for name in listed:
            tags = call("ListTags", client.list_tags, ResourceArn=self._arns[name]).get("Tags", [])
            if {t["Key"]: t["Value"] for t in tags}.items() >= want.items():
                out.append((name, call(f"DescribeTrainingJob {name}", client.describe_training_job,
                                       TrainingJobName=name)))
        return sorted(out, key=lambda item: names.attempt_of(item[0], plan.job_prefix) or 0, reverse=True)

    def _upload(self, plan: SageMakerPlan) -> None:
        """The step program and the runtime to the ``mlrecipe`` channel (a copy stays in the step directory)."""
        local = plan.step_dir / "mlrecipe"
        local.mkdir(parents=True, exist_ok=True)
        for name, data in plan.files().items():
            (local / name).write_bytes(data)
        uri = urlparse(plan.program_uri)
        if uri.scheme != "s3":
            return
        s3 = self._client("s3")
        for name, data in plan.files().items():
            key = f"{uri.path.lstrip('/')}{name}"
            call(f"PutObject s3://{uri.netloc}/{key}", s3.put_object, Bucket=uri.netloc, Key=key, Body=data)

    @staticmethod
    def _save_handle(step_dir: Path, handle: SageMakerHandle) -> None:
        step_dir.mkdir(parents=True, exist_ok=True)
        (step_dir / HANDLE_FILE).write_text(json.dumps(handle.to_json(), indent=2), encoding="utf-8")

    def _fetch_all_logs(self, handle: SageMakerHandle, plan: SageMakerPlan) -> list[str]:
        """Every host's log into the step directory; the last lines of the first host's."""
        for rank in range(plan.node_count):
            self._fetch_log(handle, rank, plan.step_dir / f"node-{rank}.log")
        path = plan.step_dir / "node-0.log"
        return path.read_text(encoding="utf-8", errors="replace").splitlines() if path.exists() else []

    def _fetch_log(self, handle: SageMakerHandle, rank: int, dest: Path) -> Path:
        client = self._client("sagemaker", handle)
        if handle.mode == "local":
            source = Path(client.log_path(handle.job_name, rank))
            if source.exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(source.read_bytes())
            return dest
        return fetch_stream(self._client("logs", handle), self.options.log_group, handle.job_name, rank, dest)

    def log_path(self, ctx: ReleaseContext, step: str, rank: int = 0) -> Path:
        """Host ``rank``'s log, fetched from CloudWatch (local mode: copied) into the step directory."""
        dest = super().log_path(ctx, step, rank)
        saved = ctx.step_dir(step) / HANDLE_FILE
        if saved.exists():
            with contextlib.suppress(BackendError, OSError, ValueError):
                handle = SageMakerHandle.model_validate_json(saved.read_text(encoding="utf-8"))
                if handle.job_name:
                    self._fetch_log(handle, rank, dest)
        return dest

    def metrics_path(self, ctx: ReleaseContext, step: str) -> Path | None:
        return None  # the job's hosts cannot append to a file on this machine

    def cancel_handle(self, handle: SageMakerHandle) -> None:
        """StopTrainingJob; an endpoint step's endpoint, config and model are deleted."""
        if handle.endpoint_name:
            delete_endpoint(self._client("sagemaker", handle), handle.endpoint_name)
        else:
            stop_job(self._client("sagemaker", handle), handle.job_name)

    def remove_release(self, release: str, namespace: str | None,
                       handle: dict[str, Any] | None = None) -> list[str]:
        """Stop the release's running training jobs and delete its endpoints, configs and models, found by their
        tags (:mod:`.tagged`) where ``handle`` (or else the options) says the API is."""
        from botocore.exceptions import BotoCoreError

        where = self.load_handle(handle) if handle is not None else None
        try:
            client = self._client("sagemaker", where)
        except BotoCoreError as exc:  # no region, a bad endpoint URL: before any call
            raise BackendError(f"no SageMaker client: {exc}") from exc
        return tagged.remove_release(client, release, namespace)

    def live_note(self, handle: SageMakerHandle) -> str | None:
        """DescribeTrainingJob now: SageMaker's secondary status and billable seconds (an endpoint step:
        DescribeEndpoint's status); in mode aws through a client that asks once and waits briefly."""
        client = self.clients.get("sagemaker")
        if client is None:
            quick = handle.mode != "local"  # a local client is made once; a quick boto3 one is not kept
            client = self._provider(handle).client("sagemaker", quick=True) if quick else self._client("sagemaker",
                                                                                                        handle)
        if handle.endpoint_name:
            found = describe_endpoint(client, handle.endpoint_name)
            return f"SageMaker: endpoint {found.get('EndpointStatus')}" if found else \
                f"SageMaker: endpoint {handle.endpoint_name} is gone"
        job = call(f"DescribeTrainingJob {handle.job_name}", client.describe_training_job,
                   TrainingJobName=handle.job_name)
        note = status.progress_note(job)
        if not status.job_state(job).active:
            note += f"; the job has ended ({job.get('TrainingJobStatus')}): 'mlrecipe resume' records it"
        return note

    def debug_records(self, handle: SageMakerHandle) -> list[DebugRecord]:
        """DescribeTrainingJob and every host's log stream, or DescribeEndpoint (:mod:`.debug`)."""
        try:
            client = self._client("sagemaker", handle)
        except MlrecipeError as exc:
            return [DebugRecord("describe.json", missing=f"no SageMaker client: {exc}")]
        return debug.debug_records(client, lambda: self._client("logs", handle), self.options.log_group, handle)

    def handle_alive(self, handle: SageMakerHandle) -> bool:
        client = self._client("sagemaker", handle)
        if handle.endpoint_name:
            return describe_endpoint(client, handle.endpoint_name) is not None
        job = call(f"DescribeTrainingJob {handle.job_name}", client.describe_training_job,
                   TrainingJobName=handle.job_name)
        return status.job_state(job).active

