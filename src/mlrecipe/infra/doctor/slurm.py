"""Checks for the Slurm backend: client tools, controller reachable (``scontrol ping``), usable
partitions and GPUs per node (``sinfo``). Parsers are pure functions so recorded outputs test them.

With ``slurm.ssh_host`` the same checks run on the login node through the backend's SSH transport, after
checking the connection itself (host key, authentication), the remote Slurm commands and the remote Python.
"""

from __future__ import annotations

import re
import shutil
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlrecipe.infra.doctor.base import Check, CheckResult
from mlrecipe.infra.doctor.probes import CommandResult, run_command
from mlrecipe.infra.doctor.requirements import GPU, Requirements

if TYPE_CHECKING:
    from mlrecipe.backends.slurm import SlurmOptions, SshTransport

Runner = Callable[[list[str]], CommandResult]
REMOTE_TOOLS = ("sbatch", "scontrol", "sinfo", "scancel", "squeue", "sacct")

SINFO_FORMAT = "%N|%P|%a|%T|%c|%G"
INSTALL_HINT = "apt-get install slurm-wlm (client tools), and point SLURM_CONF at your cluster's slurm.conf"
USABLE_STATES = {"idle", "mixed", "allocated", "completing", "planned", "reserved"}


@dataclass(frozen=True)
class SinfoNode:
    """One node of one partition, as ``sinfo -N`` reports it."""

    name: str
    partition: str
    default: bool
    available: bool
    state: str
    cpus: int
    gpus: int

    @property
    def usable(self) -> bool:
        """Up partition and a state that accepts jobs (powered-down cloud nodes count: they start)."""
        return self.available and self.state in USABLE_STATES


