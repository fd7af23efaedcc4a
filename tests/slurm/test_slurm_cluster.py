"""Real jobs on a real single-machine Slurm cluster (controller + two slurmd "nodes" on 127.0.0.1).

The quickstart pipeline, a 2-node torchrun DDP recipe, failures with exit code, reason and log,
chain mode with uninstall and resume, and a node failure that requeues the job.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import openai
import pytest

from tests.integration.helpers import cli, release_processes, release_tree, start_cli, still_alive, wait_for
from tests.repo import EXAMPLES, REPO
from tests.serve.serving import NEVER_READY_RECIPE, write
from tests.slurm.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("slurm_cluster")]
ASSETS = REPO / "tests" / "integration" / "assets"


def state(home: Path, release: str) -> dict:
    return json.loads((home / "releases" / "slurm" / "default" / release / "state.json").read_text())


def job_field(cluster: Cluster, job_id: str, name: str) -> str:
    out = cluster.run("scontrol", "show", "job", "-o", job_id).stdout
    for part in out.split():
        if part.startswith(f"{name}="):
            return part.split("=", 1)[1]
    return ""


def chain_jobs(home: Path, release: str) -> list[str]:
    path = home / "releases" / "slurm" / "default" / release / "slurm-chain.json"
    return [e["job_id"] for e in json.loads(path.read_text())] if path.exists() else []


def test_quickstart_pipeline_on_slurm(tmp_path: Path, mlhome: Path, slurm_cluster: Cluster,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole quickstart as batch jobs: data, 2-node elastic DDP, evaluation, a vLLM server job, a client job."""
    from tests.serve.serving import SERVE_ENV, SERVE_IMAGE, has_serve_env

    if not has_serve_env():
        pytest.skip(f"the quickstart's serving step needs vLLM in {SERVE_ENV} (run 'make serve-env')")
    monkeypatch.setenv("MLRECIPE_IMAGES", f"{SERVE_IMAGE}={SERVE_ENV}")
    pipeline = str(EXAMPLES / "quickstart" / "pipeline.yaml")
    try:
        result = cli(mlhome, "run", pipeline, "--backend", "slurm", timeout=900)
        assert result.returncode == 0, result.stdout + result.stderr
        home = mlhome / "volumes" / "pv-efs" / "home" / "quickstart"
        metrics = json.loads((home / "metrics.json").read_text())
        assert metrics["world_size"] == 2 and metrics["train_steps"] == 300
        assert metrics["perplexity"] < metrics["perplexity_untrained"] / 5
        rec = state(mlhome, "quickstart")
        train_job = rec["steps"]["train"]["handle"]["job_id"]
        assert job_field(slurm_cluster, train_job, "NodeList") == "n[1-2]"
        assert job_field(slurm_cluster, train_job, "JobState") == "COMPLETED"
        ranks = [cli(mlhome, "logs", "quickstart", "train", "--rank", str(r)) for r in (0, 1)]
        assert all(r.returncode == 0 and "torchrun" not in r.stderr for r in ranks)
        assert ranks[0].stdout != ranks[1].stdout, "one log file per node"
        assert "step 300/300" in ranks[0].stdout + ranks[1].stdout  # c10d decides which node holds global rank 0

        serve_job = rec["steps"]["serve"]["handle"]["job_id"]
        url = rec["steps"]["serve"]["url"]
        assert url.startswith("http://127.0.0.1:"), url  # the node's NodeAddr
        assert job_field(slurm_cluster, serve_job, "JobState") == "RUNNING"
        answer = json.loads((home / "answer.json").read_text())
        assert answer["url"] == url and answer["completion"].strip() and answer["completion_tokens"] > 0
        assert answer["v2_text_output"].strip()
        assert f"serving (serve at {url})" in result.stdout
        status = json.loads(cli(mlhome, "status", "slurm://default/quickstart", "-o", "json").stdout)
        assert status[0]["state"] == "serving"
        assert [s["state"] for s in status[0]["steps"]] == ["succeeded"] * 3 + ["serving", "succeeded"]
        again = cli(mlhome, "run", pipeline, "--backend", "slurm", timeout=300)
        assert again.returncode == 0 and again.stdout.count(f"skipped (still serving at {url}") == 1
        tree = release_tree("quickstart", mlhome)
        assert any(p.name().startswith("VLLM::Engine") for p in tree)
    finally:
        down = cli(mlhome, "uninstall", "slurm://default/quickstart")
    assert down.returncode == 0, down.stdout + down.stderr
    wait_for(lambda: job_field(slurm_cluster, serve_job, "JobState") == "CANCELLED", 60, "the server job cancelled")
    wait_for(lambda: release_processes("quickstart", mlhome) == [], 60, "no quickstart process left")
    wait_for(lambda: still_alive(tree) == [], 30, "no vLLM engine process left")


