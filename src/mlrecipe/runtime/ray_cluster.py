#!/usr/bin/env python3
"""A RayJob on one host: start a Ray cluster shaped like the recipe's head and worker groups, submit the job's
entrypoint to it as a Ray job, stop the cluster.

Usage: ``python3 ray_cluster.py CLUSTER_JSON -- ENTRYPOINT...``

``CLUSTER_JSON`` holds ``{"head": {"num_cpus": n, "num_gpus": n}, "workers": [{"group": str, "replicas": n,
"num_cpus": n, "num_gpus": n, "resources": {name: n}}], "object_store_bytes": n, "worker_launcher": [argv],
"worker_cleanup": [argv]}``. Each head and worker is a real Ray node (its own raylet), as each is a pod under KubeRay:
on this host, or, with ``worker_launcher`` (e.g. ``srun --nodes=N --ntasks-per-node=1``), each worker group started
by that launcher as ``ray start --address=<head> --block`` on the nodes it reaches; ``worker_cleanup`` runs once
those have stopped (it removes their Ray temp dirs).

The head runs Ray's dashboard on 127.0.0.1 (a free port), and the entrypoint (the step runtime, which runs the
recipe's scripts) is submitted to it through the Ray Jobs API, as KubeRay's submitter does: it runs on the head as
a Ray job with its own submission id, logs and status (``ray job status|logs|stop --address <dashboard> <id>``),
with this program's environment and working directory. Its log streams to this program's stdout and its exit
status is this program's. Where Ray lacks the dashboard's packages (``ray[default]``) or the Jobs API does not
answer, the entrypoint runs as the Ray driver with ``RAY_ADDRESS`` set instead, and the log says so. SIGTERM /
SIGINT / SIGHUP stop the job (or the driver's process group), then the cluster: no Ray process outlives this one.
Needs ``ray`` in the interpreter that runs it; uses nothing of mlrecipe.

``python3 ray_cluster.py --exec LAUNCH_JSON`` is the submitted entrypoint itself: it replaces itself with the
argv that ``LAUNCH_JSON`` records, in the environment and working directory recorded there.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ray.cluster_utils import Cluster

GRACE_SECONDS = float(os.environ.get("MLRECIPE_STOP_GRACE", "15"))
DASHBOARD_TIMEOUT = float(os.environ.get("MLRECIPE_RAY_DASHBOARD_TIMEOUT", "60"))
CLEANUP_SECONDS = 60
DEFAULT_OBJECT_STORE = 128 * 1024 * 1024
#: What Ray's job supervisor sets for the driver (beside RAY_ADDRESS); they win over the step's values.
JOB_VARIABLES = ("RAY_JOB_CONFIG_JSON_ENV_VAR", "PYTHONUNBUFFERED")


def _say(message: str) -> None:
    print(f"[mlrecipe] {message}", flush=True)


def dashboard_problem() -> str | None:
    """Why Ray's dashboard and Jobs API cannot run in this interpreter (Ray's own check), or None."""
    try:
        import ray.dashboard.optional_deps  # noqa: F401
        from ray.job_submission import JobSubmissionClient  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, as the kernel picks it (this file is shipped alone, where
    ``mlrecipe.ports`` may not be importable; Ray binds it at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_cluster(spec: dict[str, Any], temp_dir: str, dashboard_port: int | None = None) -> tuple[Cluster, list[str]]:
    """The running cluster (``ray.cluster_utils.Cluster``): the head (with the dashboard on 127.0.0.1:
    ``dashboard_port`` if one is given), then every worker node on this host (none with ``worker_launcher``), and
    the cluster's shape for the log. Its session files (and the address file that a bare ``ray.init()`` would
    otherwise find and connect to after this cluster is gone) live in ``temp_dir``."""
    from ray.cluster_utils import Cluster

    store = int(spec.get("object_store_bytes") or DEFAULT_OBJECT_STORE)
    head = spec.get("head") or {}
    dashboard: dict[str, Any] = {"include_dashboard": False}
    if dashboard_port is not None:
        dashboard = {"include_dashboard": True, "dashboard_host": "127.0.0.1", "dashboard_port": dashboard_port}
    cluster = Cluster(initialize_head=True, connect=False, head_node_args={
        "num_cpus": head.get("num_cpus", 0), "num_gpus": head.get("num_gpus", 0),
        "object_store_memory": store, "temp_dir": temp_dir, **dashboard,
        # a port of its own for the head's dashboard agent (which runs the submitted jobs), not Ray's fixed 52365:
        # another Ray on this host may hold that, and the agent's HTTP service (the Jobs API's) would be off
        "dashboard_agent_listen_port": 0,
    })
    shape = [f"head ({head.get('num_cpus', 0)} CPU)"]
    if spec.get("worker_launcher"):
        return cluster, shape
    try:
        for group in spec.get("workers") or []:
            for _ in range(int(group.get("replicas", 1))):
                cluster.add_node(num_cpus=group.get("num_cpus", 1), num_gpus=group.get("num_gpus", 0),
                                 resources=group.get("resources") or None, object_store_memory=store)
            shape.append(f"{group.get('replicas', 1)} x {group.get('group', 'workers')} "
                         f"({group.get('num_cpus', 1)} CPU, {group.get('num_gpus', 0)} GPU each)")
        cluster.wait_for_nodes()
    except BaseException:
        cluster.shutdown()
        raise
    return cluster, shape


def _end_with_parent() -> None:
    """In the entrypoint: get SIGTERM when this program dies, even by SIGKILL (Ray's own daemons share our fate
    the same way)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start_remote_workers(spec: dict, address: str, shape: list[str]) -> list[subprocess.Popen]:
    """Start each worker group with the spec's ``worker_launcher`` and wait until every worker node has joined."""
    import ray

    store = int(spec.get("object_store_bytes") or DEFAULT_OBJECT_STORE)
    launched, expected = [], 1
    for group in spec.get("workers") or []:
        argv = [*spec["worker_launcher"], "ray", "start", f"--address={address}", "--block", "--disable-usage-stats",
                f"--num-cpus={group.get('num_cpus', 1)}", f"--num-gpus={group.get('num_gpus', 0)}",
                f"--object-store-memory={store}"]
        launched.append(subprocess.Popen(argv, start_new_session=True, preexec_fn=_end_with_parent))
        expected += int(group.get("replicas", 1))
        shape.append(f"{group.get('replicas', 1)} x {group.get('group', 'workers')} "
                     f"({group.get('num_cpus', 1)} CPU, {group.get('num_gpus', 0)} GPU each)")
    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        deadline = time.monotonic() + float(os.environ.get("MLRECIPE_RAY_JOIN_TIMEOUT", "300"))
        while len([n for n in ray.nodes() if n["Alive"]]) < expected:
            if any(p.poll() is not None for p in launched) or time.monotonic() > deadline:
                raise RuntimeError(f"the worker nodes did not join the Ray cluster at {address}")
            time.sleep(0.5)
    finally:
        ray.shutdown()
    return launched