def parse_scontrol_ping(text: str) -> tuple[bool, str]:
    """(primary controller up, summary) from ``scontrol ping`` output."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    for line in lines:
        match = re.match(r"Slurmctld\((primary|backup)\) at (\S+) is (UP|DOWN)", line)
        if match and match.group(3) == "UP":
            return True, f"slurmctld ({match.group(1)}) at {match.group(2)} is UP"
    return False, "; ".join(lines) or "no answer from scontrol ping"


def parse_gres_gpus(gres: str) -> int:
    """GPU count of a GRES string: ``gpu:8``, ``gpu:a100:4(S:0,1),gpu:t4:2``, ``(null)`` -> 0."""
    gres = re.sub(r"\([^)]*\)", "", gres)
    total = 0
    for item in gres.split(","):
        parts = item.strip().split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def _state(raw: str) -> str:
    # Strip flag suffixes (* not responding, ~ powered down, # powering up, ! etc.) and "+FLAG" parts.
    return re.sub(r"[*~#!%$@^\-]+$", "", raw.split("+")[0].lower())


def parse_sinfo(text: str) -> list[SinfoNode]:
    """Nodes from ``sinfo -h -N -o '%N|%P|%a|%T|%c|%G'``."""
    nodes = []
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 6:
            continue
        name, partition, avail, state, cpus, gres = fields
        nodes.append(
            SinfoNode(
                name=name,
                partition=partition.rstrip("*"),
                default=partition.endswith("*"),
                available=avail.strip().lower() == "up",
                state=_state(state.strip()),
                cpus=int(cpus) if cpus.strip().isdigit() else 0,
                gpus=parse_gres_gpus(gres),
            )
        )
    return nodes


def partition_summary(nodes: list[SinfoNode]) -> dict[str, list[SinfoNode]]:
    """Usable nodes by partition (partitions without a usable node map to [])."""
    out: dict[str, list[SinfoNode]] = defaultdict(list)
    for node in nodes:
        out.setdefault(node.partition, [])
        if node.usable:
            out[node.partition].append(node)
    return dict(out)


class _Sinfo:
    """Runs sinfo once for all checks."""

    def __init__(self, run: Runner | None = None) -> None:
        self._result: CommandResult | None = None
        self._run = run

    def result(self) -> CommandResult:
        if self._result is None:
            self._result = (self._run or run_command)(["sinfo", "-h", "-N", "-o", SINFO_FORMAT])
        return self._result


def _tools() -> CheckResult:
    missing = [tool for tool in ("scontrol", "sinfo", "sbatch") if shutil.which(tool) is None]
    if missing:
        return CheckResult.failed(f"not on PATH: {', '.join(missing)}", INSTALL_HINT)
    return CheckResult.passed(f"scontrol, sinfo, sbatch at {shutil.which('scontrol')}")


def _ping(run: Runner | None = None) -> CheckResult:
    result = (run or run_command)(["scontrol", "ping"])
    if result.returncode == 127:
        return CheckResult.failed("scontrol is not installed", INSTALL_HINT)
    up, summary = parse_scontrol_ping(result.stdout + result.stderr)
    if up:
        return CheckResult.passed(summary)
    return CheckResult.failed(
        f"controller not reachable: {summary}",
        "start slurmctld (and munged) or set SLURM_CONF to the cluster's slurm.conf; check `scontrol ping`",
    )


def _partitions(sinfo: _Sinfo, req: Requirements) -> CheckResult:
    result = sinfo.result()
    if result.returncode != 0:
        return CheckResult.failed(f"sinfo failed: {(result.stderr or result.stdout).strip()[:200]}", INSTALL_HINT)
    parts = partition_summary(parse_sinfo(result.stdout))
    if not parts:
        return CheckResult.failed("sinfo lists no partitions", "define a partition (PartitionName=...) in slurm.conf")
    listing = ", ".join(f"{p} ({len(nodes)} usable)" for p, nodes in sorted(parts.items()))
    best = max(len(nodes) for nodes in parts.values())
    if best == 0:
        return CheckResult.failed(
            f"no usable node: {listing}", "resume nodes: scontrol update nodename=NODE state=resume"
        )
    if best < req.nnodes:
        return CheckResult.failed(
            f"the recipe needs {req.nnodes} nodes; largest partition has {best}: {listing}",
            "add nodes to a partition or lower resources.nnodes",
        )
    return CheckResult.passed(listing)


def _gpus(sinfo: _Sinfo, req: Requirements) -> CheckResult:
    per_node = req.resources.get(GPU, 0)
    result = sinfo.result()
    if result.returncode != 0:
        return CheckResult.failed("sinfo failed (see partitions)", INSTALL_HINT)
    parts = partition_summary(parse_sinfo(result.stdout))
    counts = {p: sorted({n.gpus for n in nodes}) for p, nodes in parts.items() if nodes}
    listing = ", ".join(f"{p}: {'/'.join(map(str, c))} GPU(s)/node" for p, c in sorted(counts.items())) or "none"
    if per_node == 0:
        return CheckResult.passed(listing)
    fits = [p for p, nodes in parts.items() if sum(1 for n in nodes if n.gpus >= per_node) >= req.nnodes]
    if fits:
        return CheckResult.passed(f"{', '.join(sorted(fits))} fit {req.nnodes} node(s) x {per_node} GPU(s); {listing}")
    return CheckResult.failed(
        f"no partition has {req.nnodes} usable node(s) with {per_node} GPU(s): {listing}",
        "declare GPUs as GRES (Gres=gpu:N in slurm.conf, gres.conf) or lower nvidia.com/gpu",
    )


def _needs_tools(probe: Callable[[], CheckResult]) -> Callable[[], CheckResult]:
    def run() -> CheckResult:
        if shutil.which("scontrol") is None or shutil.which("sinfo") is None:
            return CheckResult.skip("skipped: the Slurm client tools are missing")
        return probe()

    return run


def checks(req: Requirements, options: SlurmOptions | None = None) -> list[Check]:
    """The Slurm backend's checks for ``req`` (through the login node when ``options`` name an ``ssh_host``)."""
    if options is not None and options.ssh_host is not None:
        return remote_checks(req, options)
    sinfo = _Sinfo()
    return [
        Check("slurm client tools", True, _tools),
        Check("controller reachable", True, _needs_tools(_ping)),
        Check("partitions", True, _needs_tools(lambda: _partitions(sinfo, req))),
        Check("GPUs per node", req.resources.get(GPU, 0) > 0, _needs_tools(lambda: _gpus(sinfo, req))),
    ]


