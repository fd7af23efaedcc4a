"""A ``serving/sagemaker-endpoint`` step: a Model, an EndpointConfig and an Endpoint serving an earlier step's model.

The model archive is the earlier step's ``model_artifacts`` (recipe ``sagemaker.model_from: <step>``, read from
``MLRECIPE_<STEP>_MODEL_ARTIFACTS``) or ``sagemaker.model_data`` (a URI, which wins when given; ``$VARIABLES`` of
earlier steps expanded; mode local also takes a ``file://`` directory).
``image`` is the inference image, ``resources.node_type`` x ``resources.nnodes`` the production variant,
``server.env`` the model container's Environment. The three share one name (release, step and a digest of the
requests), so a re-run or ``resume`` finds the endpoint again and adopts it. The step is ``serving`` when the
endpoint is ``InService`` (URL: the local server in mode local, the SageMaker runtime's invoke URL in mode aws);
``Failed`` ends it with the reason; cancelling it (Ctrl-C, ``uninstall``) deletes all three.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from string import Template
from typing import Any, ClassVar

import yaml

from mlrecipe.backends.base import Plan, PollClock, ReleaseContext, RunningStep, StepOutcome, StepState
from mlrecipe.backends.sagemaker import names, parts
from mlrecipe.backends.sagemaker.api import CreateEndpoint, CreateEndpointConfig, CreateModel
from mlrecipe.backends.sagemaker.client import call, error_code
from mlrecipe.backends.sagemaker.handle import EndpointHandle
from mlrecipe.backends.sagemaker.options import SageMakerOptions
from mlrecipe.backends.sagemaker.request import image_mismatch, instance_type
from mlrecipe.errors import BackendError, SpecIssue
from mlrecipe.spec.load import StepSpec
from mlrecipe.spec.names import step_output_var

#: The calls of an endpoint step, in the order they are made.
CALLS = ("create_model", "create_endpoint_config", "create_endpoint")
OPERATIONS = {"create_model": "CreateModel", "create_endpoint_config": "CreateEndpointConfig",
              "create_endpoint": "CreateEndpoint"}
#: EndpointStatus values that mean the endpoint is on its way or up (adopted by a re-run); the rest end the step.
LIVE = frozenset({"Creating", "Updating", "SystemUpdating", "InService"})
DEFAULT_ENDPOINT_INSTANCE = "ml.m5.large"
#: The typed output of a serving endpoint step (its URL goes to later steps as ``MLRECIPE_<STEP>_URL``).
OUTPUT_ENDPOINT_NAME = "endpoint_name"
VARIANT = "AllTraffic"


def artifacts_var(step: str) -> str:
    """The variable that carries ``step``'s model archive: ``MLRECIPE_<STEP>_MODEL_ARTIFACTS``."""
    return step_output_var(step, "model_artifacts")


def invoke_url(region: str | None, endpoint: str) -> str:
    """The SageMaker runtime's URL of ``endpoint`` (``<url>/invocations`` is InvokeEndpoint, SigV4-signed)."""
    return f"https://runtime.sagemaker.{region or 'us-east-1'}.amazonaws.com/endpoints/{endpoint}"


@dataclass
class EndpointPlan(Plan):
    """The typed requests of create_model, create_endpoint_config and create_endpoint, made in that order."""

    path: ClassVar[str] = "endpoint"  #: submitted by :mod:`.endpoint_steps`
    step: str
    chart: str
    model: CreateModel
    config: CreateEndpointConfig
    endpoint: CreateEndpoint
    step_dir: Path
    mode: str
    region: str | None
    model_ready: bool = True  #: False in a dry run before the model's step has run (its URI is a placeholder)
    notes: list[str] = field(default_factory=list)

    @property
    def endpoint_name(self) -> str:
        """The name of the endpoint, its config and its model."""
        return self.endpoint.endpoint_name

    @property
    def node_count(self) -> int:
        return self.config.instance_count

    @property
    def requests(self) -> dict[str, dict[str, Any]]:
        """The keyword arguments of each call (:data:`CALLS`) by the call's name."""
        return {"create_model": self.model.kwargs(), "create_endpoint_config": self.config.kwargs(),
                "create_endpoint": self.endpoint.kwargs()}

    @property
    def server_url(self) -> str | None:
        return invoke_url(self.region, self.endpoint_name) if self.mode == "aws" else None

    def materialize(self) -> str:
        """One YAML document per call, in order."""
        out = []
        requests = self.requests
        for call_name in CALLS:
            doc = yaml.safe_dump(requests[call_name], sort_keys=False, default_flow_style=False, width=120)
            out += [f"# step {self.step} ({self.chart}): sagemaker {call_name}"]
            out += [f"# {note}" for note in self.notes if note.startswith("warning: ") and call_name == CALLS[0]]
            out += ["---", doc.rstrip("\n")]
        return "\n".join(out) + "\n"


