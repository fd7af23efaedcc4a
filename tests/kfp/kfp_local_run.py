"""Run a compiled KFP pipeline file with kfp.local's SubprocessRunner: ``python kfp_local_run.py FILE ROOT [k=v ...]``.

The tests run it with the kfp environment's interpreter (kfp is not in .venv); each ``k=v`` is a pipeline
argument. Exit 0 when the run succeeds; a failed task raises (kfp.local's ``raise_on_error``), exit 1.
"""

from __future__ import annotations

import sys

from kfp import components, local


def main(argv: list[str]) -> None:
    path, root, *pairs = argv
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=root, raise_on_error=True)
    pipeline = components.load_component_from_file(path)
    pipeline(**dict(pair.split("=", 1) for pair in pairs))


if __name__ == "__main__":
    main(sys.argv[1:])
