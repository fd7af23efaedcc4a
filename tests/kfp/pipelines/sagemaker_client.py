"""The client step of sagemaker.yaml: ``python3 sagemaker_client.py URL OUT``: POST two numbers to the endpoint's
``URL/invocations`` (the endpoint task's typed output ``url``) and write the URL and the answer into ``OUT``."""

import sys
import urllib.request
from pathlib import Path

url, out = sys.argv[1], Path(sys.argv[2])
request = urllib.request.Request(f"{url}/invocations", data=b'{"instances": [1, 2]}',
                                 headers={"Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=30) as answer:
    (out / "client-answer.json").write_bytes(answer.read())
(out / "client-url").write_text(url)
