"""``last_error``: the log line ``status`` gives as the reason a server is unhealthy or gone."""

from __future__ import annotations

from pathlib import Path

from mlrecipe.logtail import last_error


def test_the_last_exception_line_without_colours(tmp_path: Path) -> None:
    log = tmp_path / "node-0.log"
    log.write_text("starting\n"
                   "RuntimeError: Unsupported CPU attention configuration: head_dim=16\n"
                   "\x1b[36m(ServeReplica:tiny pid=7)\x1b[0m vllm.v1.engine.exceptions.EngineDeadError: EngineCore "
                   "encountered an issue.\n"
                   "Traceback (most recent call last):\n"
                   "ERROR 10:31:15 controller -- The deployments are UNHEALTHY.\n"
                   "INFO shutting down\n")
    assert last_error(log) == ("(ServeReplica:tiny pid=7) vllm.v1.engine.exceptions.EngineDeadError: EngineCore "
                               "encountered an issue.")


def test_else_the_last_error_line(tmp_path: Path) -> None:
    (tmp_path / "plain.log").write_text("ERROR first\nTraceback (most recent call last):\nthe server error: gone\nok\n")
    assert last_error(tmp_path / "plain.log") == "the server error: gone"


def test_none_without_an_error_line_or_a_log(tmp_path: Path) -> None:
    (tmp_path / "quiet.log").write_text("INFO all well\nWARNING almost\n")
    assert last_error(tmp_path / "quiet.log") is None
    assert last_error(tmp_path / "missing.log") is None


def test_a_long_line_is_cut(tmp_path: Path) -> None:
    (tmp_path / "long.log").write_text("ValueError: " + "x" * 1000 + "\n")
    found = last_error(tmp_path / "long.log", limit=50)
    assert found is not None and len(found) == 50 and found.endswith("...")
