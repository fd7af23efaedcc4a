"""The clients the backend talks through (:class:`ClientProvider`): boto3's (``mode: aws``) or the local mode's.

boto3 is imported only here and only when a SageMaker step is planned or run, with an install hint when it is
missing. Throttling, 5xx answers and connection errors raise :class:`TransientBackendError`: the runner asks
again (:mod:`mlrecipe.runner.submit_retry` at submission; at the next look while a step runs).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrecipe.backends.sagemaker.sdk import require_boto3
from mlrecipe.errors import BackendError, TransientBackendError

TRANSIENT_CODES = frozenset({"Throttling", "ThrottlingException", "ThrottledException", "RequestThrottled",
                             "TooManyRequestsException", "ProvisionedThroughputExceededException",
                             "RequestLimitExceeded", "SlowDown", "ServiceUnavailable", "InternalFailure",
                             "InternalServerError", "InternalError", "RequestTimeout", "RequestTimeoutException"})


def aws_client(service: str, region: str | None, endpoint_url: str | None, quick: bool = False) -> Any:
    """A boto3 client of ``service`` (sagemaker, s3, logs, sts, iam) with botocore's standard retries; ``quick``:
    one attempt, connected within 3 s and answered within 10 s (``status`` answers in seconds)."""
    require_boto3()
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError

    if quick:
        config = Config(retries={"mode": "standard", "total_max_attempts": 1}, connect_timeout=3, read_timeout=10)
    else:
        config = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=10, read_timeout=60)
    try:
        return boto3.session.Session().client(service, region_name=region, endpoint_url=endpoint_url, config=config)
    except (BotoCoreError, ValueError) as exc:  # no region, a malformed endpoint URL: before any call
        shown = {"sagemaker": "SageMaker", "s3": "S3", "logs": "CloudWatch Logs"}.get(service, service)
        raise BackendError(f"no {shown} client: {exc} (set -B sagemaker.region=... and check "
                           "-B sagemaker.endpoint_url)") from exc


@dataclass(frozen=True)
class ClientProvider:
    """Where a step's SageMaker API is, and the one way to get a client of it: ``mode`` local (the local mode's
    client, rooted at ``local_root``, which reads ``s3://`` channels through ``endpoint_url``) or aws (boto3's, in
    ``region``, at ``endpoint_url`` when one is given)."""

    mode: str
    region: str | None
    endpoint_url: str | None
    local_root: Path

    def client(self, service: str, quick: bool = False) -> Any:
        """A client of ``service`` (sagemaker, s3, logs); ``quick`` as :func:`aws_client`'s (mode aws only)."""
        if service == "sagemaker" and self.mode == "local":
            require_boto3()
            from mlrecipe.backends.sagemaker.local.client import LocalSageMakerClient

            return LocalSageMakerClient(self.local_root, Path(sys.executable).parent, endpoint_url=self.endpoint_url)
        return aws_client(service, self.region, self.endpoint_url, quick=quick)


def sdk_region() -> str | None:
    """The region boto3 would use without a ``region`` option (AWS_REGION, AWS_DEFAULT_REGION, the profile in
    ~/.aws/config); ``None`` when there is none, or no botocore to ask."""
    try:
        import botocore.session
        from botocore.exceptions import BotoCoreError
    except ImportError:
        return None
    try:
        return botocore.session.get_session().get_config_variable("region") or None
    except BotoCoreError:  # a profile that does not exist
        return None


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ``ClientError`` ("" for anything else)."""
    response = getattr(exc, "response", None)
    return str(((response or {}).get("Error") or {}).get("Code", "")) if isinstance(response, dict) else ""


def is_transient(exc: BaseException) -> bool:
    """Throttling, a 5xx answer, or no answer at all (connection errors, timeouts)."""
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

    if isinstance(exc, ConnectionError | HTTPClientError):
        return True
    if isinstance(exc, ClientError):
        status = (exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0
        return error_code(exc) in TRANSIENT_CODES or int(status) >= 500
    return False


def call(what: str, fn: Any, **kwargs: Any) -> Any:
    """``fn(**kwargs)``; a botocore error becomes a (transient) :class:`BackendError` naming ``what``."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return fn(**kwargs)
    except (ClientError, BotoCoreError) as exc:
        if is_transient(exc):
            raise TransientBackendError(f"{what}: {exc}") from exc
        raise BackendError(f"{what}: {exc}") from exc
