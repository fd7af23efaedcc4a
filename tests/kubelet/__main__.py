"""``python -m tests.kubelet RENDERED.yaml|- [--logs DIR] [--timeout S] [--namespace NS] [--pvc CLAIM=DIR]
[--max-restarts N]``: run a rendered manifest stream on this machine as the kubelet and the operators would.
Exit 0 when every workload succeeded (servers: became ready), 1 when one did not, 2 for a stream it cannot read."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tests.kubelet import harness
from tests.kubelet.manifests import BadManifest, load_stream
from tests.kubelet.report import print_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kubelet", description=__doc__)
    parser.add_argument("stream", help="the manifests, as 'mlrecipe template' prints them ('-': stdin)")
    parser.add_argument("--logs", type=Path, help="keep every container's log as DIR/<pod>/<container>.log")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the whole run (default 600)")
    parser.add_argument("--namespace", "-n", default="default", help="namespace of objects that name none")
    parser.add_argument("--pvc", action="append", default=[], metavar="CLAIM=DIR",
                        help="an existing directory as a claim's volume (default: an empty one per claim)")
    parser.add_argument("--max-restarts", type=int, default=0,
                        help="restart failed pods at most N times, under the workload's backoffLimit (default 0)")
    opts = parser.parse_args(argv)
    if os.geteuid() != 0:
        sys.stderr.write("error: the harness needs root (mount and UTS namespaces, bind mounts)\n")
        return 2
    claims: dict[str, Path] = {}
    for item in opts.pvc:
        claim, sep, path = item.partition("=")
        if not sep or not claim or not Path(path).is_dir():
            sys.stderr.write(f"error: --pvc {item}: expected CLAIM=DIR with an existing directory\n")
            return 2
        claims[claim] = Path(path).resolve()
    source = "<stdin>" if opts.stream == "-" else opts.stream
    try:
        text = sys.stdin.read() if opts.stream == "-" else Path(opts.stream).read_text(encoding="utf-8")
        objects = load_stream(text, source)
    except (OSError, BadManifest) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    status, notes, outcomes = harness.run(objects, namespace=opts.namespace, timeout=opts.timeout,
                                          logs_dir=opts.logs.resolve() if opts.logs else None, claims=claims,
                                          max_restarts=opts.max_restarts)
    print_report(notes, outcomes)
    return status


if __name__ == "__main__":
    sys.exit(main())
