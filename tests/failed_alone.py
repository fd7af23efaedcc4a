"""Run the tests that failed in the last (xdist) run again, one at a time, as ``make test`` does after its workers.

A test that passes alone failed side by side (a flake; its failure stays in the log above). When the last run
failed without a failed test to name (xdist's workers collected different tests, a worker could not start: the
cache then holds ``gw0`` and the like, or nothing), there is nothing to run again: this exits 1 saying so, instead
of running the whole suite in one process.

    python tests/failed_alone.py [--cache-dir DIR] [PYTEST_ARGS...]

``--cache-dir`` reads the run that used ``-o cache_dir=DIR`` (the Slurm tests beside the workers keep their own).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DEFAULT_CACHE = Path(".pytest_cache")


def failed_tests(cache_dir: Path = DEFAULT_CACHE) -> list[str]:
    """The node ids of the last run's failed tests and modules; empty when it named none (or anything else)."""
    try:
        recorded = json.loads((cache_dir / "v" / "cache" / "lastfailed").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    ids = [str(k) for k in recorded]
    return ids if ids and all("/" in k or "::" in k for k in ids) else []


def main(argv: list[str]) -> int:
    cache_dir = DEFAULT_CACHE
    if argv[:1] == ["--cache-dir"] and len(argv) > 1:
        cache_dir, argv = Path(argv[1]), ["-o", f"cache_dir={argv[1]}", *argv[2:]]
    failed = failed_tests(cache_dir)
    if not failed:
        print("--- the workers failed, and no failed test is recorded to run again alone (a collection or internal "
              "error of xdist: see above) ---", flush=True)
        return 1
    print(f"--- the {len(failed)} failed test(s) again, alone: one that passes only alone failed side by side "
          "(see above) ---", flush=True)
    return subprocess.call([sys.executable, "-m", "pytest", "-q", "--last-failed", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
