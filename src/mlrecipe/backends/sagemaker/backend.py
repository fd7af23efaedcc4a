"""The SageMaker backend: a training step is one training job (boto3 ``create_training_job``), a
``serving/sagemaker-endpoint`` step a Model, an EndpointConfig and an Endpoint.

The plan is the typed request (:mod:`.request`, :mod:`.endpoint`; both built of :mod:`.parts`), checked against
botocore's service model before anything is uploaded (:mod:`.validate`). Each kind of step has its own path, plan
and handle (:mod:`.training_steps`, :mod:`.endpoint_steps`): the step's kind picks its path, which makes its plan;
``submit``, cancel, status and debug records go to the path the plan or handle names. A re-run, ``resume`` or a
retried submission finds the step's job or endpoint by its tags and adopts it, never creating it twice. The job's
statuses map onto step states in one table (:mod:`.status`). ``mode: local`` talks to the local mode's client, which
offers the same calls and answers; every client comes from one :class:`~.client.ClientProvider`.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from mlrecipe.backends.base import (
    AdoptsSubmitted,
    Backend,
    CollectsDebugRecords,
    DebugRecord,
    ReleaseContext,
    RemovesByRelease,
    RunningStep,
    issues_at_chart,
)
from mlrecipe.backends.sagemaker import tagged
from mlrecipe.backends.sagemaker.client import sdk_region
from mlrecipe.backends.sagemaker.endpoint import EndpointPlan
from mlrecipe.backends.sagemaker.endpoint_steps import EndpointSteps
from mlrecipe.backends.sagemaker.handle import EndpointHandle, SageMakerHandle, TrainingJobHandle, load_handle
from mlrecipe.backends.sagemaker.options import SageMakerOptions
from mlrecipe.backends.sagemaker.paths import HANDLE_FILE, Access, StepPath
from mlrecipe.backends.sagemaker.plan import TrainingJobPlan
from mlrecipe.backends.sagemaker.training_steps import TrainingSteps
from mlrecipe.backends.sagemaker.validate import OPTION_SOURCE
from mlrecipe.errors import BackendError, MlrecipeError, SpecError, SpecIssue
from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.load import StepSpec

__all__ = ["HANDLE_FILE", "SageMakerBackend"]


class SageMakerBackend(AdoptsSubmitted, RemovesByRelease, CollectsDebugRecords,
                       Backend[TrainingJobPlan | EndpointPlan, SageMakerHandle, SageMakerOptions]):
    """Runs each training step as one SageMaker training job, each endpoint step as one endpoint; see the module
    docstring.

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
        self.access = Access(options, self.clients)
        self.training = TrainingSteps(self.access)
        self.endpoints = EndpointSteps(self.access)
        #: The path of each plan and handle by the name it gives (their ``path``).
        self.paths: dict[str, StepPath[Any, Any]] = {"training": self.training, "endpoint": self.endpoints}

    def load_handle(self, data: dict[str, Any]) -> TrainingJobHandle | EndpointHandle:
        """A training step's :class:`TrainingJobHandle` or an endpoint step's :class:`EndpointHandle`."""
        return load_handle(data)

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
        return self._path_of(step).plan(step, ctx, None, self._option_issues())[1]

    def _path_of(self, step: StepSpec) -> StepPath[Any, Any]:
        """An endpoint step's path, or the training path of every other step."""
        return self.endpoints if step.chart.kind is StepKind.ENDPOINT else self.training

    def plan(self, step: StepSpec, ctx: ReleaseContext,
             env: dict[str, str] | None = None) -> TrainingJobPlan | EndpointPlan:
        """The step's path makes its plan (:meth:`.training_steps.TrainingSteps.plan`,
        :meth:`.endpoint_steps.EndpointSteps.plan`); any problem stops it here."""
        plan, issues = self._path_of(step).plan(step, ctx, env, self._option_issues())
        if issues:
            raise SpecError(issues)
        return plan

    def submit(self, plan: TrainingJobPlan | EndpointPlan, ctx: ReleaseContext) -> RunningStep[Any]:
        """The plan's path submits it (:meth:`.training_steps.TrainingSteps.submit`,
        :meth:`.endpoint_steps.EndpointSteps.submit`)."""
        return self.paths[plan.path].submit(plan, ctx)

    def log_path(self, ctx: ReleaseContext, step: str, rank: int = 0) -> Path:
        """Host ``rank``'s log, fetched from CloudWatch (local mode: copied) into the step directory."""
        dest = super().log_path(ctx, step, rank)
        saved = ctx.step_dir(step) / HANDLE_FILE
        if saved.exists():
            with contextlib.suppress(BackendError, OSError, ValueError):
                handle = load_handle(json.loads(saved.read_text(encoding="utf-8")))
                self.paths[handle.path].fetch_log(handle, rank, dest)
        return dest

    def metrics_path(self, ctx: ReleaseContext, step: str) -> Path | None:
        return None  # the job's hosts cannot append to a file on this machine

    def cancel_handle(self, handle: SageMakerHandle) -> None:
        """StopTrainingJob; an endpoint step's endpoint, config and model are deleted."""
        self.paths[handle.path].cancel(handle)

    def remove_release(self, release: str, namespace: str | None,
                       handle: dict[str, Any] | None = None) -> list[str]:
        """Stop the release's running training jobs and delete its endpoints, configs and models, found by their
        tags (:mod:`.tagged`) where ``handle`` (or else the options) says the API is."""
        from botocore.exceptions import BotoCoreError

        where = self.load_handle(handle) if handle is not None else None
        try:
            client = self.access.client("sagemaker", where)
        except BotoCoreError as exc:  # no region, a bad endpoint URL: before any call
            raise BackendError(f"no SageMaker client: {exc}") from exc
        return tagged.remove_release(client, release, namespace)

    def live_note(self, handle: SageMakerHandle) -> str | None:
        """DescribeTrainingJob now: SageMaker's secondary status and billable seconds (an endpoint step:
        DescribeEndpoint's status); in mode aws through a client that asks once and waits briefly."""
        client = self.clients.get("sagemaker")
        if client is None and handle.mode == "local":
            client = self.access.client("sagemaker", handle)
        elif client is None:  # a quick boto3 client, not kept
            client = self.access.provider(handle).client("sagemaker", quick=True)
        return self.paths[handle.path].live_note(handle, client)

    def debug_records(self, handle: SageMakerHandle) -> list[DebugRecord]:
        """DescribeTrainingJob and every host's log stream, or DescribeEndpoint (:mod:`.debug`)."""
        try:
            client = self.access.client("sagemaker", handle)
        except MlrecipeError as exc:
            return [DebugRecord("describe.json", missing=f"no SageMaker client: {exc}")]
        return self.paths[handle.path].debug_records(handle, client)

    def handle_alive(self, handle: SageMakerHandle) -> bool:
        return self.paths[handle.path].alive(handle)
