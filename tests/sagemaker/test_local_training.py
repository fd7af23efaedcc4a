"""Local SageMaker mode, training: real host processes in private namespaces with SageMaker's container contract."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tarfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, ParamValidationError

from mlrecipe.backends.host.nodes import alive, exit_fd, start_time
from mlrecipe.backends.sagemaker.local.client import LocalSageMakerClient

pytestmark = pytest.mark.integration
BIN = Path(sys.executable).parent

TERMINAL = ("Completed", "Failed", "Stopped")


def training_request(name: str, entrypoint: list[str], tmp: Path, count: int = 2, **extra: Any) -> dict[str, Any]:
    """A valid ``create_training_job`` request with a ``train`` channel from ``tmp/data`` and file:// outputs."""
    data = tmp / "data"
    data.mkdir(exist_ok=True)
    (data / "part-0.txt").write_text("0 1 2\n")
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "AlgorithmSpecification": {"TrainingImage": "local/mlrecipe:latest", "TrainingInputMode": "File",
                                   "ContainerEntrypoint": entrypoint},
        "RoleArn": "arn:aws:iam::000000000000:role/local",
        "InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix", "S3Uri": data.as_uri(), "S3DataDistributionType": "FullyReplicated"}}}],
        "OutputDataConfig": {"S3OutputPath": (tmp / "out").as_uri()},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": count, "VolumeSizeInGB": 1},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "HyperParameters": {"epochs": "3", "lr": "0.5", "name": "digits", "layers": "[8, 16]", "b": "true"},
        "Environment": {"HOME": "/opt/ml/code"},
        "Tags": [{"Key": "mlrecipe/step", "Value": "train"}],
    }
    request.update(extra)
    return request


def wait_for(client: LocalSageMakerClient, name: str, states: tuple[str, ...] = TERMINAL,
             timeout: float = 120, secondary: str | None = None) -> dict[str, Any]:
    """Describe ``name`` until its status is one of ``states`` (or its secondary status is ``secondary``)."""
    deadline = time.monotonic() + timeout
    while True:
        out = client.describe_training_job(TrainingJobName=name)
        if out["TrainingJobStatus"] in states or (secondary and out["SecondaryStatus"] == secondary):
            return out
        assert time.monotonic() < deadline, f"{name} still {out['TrainingJobStatus']}/{out['SecondaryStatus']}"
        time.sleep(0.1)


