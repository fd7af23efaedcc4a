"""Small system probes shared by the backend checks (subprocess with a timeout, GPU listing)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class CommandResult:
    """Exit status and output of a probe command (``returncode`` 127: not found, 124: timed out)."""

    returncode: int
    stdout: str
    stderr: str


def run_command(argv: list[str], timeout: float = 15.0) -> CommandResult:
    """Run ``argv`` and capture its output; never raises for a missing binary or a timeout."""
    if shutil.which(argv[0]) is None:
        return CommandResult(127, "", f"{argv[0]}: command not found")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return CommandResult(124, "", f"{' '.join(argv)} timed out after {timeout:.0f}s")
    except OSError as exc:
        return CommandResult(126, "", str(exc))
    return CommandResult(proc.returncode, proc.stdout, proc.stderr)


def parse_nvidia_smi_list(text: str) -> list[str]:
    """GPU names from ``nvidia-smi -L`` ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)")."""
    return [m.group(1).strip() for m in re.finditer(r"^GPU \d+: (.+?)(?: \(UUID: [^)]*\))?$", text, re.M)]


def nvidia_gpus() -> tuple[list[str], str]:
    """(GPU names, problem). An empty list with a problem means nvidia-smi could not tell."""
    result = run_command(["nvidia-smi", "-L"])
    if result.returncode == 127:
        return [], "nvidia-smi not found (no NVIDIA driver)"
    if result.returncode != 0:
        return [], (result.stderr or result.stdout).strip().splitlines()[0] if (result.stderr or result.stdout) else (
            f"nvidia-smi exited {result.returncode}"
        )
    return parse_nvidia_smi_list(result.stdout), ""
