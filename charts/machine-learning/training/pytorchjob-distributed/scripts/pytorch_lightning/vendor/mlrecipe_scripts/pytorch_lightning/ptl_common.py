"""Helpers shared by the ``framework: pytorch_lightning`` scripts (this folder is delivered on its own, flat).

Only the standard library is imported at module level, so that ``--help`` and argument errors are fast; torch,
transformers and Lightning are imported inside the functions that need them.

* from ``script_common`` (the part the nemo2 folder shares, by a link to that file): :class:`ScriptError` /
  :func:`run_main` (bad input ends a script with one ``error: ...`` line on stderr and exit status 1; argparse errors
  keep their status 2), logging, offline defaults, atomic writes, progress lines and the dataclass-driven CLI;
* the CLI families of the reference scripts: ``D1`` (``fine_tune.py``: dataclass fields with their real defaults,
  flip-the-default booleans, a comma list, a nested ``--hfdc_*`` config), ``C`` (converter) and ``T`` (evaluator);
* how the process was launched (torchrun, or ``python`` with Lightning starting the other local processes);
* device-dependent precision and attention, model / tokenizer loading that never downloads by default;
* the newest ``model-*.ckpt`` rule, atomic writes, ``$MLRECIPE_METRICS_FILE`` progress lines.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import time
from pathlib import Path
from typing import Any

from mlrecipe_scripts.lightning_core import script_common
from mlrecipe_scripts.lightning_core.script_common import *  # noqa: F403 - re-exported (script_common.__all__ is part of this module's interface)
from mlrecipe_scripts.lightning_core.script_common import ScriptError, local_only, log, model_id_parts, short_error

__all__ = [
    *script_common.__all__, "DEFAULT_LORA_TARGETS", "Device", "Launch", "comma_list", "detect_launch",
    "load_causal_lm", "load_tokenizer", "newest_checkpoint", "results_dir", "select_device", "sibling_path",
    "wait_for",
]

DEFAULT_LORA_TARGETS = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"


# --------------------------------------------------------------------------------------------------------------
# launch topology


@dataclasses.dataclass
class Launch:
    """How this process was started.

    ``torchrun``: every rank is a process of its own (``RANK``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``WORLD_SIZE``
    set by the launcher). Otherwise (``python fine_tune.py``, as the reference recipe runs it) Lightning starts the
    other local processes itself; they carry ``LOCAL_RANK``, and ``NODE_RANK`` names the node.
    """

    torchrun: bool
    node_rank: int
    local_rank: int
    rank: int | None  # known under torchrun; else computed once the processes per node are known

    def global_rank(self, devices: int) -> int:
        """The global rank, given the processes per node."""
        return self.rank if self.rank is not None else self.node_rank * devices + self.local_rank


def _int_env(name: str, default: int = 0) -> int:
    try:
        return int(os.environ.get(name, "") or default)
    except ValueError:
        return default


def detect_launch() -> Launch:
    """Read the launcher's environment (torchrun / Lightning's own process launcher)."""
    env = os.environ
    if all(k in env for k in ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE")):
        return Launch(True, _int_env("GROUP_RANK", _int_env("NODE_RANK")), _int_env("LOCAL_RANK"), _int_env("RANK"))
    return Launch(False, _int_env("NODE_RANK", _int_env("GROUP_RANK")), _int_env("LOCAL_RANK"), None)


def wait_for(path: Path, what: str, poll_seconds: float) -> None:
    """Poll until ``path`` exists; give up (ScriptError) if the process that started this one has gone."""
    parent = os.getppid()
    while not path.exists():
        if os.getppid() != parent:
            raise ScriptError(f"the launching process exited while this rank waited for {what} ({path})")
        time.sleep(poll_seconds)


# --------------------------------------------------------------------------------------------------------------
# offline behaviour, device, loading


@dataclasses.dataclass
class Device:
    """Where and how to train or run a model here."""

    kind: str  # "cuda" or "cpu"
    dtype: Any  # torch dtype of the weights
    attn_implementation: str
    bf16: bool

    def describe(self) -> str:
        return f"device {self.kind}, weights {str(self.dtype).replace('torch.', '')}, " \
               f"attention {self.attn_implementation}"


def select_device() -> Device:
    """CUDA with bf16: bf16 weights, flash_attention_2 when the flash-attn package is there, else sdpa.
    CUDA without bf16: fp32 weights (16-bit autocast), sdpa. CPU: fp32 weights and sdpa.

    ``MLRECIPE_FORCE_CPU=1`` picks the CPU even where CUDA is present; ``MLRECIPE_ATTN_IMPLEMENTATION`` (e.g.
    ``eager``) overrides the attention kernel.
    """
    import importlib.util

    import torch

    override = os.environ.get("MLRECIPE_ATTN_IMPLEMENTATION")
    if torch.cuda.is_available() and os.environ.get("MLRECIPE_FORCE_CPU", "") not in ("1", "true"):
        attn = override or ("flash_attention_2" if importlib.util.find_spec("flash_attn") else "sdpa")
        if torch.cuda.is_bf16_supported():
            return Device("cuda", torch.bfloat16, attn, bf16=True)
        return Device("cuda", torch.float32, override or "sdpa", bf16=False)
    return Device("cpu", torch.float32, override or "sdpa", bf16=False)


def load_tokenizer(path: str, flag: str) -> Any:
    """The tokenizer at ``path`` (never downloads by default); pad falls back to eos; right padding."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, use_fast=True, trust_remote_code=True,
                                                  local_files_only=local_only())
    except Exception as exc:
        raise ScriptError(f"{flag}={path}: cannot load a tokenizer ({short_error(exc)})") from exc
    tokenizer.padding_side = "right"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ScriptError(f"{flag}={path}: the tokenizer has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(path: str, flag: str, dtype: Any = "auto", attn_implementation: str = "sdpa",
                   device_map: Any = None, **kwargs: Any) -> Any:
    """``AutoModelForCausalLM.from_pretrained`` that never downloads by default; failures name ``flag``.

    An attention kernel the model (or this machine) lacks falls back to ``sdpa``, then ``eager``.
    """
    from transformers import AutoModelForCausalLM

    common: dict[str, Any] = dict(dtype=dtype, trust_remote_code=True, local_files_only=local_only(), **kwargs)
    if device_map is not None:
        common["device_map"] = device_map
    kernels = [attn_implementation] + [k for k in ("sdpa", "eager") if k != attn_implementation]
    try:
        for kernel, fallback in itertools.pairwise(kernels):
            try:
                return AutoModelForCausalLM.from_pretrained(path, attn_implementation=kernel, **common)
            except (ValueError, ImportError) as exc:
                if "attn" not in str(exc).lower() and "attention" not in str(exc).lower():
                    raise
                log(f"note: attention {kernel} is not available ({short_error(exc)}); trying {fallback}")
        return AutoModelForCausalLM.from_pretrained(path, attn_implementation=kernels[-1], **common)
    except Exception as exc:
        raise ScriptError(f"{flag}={path}: cannot load a causal LM from it ({short_error(exc)})") from exc