def processes_with(marker: str) -> list[int]:
    """Pids of live processes whose command line starts with ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cmdline.startswith(marker) and state != "Z" and int(entry) != os.getpid():
            found.append(int(entry))
    return found


# Runs as each host's entrypoint: records what the host sees, and what SageMaker's own toolkit
# (sagemaker-training) reads from the same /opt/ml tree, in the shared checkpoint directory.
CONTRACT_SCRIPT = textwrap.dedent('''
    import json, os, socket, sys
    host = os.environ["SM_CURRENT_HOST"]
    seen = {
        "pid": os.getpid(), "hostname": socket.gethostname(),
        "resolved": {h: socket.gethostbyname(h) for h in json.loads(os.environ["SM_HOSTS"])},
        "data": sorted(os.listdir(os.environ["SM_CHANNEL_TRAIN"])),
        "hyperparameters": json.load(open("/opt/ml/input/config/hyperparameters.json")),
        "resourceconfig": json.load(open("/opt/ml/input/config/resourceconfig.json")),
        "inputdataconfig": json.load(open("/opt/ml/input/config/inputdataconfig.json")),
        "sm": {k: v for k, v in os.environ.items() if k.startswith("SM_")},
        "python": sys.executable,
    }
    try:
        from sagemaker_training import environment
    except ImportError:
        seen["toolkit"] = None
    else:
        seen["toolkit"] = environment.Environment().to_env_vars()
    open(f"/opt/ml/checkpoints/{host}.json", "w").write(json.dumps(seen))
    open("/opt/ml/model/weights.txt", "w").write(f"trained on {host}")
''')


# The step runtime's own node temporary directory (as each host's step program makes it), then a long sleep.
NODE_TEMP_THEN_SLEEP = ("import os; from mlrecipe.runtime import step_runtime as rt; env = dict(os.environ); "
                        "print('temp', rt.node_temp_dir(env), flush=True); os.execvp('sleep', ['sleep', '4714.5'])")


@pytest.fixture
def client(tmp_path: Path) -> Iterator[LocalSageMakerClient]:
    """A client on a fresh root; jobs a failed test leaves running are stopped."""
    local = LocalSageMakerClient(tmp_path / "sm", python_bin_dir=BIN, stop_grace_s=2)
    yield local
    for job in local.list_training_jobs(StatusEquals="InProgress")["TrainingJobSummaries"]:
        local.stop_training_job(TrainingJobName=job["TrainingJobName"])
        wait_for(local, job["TrainingJobName"], timeout=30)


def test_two_hosts_get_sagemakers_container_contract(client: LocalSageMakerClient, tmp_path: Path) -> None:
    script = tmp_path / "contract.py"
    script.write_text(CONTRACT_SCRIPT)
    ckpt = tmp_path / "ckpt"
    request = training_request("contract-job", ["python3", str(script)], tmp_path,
                               CheckpointConfig={"S3Uri": ckpt.as_uri(), "LocalPath": "/opt/ml/checkpoints"})
    arn = client.create_training_job(**request)["TrainingJobArn"]
    assert arn.endswith(":training-job/contract-job")
    done = wait_for(client, "contract-job")
    assert done["TrainingJobStatus"] == "Completed", done.get("FailureReason")
    assert done["SecondaryStatus"] == "Completed" and done["BillableTimeInSeconds"] >= 1
    assert done["TrainingStartTime"] <= done["TrainingEndTime"]
    model = done["ModelArtifacts"]["S3ModelArtifacts"]
    assert model == (tmp_path / "out" / "contract-job" / "output" / "model.tar.gz").as_uri()
    with tarfile.open(model.removeprefix("file://")) as tar:
        assert tar.extractfile("weights.txt").read() == b"trained on algo-1"

    for index, host in enumerate(["algo-1", "algo-2"]):
        seen = json.loads((ckpt / f"{host}.json").read_text())
        assert seen["pid"] == 1 and seen["hostname"] == host
        assert seen["resolved"] == {"algo-1": "127.0.10.1", "algo-2": "127.0.10.2"}
        assert seen["data"] == ["part-0.txt"]
        assert seen["python"].startswith(str(BIN))
        assert seen["hyperparameters"] == request["HyperParameters"]
        assert seen["resourceconfig"]["current_host"] == host
        assert seen["resourceconfig"]["hosts"] == ["algo-1", "algo-2"]
        assert seen["inputdataconfig"]["train"]["TrainingInputMode"] == "File"
        sm = seen["sm"]
        assert json.loads(sm["SM_HOSTS"]) == ["algo-1", "algo-2"] and sm["SM_CURRENT_HOST"] == host
        assert json.loads(sm["SM_CHANNELS"]) == ["train"]
        assert sm["SM_CHANNEL_TRAIN"] == "/opt/ml/input/data/train"
        assert sm["SM_MODEL_DIR"] == "/opt/ml/model" and sm["SM_OUTPUT_DATA_DIR"] == "/opt/ml/output/data"
        assert json.loads(sm["SM_HPS"]) == {"epochs": 3, "lr": 0.5, "name": "digits", "layers": [8, 16], "b": True}
        assert (sm["SM_HP_EPOCHS"], sm["SM_HP_LR"], sm["SM_HP_NAME"]) == ("3", "0.5", "digits")
        assert sm["SM_NUM_GPUS"] == "0" and int(sm["SM_NUM_CPUS"]) >= 1
        assert client.log_path("contract-job", index).is_file()
        toolkit = seen["toolkit"]
        if toolkit is None:
            pytest.skip("sagemaker-training is not installed in this environment: the toolkit check needs it")
        compared = [k for k in sm if k in toolkit]
        assert {"SM_HOSTS", "SM_CURRENT_HOST", "SM_NUM_GPUS", "SM_NUM_CPUS", "SM_CHANNELS", "SM_CHANNEL_TRAIN",
                "SM_MODEL_DIR", "SM_OUTPUT_DATA_DIR", "SM_HPS", "SM_HP_EPOCHS", "SM_HP_NAME", "SM_RESOURCE_CONFIG",
                "SM_INPUT_DATA_CONFIG", "SM_NETWORK_INTERFACE_NAME", "SM_CURRENT_INSTANCE_TYPE", "SM_USER_ARGS",
                "SM_LOG_LEVEL"} <= set(compared)
        assert {k: sm[k] for k in compared} == {k: toolkit[k] for k in compared}


RENDEZVOUS = textwrap.dedent('''
    import datetime, json, os, socket
    import torch, torch.distributed as dist
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    pet = {k: v for k, v in os.environ.items() if k.startswith("PET_")}
    out = {"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": t.item(), "pet": pet,
           "algo-1": socket.gethostbyname("algo-1"), "host": socket.gethostname()}
    open(f"/opt/ml/checkpoints/rank-{dist.get_rank()}.json", "w").write(json.dumps(out))
    dist.destroy_process_group()
''')


@pytest.mark.slow
@pytest.mark.parametrize("elastic", [False, True], ids=["static", "c10d"])
def test_torchrun_rendezvous_across_two_hosts_through_the_env_contract(client: LocalSageMakerClient,
                                                                       tmp_path: Path, elastic: bool) -> None:
    from mlrecipe.runtime import RUNTIME_PATH
    from mlrecipe.spec.launcher import TORCHRUN_ELASTIC, TORCHRUN_STATIC

    code = tmp_path / "code"
    code.mkdir()
    (code / "step_runtime.py").write_bytes(Path(RUNTIME_PATH).read_bytes())
    (code / "ddp.py").write_text(RENDEZVOUS)
    (code / "step.json").write_text(json.dumps({
        "version": 1, "release": "r", "step": "train", "command": ["torchrun"],
        "args": [TORCHRUN_ELASTIC if elastic else TORCHRUN_STATIC, "/opt/ml/input/data/mlrecipe/ddp.py"]}))
    ckpt = tmp_path / "ckpt"
    channel = {"ChannelName": "mlrecipe", "DataSource": {"S3DataSource": {
        "S3DataType": "S3Prefix", "S3Uri": code.as_uri(), "S3DataDistributionType": "FullyReplicated"}}}
    request = training_request(
        "ddp-job", ["python3", "/opt/ml/input/data/mlrecipe/step_runtime.py", "/opt/ml/input/data/mlrecipe/step.json"],
        tmp_path, CheckpointConfig={"S3Uri": ckpt.as_uri()})
    request["InputDataConfig"].append(channel)
    request["Environment"]["MLRECIPE_RESOLVE_TIMEOUT"] = "20"
    if elastic:  # what the backend's contract sets for an elastic step; the runtime adds the endpoint
        request["Environment"].update({"PET_RDZV_BACKEND": "c10d", "PET_RDZV_ID": "r-train"})
    client.create_training_job(**request)
    done = wait_for(client, "ddp-job", timeout=180)
    logs = [client.log_path("ddp-job", i).read_text(errors="replace")[-2000:] for i in range(2)]
    assert done["TrainingJobStatus"] == "Completed", (done.get("FailureReason"), logs)
    outs = [json.loads((ckpt / f"rank-{rank}.json").read_text()) for rank in (0, 1)]
    assert sorted(o["host"] for o in outs) == ["algo-1", "algo-2"]
    for out in outs:
        assert out["world"] == 2 and out["sum"] == 3.0 and out["algo-1"] == "127.0.10.1"
        node_rank = str(int(out["host"].removeprefix("algo-")) - 1)
        assert out["pet"]["PET_NNODES"] == "2" and out["pet"]["PET_NODE_RANK"] == node_rank
        assert out["pet"]["PET_MASTER_ADDR"] == "algo-1" and out["pet"]["PET_NPROC_PER_NODE"] == "1"
        if elastic:
            assert out["pet"]["PET_RDZV_ENDPOINT"] == f"algo-1:{out['pet']['PET_MASTER_PORT']}"
        else:
            assert out["rank"] == int(node_rank)


def test_output_failure_is_the_failure_reason_and_the_other_host_is_stopped(
        client: LocalSageMakerClient, tmp_path: Path) -> None:
    entry = ["sh", "-c", 'if [ "$SM_CURRENT_HOST" = algo-2 ]; then echo "label 11 out of range" '
             '> /opt/ml/output/failure; exit 3; fi; exec sleep 4711.25']
    client.create_training_job(**training_request("failing-job", entry, tmp_path))
    done = wait_for(client, "failing-job", timeout=60)
    assert done["TrainingJobStatus"] == "Failed" and done["SecondaryStatus"] == "Failed"
    assert done["FailureReason"] == "label 11 out of range"
    assert "ModelArtifacts" not in done
    assert processes_with("sleep 4711.25") == []


def test_exit_status_without_failure_file_is_reported(client: LocalSageMakerClient, tmp_path: Path) -> None:
    entry = ["sh", "-c", "echo 'Traceback: boom' >&2; exit 5"]
    client.create_training_job(**training_request("exit-job", entry, tmp_path, count=1))
    done = wait_for(client, "exit-job", timeout=60)
    assert done["TrainingJobStatus"] == "Failed"
    assert "algo-1 exited with status 5" in done["FailureReason"] and "boom" in done["FailureReason"]


SECOND_CLIENT = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    from mlrecipe.backends.sagemaker.local.client import LocalSageMakerClient
    c = LocalSageMakerClient(Path(sys.argv[1]))
    d = c.describe_training_job(TrainingJobName="stop-job")
    jobs = c.list_training_jobs(NameContains="stop")["TrainingJobSummaries"]
    tags = c.list_tags(ResourceArn=d["TrainingJobArn"])["Tags"]
    c.stop_training_job(TrainingJobName="stop-job")
    print(json.dumps({"status": d["TrainingJobStatus"], "jobs": [j["TrainingJobName"] for j in jobs], "tags": tags}))
''')


def test_another_client_sees_and_stops_the_job_and_nothing_survives(client: LocalSageMakerClient,
                                                                      tmp_path: Path) -> None:
    entry = ["sh", "-c", "trap '' TERM; sleep 4712.5 & setsid sleep 4712.5 & wait"]
    client.create_training_job(**training_request("stop-job", entry, tmp_path))
    wait_for(client, "stop-job", secondary="Training", timeout=30)
    deadline = time.monotonic() + 20
    while len(processes_with("sleep 4712.5")) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(processes_with("sleep 4712.5")) == 4
    out = subprocess.run([sys.executable, "-c", SECOND_CLIENT, str(tmp_path / "sm")], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen == {"status": "InProgress", "jobs": ["stop-job"],
                    "tags": [{"Key": "mlrecipe/step", "Value": "train"}]}
    assert client.describe_training_job(TrainingJobName="stop-job")["TrainingJobStatus"] in ("Stopping", "Stopped")
    done = wait_for(client, "stop-job", timeout=30)
    assert (done["TrainingJobStatus"], done["SecondaryStatus"]) == ("Stopped", "Stopped")
    assert processes_with("sleep 4712.5") == []

    def supervisors() -> list[int]:
        return [p for p in processes_with(sys.executable) if "stop-job" in Path(f"/proc/{p}/cmdline").read_text()]

    deadline = time.monotonic() + 10  # the supervisor writes Stopped, then exits
    while supervisors() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert supervisors() == []
    with pytest.raises(ClientError) as err:
        client.stop_training_job(TrainingJobName="stop-job")
    assert err.value.response["Error"]["Code"] == "ValidationException"


def test_sagemakers_errors(client: LocalSageMakerClient, tmp_path: Path) -> None:
    client.create_training_job(**training_request("dup-job", ["true"], tmp_path, count=1))
    with pytest.raises(ClientError) as err:
        client.create_training_job(**training_request("dup-job", ["true"], tmp_path, count=1))
    assert err.value.response["Error"]["Code"] == "ResourceInUse"
    for call in (client.describe_training_job, client.stop_training_job):
        with pytest.raises(ClientError) as err:
            call(TrainingJobName="no-such-job")
        assert err.value.response["Error"]["Code"] == "ValidationException"
    with pytest.raises(ParamValidationError):
        client.create_training_job(**{**training_request("bad-job", ["true"], tmp_path),
                                      "ResourceConfig": {"InstanceCount": "two"}})
    with pytest.raises(ClientError) as err:
        client.create_training_job(**{**training_request("bad-job", ["true"], tmp_path),
                                      "ResourceConfig": {"InstanceType": "ml.m5.large", "VolumeSizeInGB": 1}})
    assert "InstanceCount" in err.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as err:
        client.list_tags(ResourceArn="arn:aws:sagemaker:local:000000000000:training-job/no-such-job")
    assert err.value.response["Error"]["Code"] == "ValidationException"
    assert wait_for(client, "dup-job", timeout=30)["TrainingJobStatus"] == "Completed"
    client.create_training_job(**training_request("dup-job-2", ["true"], tmp_path, count=1))
    first = client.list_training_jobs(NameContains="dup", MaxResults=1, SortBy="Name", SortOrder="Ascending")
    second = client.list_training_jobs(NameContains="dup", MaxResults=1, SortBy="Name", SortOrder="Ascending",
                                       NextToken=first["NextToken"])
    assert [s["TrainingJobName"] for s in first["TrainingJobSummaries"] + second["TrainingJobSummaries"]] == [
        "dup-job", "dup-job-2"]
    assert "NextToken" not in second
    wait_for(client, "dup-job-2", timeout=30)


def test_missing_channel_data_fails_the_job(client: LocalSageMakerClient, tmp_path: Path) -> None:
    request = training_request("nodata-job", ["true"], tmp_path, count=1)
    request["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] = (tmp_path / "absent").as_uri()
    client.create_training_job(**request)
    done = client.describe_training_job(TrainingJobName="nodata-job")
    assert done["TrainingJobStatus"] == "Failed" and "does not exist" in done["FailureReason"]


def test_s3_channels_are_staged_through_the_client_factory(tmp_path: Path) -> None:
    pytest.importorskip("moto.server", reason="moto[server] (dev extra) provides the S3 server on 127.0.0.1")
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        url = f"http://127.0.0.1:{server._server.server_port}"

        def s3() -> Any:
            return boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing",
                                aws_secret_access_key="testing")

        s3().create_bucket(Bucket="data")
        for key in ("full/a.txt", "full/sub/b.txt", "shards/0.txt", "shards/1.txt"):
            s3().put_object(Bucket="data", Key=key, Body=key.encode())
        local = LocalSageMakerClient(tmp_path / "sm", python_bin_dir=BIN, s3_client_factory=s3)
        ckpt = tmp_path / "ckpt"
        entry = ["sh", "-c", 'cd /opt/ml/input/data && find . -type f | sort > "/opt/ml/checkpoints/$SM_CURRENT_HOST"']
        request = training_request("s3-job", entry, tmp_path, CheckpointConfig={"S3Uri": ckpt.as_uri()})
        request["InputDataConfig"] = [
            {"ChannelName": name, "DataSource": {"S3DataSource": {
                "S3DataType": "S3Prefix", "S3Uri": f"s3://data/{prefix}", "S3DataDistributionType": kind}}}
            for name, prefix, kind in (("full", "full/", "FullyReplicated"), ("shards", "shards", "ShardedByS3Key"))]
        local.create_training_job(**request)
        done = wait_for(local, "s3-job", timeout=60)
        assert done["TrainingJobStatus"] == "Completed", done.get("FailureReason")
        seen = {h: (ckpt / h).read_text().split() for h in ("algo-1", "algo-2")}
        assert seen["algo-1"] == ["./full/a.txt", "./full/sub/b.txt", "./shards/0.txt"]
        assert seen["algo-2"] == ["./full/a.txt", "./full/sub/b.txt", "./shards/1.txt"]
    finally:
        server.stop()


def test_max_runtime_stops_the_job(client: LocalSageMakerClient, tmp_path: Path) -> None:
    request = training_request("slow-job", ["sleep", "4713.5"], tmp_path, count=1,
                               StoppingCondition={"MaxRuntimeInSeconds": 1})
    client.create_training_job(**request)
    done = wait_for(client, "slow-job", timeout=30)
    assert (done["TrainingJobStatus"], done["SecondaryStatus"]) == ("Stopped", "MaxRuntimeExceeded")
    assert processes_with("sleep 4713.5") == []


def test_a_lost_supervisor_takes_its_hosts_along_and_fails_the_job(client: LocalSageMakerClient,
                                                                    tmp_path: Path) -> None:
    client.create_training_job(**training_request("lost-job", ["env", "-u", "TMPDIR", str(BIN / "python"), "-c",
                                                               NODE_TEMP_THEN_SLEEP], tmp_path))
    wait_for(client, "lost-job", secondary="Training", timeout=30)
    pids = tmp_path / "sm" / "training-jobs" / "lost-job" / "pids.json"
    logs = [client.log_path("lost-job", i) for i in range(2)]
    deadline = time.monotonic() + 20
    while not all("temp " in (p.read_text() if p.exists() else "") for p in logs) and time.monotonic() < deadline:
        time.sleep(0.05)
    temps = [Path(p.read_text().split("temp ", 1)[1].split()[0]) for p in logs]
    assert all(t.is_dir() for t in temps) and len(set(temps)) == 2
    os.kill(json.loads(pids.read_text())["supervisor"][0], 9)
    done = wait_for(client, "lost-job", timeout=30)
    assert done["TrainingJobStatus"] == "Failed" and "supervisor ended" in done["FailureReason"]
    deadline = time.monotonic() + 10
    while processes_with("sleep 4714.5") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with("sleep 4714.5") == []
    assert [t for t in temps if t.exists()] == [], "a killed host's /tmp/mlrecipe-tmp-* is left"  # issue 41 R13


def test_removing_a_release_removes_its_local_job_trees(client: LocalSageMakerClient, tmp_path: Path) -> None:
    """Issue 41 R14: what uninstall does through the release's tags also removes a local job's directory (every
    host's /opt/ml tree with its copy of each channel); another release's job is left alone."""
    from mlrecipe.backends.sagemaker import names, tagged

    jobs = tmp_path / "sm" / "training-jobs"
    for release in ("rel", "other"):
        name = names.job_name(names.job_prefix("default", release, "train", "0" * 12), 1)
        client.create_training_job(**training_request(name, ["sleep", "4714.6"], tmp_path, count=2, Tags=[
            {"Key": k, "Value": v} for k, v in names.job_tags("default", release, "train", 1, "0" * 12).items()]))
        wait_for(client, name, secondary="Training", timeout=30)
        assert (jobs / name / "hosts" / "algo-2" / "opt-ml" / "input" / "data" / "train" / "part-0.txt").is_file()
    mine, other = (names.job_name(names.job_prefix("default", r, "train", "0" * 12), 1) for r in ("rel", "other"))
    done = tagged.remove_release(client, "rel", "default")
    assert done == [f"stopped training job {mine}", f"removed local training job {mine} and its hosts' trees"]
    assert not (jobs / mine).exists() and (jobs / other / "hosts").is_dir()


def test_a_supervisor_log_planted_as_a_link_fails_the_job_and_is_not_written_through(
        client: LocalSageMakerClient, tmp_path: Path) -> None:
    """The job's supervisor starts as a node of the host layer, whose log is never written through a link."""
    home = tmp_path / "sm" / "training-jobs" / "linked-job"
    home.mkdir(parents=True)
    outside = tmp_path / "outside.log"
    outside.write_text("kept\n")
    (home / "supervisor.log").symlink_to(outside)
    client.create_training_job(**training_request("linked-job", ["true"], tmp_path, count=1))
    out = client.describe_training_job(TrainingJobName="linked-job")  # the first look, no waiting: Failed already
    assert out["TrainingJobStatus"] == "Failed", out
    assert "supervisor cannot start" in out["FailureReason"] and "symbolic link" in out["FailureReason"], out
    assert not (home / "pids.json").exists() and client.job_end_fd("linked-job") is None
    assert outside.read_text() == "kept\n"


def _readable(fd: int, timeout: float) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))


