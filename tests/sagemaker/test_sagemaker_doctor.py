"""``mlrecipe doctor --backend sagemaker`` against a real moto server: credentials, the role and its trust, the
bucket; and what it says when each is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mlrecipe.backends.sagemaker import SageMakerOptions
from mlrecipe.infra.doctor import run_checks
from mlrecipe.infra.doctor.sagemaker import checks
from tests.repo import cli_env
from tests.sagemaker.moto_server import BUCKET, Moto, moto_server  # noqa: F401

pytestmark = pytest.mark.integration
TRUST = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                 "Principal": {"Service": "sagemaker.amazonaws.com"}}]}


def _role(moto: Moto, name: str, service: str = "sagemaker.amazonaws.com") -> str:
    trust = json.loads(json.dumps(TRUST).replace("sagemaker.amazonaws.com", service))
    return moto.client("iam").create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]


def _statuses(options: SageMakerOptions, moto: Moto) -> dict[str, tuple[str, str]]:
    return {o.check.name: (o.status, o.result.detail) for o in run_checks(checks(options, moto.client))}


def test_everything_in_place(moto_server: Moto) -> None:  # noqa: F811
    role = _role(moto_server, "SageMakerExec")
    found = _statuses(SageMakerOptions(role_arn=role, s3_prefix=f"s3://{BUCKET}/runs"), moto_server)
    assert {name: status for name, (status, _) in found.items()} == {
        "boto3": "ok", "credentials": "ok", "execution role": "ok", "bucket": "ok"}
    assert "account 123456789012" in found["credentials"][1]


def test_missing_role_untrusted_role_and_missing_bucket(moto_server: Moto) -> None:  # noqa: F811
    ec2_role = _role(moto_server, "Ec2Only", "ec2.amazonaws.com")
    found = _statuses(SageMakerOptions(role_arn=ec2_role, s3_prefix="s3://no-such-bucket/x"), moto_server)
    status, detail = found["execution role"]
    assert status == "FAIL" and "does not trust sagemaker.amazonaws.com" in detail
    assert found["bucket"][0] == "FAIL" and "no-such-bucket" in found["bucket"][1]
    gone = _statuses(SageMakerOptions(role_arn="arn:aws:iam::123456789012:role/Nope", s3_prefix=None), moto_server)
    assert gone["execution role"][0] == "FAIL" and gone["bucket"] == ("FAIL", "sagemaker s3_prefix is not set")


def test_local_mode_needs_no_aws() -> None:
    names = {o.check.name: o.status for o in run_checks(checks(SageMakerOptions(mode="local")))}
    assert names == {"boto3": "ok", "aws": "skip"}


def test_doctor_cli_reads_the_config_file(moto_server: Moto, mlhome: Path) -> None:  # noqa: F811
    role = _role(moto_server, "SageMakerExec")
    mlhome.mkdir(parents=True)
    (mlhome / "config.yaml").write_text(textwrap.dedent(f"""
        sagemaker: {{region: us-east-1, role_arn: "{role}", s3_prefix: "s3://{BUCKET}/runs"}}
        """))
    env = {**cli_env(mlhome), "AWS_ENDPOINT_URL": moto_server.url}
    proc = subprocess.run([sys.executable, "-m", "mlrecipe", "doctor", "--backend", "sagemaker", "-o", "json"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert all(c["status"] == "ok" for c in report["checks"]), report
    env.pop("AWS_ACCESS_KEY_ID"), env.pop("AWS_SECRET_ACCESS_KEY")
    env.update(AWS_SHARED_CREDENTIALS_FILE=os.devnull, AWS_CONFIG_FILE=os.devnull, AWS_EC2_METADATA_DISABLED="true")
    proc = subprocess.run([sys.executable, "-m", "mlrecipe", "doctor", "--backend", "sagemaker", "-o", "json"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1
    failed = {c["name"]: c for c in json.loads(proc.stdout)["checks"] if c["status"] == "FAIL"}
    assert "credentials" in failed and "aws configure" in failed["credentials"]["fix_hint"]


def test_doctor_cli_takes_options_over_the_config_file(moto_server: Moto, mlhome: Path) -> None:  # noqa: F811
    """``-B`` wins over the config file, as the fix hints say (``-B role_arn=...``); options the checks would not
    read are exit 2 naming them."""
    role = _role(moto_server, "SageMakerExec")
    mlhome.mkdir(parents=True)
    (mlhome / "config.yaml").write_text('sagemaker: {region: us-east-1, role_arn: "arn:aws:iam::123456789012:role/'
                                        'Nope", s3_prefix: "s3://no-such-bucket/x"}\n')
    env = {**cli_env(mlhome), "AWS_ENDPOINT_URL": moto_server.url}

    def doctor(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mlrecipe", "doctor", "--backend", "sagemaker", "-o", "json",
                               *args], capture_output=True, text=True, env=env, timeout=120)

    assert doctor().returncode == 1
    proc = doctor("-B", f"role_arn={role}", "-B", f"sagemaker.s3_prefix=s3://{BUCKET}/runs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(c["status"] == "ok" for c in json.loads(proc.stdout)["checks"])
    local = doctor("-B", "mode=local")
    assert local.returncode == 0 and {c["name"] for c in json.loads(local.stdout)["checks"]} == {"boto3", "aws"}
    for bad, words in ((["-B", "rolearn=x"], "unknown option 'rolearn'"), (["-B", "mode=cloud"], "mode"),
                       (["-B", "kubernetes.context=a"], "doctor checks one backend, sagemaker")):
        proc = doctor(*bad)
        assert proc.returncode == 2 and proc.stdout == "" and words in proc.stderr, proc.stderr