def stop_remote_workers(launched: list[subprocess.Popen], cleanup: list[str] | None) -> None:
    """SIGTERM each launcher (srun passes it to its tasks; ``ray start --block`` then stops its node), then run
    ``cleanup`` (best effort, bounded) on the nodes they reached."""
    for proc in launched:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in launched:
        try:
            proc.wait(timeout=GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    if launched and cleanup:
        try:
            subprocess.run(cleanup, stdin=subprocess.DEVNULL, capture_output=True, timeout=CLEANUP_SECONDS)
        except (OSError, subprocess.TimeoutExpired) as exc:
            _say(f"the worker nodes' clean-up did not finish ({exc}): {shlex.join(cleanup)}")


class _Stop:
    """Signal handler: remember the signal and pass it to the entrypoint's process group (the driver path; the
    job path polls ``signum``)."""

    def __init__(self) -> None:
        self.child: subprocess.Popen | None = None
        self.signum: int | None = None

    def install(self) -> None:
        """Handle SIGTERM, SIGINT and SIGHUP."""
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self)

    def __call__(self, signum: int, _frame: object) -> None:
        self.signum = signum
        if self.child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.child.pid, signum)


def _exit_status(code: int) -> int:
    """A shell's exit status for a process's return code (a signal N: 128 + N)."""
    return 128 - code if code < 0 else code