def _remote_runner(transport: SshTransport) -> Runner:
    """Runs a command on the login node; ssh's own failure is status 255 with its one-line reason."""
    from mlrecipe.errors import BackendError

    def run(argv: list[str]) -> CommandResult:
        try:
            done = transport.run(argv, timeout=30)
        except BackendError as exc:
            return CommandResult(255, "", str(exc))
        return CommandResult(done.returncode, done.stdout, done.stderr)

    return run


def _connection(run: Runner, host: str) -> CheckResult:
    result = run(["true"])
    if result.returncode == 0:
        return CheckResult.passed(f"ssh {host}: connected (host key verified by known_hosts; one shared connection)")
    return CheckResult.failed(result.stderr.strip() or f"ssh {host} failed", "check that 'ssh " + host +
                              " true' works without a prompt (agent or ssh_identity, known_hosts)")


def _remote_tools(run: Runner, host: str) -> CheckResult:
    result = run(["sh", "-c", "for t in \"$@\"; do command -v \"$t\" >/dev/null || echo \"$t\"; done",
                  "mlrecipe-doctor", *REMOTE_TOOLS])
    if result.returncode == 255:
        return CheckResult.skip("skipped: no ssh connection")
    missing = [t for t in result.stdout.split() if t not in ("sacct", "squeue")]
    if result.returncode != 0 or missing:
        return CheckResult.failed(f"not on the PATH of {host}: {', '.join(missing) or result.stderr.strip()}",
                                  "load the Slurm module in the login shell's profile (non-interactive ssh)")
    return CheckResult.passed(f"{', '.join(t for t in REMOTE_TOOLS if t not in result.stdout.split())} on {host}")


def _remote_python(run: Runner, host: str) -> CheckResult:
    result = run(["python3", "-c", "import sys; print(sys.version.split()[0]); sys.exit(sys.version_info < (3, 9))"])
    if result.returncode == 255:
        return CheckResult.skip("skipped: no ssh connection")
    if result.returncode != 0:
        return CheckResult.failed(f"python3 on {host}: {(result.stderr or result.stdout).strip() or 'too old'}",
                                  "the step runtime needs python3 >= 3.9 on the nodes (slurm.images for venvs)")
    return CheckResult.passed(f"python3 {result.stdout.strip()} on {host}")


def remote_checks(req: Requirements, options: SlurmOptions) -> list[Check]:
    """The checks through the login node ``options.ssh_host``."""
    from mlrecipe.backends.slurm import SshTransport

    target = options.ssh_target()
    assert target is not None
    run = _remote_runner(SshTransport(target, options.slurm_conf))
    sinfo = _Sinfo(run)
    connected: list[bool] = []

    def after_connection(probe: Callable[[], CheckResult]) -> Callable[[], CheckResult]:
        def checked() -> CheckResult:
            return probe() if connected and connected[0] else CheckResult.skip("skipped: no ssh connection")
        return checked

    def connection() -> CheckResult:
        result = _connection(run, target.host)
        connected.append(result.ok)
        return result

    return [
        Check("ssh connection", True, connection),
        Check("remote slurm commands", True, after_connection(lambda: _remote_tools(run, target.host))),
        Check("remote python", True, after_connection(lambda: _remote_python(run, target.host))),
        Check("controller reachable", True, after_connection(lambda: _ping(run))),
        Check("partitions", True, after_connection(lambda: _partitions(sinfo, req))),
        Check("GPUs per node", req.resources.get(GPU, 0) > 0, after_connection(lambda: _gpus(sinfo, req))),
    ]