def test_another_client_learns_of_the_jobs_end_from_its_supervisors_identity(client: LocalSageMakerClient,
                                                                             tmp_path: Path) -> None:
    """A second client (another CLI: ``resume``) opens a pidfd of the supervisor from its identity in ``pids.json``
    (``[pid, start ticks]``): readable once the job ended, its final status written by then; none once it ended."""
    probe = exit_fd(os.getpid())
    if probe is None:
        pytest.skip("no pidfd on this system (Linux >= 5.3): the runner asks DescribeTrainingJob instead")
    os.close(probe)
    gate = tmp_path / "gate"
    client.create_training_job(**training_request(
        "end-job", ["sh", "-c", f'while [ ! -e "{gate}" ]; do sleep 0.05; done'], tmp_path, count=1))
    other = LocalSageMakerClient(tmp_path / "sm", python_bin_dir=BIN)
    fd = other.job_end_fd("end-job")
    try:
        assert fd is not None
        supervisor = json.loads((tmp_path / "sm" / "training-jobs" / "end-job" / "pids.json").read_text())["supervisor"]
        assert alive(supervisor) and supervisor[1] == start_time(supervisor[0])
        assert not _readable(fd, 0), other.describe_training_job(TrainingJobName="end-job")  # it runs
        gate.touch()
        assert _readable(fd, 120), other.describe_training_job(TrainingJobName="end-job")  # the supervisor exited
        out = other.describe_training_job(TrainingJobName="end-job")
        assert out["TrainingJobStatus"] == "Completed", out
        assert other.job_end_fd("end-job") is None
    finally:
        gate.touch()
        if fd is not None:
            os.close(fd)