def _model_url(step: StepSpec, env: dict[str, str]) -> tuple[str, bool, SpecIssue | None]:
    """(ModelDataUrl, whether it is known yet, a problem)."""
    block = step.recipe.sagemaker
    if block is not None and block.model_data:  # given explicitly, it wins over model_from
        url = Template(block.model_data).safe_substitute(env)
        return url, "$" not in url, None
    if block is not None and block.model_from:
        var = artifacts_var(block.model_from)
        if var in env:
            return env[var], True, None
        return f"${var}", False, None
    return "", False, step.issue("sagemaker", "serving/sagemaker-endpoint needs sagemaker.model_from (the earlier "
                                 "step whose model_artifacts it serves) or sagemaker.model_data (an archive URI)")


def build_endpoint(step: StepSpec, ctx: ReleaseContext, options: SageMakerOptions,
                   env: dict[str, str] | None = None) -> tuple[EndpointPlan, list[SpecIssue]]:
    """The plan of an endpoint step and its problems (as the service would see them, located in the recipe)."""
    from mlrecipe.backends.sagemaker.validate import OPTION_SOURCE, request_problems

    env = dict(env or {})
    recipe = step.recipe
    issues: list[SpecIssue] = []
    local = options.mode == "local"
    url, known, problem = _model_url(step, env)
    issues += [problem] if problem else []
    image, _ = parts.image(step, options)
    if not image:
        issues.append(step.issue("image", "required on the sagemaker backend: the inference image (an ECR URI), or "
                                 "map the recipe's image with -B sagemaker.images.<image>=<ECR URI>"))
    environment, refused = parts.recipe_environment(step, ctx)
    for i, name in refused:
        issues.append(step.issue(f"{step.chart.block}.env[{i}].value", f"{name} looks like a credential: "
                                 "a Model's Environment is visible in DescribeModel; give it to the inference "
                                 "code from AWS Secrets Manager instead"))
    kind = instance_type(recipe.resources.node_type) if recipe.resources.node_type else DEFAULT_ENDPOINT_INSTANCE
    model = CreateModel(model_name="", image=image, model_data_url=url, environment=environment,
                        execution_role_arn=parts.role(options), vpc=parts.vpc(options),
                        network_isolation=options.network_isolation)
    config = CreateEndpointConfig(endpoint_config_name="", variant_name=VARIANT, model_name="",
                                  instance_count=recipe.resources.nnodes, instance_type=kind)
    unnamed = {"create_model": model.kwargs(), "create_endpoint_config": config.kwargs(),
               "create_endpoint": CreateEndpoint("", "").kwargs()}
    for request in unnamed.values():
        del request["Tags"]  # the digest is of what the resources are, not of their names or tags
    digest = hashlib.sha256(json.dumps(unnamed, sort_keys=True).encode()).hexdigest()[:12]
    name = names.job_prefix(ctx.namespace, ctx.release, step.name, digest)
    tags = parts.tags(options, {names.TAG_RELEASE: ctx.release, names.TAG_NAMESPACE: ctx.namespace,
                                names.TAG_STEP: step.name, names.TAG_DIGEST: digest})
    model = replace(model, model_name=name, tags=tags)
    config = replace(config, endpoint_config_name=name, model_name=name, tags=tags)
    endpoint = CreateEndpoint(endpoint_name=name, endpoint_config_name=name, tags=tags)
    requests = {"create_model": model.kwargs(), "create_endpoint_config": config.kwargs(),
                "create_endpoint": endpoint.kwargs()}
    where = {"PrimaryContainer.Image": "image", "PrimaryContainer.ModelDataUrl": "sagemaker",
             "ProductionVariants[0].InstanceType": "resources.node_type",
             "ProductionVariants[0].InitialInstanceCount": "resources.nnodes"}
    for call_name, request in requests.items():
        for path, message in request_problems(request, OPERATIONS[call_name], local=local):
            if path == "PrimaryContainer.ModelDataUrl" and not known:
                continue  # filled in when the model's step has run
            if (path == "ExecutionRoleArn" and not model.execution_role_arn) or (
                    path == "PrimaryContainer.Image" and not image):
                continue  # said by the backend's options check (role_arn) or once above (image)
            if path in where:
                issues.append(step.issue(where[path], f"{OPERATIONS[call_name]} {path}: {message}"))
            else:
                issues.append(SpecIssue(OPTION_SOURCE, None, path, f"{OPERATIONS[call_name]}: {message}"))
    notes = [] if known else [f"the model archive is {url}, known once that step has finished"]
    notes += [n for n in [image_mismatch(kind, image)] if n]
    plan = EndpointPlan(step=step.name, chart=step.chart.name, model=model, config=config, endpoint=endpoint,
                        step_dir=ctx.step_dir(step.name), mode=options.mode, region=options.region,
                        model_ready=known, notes=notes)
    return plan, issues


