"""A step that requested EFA and whose rank-0 log shows NCCL on sockets ends with the EFA warning (and its fix), and
``mlrecipe status`` shows it from the record; a step without EFA, or with EFA selected, gets none. Driven through
the backend contract with the fake backend (tests/unit/fake_backend.py); the log lines are NCCL's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlrecipe.cli.execute import run_inputs
from mlrecipe.cli.inspect_cmd import status
from mlrecipe.config import release_dir
from mlrecipe.errors import ExitCode
from mlrecipe.runner.state import load_record

pytestmark = pytest.mark.usefixtures("fake_backend")

SOCKETS = ("worker-0:120:120 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so.\n"
           "worker-0:120:120 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.2.3<0>\n"
           "worker-0:120:120 [0] NCCL INFO Using network Socket\n")
EFA = "worker-0:120:120 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)\n"


def _pipeline(tmp_path: Path, efa: bool) -> dict:
    resources = '      resources: {requests: {"vpc.amazonaws.com/efa": 4}}\n' if efa else ""
    path = tmp_path / "pipeline.yaml"
    path.write_text("release: rel\nsteps:\n  - name: train\n    chart: data-prep/data-process\n    values:\n"
                    f"      pvc: []\n{resources}      process: {{command: [ok]}}\n")
    return {"kind": "pipeline", "path": str(path), "sets": []}


def _log(text: str) -> None:
    log = release_dir("fake", "default", "rel") / "steps" / "train" / "node-0.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(text)


@pytest.mark.parametrize(("efa", "log", "warned"), [(True, SOCKETS, True), (True, EFA + SOCKETS, False),
                                                    (False, SOCKETS, False)])
def test_step_end_and_status_warn_when_efa_was_requested_but_nccl_used_sockets(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], efa: bool, log: str, warned: bool) -> None:
    _log(log)
    assert run_inputs(_pipeline(tmp_path, efa), "fake", [], False, False, "text") == ExitCode.OK
    ended = capsys.readouterr().out
    record = load_record("fake", "default", "rel")
    assert record is not None
    message = record.steps["train"].message
    assert status("rel", None, "fake", "text", []) == ExitCode.OK
    shown = capsys.readouterr().out
    if warned:
        for text in (ended, message, shown):
            assert "NCCL fell back to TCP sockets although the step requested EFA" in text, text
            assert "aws-ofi-nccl" in text and "FI_PROVIDER=efa" in text
    else:
        assert "fell back to TCP sockets" not in ended + message + shown
