"""The client step: send held-out digits to the endpoint and check its answers.

The endpoint step hands over its URL (``--url``, default ``$ENDPOINT_URL``) and its name (``--endpoint-name``,
default ``$ENDPOINT_NAME``). How the endpoint is called follows from the URL:

- mode local: the URL is the local endpoint server's; plain HTTP ``POST <url>/invocations`` (SageMaker's hosting
  contract);
- mode aws: the URL is the SageMaker runtime's (``https://runtime.sagemaker.<region>.amazonaws.com/...``), or no URL
  is given: the sagemaker-runtime API ``InvokeEndpoint`` with the endpoint's name, through boto3, which signs the
  request (SigV4) with the step's AWS credentials. The region is ``--region``, else the runtime URL's, else
  ``$AWS_REGION`` / ``$AWS_DEFAULT_REGION``; ``--runtime-endpoint-url`` (or botocore's
  ``$AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME``) points the API at a VPC endpoint or an emulator.

Both ways send the same body (raw digits as JSON ``{"instances": [...]}``; the endpoint's handler preprocesses them
with the function training used) and read the same answer (``{"predictions": [...]}``). Exits 1 when fewer than
``--min-accuracy`` of the answers are right or the endpoint cannot be called, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

JSON = "application/json"
#: The SageMaker runtime's host (the URL an endpoint step reports in mode aws); group 1 is the region.
RUNTIME_HOST = re.compile(r"^https://runtime(?:-fips)?\.sagemaker\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?(?:/|$)")

#: Sends one request body to the endpoint and returns the answer's body.
Invoke = Callable[[bytes], bytes]


class InvokeError(Exception):
    """The endpoint could not be called, or its answer could not be read."""


def request_body(images: np.ndarray) -> bytes:
    """The body of one request: raw digits (the endpoint's handler preprocesses them as training did)."""
    return json.dumps({"instances": images.tolist()}).encode()


def read_predictions(answer: bytes) -> list[int]:
    """The labels in one answer's body."""
    try:
        return [int(p) for p in json.loads(answer)["predictions"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise InvokeError(f'the answer is not {{"predictions": [...]}}: {answer[:200]!r}') from exc


def http_invoke(url: str) -> Invoke:
    """Plain HTTP to ``<url>/invocations``: a mode local endpoint (SageMaker's hosting contract)."""
    target = f"{url.rstrip('/')}/invocations"

    def send(body: bytes) -> bytes:
        request = urllib.request.Request(target, data=body, headers={"Content-Type": JSON, "Accept": JSON})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return bytes(answer.read())
        except (urllib.error.URLError, OSError) as exc:
            raise InvokeError(f"POST {target}: {exc}") from exc

    return send


def runtime_invoke(endpoint_name: str, region: str | None, endpoint_url: str | None) -> Invoke:
    """The sagemaker-runtime API's ``InvokeEndpoint`` (boto3; botocore signs the request): a mode aws endpoint."""
    import boto3
    import botocore.exceptions

    client: Any = boto3.client("sagemaker-runtime", region_name=region, endpoint_url=endpoint_url)

    def send(body: bytes) -> bytes:
        try:
            answer = client.invoke_endpoint(EndpointName=endpoint_name, ContentType=JSON, Accept=JSON, Body=body)
            return bytes(answer["Body"].read())
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            raise InvokeError(f"InvokeEndpoint {endpoint_name}: {exc}") from exc

    return send


def predict(invoke: Invoke, images: np.ndarray, batch: int) -> list[int]:
    """The endpoint's labels for ``images``, ``batch`` images per request."""
    return [label for start in range(0, len(images), batch)
            for label in read_predictions(invoke(request_body(images[start:start + batch])))]


def choose_invoke(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[Invoke, str]:
    """How to call the endpoint the arguments name (see the module's doc), and a line saying so."""
    runtime = RUNTIME_HOST.match(args.url or "")
    if args.url and not runtime:
        return http_invoke(args.url), f"POST {args.url.rstrip('/')}/invocations"
    if not args.endpoint_name:
        if runtime:
            parser.error(f"--url {args.url} is the SageMaker runtime's: InvokeEndpoint needs the endpoint's name "
                         "(--endpoint-name or ENDPOINT_NAME; the endpoint step's endpoint_name)")
        parser.error("no endpoint: give --url (or ENDPOINT_URL; a mode local endpoint's address, called by HTTP) or "
                     "--endpoint-name (or ENDPOINT_NAME; a SageMaker endpoint, called through InvokeEndpoint)")
    region = (args.region or (runtime.group(1) if runtime else None) or os.environ.get("AWS_REGION")
              or os.environ.get("AWS_DEFAULT_REGION"))
    if not region:
        parser.error("InvokeEndpoint needs a region: give --region or set AWS_REGION")
    return (runtime_invoke(args.endpoint_name, region, args.runtime_endpoint_url),
            f"InvokeEndpoint {args.endpoint_name} ({region})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("ENDPOINT_URL") or None,
                        help="the endpoint step's URL (default: $ENDPOINT_URL)")
    parser.add_argument("--endpoint-name", default=os.environ.get("ENDPOINT_NAME") or None,
                        help="the endpoint step's endpoint name (default: $ENDPOINT_NAME)")
    parser.add_argument("--region", help="the endpoint's AWS region (mode aws)")
    parser.add_argument("--runtime-endpoint-url",
                        help="the sagemaker-runtime API's URL: a VPC endpoint or an emulator (mode aws)")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("DATA_DIR", "data")))
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--min-accuracy", type=float, default=0.9)
    args = parser.parse_args()
    if args.count < 1 or args.batch < 1:
        parser.error("--count and --batch must be >= 1")
    invoke, how = choose_invoke(parser, args)
    with np.load(args.data_dir / "test.npz") as data:
        images, labels = data["images"][: args.count], data["labels"][: args.count]
    try:
        predicted = predict(invoke, images, args.batch)
    except InvokeError as exc:
        print(f"client: error: {exc}", file=sys.stderr)
        return 1
    if len(predicted) != len(labels):
        print(f"client: error: {len(predicted)} predictions for {len(labels)} images ({how})", file=sys.stderr)
        return 1
    right = sum(p == int(y) for p, y in zip(predicted, labels, strict=True))
    score = right / len(labels)
    print(f"endpoint accuracy {score:.2f} ({right}/{len(labels)} held-out digits; {how})")
    return 0 if score >= args.min_accuracy else 1


if __name__ == "__main__":
    sys.exit(main())
