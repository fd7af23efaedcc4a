"""The two typed paths of a SageMaker step, training (:mod:`.training_steps`) and endpoint (:mod:`.endpoint_steps`),
each with its own plan and handle, and what both use: the options, the clients and the handle's file
(:class:`Access`). A plan or handle names its path (``path``); the backend never asks which one it holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol, TypeVar

from mlrecipe.backends.base import DebugRecord, ReleaseContext, RunningStep
from mlrecipe.backends.sagemaker.client import ClientProvider
from mlrecipe.backends.sagemaker.handle import SageMakerHandle
from mlrecipe.backends.sagemaker.options import SageMakerOptions
from mlrecipe.errors import SpecIssue
from mlrecipe.spec.load import StepSpec

HANDLE_FILE = "sagemaker-job.json"
PlanT = TypeVar("PlanT")
HandleT = TypeVar("HandleT", bound=SageMakerHandle, contravariant=True)


class StepPath(Protocol[PlanT, HandleT]):
    """What the backend asks of a step's path."""

    def plan(self, step: StepSpec, ctx: ReleaseContext, env: dict[str, str] | None,
             option_issues: list[SpecIssue]) -> tuple[PlanT, list[SpecIssue]]:
        """The step's plan and every problem of it, the backend's ``option_issues`` (those the path needs) first."""

    def submit(self, plan: PlanT, ctx: ReleaseContext) -> RunningStep[Any]:
        """Adopt what a re-run finds of the plan, or create it."""

    def cancel(self, handle: HandleT) -> None:
        """Stop (a job) or delete (an endpoint) what the step made."""

    def alive(self, handle: HandleT) -> bool:
        """Whether what the step made still runs or serves."""

    def live_note(self, handle: HandleT, client: Any) -> str:
        """The service's word on the step now (``status``)."""

    def debug_records(self, handle: HandleT, client: Any) -> list[DebugRecord]:
        """What a debug bundle keeps of the step."""

    def fetch_log(self, handle: HandleT, rank: int, dest: Path) -> None:
        """Host ``rank``'s log into ``dest`` (where the step has one)."""


class Access:
    """The options, the clients (one per service, made by :class:`ClientProvider` when first needed, or injected:
    tests pass botocore-stubbed ones) and where a step's handle is written."""

    def __init__(self, options: SageMakerOptions, clients: dict[str, Any]) -> None:
        self.options = options
        self.clients = clients

    def provider(self, handle: SageMakerHandle | None = None) -> ClientProvider:
        """Where the API is: the handle's (a step of an earlier CLI process), else the options'."""
        o = self.options
        if handle is None:
            return ClientProvider(o.mode, o.region, o.endpoint_url, o.local_dir())
        root = Path(handle.local_root) if handle.local_root else o.local_dir()
        return ClientProvider(handle.mode, handle.region, handle.endpoint_url, root)

    def client(self, service: str, handle: SageMakerHandle | None = None) -> Any:
        if service not in self.clients:
            self.clients[service] = self.provider(handle).client(service)
        return self.clients[service]

    def where(self) -> dict[str, Any]:
        """The handle fields that say where the options' API is."""
        o = self.options
        return {"mode": o.mode, "region": o.region, "endpoint_url": o.endpoint_url,
                "local_root": str(o.local_dir()) if o.mode == "local" else None}

    @staticmethod
    def save_handle(step_dir: Path, handle: SageMakerHandle) -> None:
        step_dir.mkdir(parents=True, exist_ok=True)
        (step_dir / HANDLE_FILE).write_text(json.dumps(handle.to_json(), indent=2), encoding="utf-8")
