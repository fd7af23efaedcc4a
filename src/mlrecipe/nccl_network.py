"""Is the fast network used? A step that asked for EFA (``vpc.amazonaws.com/efa``) whose rank-0 log shows NCCL on
TCP sockets trains at a fraction of the speed it paid for, and nothing fails. This module reads NCCL's own lines
(printed with ``NCCL_DEBUG=INFO``) and says so, with the fix. Pure functions plus one bounded file read.

What counts: NCCL names its network once per process: ``NET/OFI Selected Provider is efa`` (the aws-ofi-nccl plugin
on EFA, also written ``Selected provider is efa``) or ``NET/Socket : Using ...`` / ``Using network Socket`` (the
built-in TCP transport). Sockets without an EFA selection is a fallback; so is a log where NCCL initialized
(``NCCL INFO``) but never selected EFA. A log without NCCL's INFO lines proves nothing and gives no warning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlrecipe.runtime.step_runtime import NCCL_SOCKETS

EFA_RESOURCE = "vpc.amazonaws.com/efa"
EFA_SELECTED = re.compile(r"selected provider is efa", re.IGNORECASE)
SOCKETS = NCCL_SOCKETS  # one pattern for the check after the run and the runtime's fabric check
NCCL_INFO = re.compile(r"NCCL INFO")
TAIL_BYTES = 4 << 20
FIX = ("NCCL fell back to TCP sockets although the step requested EFA (vpc.amazonaws.com/efa); fix: run an image "
       "with libfabric and the aws-ofi-nccl plugin (the EFA installer), set FI_PROVIDER=efa, FI_EFA_USE_DEVICE_RDMA=1 "
       "and NCCL_SOCKET_IFNAME=^lo,docker, check that the pod got its EFA devices (fi_info -p efa) and look for "
       "'NET/OFI Selected Provider is efa' with NCCL_DEBUG=INFO")


def requests_efa(values: Mapping[str, Any]) -> bool:
    """Whether a step's chart values ask for at least one EFA interface (resources.requests or limits)."""
    resources = values.get("resources")
    if not isinstance(resources, Mapping):
        return False
    for block in ("requests", "limits"):
        amounts = resources.get(block)
        if isinstance(amounts, Mapping) and str(amounts.get(EFA_RESOURCE, "0")).strip() not in ("", "0", "None"):
            return True
    return False


def socket_fallback(log_text: str) -> bool:
    """Whether NCCL's lines in ``log_text`` show it on sockets rather than EFA."""
    if EFA_SELECTED.search(log_text):
        return False
    return bool(SOCKETS.search(log_text) or NCCL_INFO.search(log_text))


def efa_warning(values: Mapping[str, Any], log: Path | None) -> str | None:
    """The warning (with the fix) for a step that requested EFA and whose rank-0 log shows sockets, else None."""
    if log is None or not requests_efa(values):
        return None
    try:
        with log.open("rb") as stream:
            size = stream.seek(0, 2)
            stream.seek(max(size - TAIL_BYTES, 0))
            text = stream.read().decode("utf-8", "replace")
    except OSError:
        return None
    return FIX if socket_fallback(text) else None