def run_entrypoint(argv: list[str], address: str, stop: _Stop) -> int:
    """Run ``argv`` as the Ray driver of the cluster at ``address``; its exit status."""
    env = {**os.environ, "RAY_ADDRESS": address}
    stop.child = subprocess.Popen(argv, env=env, start_new_session=True, preexec_fn=_end_with_parent)
    if stop.signum is not None:
        stop(stop.signum, None)
    try:
        status = stop.child.wait()
    finally:
        with contextlib.suppress(ProcessLookupError):
            deadline = time.monotonic() + GRACE_SECONDS
            while stop.child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            os.killpg(stop.child.pid, signal.SIGKILL)
    return _exit_status(status)


def submission_id(env: dict[str, str]) -> str:
    """The Ray job's submission id: the release and step (``<release>-<step>``), as KubeRay names it after the
    RayJob."""
    name = "-".join(v for v in (env.get("MLRECIPE_RELEASE"), env.get("MLRECIPE_STEP")) if v) or "mlrecipe-job"
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name)


class _JobLog:
    """The Ray job's log as the head writes it (``ray job logs`` reads the same file), copied to stdout as it
    grows."""

    def __init__(self, temp_dir: str, job: str) -> None:
        from ray.dashboard.modules.job.common import JOB_LOGS_PATH_TEMPLATE

        self.pattern = os.path.join(temp_dir, "session_*", "logs", JOB_LOGS_PATH_TEMPLATE.format(submission_id=job))
        self.file: Any = None

    def copy(self) -> None:
        """Write what was added to the log since the last call."""
        if self.file is None:
            found = glob.glob(self.pattern)
            if not found:
                return
            self.file = open(found[0], "rb")  # noqa: SIM115 (open for as long as the job runs)
        data = self.file.read()
        if data:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def _submit(url: str, entrypoint: str, job: str, stop: _Stop) -> Any | None:
    """A Jobs API client of the dashboard at ``url`` once ``entrypoint`` is submitted to it as ``job``; None if the
    dashboard did not take it within ``DASHBOARD_TIMEOUT`` or a stop signal came first."""
    from ray.job_submission import JobSubmissionClient

    deadline = time.monotonic() + DASHBOARD_TIMEOUT
    client, error = None, None
    while stop.signum is None:
        try:
            client = client or JobSubmissionClient(url)
            client.submit_job(entrypoint=entrypoint, submission_id=job)
            return client
        except Exception as exc:  # the dashboard or its job agent still starting (connection refused, 5xx)
            error = exc
            with contextlib.suppress(Exception):
                if client is not None and client.get_job_info(job) is not None:
                    return client  # submitted, though the answer was lost
        if time.monotonic() > deadline:
            _say(f"the Ray dashboard at {url} did not take the job within {DASHBOARD_TIMEOUT:.0f} s: {error!r}")
            return None
        time.sleep(0.5)
    return None


def _follow_job(client: Any, job: str, log: _JobLog, stop: _Stop) -> Any | None:
    """Copy the job's log until the job has ended (after ``stop_job`` on a stop signal); its final ``JobDetails``,
    or None if the dashboard stopped answering, or the job outlived its stop grace."""
    stopping: float | None = None
    last_answer = next_check = time.monotonic()
    while True:
        log.copy()
        now = time.monotonic()
        if stop.signum is not None and stopping is None:
            stopping = now
            _say(f"stopping Ray job {job} (signal {stop.signum})")
            with contextlib.suppress(Exception):
                client.stop_job(job)
        if now >= next_check:
            next_check = now + 0.5
            try:
                info = client.get_job_info(job)
                last_answer = now
            except Exception:  # the dashboard busy, or gone (an uninstall signals every process of the step at once)
                if stopping is not None:
                    return None
                info = None
            if info is not None and info.status.is_terminal():
                log.copy()
                return info
            if stopping is not None and now - stopping > GRACE_SECONDS + 5:
                return None
            if now - last_answer > DASHBOARD_TIMEOUT:
                _say(f"the Ray dashboard stopped answering about job {job}")
                return None
        time.sleep(0.1)


