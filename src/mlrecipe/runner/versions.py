"""The versions a debug bundle records, read cheaply: installed packages' metadata (torch is never imported),
``nvidia-smi`` or ``/proc/driver/nvidia/version`` for the driver, and the NCCL versions the collected logs name."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

#: Distributions whose versions matter when a distributed job goes wrong (those installed are listed).
PACKAGES = ("mlrecipe", "torch", "nvidia-nccl-cu12", "nvidia-nccl-cu11", "nvidia-nccl-cu13", "accelerate",
            "transformers", "deepspeed", "ray", "vllm", "mpi4py", "horovod", "boto3", "kubernetes")
#: NCCL's own line at start-up with NCCL_DEBUG=INFO: ``NCCL version 2.21.5+cuda12.4``.
NCCL_LINE = re.compile(rb"NCCL version (\d+\.\d+\.\d+[^\s]*)")
DRIVER_FILE = Path("/proc/driver/nvidia/version")


def _platform() -> str:
    """The kernel and machine (from ``os.uname``: ``platform.platform()`` may start ``uname -p``)."""
    u = os.uname()
    return f"{u.sysname} {u.release} {u.machine}, {' '.join(platform.libc_ver())}"


def package_versions() -> list[tuple[str, str]]:
    """(distribution, version) of each of :data:`PACKAGES`, "not installed" where it is not."""
    out = []
    for name in PACKAGES:
        try:
            out.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            out.append((name, "not installed"))
    return out


def _proc_driver() -> str:
    """The kernel module's version line and each GPU's model, read from ``/proc/driver/nvidia`` (no process)."""
    lines = [DRIVER_FILE.read_text(encoding="utf-8", errors="replace").strip().splitlines()[0]]
    for info in sorted((DRIVER_FILE.parent / "gpus").glob("*/information")):
        model = next((line.split(":", 1)[1].strip() for line in info.read_text(errors="replace").splitlines()
                      if line.startswith("Model:")), "?")
        lines.append(f"gpu {info.parent.name}: {model}")
    return "\n".join(lines)


def driver_version() -> tuple[str, str]:
    """The NVIDIA driver and GPUs of this machine (``/proc/driver/nvidia``, else ``nvidia-smi``'s query), and where
    that came from; ("", why) when there is none."""
    try:
        return _proc_driver(), str(DRIVER_FILE.parent)
    except (OSError, IndexError):
        pass
    if shutil.which("nvidia-smi") is None:
        return "", "no NVIDIA driver on this machine (no /proc/driver/nvidia/version, no nvidia-smi)"
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=20, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "", f"nvidia-smi did not answer: {exc}"
    if done.returncode == 0 and done.stdout.strip():
        return done.stdout.strip(), "nvidia-smi"
    return "", f"nvidia-smi failed: {(done.stderr or done.stdout).strip()}"


def nccl_in_logs(logs: Iterable[tuple[str, bytes]]) -> list[tuple[str, str]]:
    """(version, log) of each NCCL start-up line in ``logs`` ((name, content) pairs), once per log and version."""
    found = []
    for name, data in logs:
        for version in dict.fromkeys(m.group(1).decode(errors="replace") for m in NCCL_LINE.finditer(data)):
            found.append((version, name))
    return found


def versions_text(nccl: list[tuple[str, str]]) -> tuple[str, str]:
    """The bundle's ``versions.txt`` (``nccl``: the (version, log) pairs :func:`nccl_in_logs` found), and why the
    driver's version is unknown ("" when known)."""
    lines = ["# versions on the machine that made this bundle (nodes elsewhere may differ: see their logs)",
             f"python\t{sys.version.split()[0]} ({sys.executable})", f"platform\t{_platform()}"]
    lines += [f"{name}\t{version}" for name, version in package_versions()]
    driver, source = driver_version()
    why = "" if driver else source
    if driver:
        lines += [f"# NVIDIA driver and GPUs ({source}):", *driver.splitlines()]
    else:
        lines.append(f"nvidia-driver\tunknown: {source}")
    lines += [f"nccl\t{version} (reported in {name})" for version, name in nccl] or [
        "nccl\tnot reported by any collected log (NCCL prints its version with NCCL_DEBUG=INFO)"]
    return "\n".join(lines) + "\n", why
