"""A release's SageMaker resources found by their tags, without the release's state: what ``uninstall`` removes
from another machine or ``MLRECIPE_HOME`` (a KFP task's pod made them).

In mode local, an ended training job's directory (its hosts' ``/opt/ml`` trees) is removed as well.
Each kind is listed by name (``NameContains``: the release's name prefix, :func:`.names.release_prefix`, every
page) and confirmed by ``ListTags`` (release and namespace tags), so that a release whose name another one starts
with is left alone. Running training jobs are stopped (SageMaker keeps ended jobs; they cannot be deleted);
endpoints, their configs and their models (one name per endpoint step) are deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlrecipe.backends.sagemaker import names
from mlrecipe.backends.sagemaker.client import call
from mlrecipe.backends.sagemaker.endpoint import delete_endpoint
from mlrecipe.backends.sagemaker.running import stop_job
from mlrecipe.errors import BackendError, UserError


@dataclass(frozen=True)
class Listing:
    """How one kind of resource is listed: the call, its list key and the summary keys of name, ARN and status."""

    kind: str
    operation: str
    method: str
    key: str
    name: str
    arn: str
    status: str | None = None


LISTINGS = (
    Listing("training-job", "ListTrainingJobs", "list_training_jobs", "TrainingJobSummaries", "TrainingJobName",
            "TrainingJobArn", "TrainingJobStatus"),
    Listing("endpoint", "ListEndpoints", "list_endpoints", "Endpoints", "EndpointName", "EndpointArn",
            "EndpointStatus"),
    Listing("endpoint-config", "ListEndpointConfigs", "list_endpoint_configs", "EndpointConfigs",
            "EndpointConfigName", "EndpointConfigArn"),
    Listing("model", "ListModels", "list_models", "Models", "ModelName", "ModelArn"),
)
#: Training job statuses that StopTrainingJob acts on.
STOPPABLE = frozenset({"InProgress"})


@dataclass(frozen=True)
class Tagged:
    """One resource of a release: its kind, name, namespace tag and status (training jobs and endpoints)."""

    kind: str
    name: str
    namespace: str
    status: str | None


def _summaries(client: Any, listing: Listing, prefix: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"NameContains": prefix, "MaxResults": 100}
    while True:
        page = call(listing.operation, getattr(client, listing.method), **kwargs)
        out += page.get(listing.key, [])
        if not page.get("NextToken"):
            return out
        kwargs["NextToken"] = page["NextToken"]


def find_release(client: Any, release: str, namespace: str | None) -> list[Tagged]:
    """Every training job, endpoint, endpoint config and model tagged with ``release`` (and ``namespace``, when
    given)."""
    prefix = names.release_prefix(release)
    found = []
    for listing in LISTINGS:
        for summary in _summaries(client, listing, prefix):
            name = summary[listing.name]
            tags = call(f"ListTags {name}", client.list_tags, ResourceArn=summary[listing.arn]).get("Tags", [])
            tagged = {t["Key"]: t["Value"] for t in tags}
            if tagged.get(names.TAG_RELEASE) != release or names.TAG_NAMESPACE not in tagged:
                continue
            if namespace is None or tagged[names.TAG_NAMESPACE] == namespace:
                status = summary.get(listing.status) if listing.status else None
                found.append(Tagged(listing.kind, name, tagged[names.TAG_NAMESPACE], status))
    return found


def remove_release(client: Any, release: str, namespace: str | None) -> list[str]:
    """Stop the release's running training jobs and delete its endpoints, configs and models; one line for each.
    ``namespace`` ``None``: the release must be in one namespace only (else :class:`UserError` naming them)."""
    found = find_release(client, release, namespace)
    spaces = sorted({r.namespace for r in found})
    if namespace is None and len(spaces) > 1:
        where = ", ".join(f"sagemaker://{n}/{release}" for n in spaces)
        raise UserError(f"release '{release}' has SageMaker resources in several namespaces ({where}): give the "
                        "full address")
    done = []
    for job in (r for r in found if r.kind == "training-job" and r.status in STOPPABLE):
        stop_job(client, job.name)
        done.append(f"stopped training job {job.name}")
    if hasattr(client, "remove_job_tree"):  # mode local: a job's hosts' trees (a copy of every channel each) go too
        for job in (r for r in found if r.kind == "training-job"):
            if client.remove_job_tree(TrainingJobName=job.name):
                done.append(f"removed local training job {job.name} and its hosts' trees")
            else:
                raise BackendError(f"local training job {job.name} did not stop; its tree is kept")
    for name in sorted({r.name for r in found if r.kind != "training-job"}):
        delete_endpoint(client, name)
        kinds = [r.kind for r in found if r.name == name and r.kind != "training-job"]
        done.append(f"deleted {', '.join(k.replace('-', ' ') for k in kinds)} {name}")
    return done