# --------------------------------------------------------------------------------------------------------------
# paths


def results_dir(model_id: str) -> Path:
    """``$HOME/results/<model id>`` with the slash kept (``results/Qwen/Qwen3-14B``)."""
    return Path.home() / "results" / Path(*model_id_parts(model_id))


def newest_checkpoint(checkpoints_dir: Path, flag: str = "--checkpoints_dir") -> Path:
    """The newest (by modification time; then by name) ``model-*.ckpt`` in ``checkpoints_dir``."""
    if not checkpoints_dir.is_dir():
        raise ScriptError(f"{flag}={checkpoints_dir}: no such directory (no training checkpoints; run fine_tune.py "
                          "first or pass --checkpoints_dir)")
    found = [p for p in checkpoints_dir.glob("model-*.ckpt") if p.is_file()]
    if not found:
        raise ScriptError(f"{flag}={checkpoints_dir}: no model-*.ckpt file in it")
    return max(found, key=lambda p: (p.stat().st_mtime, p.name))


def sibling_path(ckpt: Path, suffix: str) -> Path:
    """``model-...-step=S.ckpt`` -> ``model-...-step=S<suffix>`` (only the final ``.ckpt`` is replaced)."""
    return ckpt.with_name(ckpt.name.removesuffix(".ckpt") + suffix)


# --------------------------------------------------------------------------------------------------------------
# progress lines for mlrecipe


# --------------------------------------------------------------------------------------------------------------
# CLI families


def comma_list(value: str | list[str] | None) -> list[str]:
    """``"q_proj, k_proj"`` -> ``["q_proj", "k_proj"]`` (items stripped, empty items dropped)."""
    if value is None:
        return []
    items = value if isinstance(value, list) else str(value).split(",")
    return [str(item).strip() for item in items if str(item).strip()]


