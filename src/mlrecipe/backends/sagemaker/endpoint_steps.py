"""An endpoint step's path: its plan (:class:`~.endpoint.EndpointPlan`, the Model, EndpointConfig and Endpoint
requests) is submitted as the step's endpoint: a live one of the same plan is adopted, else the three are made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlrecipe.backends.base import DebugRecord, ReleaseContext
from mlrecipe.backends.sagemaker import debug
from mlrecipe.backends.sagemaker.endpoint import (
    EndpointPlan,
    EndpointRunningStep,
    build_endpoint,
    create_endpoint,
    delete_endpoint,
    describe_endpoint,
)
from mlrecipe.backends.sagemaker.handle import EndpointHandle
from mlrecipe.backends.sagemaker.paths import Access
from mlrecipe.errors import BackendError, SpecIssue
from mlrecipe.spec.load import StepSpec


class EndpointSteps:
    """``serving/sagemaker-endpoint`` steps: each one endpoint, its config and its model."""

    def __init__(self, access: Access) -> None:
        self.access = access

    def plan(self, step: StepSpec, ctx: ReleaseContext, env: dict[str, str] | None,
             option_issues: list[SpecIssue]) -> tuple[EndpointPlan, list[SpecIssue]]:
        """The Model, EndpointConfig and Endpoint requests of ``step`` and their problems, after the missing options
        (but ``s3_prefix``: an endpoint uploads nothing)."""
        plan, found = build_endpoint(step, ctx, self.access.options, env)
        return plan, [i for i in option_issues if i.path != "s3_prefix"] + found

    def submit(self, plan: EndpointPlan, ctx: ReleaseContext) -> EndpointRunningStep:
        """Adopt the step's live endpoint or create its model, config and endpoint (the handle is written first:
        ``uninstall`` finds what a lost CLI created)."""
        if not plan.model_ready:
            raise BackendError(f"step {plan.step}: no model archive: {plan.notes[0] if plan.notes else ''}; only a "
                               "training step that ran on SageMaker records model_artifacts: does sagemaker.model_from "
                               "name one? Else give the model with sagemaker.model_data (mode local also takes a "
                               "file:// directory, e.g. the model a local training step left on a volume)")
        client = self.access.client("sagemaker")
        handle = EndpointHandle(endpoint_name=plan.endpoint_name, **self.access.where())
        self.access.save_handle(plan.step_dir, handle)
        handle.adopted = create_endpoint(client, plan)
        self.access.save_handle(plan.step_dir, handle)
        return EndpointRunningStep(client, handle, self.access.options.poll_seconds)

    def cancel(self, handle: EndpointHandle) -> None:
        """Delete the endpoint, its config and its model."""
        delete_endpoint(self.access.client("sagemaker", handle), handle.endpoint_name)

    def alive(self, handle: EndpointHandle) -> bool:
        return describe_endpoint(self.access.client("sagemaker", handle), handle.endpoint_name) is not None

    def live_note(self, handle: EndpointHandle, client: Any) -> str:
        found = describe_endpoint(client, handle.endpoint_name)
        return f"SageMaker: endpoint {found.get('EndpointStatus')}" if found else \
            f"SageMaker: endpoint {handle.endpoint_name} is gone"

    def debug_records(self, handle: EndpointHandle, client: Any) -> list[DebugRecord]:
        return debug.endpoint_records(client, handle)

    def fetch_log(self, handle: EndpointHandle, rank: int, dest: Path) -> None:
        """An endpoint's containers log to CloudWatch under the endpoint's name; mlrecipe fetches none."""
