"""Slurm from a laptop over SSH: a real OpenSSH sshd on 127.0.0.1 in front of the real test Slurm cluster.

The "login node" is this machine, reached through sshd (which gives its sessions a clean environment:
the cluster's slurm.conf reaches them only through the ``slurm_conf`` option), and ``remote_root`` is a
directory of the test's own, so every file the job reads had to be staged there.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import MLRECIPE, cli, finish, start_cli, wait_for
from tests.repo import cli_env
from tests.serve.serving import write
from tests.slurm.cluster import Cluster
from tests.slurm.sshd import RefusingPort, Sshd, free_port, has_sshd, keygen, start_sshd

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not has_sshd(), reason="OpenSSH server not installed (make system-deps)")]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    server = start_sshd(tmp_path_factory.mktemp("sshd") / "keys")
    try:
        yield server
    finally:
        server.stop()


def configure(mlhome: Path, sshd: Sshd, remote: Path, cluster: Cluster | None = None, **extra: str) -> None:
    mlhome.mkdir(parents=True, exist_ok=True)
    opts = {"remote_root": str(remote), "poll_seconds": "0.2", **extra}
    if cluster is not None:
        opts["slurm_conf"] = str(cluster.conf)
    (mlhome / "config.yaml").write_text(sshd.config(**opts))


def handle(mlhome: Path, release: str, step: str) -> dict:
    path = mlhome / "releases" / "slurm" / "default" / release / "state.json"
    return json.loads(path.read_text())["steps"][step]["handle"]


def job_state(cluster: Cluster, job_id: str) -> str:
    out = cluster.run("scontrol", "show", "job", "-o", job_id).stdout
    return next((p.split("=", 1)[1] for p in out.split() if p.startswith("JobState=")), "")


def pipeline(directory: Path, command: str, nnodes: int = 2) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "message.txt").write_text("staged-message-42\n")
    write(directory / "work.yaml", f"resources: {{nnodes: {nnodes}}}\nprocess: {{command: [{json.dumps(command)}]}}\n")
    return write(directory / "pipeline.yaml", """
        release: viassh
        steps:
          - {name: work, chart: data-prep/data-process, recipe: work.yaml}
        """)


def test_two_node_pipeline_over_ssh_survives_a_dropped_connection(tmp_path: Path, mlhome: Path, sshd: Sshd,
                                                                   slurm_cluster: Cluster) -> None:
    """Staged files, remote sbatch, logs mirrored back while the job runs. Mid-run the sshd child serving the
    shared connection is killed (by pid) and the login node refuses connections until the driver has tried at
    least once (its poll fails: ssh exits 255); sshd comes back and the run still succeeds over a new
    connection (the failed polls were transient errors, retried)."""
    remote, go = tmp_path / "remote", tmp_path / "go"
    configure(mlhome, sshd, remote, slurm_cluster)
    pipe = pipeline(tmp_path / "pipe", f'echo "node $PET_NODE_RANK read $(cat $MLRECIPE_PIPELINE_DIR/message.txt) '
                    f'in $MLRECIPE_PIPELINE_DIR"; for i in $(seq 600); do [ -e {go} ] && break; sleep 0.1; done; '
                    'echo "node $PET_NODE_RANK done"')
    driver = start_cli(mlhome, "run", str(pipe), "-b", "slurm")
    try:
        log0 = mlhome / "releases" / "slurm" / "default" / "viassh" / "steps" / "work" / "node-1.log"
        wait_for(lambda: log0.exists() and "read staged-message-42" in log0.read_text(), 60,
                 "node 1's log to come back over ssh")
        job = handle(mlhome, "viassh", "work")["job_id"]
        assert job_state(slurm_cluster, job) == "RUNNING"
        sessions = sshd.session_pids()
        assert sessions, "the driver holds a connection through sshd"
        for pid in sessions:
            kill(pid)
        sshd.stop()
        refusing = RefusingPort(sshd.port)
        try:
            wait_for(lambda: refusing.attempts >= 2, 30, "the driver to try the login node while it is down")
        finally:
            refusing.close()
        sshd.restart()
        go.touch()
        out = finish(driver, 120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, out
    assert "Traceback" not in out
    assert job_state(slurm_cluster, job) == "COMPLETED"
    logs = [cli(mlhome, "logs", "viassh", "--rank", str(r)).stdout for r in (0, 1)]
    remote_pipe = remote / "pipelines" / "default" / "viassh"
    for rank, text in enumerate(logs):
        assert f"node {rank} read staged-message-42 in {remote_pipe}" in text and f"node {rank} done" in text
    assert (remote_pipe / "message.txt").read_text() == "staged-message-42\n"
    step_dir = remote / "releases" / "slurm" / "default" / "viassh" / "steps" / "work"
    script = (step_dir / "job.sbatch").read_text()
    assert str(mlhome) not in script and f"--output={step_dir}/batch.log" in script
    assert (step_dir / "step_runtime.py").exists() and (step_dir / "program.json").exists()
    saved = handle(mlhome, "viassh", "work")
    assert saved["ssh"]["host"] == sshd.host and saved["remote_dir"] == str(step_dir)
    again = sshd.session_pids()
    assert again and not set(again) & set(sessions), "a new shared connection replaced the killed one"


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def test_ctrl_c_cancels_the_job_on_the_cluster(tmp_path: Path, mlhome: Path, sshd: Sshd,
                                               slurm_cluster: Cluster) -> None:
    configure(mlhome, sshd, tmp_path / "remote", slurm_cluster)
    pipe = pipeline(tmp_path / "pipe", "echo started; sleep 300", nnodes=1)
    driver = start_cli(mlhome, "run", str(pipe), "-b", "slurm")
    try:
        step_dir = mlhome / "releases" / "slurm" / "default" / "viassh" / "steps" / "work"
        wait_for(lambda: (step_dir / "node-0.log").exists() and "started" in (step_dir / "node-0.log").read_text(),
                 60, "the job to run")
        job = handle(mlhome, "viassh", "work")["job_id"]
        driver.send_signal(signal.SIGINT)
        out = finish(driver, 60)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert "Traceback" not in out
    wait_for(lambda: job_state(slurm_cluster, job) == "CANCELLED", 30, "the job cancelled on the cluster")


def test_staging_copies_only_what_changed(tmp_path: Path, sshd: Sshd) -> None:
    from mlrecipe.backends.slurm import remote
    from mlrecipe.backends.slurm.transport import SshTarget, SshTransport

    target = SshTarget(host=sshd.host, port=sshd.port, identity=str(sshd.identity), options=sshd.ssh_options())
    transport = SshTransport(target, None)
    root, _ = remote.resolve_root(transport, str(tmp_path / "r"))
    files = {f"{root}/a.txt": (b"one", 0o644), f"{root}/sub/b.sh": (b"#!/bin/sh\n", 0o755)}
    assert remote.stage(transport, files) == sorted(files)
    assert (tmp_path / "r" / "sub" / "b.sh").stat().st_mode & 0o777 == 0o755
    assert remote.stage(transport, files) == []
    files[f"{root}/a.txt"] = (b"two", 0o644)
    assert remote.stage(transport, files) == [f"{root}/a.txt"]
    assert (tmp_path / "r" / "a.txt").read_bytes() == b"two"


def test_a_wrong_host_key_is_refused(tmp_path: Path, mlhome: Path, sshd: Sshd) -> None:
    from mlrecipe.backends.slurm.transport import SshTarget

    other = keygen(tmp_path / "other_host_key")
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {' '.join(other.split()[:2])}\n")
    mlhome.mkdir(parents=True)
    (mlhome / "config.yaml").write_text(sshd.config(known, remote_root=str(tmp_path / "remote")))
    SshTarget(host=sshd.host, port=sshd.port, options=sshd.ssh_options(known)).close()  # no shared connection
    result = cli(mlhome, "run", str(pipeline(tmp_path / "pipe", "echo hi", 1)), "-b", "slurm", timeout=60)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert f"the host key of {sshd.host} is not the one in known_hosts" in out and "Traceback" not in out
    assert not (tmp_path / "remote").exists(), "nothing was staged"


def test_an_unreachable_host_is_exit_1_naming_it(tmp_path: Path, mlhome: Path, sshd: Sshd) -> None:
    configure(mlhome, sshd, tmp_path / "remote", ssh_port=str(free_port()))
    result = cli(mlhome, "run", str(pipeline(tmp_path / "pipe", "echo hi", 1)), "-b", "slurm", timeout=60)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "cannot reach the Slurm login node root@127.0.0.1" in out and "Traceback" not in out


def test_dry_run_prints_the_remote_script_and_the_staging_list(tmp_path: Path, mlhome: Path) -> None:
    mlhome.mkdir(parents=True)
    (mlhome / "config.yaml").write_text("slurm: {ssh_host: alice@login.invalid, remote_root: /scratch/alice/ml}\n")
    pipe = pipeline(tmp_path / "pipe", "echo hi", 2)
    shown = cli(mlhome, "run", str(pipe), "-b", "slurm", "--dry-run", timeout=60)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    step = "/scratch/alice/ml/releases/slurm/default/viassh/steps/work"
    assert f"# ==> alice@login.invalid:{step}/job.sbatch (over ssh alice@login.invalid: sbatch" in shown.stdout
    assert f"--output={step}/batch.log" in shown.stdout and str(mlhome) not in shown.stdout
    assert "# staging to alice@login.invalid" in shown.stdout
    assert "/scratch/alice/ml/pipelines/default/viassh/message.txt" in shown.stdout
    assert f"{step}/step_runtime.py" in shown.stdout


def test_doctor_checks_the_login_node_over_ssh(tmp_path: Path, mlhome: Path, sshd: Sshd,
                                               slurm_cluster: Cluster) -> None:
    configure(mlhome, sshd, tmp_path / "remote", slurm_cluster)
    result = cli(mlhome, "doctor", "--backend", "slurm", "-o", "json", timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    text = result.stdout
    for name in ("ssh connection", "remote slurm commands", "remote python", "controller reachable", "partitions"):
        assert name in text
    assert f"ssh {sshd.host}: connected" in text and "python3 3." in text and "debug (2 usable)" in text
    down = cli(mlhome, "doctor", "--backend", "slurm", "-B", f"ssh_port={free_port()}", "-o", "json", timeout=120)
    assert down.returncode == 1, down.stdout + down.stderr
    assert "cannot reach the Slurm login node root@127.0.0.1" in down.stdout and "skipped: no ssh connection" in \
        down.stdout and "Traceback" not in down.stdout + down.stderr


def test_one_round_trip_submission_detects_files_changed_on_the_cluster(tmp_path: Path, sshd: Sshd) -> None:
    """The Stager's prelude unpacks only what it does not know there; a file changed behind its back stops the
    command (StaleStaging) before it runs, and a fresh listing re-sends it."""
    from mlrecipe.backends.slurm import remote
    from mlrecipe.backends.slurm.transport import SshTarget, SshTransport, StaleStaging

    target = SshTarget(host=sshd.host, port=sshd.port, identity=str(sshd.identity), options=sshd.ssh_options())
    stager = remote.Stager(SshTransport(target, None))
    root = tmp_path / "r"
    files = {f"{root}/a.txt": (b"one", 0o644), f"{root}/b.txt": (b"two", 0o644)}
    ran = tmp_path / "ran"
    prelude, sent = stager.prelude(files, [])
    assert sent == sorted(files)
    stager.transport.run(["touch", str(ran)], prelude=prelude)
    stager.staged(files)
    assert (root / "a.txt").read_bytes() == b"one" and ran.exists()
    files[f"{root}/b.txt"] = (b"three", 0o644)
    prelude, sent = stager.prelude(files, [])
    assert sent == [f"{root}/b.txt"]
    (root / "a.txt").write_bytes(b"edited on the cluster")
    ran.unlink()
    with pytest.raises(StaleStaging):
        stager.transport.run(["touch", str(ran)], prelude=prelude)
    assert not ran.exists() and (root / "b.txt").read_bytes() == b"two", "nothing ran, nothing unpacked"
    stager.forget()
    prelude, sent = stager.prelude(files, [])
    assert sent == sorted(files)
    stager.transport.run(["touch", str(ran)], prelude=prelude)
    assert (root / "a.txt").read_bytes() == b"one" and (root / "b.txt").read_bytes() == b"three" and ran.exists()


def test_a_failed_node_reports_its_status_and_last_lines_over_ssh(tmp_path: Path, mlhome: Path, sshd: Sshd,
                                                                  slurm_cluster: Cluster) -> None:
    configure(mlhome, sshd, tmp_path / "remote", slurm_cluster)
    pipe = pipeline(tmp_path / "pipe", 'if [ "$PET_NODE_RANK" = 1 ]; then echo "disk full on $HOSTNAME"; exit 7; fi; '
                    "sleep 30")
    result = cli(mlhome, "run", str(pipe), "-b", "slurm", timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "disk full on n2" in out and "node 1 (n2) exited with status 7" in out and "Traceback" not in out


def test_a_later_command_trusts_its_staging_record_only_after_checking(tmp_path: Path, mlhome: Path, sshd: Sshd,
                                                                       slurm_cluster: Cluster) -> None:
    """The next command starts from what the last one staged (root, digests): a staged file edited on the
    cluster since is caught by the digest check and sent again, before the job runs."""
    remote = tmp_path / "remote"
    configure(mlhome, sshd, remote, slurm_cluster)
    pipe = pipeline(tmp_path / "pipe", "cat $MLRECIPE_PIPELINE_DIR/message.txt", nnodes=1)
    first = cli(mlhome, "run", str(pipe), "-b", "slurm", timeout=120)
    assert first.returncode == 0, first.stdout + first.stderr
    records = list((mlhome / "ssh").glob("staged-*.json"))
    assert len(records) == 1 and str(remote) in records[0].read_text()
    staged = remote / "pipelines" / "default" / "viassh" / "message.txt"
    staged.write_text("edited on the cluster\n")
    again = cli(mlhome, "run", str(pipe), "-b", "slurm", "--force", timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert staged.read_text() == "staged-message-42\n"
    assert "edited on the cluster" not in cli(mlhome, "logs", "viassh").stdout


def test_status_and_uninstall_from_another_process(tmp_path: Path, mlhome: Path, sshd: Sshd,
                                                   slurm_cluster: Cluster) -> None:
    """The driver dies; status and uninstall, new processes, reach the job through the handle's SSH target."""
    mlhome.mkdir(parents=True)  # the login node's session gets SLURM_CONF from ssh (SetEnv); this machine none
    (mlhome / "config.yaml").write_text(sshd.config(None, ["-o", f"SetEnv=SLURM_CONF={slurm_cluster.conf}"],
                                                    remote_root=str(tmp_path / "remote"), poll_seconds="0.2"))
    pipe = pipeline(tmp_path / "pipe", "echo started; sleep 300", nnodes=1)
    driver = start_cli(mlhome, "run", str(pipe), "-b", "slurm")
    try:
        step_dir = mlhome / "releases" / "slurm" / "default" / "viassh" / "steps" / "work"
        wait_for(lambda: (step_dir / "node-0.log").exists() and "started" in (step_dir / "node-0.log").read_text(),
                 60, "the job to run")
        job = handle(mlhome, "viassh", "work")["job_id"]
        assert handle(mlhome, "viassh", "work")["slurm_conf"] is None
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert job_state(slurm_cluster, job) == "RUNNING"
    env = {k: v for k, v in cli_env(mlhome).items() if k != "SLURM_CONF"}  # this machine cannot reach the cluster
    status = subprocess.run([*MLRECIPE, "status", "viassh"], env=env, capture_output=True, text=True, timeout=60,
                            check=False)
    assert status.returncode == 0 and "Traceback" not in status.stdout + status.stderr
    down = subprocess.run([*MLRECIPE, "uninstall", "viassh"], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert down.returncode == 0, down.stdout + down.stderr
    wait_for(lambda: job_state(slurm_cluster, job) == "CANCELLED", 30, "uninstall to cancel the job over ssh")
