"""How fast the commands people run in loops answer, against ``python -c pass`` measured in the same run.

Prints the median of ``--runs`` wall times (default 7, interleaved so that a drift of the machine's speed touches
every command alike) of: ``python -c pass`` (the floor), ``mlrecipe --help``, ``mlrecipe status --help``,
``list``, ``status`` and ``status RELEASE`` of an ended release, ``logs RELEASE STEP`` of its ended step, and
``validate`` of the quickstart; each with its difference to the floor, and the targets of issue 41 point 4:
read-only commands within 0.08 s of the floor, ``validate`` within 0.15 s.

Run: ``python benchmarks/bench_read_commands.py [--runs N]`` (with the environment of ``make venv``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
READ_ONLY_TARGET = 0.08
VALIDATE_TARGET = 0.15


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    home = Path(tempfile.mkdtemp(prefix="mlrecipe-bench-"))
    env = {**os.environ, "MLRECIPE_HOME": str(home), "PATH": f"{BIN}:{os.environ['PATH']}"}
    recipe = home / "echo.yaml"
    recipe.write_text("image: python:3.11\nprocess:\n  command: [echo]\n  args: [hello]\n")
    cli = str(BIN / "mlrecipe")
    subprocess.run([cli, "install", "bench", "data-prep/data-process", "-f", str(recipe)], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "mlrecipe --help": [cli, "--help"],
        "mlrecipe status --help": [cli, "status", "--help"],
        "mlrecipe list": [cli, "list"],
        "mlrecipe status": [cli, "status"],
        "mlrecipe status bench": [cli, "status", "bench"],
        "mlrecipe logs bench data-process": [cli, "logs", "bench", "data-process"],
        "mlrecipe validate quickstart": [cli, "validate", str(REPO / "examples" / "quickstart" / "pipeline.yaml")],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            times[name].append(timed(argv, env))
    floor = statistics.median(times["python -c pass"])
    print(f"{'command':<36} {'median':>8} {'- floor':>8}  target")
    for name, values in times.items():
        median = statistics.median(values)
        target = "" if name.startswith("python") else (
            f"<= {VALIDATE_TARGET:.2f}" if "validate" in name else f"<= {READ_ONLY_TARGET:.2f}")
        print(f"{name:<36} {median:8.3f} {median - floor:8.3f}  {target}")
    subprocess.run([cli, "uninstall", "bench"], env=env, check=False, stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
