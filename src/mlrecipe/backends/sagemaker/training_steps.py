"""A training step's path: its plan (:class:`~.plan.TrainingJobPlan`, the ``create_training_job`` request) is
submitted as the step's training job: one that runs or completed with the same plan (found by its tags) is adopted,
never created twice; otherwise the step program and the runtime go to the ``mlrecipe`` channel's URI and the next
attempt is created."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from mlrecipe.backends.base import DebugRecord, ReleaseContext
from mlrecipe.backends.sagemaker import debug, names, status
from mlrecipe.backends.sagemaker.api import CreateTrainingJob, Tag
from mlrecipe.backends.sagemaker.client import call
from mlrecipe.backends.sagemaker.handle import TrainingJobHandle
from mlrecipe.backends.sagemaker.logs import fetch_stream
from mlrecipe.backends.sagemaker.paths import Access
from mlrecipe.backends.sagemaker.plan import TrainingJobPlan
from mlrecipe.backends.sagemaker.request import TrainingRequest, build_request, register_local_file_system
from mlrecipe.backends.sagemaker.running import SageMakerRunningStep, stop_job
from mlrecipe.backends.sagemaker.validate import OPTION_SOURCE, issues_of
from mlrecipe.errors import SpecIssue
from mlrecipe.spec.load import StepSpec

LOCAL_FILE_SYSTEMS = "file-systems"  #: under the local mode's root: its file systems (LocalSageMakerClient's default)
#: Jobs that a re-run adopts (the same plan, running or done); a failed or stopped one gets a new attempt.
ADOPTABLE = frozenset({"InProgress", "Completed"})


class TrainingSteps:
    """Training steps: each one SageMaker training job."""

    def __init__(self, access: Access) -> None:
        self.access = access
        self._arns: dict[str, str] = {}

    def plan(self, step: StepSpec, ctx: ReleaseContext, env: dict[str, str] | None,
             option_issues: list[SpecIssue]) -> tuple[TrainingJobPlan, list[SpecIssue]]:
        """The ``create_training_job`` request of ``step``, and the missing options, then the request's problems as
        the service would find them (those of a missing option said once)."""
        request = build_request(step, ctx, self.access.options, env)
        plan = TrainingJobPlan(
            step=step.name, chart=step.chart.name, request=request.job, program=request.program,
            job_prefix=request.job.training_job_name.rpartition("-")[0], digest=request.digest,
            step_dir=ctx.step_dir(step.name), notes=request.notes, local_file_systems=request.local_file_systems,
            mount_script=request.mount_script)
        return plan, option_issues + self._request_issues(step, request, {i.path for i in option_issues})

    def _request_issues(self, step: StepSpec, request: TrainingRequest, said: set[str]) -> list[SpecIssue]:
        found = issues_of(step, request, local=self.access.options.mode == "local")
        if not request.job.image:
            found.insert(0, step.issue("image", "required on the sagemaker backend: an image SageMaker can pull (an "
                                       "ECR URI), or map the recipe's image with "
                                       "-B sagemaker.images.<image>=<ECR URI>"))
        return [i for i in found if not (i.file == OPTION_SOURCE and i.path in said)]

    def submit(self, plan: TrainingJobPlan, ctx: ReleaseContext) -> SageMakerRunningStep:
        """Adopt the step's job or create the next attempt. A transient error reaches the runner, which submits again
        (:mod:`mlrecipe.runner.submit_retry`): the next submit finds the job a lost create may have made, by its
        tags, and adopts it."""
        client = self.access.client("sagemaker")
        listed = self._listed(plan)
        found = self.find_jobs(plan, ctx, listed)
        if found and found[0][1].get("TrainingJobStatus") in ADOPTABLE:
            handle = TrainingJobHandle(job_name=found[0][0], adopted=True, **self.access.where())
        else:  # the next attempt after every name taken, ours or not (SageMaker never reuses a job name)
            attempt = 1 + max((names.attempt_of(n, plan.job_prefix) or 0 for n in listed), default=0)
            request = attempt_request(plan, attempt)
            self._upload(plan)
            for fs_id, directory in plan.local_file_systems.items():
                register_local_file_system(self.access.options.local_dir() / LOCAL_FILE_SYSTEMS, fs_id,
                                           Path(directory))
            call(f"CreateTrainingJob {request.training_job_name}", client.create_training_job, **request.kwargs())
            handle = TrainingJobHandle(job_name=request.training_job_name, **self.access.where())
        self.access.save_handle(plan.step_dir, handle)
        return SageMakerRunningStep(client, handle, self.access.options.poll_seconds,
                                    on_end=lambda: self._fetch_all_logs(handle, plan))

    def _listed(self, plan: TrainingJobPlan) -> list[str]:
        """The names of the jobs of ``plan``'s prefix (ListTrainingJobs, every page)."""
        client = self.access.client("sagemaker")
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

    def find_jobs(self, plan: TrainingJobPlan, ctx: ReleaseContext,
                  listed: list[str] | None = None) -> list[tuple[str, dict[str, Any]]]:
        """The step's earlier jobs with this plan, newest attempt first, as (name, DescribeTrainingJob): listed by
        name and confirmed by their release, namespace, step and digest tags."""
        client = self.access.client("sagemaker")
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

    def _upload(self, plan: TrainingJobPlan) -> None:
        """The step program and the runtime to the ``mlrecipe`` channel (a copy stays in the step directory)."""
        local = plan.step_dir / "mlrecipe"
        local.mkdir(parents=True, exist_ok=True)
        for name, data in plan.files().items():
            (local / name).write_bytes(data)
        uri = urlparse(plan.program_uri)
        if uri.scheme != "s3":
            return
        s3 = self.access.client("s3")
        for name, data in plan.files().items():
            key = f"{uri.path.lstrip('/')}{name}"
            call(f"PutObject s3://{uri.netloc}/{key}", s3.put_object, Bucket=uri.netloc, Key=key, Body=data)

    def _fetch_all_logs(self, handle: TrainingJobHandle, plan: TrainingJobPlan) -> list[str]:
        """Every host's log into the step directory; the last lines of the first host's."""
        for rank in range(plan.node_count):
            self.fetch_log(handle, rank, plan.step_dir / f"node-{rank}.log")
        path = plan.step_dir / "node-0.log"
        return path.read_text(encoding="utf-8", errors="replace").splitlines() if path.exists() else []

    def fetch_log(self, handle: TrainingJobHandle, rank: int, dest: Path) -> None:
        """Host ``rank``'s log: from CloudWatch, or (mode local) copied from the local mode's job."""
        client = self.access.client("sagemaker", handle)
        if handle.mode == "local":
            source = Path(client.log_path(handle.job_name, rank))
            if source.exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(source.read_bytes())
            return
        fetch_stream(self.access.client("logs", handle), self.access.options.log_group, handle.job_name, rank, dest)

    def cancel(self, handle: TrainingJobHandle) -> None:
        """StopTrainingJob."""
        stop_job(self.access.client("sagemaker", handle), handle.job_name)

    def alive(self, handle: TrainingJobHandle) -> bool:
        return status.job_state(self._describe(self.access.client("sagemaker", handle), handle)).active

    def live_note(self, handle: TrainingJobHandle, client: Any) -> str:
        """SageMaker's secondary status and billable seconds, and whether the job has ended."""
        job = self._describe(client, handle)
        note = status.progress_note(job)
        if not status.job_state(job).active:
            note += f"; the job has ended ({job.get('TrainingJobStatus')}): 'mlrecipe resume' records it"
        return note

    def debug_records(self, handle: TrainingJobHandle, client: Any) -> list[DebugRecord]:
        """DescribeTrainingJob and every host's log stream (:mod:`.debug`)."""
        return debug.training_records(client, lambda: self.access.client("logs", handle),
                                      self.access.options.log_group, handle)

    @staticmethod
    def _describe(client: Any, handle: TrainingJobHandle) -> dict[str, Any]:
        return call(f"DescribeTrainingJob {handle.job_name}", client.describe_training_job,  # type: ignore[no-any-return]
                    TrainingJobName=handle.job_name)


def attempt_request(plan: TrainingJobPlan, attempt: int) -> CreateTrainingJob:
    """The plan's request as attempt ``attempt`` (its job name and attempt tag)."""
    tags = tuple(t for t in plan.request.tags if t.key != names.TAG_ATTEMPT)
    return replace(plan.request, training_job_name=names.job_name(plan.job_prefix, attempt),
                   tags=(*tags, Tag(names.TAG_ATTEMPT, str(attempt))))
