"""The EFA check (mlrecipe.nccl_network) on recorded NCCL log lines: EFA selected, sockets, silent logs."""

from __future__ import annotations

from pathlib import Path

from mlrecipe.nccl_network import efa_warning, requests_efa, socket_fallback

# Lines as NCCL 2.2x prints them with NCCL_DEBUG=INFO (hosts and addresses changed).
EFA_LOG = """\
pytorchjob-megatron-worker-0:120:120 [0] NCCL INFO Bootstrap : Using eth0:10.1.2.3<0>
pytorchjob-megatron-worker-0:120:120 [0] NCCL INFO NET/Plugin: Loaded net plugin Libfabric (v8)
pytorchjob-megatron-worker-0:120:120 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.13.2-aws
pytorchjob-megatron-worker-0:120:120 [0] NCCL INFO NET/OFI Using Libfabric version 1.22
pytorchjob-megatron-worker-0:120:120 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)
pytorchjob-megatron-worker-0:120:120 [0] NCCL INFO Using network Libfabric
"""
SOCKET_LOG = """\
pytorchjob-megatron-worker-0:120:120 [0] NCCL INFO Bootstrap : Using eth0:10.1.2.3<0>
worker-0:120:120 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.
pytorchjob-megatron-worker-0:120:120 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.2.3<0>
pytorchjob-megatron-worker-0:120:120 [0] NCCL INFO Using network Socket
"""
OFI_WITHOUT_EFA = """\
worker-0:88:88 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.13.2-aws
worker-0:88:88 [0] NCCL INFO NET/OFI No eligible providers were found
worker-0:88:88 [0] NCCL INFO Using network IB
"""
EFA_VALUES = {"resources": {"requests": {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 4}}}


def test_efa_selected_is_no_fallback() -> None:
    assert not socket_fallback(EFA_LOG)
    assert not socket_fallback("worker-0:1:1 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct\n")


def test_sockets_or_no_efa_selection_is_a_fallback() -> None:
    assert socket_fallback(SOCKET_LOG)
    assert socket_fallback(OFI_WITHOUT_EFA), "NCCL initialized, EFA never selected"
    assert not socket_fallback("step 10/100 loss 4.2\n"), "no NCCL INFO lines: nothing to tell"


def test_requested_efa_reads_requests_and_limits() -> None:
    assert requests_efa(EFA_VALUES)
    assert requests_efa({"resources": {"limits": {"vpc.amazonaws.com/efa": "1"}}})
    assert not requests_efa({"resources": {"requests": {"vpc.amazonaws.com/efa": 0}}})
    assert not requests_efa({"resources": {"requests": {"nvidia.com/gpu": 8}}})
    assert not requests_efa({})


def test_warning_names_the_fix_only_for_an_efa_step_on_sockets(tmp_path: Path) -> None:
    log = tmp_path / "node-0.log"
    log.write_text("x" * 100 + "\n" + SOCKET_LOG)
    warning = efa_warning(EFA_VALUES, log)
    assert warning is not None and "fell back to TCP sockets" in warning
    assert "aws-ofi-nccl" in warning and "FI_PROVIDER=efa" in warning
    assert efa_warning({"resources": {"requests": {"cpu": 2}}}, log) is None, "no EFA requested: no warning"
    log.write_text(EFA_LOG)
    assert efa_warning(EFA_VALUES, log) is None
    assert efa_warning(EFA_VALUES, tmp_path / "missing.log") is None