def run_job(argv: list[str], url: str, address: str, env: dict[str, str], temp_dir: str, stop: _Stop) -> int | None:
    """Submit ``argv`` as a Ray job to the dashboard at ``url`` of the cluster at ``address`` (its session files in
    ``temp_dir``), to run in ``env`` and this working directory; stream its log and wait for it to end (stop it on a
    stop signal). Its exit status, or None if the Jobs API did not take it (then nothing of it runs)."""
    launch = os.path.join(temp_dir, "entrypoint.json")
    with open(os.open(launch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as fh:
        json.dump({"argv": argv, "env": env, "cwd": os.getcwd(), "address": address}, fh)
    entrypoint = "exec " + shlex.join([sys.executable, os.path.abspath(__file__), "--exec", launch])
    job = submission_id(env)
    client = _submit(url, entrypoint, job, stop)
    if client is None:
        return 128 + stop.signum if stop.signum is not None else None
    _say(f"Ray job {job} submitted to the Ray dashboard at {url} (ray job status|logs|stop --address {url} {job})")
    log = _JobLog(temp_dir, job)
    try:
        info = _follow_job(client, job, log, stop)
    finally:
        log.close()
    if info is None:
        return 128 + stop.signum if stop.signum is not None else 1
    code = info.driver_exit_code
    _say(f"Ray job {job} {info.status.value} (driver's job id {info.job_id}"
         + ("" if code is None else f", entrypoint exit code {code}") + ")")
    if info.status.value == "SUCCEEDED":
        return 0
    if stop.signum is not None:
        return 128 + stop.signum
    if not code:
        _say(f"Ray job {job}: {info.message}")
        return 1
    return _exit_status(code)


def exec_launch(path: str) -> int:
    """The submitted entrypoint: become the argv ``path`` records, in its environment (with the variables Ray's
    job supervisor sets for a driver) and working directory, with ``RAY_ADDRESS`` its cluster's (the supervisor's
    guess picks any Ray cluster this host runs). Returns only if that fails."""
    with open(path, encoding="utf-8") as fh:
        launch = json.load(fh)
    with contextlib.suppress(OSError):
        os.unlink(path)  # the step's environment (secrets too) is on disk no longer than needed
    env = {**os.environ, **launch["env"], **{k: os.environ[k] for k in JOB_VARIABLES if k in os.environ},
           "RAY_ADDRESS": launch["address"]}
    try:
        os.chdir(launch["cwd"])
        os.execvpe(launch["argv"][0], launch["argv"], env)
    except OSError as exc:
        sys.stderr.write(f"cannot run {launch['argv'][0]}: {exc}\n")
    return 127


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 2 and args[0] == "--exec":
        return exec_launch(args[1])
    if len(args) < 3 or args[1] != "--":
        sys.stderr.write("usage: ray_cluster.py CLUSTER_JSON -- ENTRYPOINT...\n")
        return 2
    with open(args[0], encoding="utf-8") as fh:
        spec = json.load(fh)
    step_env = dict(os.environ)
    stop = _Stop()
    stop.install()
    problem = dashboard_problem()
    port = None if problem else free_port()
    if problem:
        _say(f"Ray's dashboard cannot run here ({problem}; it needs ray[default]): the entrypoint runs as the Ray "
             "driver, not as a Ray job")
    os.environ.setdefault("RAY_JOB_STOP_WAIT_TIME_S", str(int(GRACE_SECONDS)))  # ray job stop's SIGTERM grace
    temp_dir = tempfile.mkdtemp(prefix="mlrecipe-ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    # Ray's processes find "their" cluster (Ray Train's placement group cleaner asks the State API whether its
    # controller lives) through $RAY_TMPDIR/ray/ray_current_cluster: this cluster's, not the last one this host started
    os.makedirs(os.path.join(temp_dir, "ray"))
    os.environ["RAY_TMPDIR"] = temp_dir
    try:
        cluster, shape = start_cluster(spec, temp_dir, port)
    except BaseException:
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    stop.install()  # again: each Ray node started here set its own SIGTERM handler (drain, then exit)
    remote: list[subprocess.Popen] = []
    try:
        if spec.get("worker_launcher"):
            remote = start_remote_workers(spec, cluster.address, shape)
        _say(f"Ray cluster at {cluster.address}: {', '.join(shape)}")
        if stop.signum is not None:
            return 128 + stop.signum
        status = None
        if port is not None:
            status = run_job(args[2:], f"http://127.0.0.1:{port}", cluster.address, step_env, temp_dir, stop)
            if status is None:
                _say("the entrypoint runs as the Ray driver instead (RAY_ADDRESS set), not as a Ray job")
        if status is None:
            status = run_entrypoint(args[2:], cluster.address, stop)
    finally:
        stop_remote_workers(remote, spec.get("worker_cleanup"))
        cluster.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
        _say("Ray cluster stopped")
    return status


if __name__ == "__main__":
    sys.exit(main())
