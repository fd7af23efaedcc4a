"""How fast the commands people run in loops answer, against ``python -c pass`` measured in the same run.

Prints the median of ``--runs`` wall times (default 7, interleaved so that a drift of the machine's speed touches
every command alike), and of their CPU seconds (user + system: what a busy machine's waits for a core leave out),
of: ``python -c pass`` (the floor), the imports of Typer alone (the floor of what Typer still prints: the listing of
every verb, usage errors) and of pydantic and PyYAML (the floor ``validate``'s libraries set: its plain command line
runs without Typer, since 2026-11-29), ``mlrecipe --help``, ``mlrecipe status --help``,
``list`` and ``status`` with no release and with one, ``status RELEASE`` and ``logs RELEASE STEP`` of an ended
release, and ``validate`` of the quickstart; each with its difference to the floor, and the targets of issue 41
point 4: read-only commands within 0.08 s of the floor, ``validate`` within 0.15 s.

mlrecipe's modules are byte-compiled first, as an installed package is (otherwise a module edited since its last
import is compiled again by every run, under ``PYTHONDONTWRITEBYTECODE``). The ``mlrecipe`` that runs is the one
the environment imports; ``--against OTHER/src`` also times another tree (an older commit's, from ``git archive``),
interleaved with this one, for a before/after under the same load.

``--instructions`` adds, for each command, the user-space instructions it executes, counted once by valgrind's
callgrind (slow: about 5-20 s a command): unlike the times, the counts hardly move with the machine's load (another
agent's work on the same cores), so they show a change of a few milliseconds that the load hides.

Run: ``python benchmarks/bench_read_commands.py [--runs N] [--instructions]`` (with the environment of ``make venv``).
"""

from __future__ import annotations

import argparse
import os
import shutil
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
#: What ``validate`` imports of its libraries (the parts of pydantic a model with validators uses, PyYAML), and
#: nothing of mlrecipe: no ``validate`` built on them can take less.
VALIDATE_LIBRARIES = ("import pydantic, pydantic.fields, pydantic.functional_validators, "
                      "pydantic._internal._generate_schema, yaml")

#: ``mlrecipe`` for ``--against``: the console entry of whichever tree ``PYTHONPATH`` names (before 2026-11-29 it was
#: ``mlrecipe.cli.app:main``).
PROGRAM = """#!{python}
import sys
try:
    from mlrecipe.cli.entry import main
except ImportError:
    from mlrecipe.cli.app import main
sys.exit(main())
"""


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one run of ``argv``."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    assert os.waitstatus_to_exitcode(status) == 0, f"{argv} failed"
    return wall, usage.ru_utime + usage.ru_stime


def instructions(argv: list[str], env: dict[str, str]) -> int:
    """User-space instructions one run of ``argv`` executes, counted by callgrind (``I refs``)."""
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    return int(next(line for line in done.stderr.splitlines() if "I   refs:" in line).split()[-1].replace(",", ""))


def compile_package(src: str | None) -> None:
    """Byte-compile the mlrecipe that ``PYTHONPATH=src`` (None: this environment) imports."""
    code = "import compileall, mlrecipe, os; compileall.compile_dir(os.path.dirname(mlrecipe.__file__), quiet=1)"
    env = {**os.environ, **({"PYTHONPATH": src} if src else {})}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--against", metavar="SRC", help="also time the mlrecipe of this src directory (e.g. an "
                        "older commit's, from git archive), interleaved with this one's")
    parser.add_argument("--instructions", action="store_true", help="also count each command's instructions with "
                        "valgrind's callgrind (needs valgrind)")
    args = parser.parse_args()
    trees = {"this": None, **({"against": str(Path(args.against).resolve())} if args.against else {})}
    for src in trees.values():
        compile_package(src)
    home = Path(tempfile.mkdtemp(prefix="mlrecipe-bench-"))
    env = {**os.environ, "MLRECIPE_HOME": str(home / "home"), "PATH": f"{BIN}:{os.environ['PATH']}"}
    empty = {**env, "MLRECIPE_HOME": str(home / "empty")}
    recipe = home / "echo.yaml"
    recipe.write_text("image: python:3.11\nprocess:\n  command: [echo]\n  args: [hello]\n")
    cli = str(BIN / "mlrecipe")
    if args.against:  # a tree older than the console entry of mlrecipe.cli.entry: a program that runs either's
        cli = str(home / "mlrecipe")
        Path(cli).write_text(PROGRAM.format(python=sys.executable))
        Path(cli).chmod(0o755)
    subprocess.run([cli, "install", "bench", "data-prep/data-process", "-f", str(recipe)], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    commands = {
        "python -c pass": ([sys.executable, "-c", "pass"], env),
        "import typer (a floor)": ([sys.executable, "-c", "import typer"], env),
        "import pydantic, yaml (a floor)": ([sys.executable, "-c", VALIDATE_LIBRARIES], env),
        "mlrecipe --help": ([cli, "--help"], env),
        "mlrecipe status --help": ([cli, "status", "--help"], env),
        "mlrecipe list (no releases)": ([cli, "list"], empty),
        "mlrecipe status (no releases)": ([cli, "status"], empty),
        "mlrecipe list": ([cli, "list"], env),
        "mlrecipe status": ([cli, "status"], env),
        "mlrecipe status bench": ([cli, "status", "bench"], env),
        "mlrecipe logs bench data-process": ([cli, "logs", "bench", "data-process"], env),
        "mlrecipe validate quickstart": ([cli, "validate", str(REPO / "examples" / "quickstart" / "pipeline.yaml")],
                                         env),
    }
    times: dict[tuple[str, str], list[float]] = {(name, tree): [] for name in commands for tree in trees}
    cpu: dict[tuple[str, str], list[float]] = {(name, tree): [] for name in commands for tree in trees}
    for _ in range(args.runs):
        for name, (argv, base) in commands.items():
            for tree, src in trees.items():
                wall, used = timed(argv, {**base, **({"PYTHONPATH": src} if src else {})})
                times[name, tree].append(wall)
                cpu[name, tree].append(used)
    floors = {tree: statistics.median(times["python -c pass", tree]) for tree in trees}
    print(f"{'command':<40} " + " ".join(f"{tree + ' median':>14} {'- floor':>8} {'CPU':>6}" for tree in trees)
          + "  target")
    for name in commands:
        target = "" if name.startswith(("python", "import")) else (
            f"<= {VALIDATE_TARGET:.2f}" if "validate" in name else f"<= {READ_ONLY_TARGET:.2f}")
        cells = []
        for tree in trees:
            median = statistics.median(times[name, tree])
            cells.append(f"{median:14.3f} {median - floors[tree]:8.3f} {statistics.median(cpu[name, tree]):6.3f}")
        print(f"{name:<40} " + " ".join(cells) + f"  {target}")
    if args.instructions:
        counts = {(name, tree): instructions(argv, {**base, **({"PYTHONPATH": src} if src else {})})
                  for name, (argv, base) in commands.items() for tree, src in trees.items()}
        print(f"\n{'instructions (millions)':<40} " + " ".join(f"{tree:>14} {'- floor':>8}" for tree in trees))
        for name in commands:
            print(f"{name:<40} " + " ".join(f"{counts[name, tree] / 1e6:14.0f} "
                                           f"{(counts[name, tree] - counts['python -c pass', tree]) / 1e6:8.0f}"
                                           for tree in trees))
    subprocess.run([cli, "uninstall", "bench"], env=env, check=False, stdout=subprocess.DEVNULL)
    shutil.rmtree(home, ignore_errors=True)

if __name__ == "__main__":
    main()
