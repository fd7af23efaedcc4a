"""The SSH transport's pure parts: the ssh command line, the remote script, failure messages, path mapping.

No process is started here (the integration tests in test_slurm_ssh.py run them against a real sshd).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlrecipe.backends.slurm.options import SlurmOptions
from mlrecipe.backends.slurm.remote import RemotePlan
from mlrecipe.backends.slurm.transport import SshTarget, SshTransport, describe_ssh_failure


def test_the_ssh_command_line_shares_one_connection_and_never_prompts() -> None:
    target = SlurmOptions(ssh_host="alice@login", ssh_port=2222, ssh_identity="~/.ssh/k",
                          ssh_options=["-o", "ProxyJump=bastion"]).ssh_target()
    assert target is not None
    argv = target.argv()
    joined = " ".join(argv)
    assert argv[0] == "ssh" and argv[-2:] == ["--", "alice@login"]
    for option in ("BatchMode=yes", "ControlMaster=auto", "ControlPersist=60", "-p 2222", "ProxyJump=bastion"):
        assert option in joined
    assert f"-i {Path('~/.ssh/k').expanduser()}" in joined
    assert "StrictHostKeyChecking" not in joined, "host key checking is the user's ssh config's, never turned off"
    assert SlurmOptions().ssh_target() is None


def test_secrets_travel_in_the_stdin_script_not_on_a_command_line() -> None:
    transport = SshTransport(SshTarget(host="h"), "/etc/slurm/b.conf")
    script = transport.script(["sbatch", "--parsable", "/r/job one.sbatch"], {"HF_TOKEN": "s3cret value"})
    assert "export SLURM_CONF=/etc/slurm/b.conf" in script
    assert "export HF_TOKEN='s3cret value'" in script
    assert script.rstrip().endswith("sbatch --parsable '/r/job one.sbatch'")


def test_ssh_failures_are_one_line_that_says_what_to_do() -> None:
    changed = ("@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
               "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
               "Host key verification failed.\n")
    assert "not the one in known_hosts (changed or spoofed)" in describe_ssh_failure("login", changed)
    unknown = "No ED25519 host key is known for [127.0.0.1]:2222 and you have requested strict checking.\n" \
              "Host key verification failed.\n"
    assert "is not in known_hosts" in describe_ssh_failure("login", unknown)
    refused = "ssh: connect to host 127.0.0.1 port 9: Connection refused\n"
    assert describe_ssh_failure("u@127.0.0.1", refused) == (
        "cannot reach the Slurm login node u@127.0.0.1 over ssh: ssh: connect to host 127.0.0.1 port 9: "
        "Connection refused")


def test_local_paths_map_onto_remote_root() -> None:
    plan = RemotePlan(SshTarget(host="h"), "/scratch/me/", Path("/home/me/.mlrecipe"), Path("/home/me/.mlrecipe/p"),
                      "default", "rel")
    text = "--output=/home/me/.mlrecipe/releases/x/batch.log PIPE=/home/me/.mlrecipe/p/data.txt"
    assert plan.map_text(text) == ("--output=/scratch/me/releases/x/batch.log "
                                   "PIPE=/scratch/me/pipelines/default/rel/data.txt")


def test_an_sbatch_that_did_not_answer_is_never_submitted_again(monkeypatch) -> None:
    """The runner submits again after a transient error (runner/submit_retry.py); an sbatch that timed out may have
    queued its job, so it fails the step with an error that is not transient instead (asking again would queue the
    job twice)."""
    from mlrecipe.backends.slurm import scontrol
    from mlrecipe.errors import SlurmError, TransientBackendError

    calls: list[list[str]] = []

    class SilentTransport:
        def run(self, argv, timeout=30, env=None, prelude=""):
            calls.append(argv)
            raise TransientBackendError("ssh login did not answer in 30s")

    monkeypatch.setattr(scontrol, "transport_for", lambda ssh, conf: SilentTransport())
    with pytest.raises(SlurmError, match="may have been queued") as failed:
        scontrol.sbatch("/r/job.sbatch")
    assert not isinstance(failed.value, TransientBackendError), "the runner must not submit it again"
    assert len(calls) == 1, calls
