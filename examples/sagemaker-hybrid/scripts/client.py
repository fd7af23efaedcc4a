"""The client step: send held-out digits to the endpoint and check its answers.

The endpoint is the earlier step's (``--url``, default ``$ENDPOINT_URL``): SageMaker's hosting contract,
``POST <url>/invocations``. Exits 1 when fewer than ``--min-accuracy`` of the answers are right.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from pathlib import Path

import numpy as np


def invoke(url: str, images: np.ndarray) -> list[int]:
    body = json.dumps({"instances": images.tolist()}).encode()
    request = urllib.request.Request(f"{url.rstrip('/')}/invocations", data=body,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())["predictions"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default=os.environ.get("ENDPOINT_URL"))
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("DATA_DIR", "data")))
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--min-accuracy", type=float, default=0.9)
    args = parser.parse_args()
    if not args.url:
        parser.error("no endpoint URL: give --url or set ENDPOINT_URL")
    with np.load(args.data_dir / "test.npz") as data:
        images, labels = data["images"][: args.count], data["labels"][: args.count]
    predicted = [p for start in range(0, len(images), args.batch)
                 for p in invoke(args.url, images[start:start + args.batch])]
    right = int(sum(int(p) == int(y) for p, y in zip(predicted, labels, strict=True)))
    score = right / len(labels)
    print(f"endpoint accuracy {score:.2f} ({right}/{len(labels)} held-out digits)")
    return 0 if score >= args.min_accuracy else 1


if __name__ == "__main__":
    sys.exit(main())
