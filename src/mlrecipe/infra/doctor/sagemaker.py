"""Checks for the SageMaker backend: boto3, credentials (STS GetCallerIdentity), the execution role (IAM GetRole,
trusted by SageMaker) and the bucket of ``s3_prefix`` (S3 HeadBucket). Local mode needs none of the AWS ones."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlparse

from mlrecipe.backends.sagemaker import INSTALL_HINT, SageMakerOptions, aws_client, error_code, require_boto3
from mlrecipe.errors import UserError
from mlrecipe.infra.doctor.base import Check, CheckResult

ClientFactory = Callable[[str], Any]


def checks(options: SageMakerOptions, client: ClientFactory | None = None) -> list[Check]:
    """The checks for ``options`` (``client(service)`` makes the AWS clients; tests pass ones that talk to moto)."""
    make = client or (lambda service: aws_client(service, options.region, _endpoint(options, service)))
    out = [Check("boto3", True, _boto3)]
    if options.mode == "local":
        return [*out, Check("aws", False, lambda: CheckResult.skip("mode local: no AWS account, role or bucket "
                                                                    "needed"))]
    return [*out, Check("credentials", True, lambda: _credentials(make)),
            Check("execution role", True, lambda: _role(make, options.role_arn)),
            Check("bucket", True, lambda: _bucket(make, options.s3_prefix))]


def _endpoint(options: SageMakerOptions, service: str) -> str | None:
    return options.endpoint_url if service in ("sagemaker", "s3") else None


def _boto3() -> CheckResult:
    try:
        require_boto3()
    except UserError:
        return CheckResult.failed("boto3 is not installed", INSTALL_HINT)
    return CheckResult.passed("boto3 is installed")


def _credentials(make: ClientFactory) -> CheckResult:
    try:
        who = make("sts").get_caller_identity()
    except Exception as exc:  # NoCredentialsError, ClientError, no network: all say the same to the user
        return CheckResult.failed(f"no working AWS credentials: {exc}",
                                  "configure credentials (aws configure, AWS_PROFILE, or an instance/IRSA role); "
                                  "without an AWS account, -B mode=local runs the same plan on this machine")
    return CheckResult.passed(f"account {who['Account']} as {who['Arn']}")


def _role(make: ClientFactory, role_arn: str | None) -> CheckResult:
    fix = "-B role_arn=arn:aws:iam::<account>:role/<name>, a role that trusts sagemaker.amazonaws.com"
    if not role_arn:
        return CheckResult.failed("sagemaker role_arn is not set", fix)
    name = role_arn.rsplit("/", 1)[-1]
    try:
        role = make("iam").get_role(RoleName=name)["Role"]
    except Exception as exc:
        if error_code(exc) in ("AccessDenied", "AccessDeniedException"):
            return CheckResult(True, f"{role_arn}: not readable with these credentials (iam:GetRole denied); not "
                               "checked")
        return CheckResult.failed(f"{role_arn}: {exc}", fix)
    policy = role.get("AssumeRolePolicyDocument") or {}
    text = unquote(policy) if isinstance(policy, str) else json.dumps(policy)
    if "sagemaker.amazonaws.com" not in text:
        return CheckResult.failed(f"{role_arn} does not trust sagemaker.amazonaws.com",
                                  "add sagemaker.amazonaws.com to the role's trust policy (sts:AssumeRole)")
    return CheckResult.passed(f"{role_arn} exists and trusts SageMaker")


def _bucket(make: ClientFactory, s3_prefix: str | None) -> CheckResult:
    fix = "-B s3_prefix=s3://<bucket>/<prefix>, a bucket in the region the execution role may read and write"
    if not s3_prefix:
        return CheckResult.failed("sagemaker s3_prefix is not set", fix)
    bucket = urlparse(s3_prefix).netloc
    try:
        make("s3").head_bucket(Bucket=bucket)
    except Exception as exc:
        return CheckResult.failed(f"bucket {bucket}: {exc}", fix)
    return CheckResult.passed(f"bucket {bucket} is reachable")