def _gone(exc: BackendError) -> bool:
    """Whether a failed call says that the resource does not exist."""
    cause = exc.__cause__ or exc
    return error_code(cause) in ("ValidationException", "ResourceNotFound") and "not find" in str(cause).lower()


def describe_endpoint(client: Any, name: str) -> dict[str, Any] | None:
    """DescribeEndpoint, or ``None`` when there is no such endpoint."""
    try:
        return call(f"DescribeEndpoint {name}", client.describe_endpoint, EndpointName=name)
    except BackendError as exc:
        if _gone(exc):
            return None
        raise


def create_endpoint(client: Any, plan: EndpointPlan) -> bool:
    """Adopt the live endpoint of ``plan`` (True) or create its model, config and endpoint (False); a model or
    config left by an earlier attempt is reused, a ``Failed`` endpoint of mode local replaced (mode aws: refused,
    with the way out)."""
    found = describe_endpoint(client, plan.endpoint_name)
    if found is not None and found.get("EndpointStatus") in LIVE:
        return True
    if found is not None and plan.mode == "local" and found.get("EndpointStatus") == "Failed":
        call(f"DeleteEndpoint {plan.endpoint_name}", client.delete_endpoint, EndpointName=plan.endpoint_name)
        found = None  # a local endpoint is deleted at once: the re-run tries again (the archive may be fixed)
    if found is not None:
        raise BackendError(f"endpoint {plan.endpoint_name} exists in state {found.get('EndpointStatus')} "
                           f"({found.get('FailureReason', 'no reason given')}): run 'mlrecipe uninstall' first")
    requests = plan.requests
    for call_name in CALLS:
        request = requests[call_name]
        what = f"{OPERATIONS[call_name]} {plan.endpoint_name}"
        try:
            call(what, getattr(client, call_name), **request)
        except BackendError as exc:
            if call_name == "create_endpoint" or "already exist" not in str(exc.__cause__ or exc).lower():
                raise
    return False


def delete_endpoint(client: Any, name: str) -> None:
    """DeleteEndpoint, DeleteEndpointConfig, DeleteModel of ``name``; what is already gone is fine."""
    for what, fn, key in (("DeleteEndpoint", client.delete_endpoint, "EndpointName"),
                          ("DeleteEndpointConfig", client.delete_endpoint_config, "EndpointConfigName"),
                          ("DeleteModel", client.delete_model, "ModelName")):
        try:
            call(f"{what} {name}", fn, **{key: name})
        except BackendError as exc:
            if not _gone(exc):
                raise


class EndpointRunningStep(RunningStep[EndpointHandle]):
    """An endpoint as the runner watches it: DescribeEndpoint at most once per ``poll_seconds``; ready (its URL)
    when ``InService``; ``Failed``, ``OutOfService`` or gone end the step as failed with the reason."""

    def __init__(self, client: Any, handle: EndpointHandle, poll_seconds: float) -> None:
        self.client = client
        self.handle = handle
        self.endpoint: dict[str, Any] | None = None
        self._clock = PollClock(poll_seconds)
        self._url: str | None = None

    def poll(self) -> StepOutcome | None:
        if not self._clock.due():
            return None
        name = self.handle.endpoint_name
        self.endpoint = describe_endpoint(self.client, name)
        if self.endpoint is None:
            return StepOutcome(StepState.FAILED, message=f"endpoint {name} is gone (deleted outside this release)")
        state = str(self.endpoint.get("EndpointStatus"))
        if state in LIVE:
            return None
        reason = self.endpoint.get("FailureReason") or "no reason given"
        return StepOutcome(StepState.FAILED, message=f"endpoint {name} is {state}: {reason}")

    def ready_url(self) -> str | None:
        if self._url is None and self.endpoint is not None and self.endpoint.get("EndpointStatus") == "InService":
            name = self.handle.endpoint_name
            if self.handle.mode == "local":
                self._url = self.client.endpoint_url(name)
            else:
                region = self.handle.region or getattr(getattr(self.client, "meta", None), "region_name", None)
                self._url = invoke_url(region, name)
        return self._url

    def settled(self) -> StepOutcome | None:
        """As :meth:`RunningStep.settled`; once serving, the typed output ``endpoint_name`` (later steps:
        ``MLRECIPE_<STEP>_ENDPOINT_NAME``, beside the URL's ``MLRECIPE_<STEP>_URL``)."""
        outcome = super().settled()
        if outcome is not None and outcome.state is StepState.SERVING:
            outcome.outputs = {OUTPUT_ENDPOINT_NAME: self.handle.endpoint_name}
        return outcome

    def progress_note(self) -> str:
        return f"endpoint {self.endpoint.get('EndpointStatus')}" if self.endpoint else ""

    def cancel(self) -> None:
        """Delete the endpoint, its config and its model."""
        delete_endpoint(self.client, self.handle.endpoint_name)
