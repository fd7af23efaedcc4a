"""Training job names and the tags that find a step's jobs again (re-run, resume, a retried task)."""

from __future__ import annotations

import hashlib
import re

#: SageMaker's TrainingJobName pattern (and its 63-character limit).
JOB_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
MAX_NAME = 63
TAG_RELEASE = "mlrecipe:release"
TAG_NAMESPACE = "mlrecipe:namespace"
TAG_STEP = "mlrecipe:step"
TAG_ATTEMPT = "mlrecipe:attempt"
TAG_DIGEST = "mlrecipe:digest"


def job_prefix(namespace: str, release: str, step: str, digest: str) -> str:
    """``<release>-<step>-<key>``, cut to leave room for ``-<attempt>``; ``key`` is unique to the namespace,
    release, step and plan digest, so that a changed plan gets new jobs and an unchanged one finds its own."""
    key = hashlib.sha256(f"{namespace}/{release}/{step}/{digest}".encode()).hexdigest()[:8]
    base = re.sub(r"[^a-zA-Z0-9]+", "-", f"{release}-{step}").strip("-") or "step"
    room = MAX_NAME - len(key) - 1 - 4  # "-<key>" and "-NNN"
    return f"{base[:room].rstrip('-')}-{key}"


def release_prefix(release: str) -> str:
    """What the names of every job, model, endpoint config and endpoint of ``release`` start with (ListX's
    ``NameContains``; other releases may match too: their tags tell them apart)."""
    base = re.sub(r"[^a-zA-Z0-9]+", "-", release).strip("-") or "step"
    return base[:MAX_NAME - 8 - 1 - 4].rstrip("-")


def job_name(prefix: str, attempt: int) -> str:
    """The name of attempt ``attempt`` (1, 2, ...) of the job ``prefix``."""
    return f"{prefix}-{attempt}"


def attempt_of(name: str, prefix: str) -> int | None:
    """The attempt number of a job called ``name``, when it is one of ``prefix``'s."""
    head, _, tail = name.rpartition("-")
    return int(tail) if head == prefix and tail.isdigit() else None


def job_tags(namespace: str, release: str, step: str, attempt: int, digest: str) -> dict[str, str]:
    """mlrecipe's tags of a training job."""
    return {TAG_RELEASE: release, TAG_NAMESPACE: namespace, TAG_STEP: step, TAG_ATTEMPT: str(attempt),
            TAG_DIGEST: digest}
