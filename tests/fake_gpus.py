"""A fake ``nvidia-smi`` on ``PATH`` that reports N GPUs (H100s, or V100s without bf16), for plan-level tests."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

SCRIPT = """#!/bin/sh
# fake nvidia-smi for tests: {count} GPU(s)
case "$*" in
  *--query-gpu=*)
    i=0; while [ $i -lt {count} ]; do echo "$i, GPU-{tag}-$i, {name}, {cap}"; i=$((i+1)); done ;;
  *-L*)
    i=0; while [ $i -lt {count} ]; do echo "GPU $i: {name} (UUID: GPU-{tag}-$i)"; i=$((i+1)); done ;;
  *) echo "fake nvidia-smi: {count} GPU(s)" ;;
esac
"""


def install_fake_nvidia_smi(bin_dir: Path, count: int, name: str = "NVIDIA H100 80GB HBM3",
                            capability: str = "9.0") -> str:
    """Write ``bin_dir/nvidia-smi`` answering for ``count`` GPUs; returns the UUID tag (unique per call)."""
    tag = uuid.uuid4().hex[:8]
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "nvidia-smi"
    path.write_text(SCRIPT.format(count=count, tag=tag, name=name, cap=capability))
    path.chmod(0o755)
    return tag


def gpu_env(base: dict[str, str], bin_dir: Path) -> dict[str, str]:
    """``base`` with the fake first on PATH and no inherited ``CUDA_VISIBLE_DEVICES``."""
    env = dict(base)
    env["PATH"] = f"{bin_dir}:{env.get('PATH', os.environ.get('PATH', ''))}"
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env