def test_torchrun_ddp_two_nodes(tmp_path: Path, mlhome: Path, slurm_cluster: Cluster) -> None:
    recipe = write(tmp_path / "ddp.yaml", f"""
        resources: {{nnodes: 2, nproc_per_node: 1, requests: {{cpu: "1", memory: 1Gi}}}}
        launcher: {{type: torchrun, script: {ASSETS}/allreduce.py}}
        train:
          env: [{{name: OMP_NUM_THREADS, value: "1"}}]
        """)
    result = cli(mlhome, "install", "ddp", "training/pytorchjob-distributed", "-f", str(recipe), "-b", "slurm",
                 timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    logs = [cli(mlhome, "logs", "ddp", "--rank", str(r)).stdout for r in (0, 1)]
    assert "rank=0 world_size=2 sum=3" in logs[0] and "rank=1 world_size=2 sum=3" in logs[1]
    job = state(mlhome, "ddp")["steps"]["pytorchjob-distributed"]["handle"]["job_id"]
    assert job_field(slurm_cluster, job, "NumNodes") == "2"
    assert job_field(slurm_cluster, job, "MinMemoryNode") == "1G"


@pytest.mark.parametrize("mode", ["step", "chain"])
def test_server_job_url_secret_and_uninstall(tmp_path: Path, mlhome: Path, slurm_cluster: Cluster, mode: str) -> None:
    """A serving step is a job that stays up: its URL (node address) reaches the next job; secrets stay off disk.

    In chain mode the server ends the first chain (prep -> web); the client is submitted once web is ready.
    """
    mlhome.mkdir(parents=True, exist_ok=True)
    (mlhome / "config.yaml").write_text(f"slurm: {{mode: {mode}, poll_seconds: 0.2}}\n")
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "ready.txt").write_text("ok")
    write(tmp_path / "web.yaml", f"""
        server:
          command: [python3, -m, http.server]
          args: ["$PORT", --bind "$MLRECIPE_SERVER_HOST", --directory {tmp_path / "www"}]
          readiness_probe: {{path: /ready.txt, period_secs: 1}}
          env: [{{name: HF_TOKEN, value: hf-s3cr3t-value}}]
        """)
    write(tmp_path / "client.yaml", """
        process:
          command: ['python3 -c "import os, urllib.request; u = os.environ[\\"MLRECIPE_WEB_URL\\"];
                     print(\\"got\\", urllib.request.urlopen(u + \\"/ready.txt\\").read().decode())"']
        """)
    pipeline = write(tmp_path / "pipeline.yaml", """
        release: websrv
        steps:
          - {name: prep, chart: data-prep/data-process, recipe: prep.yaml}
          - {name: web, chart: serving/generic-server, recipe: web.yaml}
          - {name: client, chart: data-prep/data-process, recipe: client.yaml}
        """)
    write(tmp_path / "prep.yaml", "process: {command: ['sleep 2; echo prepared']}\n")
    try:
        result = cli(mlhome, "run", str(pipeline), "--backend", "slurm", timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        rec = state(mlhome, "websrv")
        url, job = rec["steps"]["web"]["url"], rec["steps"]["web"]["handle"]["job_id"]
        assert rec["state"] == "serving" and url.startswith("http://127.0.0.1:")
        assert "got ok" in cli(mlhome, "logs", "slurm://default/websrv", "client").stdout
        assert job_field(slurm_cluster, job, "JobState") == "RUNNING"
        if mode == "chain":
            prep_job = rec["steps"]["prep"]["handle"]["job_id"]
            assert rec["steps"]["prep"]["handle"]["chain"] == [job], "prep and web were submitted together"
            assert job_field(slurm_cluster, job, "Dependency") == "(null)"  # satisfied: afterok:<prep> ran
            assert job_field(slurm_cluster, prep_job, "JobState") == "COMPLETED"
            assert chain_jobs(mlhome, "websrv") == [rec["steps"]["client"]["handle"]["job_id"]]
        on_disk = [p for p in (mlhome / "releases").rglob("*") if p.is_file()]
        assert on_disk and not [p for p in on_disk if b"hf-s3cr3t-value" in p.read_bytes()]
        job_env = Path(f"/proc/{_server_pid(mlhome, 'websrv')}/environ").read_bytes().split(b"\0")
        assert b"HF_TOKEN=hf-s3cr3t-value" in job_env, "the job still gets the secret"
    finally:
        cli(mlhome, "uninstall", "slurm://default/websrv")
    wait_for(lambda: job_field(slurm_cluster, job, "JobState") == "CANCELLED", 60, "the server job cancelled")
    wait_for(lambda: release_processes("websrv", mlhome) == [], 60, "no server process left")


def _server_pid(home: Path, release: str) -> int:
    procs = [p for p in release_processes(release, home) if "http.server" in " ".join(p.cmdline())]
    assert procs, "the server process runs with the release's environment"
    return procs[0].pid


def test_server_job_not_ready_in_time_is_cancelled_with_its_log(tmp_path: Path, mlhome: Path,
                                                                slurm_cluster: Cluster) -> None:
    recipe = write(tmp_path / "never.yaml", NEVER_READY_RECIPE)
    result = cli(mlhome, "install", "never", "serving/generic-server", "-f", str(recipe), "-b", "slurm",
                 timeout=90)
    assert result.returncode == 1, result.stdout
    assert "the server was not ready after" in result.stdout and "/health" in result.stdout
    assert "loading weights..." in result.stdout  # the server's last log lines
    job = state(mlhome, "never")["steps"]["generic-server"]["handle"]["job_id"]
    wait_for(lambda: job_field(slurm_cluster, job, "JobState") == "CANCELLED", 60, "the server job cancelled")


@pytest.mark.ray
def test_rayserve_recipe_runs_as_a_job(tmp_path: Path, mlhome: Path, slurm_cluster: Cluster, tiny_model: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference-style RayService recipe as a Slurm job: Ray Serve + vLLM on the node, the chart's ``openai_api.py``
    loaded from /etc/framework-scripts (``framework: vllm-<version>``, ``PYTHONPATH`` in the Serve config), the
    ``openai`` client answered; uninstall cancels the job and leaves no process. (mlrecipe's own Ray Serve
    application, the chart's default, runs on the same Ray-on-Slurm path: tests/serve/test_rayserve_local.py.)"""
    from tests.serve.serving import FRAMEWORKS, RAY_IMAGE, SERVE_ENV, framework_recipe, has_serve_env

    if not has_serve_env("ray, vllm"):
        pytest.skip(f"no serving environment with Ray Serve and vLLM at {SERVE_ENV} (run 'make serve-env')")
    monkeypatch.setenv("MLRECIPE_IMAGES", f"{RAY_IMAGE}={SERVE_ENV}")
    recipe = write(tmp_path / "rayserve.yaml", framework_recipe(tiny_model, FRAMEWORKS[0]))
    try:
        result = cli(mlhome, "install", "rs", "serving/rayserve", "-f", str(recipe), "-b", "slurm", timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
        rec = state(mlhome, "rs")
        url, job = rec["steps"]["rayserve"]["url"], rec["steps"]["rayserve"]["handle"]["job_id"]
        assert url.startswith("http://127.0.0.1:") and job_field(slurm_cluster, job, "JobState") == "RUNNING"
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        out = client.completions.create(model="tiny", prompt="The list", max_tokens=4, temperature=0,
                                        extra_body={"ignore_eos": True})
        assert out.usage.completion_tokens == 4
        chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                              max_tokens=4, extra_body={"ignore_eos": True})
        assert chat.usage.completion_tokens == 4
        logs = cli(mlhome, "logs", "slurm://default/rs").stdout
        assert "openai_api (/etc/framework-scripts/openai_api.py): vLLM " in logs, logs[-3000:]
        tree = release_tree("rs", mlhome)
    finally:
        cli(mlhome, "uninstall", "slurm://default/rs")
    wait_for(lambda: job_field(slurm_cluster, job, "JobState") == "CANCELLED", 60, "the Ray Serve job cancelled")
    wait_for(lambda: release_processes("rs", mlhome) == [], 90, "no Ray, Serve or vLLM process left")
    wait_for(lambda: still_alive(tree) == [], 30, "no renamed Ray or vLLM process left")


def test_mpijob_ranks_span_both_nodes_and_see_the_volumes(tmp_path: Path, mlhome: Path) -> None:
    """mpirun inside the allocation starts 2 x 2 ranks over both nodes; every rank sees the pvc mount path."""
    fsx = mlhome / "volumes" / "pv-fsx"
    (fsx / "code").mkdir(parents=True)
    (fsx / "code" / "rank.py").write_text(
        "import os\n"
        "rank = os.environ['OMPI_COMM_WORLD_RANK']\n"
        "os.makedirs('/fsx/out', exist_ok=True)\n"
        "with open(f'/fsx/out/rank-{rank}.txt', 'w') as f:\n"
        "    f.write(os.environ['SLURMD_NODENAME'] + ' ' + os.environ['OMPI_COMM_WORLD_SIZE'])\n")
    recipe = write(tmp_path / "mpi.yaml", """
        resources: {nnodes: 2, nproc_per_node: 2}
        pvc: [{name: pv-fsx, mount_path: /fsx}]
        launcher: {type: mpirun, script: /fsx/code/rank.py}
        """)
    result = cli(mlhome, "install", "mpi", "training/mpijob", "-f", str(recipe), "-b", "slurm", timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    written = {p.name: p.read_text() for p in sorted((fsx / "out").glob("rank-*.txt"))}
    assert written == {"rank-0.txt": "n1 4", "rank-1.txt": "n1 4", "rank-2.txt": "n2 4", "rank-3.txt": "n2 4"}


def test_failure_shows_exit_code_reason_and_log(tmp_path: Path, mlhome: Path) -> None:
    recipe = write(tmp_path / "fail.yaml", """
        resources: {nnodes: 2}
        process:
          command: ['echo "node $PET_NODE_RANK of $PET_NNODES"; if [ "$PET_NODE_RANK" = 1 ]; then
                     echo "disk full on $HOSTNAME"; exit 7; fi; sleep 30']
        """)
    result = cli(mlhome, "install", "broken", "data-prep/data-process", "-f", str(recipe), "-b", "slurm",
                 timeout=120)
    assert result.returncode == 1
    assert "disk full on n2" in result.stdout + result.stderr, "the failed node's last log lines are shown"
    step = json.loads(cli(mlhome, "status", "broken", "-o", "json").stdout)[0]["steps"][0]
    assert step["exit_code"] == 7
    assert "FAILED (reason: NonZeroExitCode)" in step["message"]
    assert "node 1 (n2) exited with status 7" in step["message"]


def test_chain_is_cancelled_by_uninstall_and_resumes(tmp_path: Path, mlhome: Path, slurm_cluster: Cluster) -> None:
    mlhome.mkdir(parents=True, exist_ok=True)
    (mlhome / "config.yaml").write_text("slurm: {mode: chain, poll_seconds: 0.2}\n")
    write(tmp_path / "slow.yaml", "process: {command: ['echo slow; sleep ${SLEEP:-60}']}\n")
    write(tmp_path / "quick.yaml", "process: {command: ['echo quick on $MLRECIPE_STEP']}\n")
    pipeline = write(tmp_path / "pipeline.yaml", """
        release: chained
        steps:
          - {name: first, chart: data-prep/data-process, recipe: slow.yaml}
          - {name: second, chart: data-prep/data-process, recipe: quick.yaml}
          - {name: third, chart: data-prep/data-process, recipe: quick.yaml}
        """)
    driver = start_cli(mlhome, "run", str(pipeline), "-b", "slurm")
    try:
        wait_for(lambda: len(chain_jobs(mlhome, "chained")) == 3, 30, "the chain to be submitted")
        jobs = chain_jobs(mlhome, "chained")
        wait_for(lambda: job_field(slurm_cluster, jobs[0], "JobState") == "RUNNING", 30, "the first job to run")
        assert job_field(slurm_cluster, jobs[1], "Dependency") == f"afterok:{jobs[0]}(unfulfilled)"
        assert job_field(slurm_cluster, jobs[2], "Dependency") == f"afterok:{jobs[1]}(unfulfilled)"
        driver.send_signal(signal.SIGKILL)  # the CLI dies; the queued chain stays with Slurm
        driver.wait(10)
        assert all(job_field(slurm_cluster, j, "JobState") in ("RUNNING", "PENDING") for j in jobs)
        assert cli(mlhome, "uninstall", "chained").returncode == 0
        wait_for(lambda: all(job_field(slurm_cluster, j, "JobState") == "CANCELLED" for j in jobs), 30,
                 "uninstall to cancel the whole chain")
    finally:
        if driver.poll() is None:
            driver.kill()
    # Again, with a failing middle step: the rest of the chain is cancelled; resume re-chains from there.
    write(tmp_path / "slow.yaml", "process: {command: ['echo fast']}\n")
    write(tmp_path / "quick.yaml", "process: {command: ['[ -e $MLRECIPE_PIPELINE_DIR/fixed ] || exit 4']}\n")
    failed = cli(mlhome, "run", str(pipeline), "-b", "slurm", timeout=120)
    assert failed.returncode == 1 and "exit code 4" in failed.stdout
    old = chain_jobs(mlhome, "chained")
    wait_for(lambda: job_field(slurm_cluster, old[2], "JobState") == "CANCELLED", 20, "the chain's tail cancelled")
    (tmp_path / "fixed").touch()
    resumed = cli(mlhome, "resume", "chained", timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "step first: skipped" in resumed.stdout
    new = chain_jobs(mlhome, "chained")
    assert len(new) == 2 and not set(new) & set(old)
    assert [s["state"] for s in state(mlhome, "chained")["steps"].values()] == ["succeeded"] * 3


def test_node_failure_requeues_when_the_recipe_asks(tmp_path: Path, mlhome: Path, slurm_cluster: Cluster) -> None:
    """backoff_limit asks for retries: a node going down requeues the job, which then succeeds."""
    recipe = write(tmp_path / "retry.yaml", """
        backoff_limit: 1
        resources: {nnodes: 2}
        process:
          command: ['echo "attempt ${SLURM_RESTART_COUNT:-0} on node $PET_NODE_RANK";
                     if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then sleep 120; fi']
        """)
    driver = start_cli(mlhome, "install", "retry", "data-prep/data-process", "-f", str(recipe), "-b", "slurm")
    try:
        log = mlhome / "releases" / "slurm" / "default" / "retry" / "steps" / "data-process" / "node-1.log"
        wait_for(lambda: log.exists() and "attempt 0" in log.read_text(), 60, "the first attempt to run")
        job = state(mlhome, "retry")["steps"]["data-process"]["handle"]["job_id"]
        assert slurm_cluster.run("scontrol", "update", "nodename=n2", "state=down", "reason=test").returncode == 0
        slurm_cluster.run("scontrol", "update", "nodename=n2", "state=resume")
        wait_for(lambda: job_field(slurm_cluster, job, "Restarts") == "1", 30, "Slurm to requeue the job")

        def started_again() -> bool:
            # A requeued job becomes eligible only after a delay (BeginTime); make it eligible now.
            if job_field(slurm_cluster, job, "JobState") == "PENDING":
                slurm_cluster.run("scontrol", "update", f"jobid={job}", "StartTime=now")
                slurm_cluster.run("scontrol", "update", "nodename=n2", "state=resume")
            return job_field(slurm_cluster, job, "JobState") in ("RUNNING", "COMPLETED")

        wait_for(started_again, 60, "the requeued job to run", interval=1.0)
        out, _ = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
        slurm_cluster.run("scontrol", "update", "nodename=n2", "state=resume")
    assert driver.returncode == 0, out
    assert "attempt 1 on node 1" in log.read_text()
    assert state(mlhome, "retry")["steps"]["data-process"]["state"] == "succeeded"


def test_template_prints_the_script_that_is_submitted(tmp_path: Path, mlhome: Path) -> None:
    recipe = write(tmp_path / "hello.yaml", """
        resources: {requests: {cpu: "1"}}
        process:
          env: [{name: GREETING, value: "hello from {{ .Release.Name }}"}]
          command: ['echo "$GREETING on $HOSTNAME"']
        """)
    shown = cli(mlhome, "template", "tpl", "data-prep/data-process", "-f", str(recipe), "-b", "slurm")
    assert shown.returncode == 0
    ran = cli(mlhome, "install", "tpl", "data-prep/data-process", "-f", str(recipe), "-b", "slurm", timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    script = (mlhome / "releases" / "slurm" / "default" / "tpl" / "steps" / "data-process" / "job.sbatch").read_text()
    assert script in shown.stdout
    assert "hello from tpl on n1" in cli(mlhome, "logs", "tpl").stdout
    env = {**os.environ, "MLRECIPE_HOME": str(mlhome)}
    assert subprocess.run(["bash", "-n", "-c", script], env=env, check=False).returncode == 0


def test_doctor_passes_on_the_running_cluster(mlhome: Path, slurm_cluster: Cluster) -> None:
    """`mlrecipe doctor --backend slurm` against the real test cluster: controller up, partition usable."""
    result = cli(mlhome, "doctor", "--backend", "slurm", "-o", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    text = json.dumps(report)
    assert "n1" in text or "n2" in text or "partition" in text.lower()
