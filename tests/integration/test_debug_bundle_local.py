"""The debug bundle of a failed 2-node local pipeline (real CLI, real node processes): both ranks' logs and the files
beside them, every step's plan, the state, versions and each step's env, and none of the credentials planted in the
environment, in ``--set`` and in a recipe file, although a step printed two of them into its log. ``--keep-on-failure``
says that a local step leaves nothing running to keep."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.integration.helpers import MLRECIPE
from tests.repo import REPO, cli_env

pytestmark = pytest.mark.integration

FILE_TOKEN = "hf_FileSecretAbcdefghijklmnopqrstuvwxyz0123"  # a recipe file's, of a well-known token's form
FILE_PLAIN = "PlainFileSecret2468"  # a recipe file's, under a credential's name
SET_SECRET = "PlainSetPass987"  # given with --set
ENV_SECRET = "EnvSecretValue4242"  # in the environment of mlrecipe (the nodes inherit it)
SECRETS = (FILE_TOKEN, FILE_PLAIN, SET_SECRET, ENV_SECRET)

NODE = """echo "rank $PET_NODE_RANK reached the all_reduce"
reached="$MLRECIPE_PIPELINE_DIR/rank-0-reached"
if [ "$PET_NODE_RANK" = 0 ]; then touch "$reached"; fi
if [ "$PET_NODE_RANK" = 1 ]; then
  for _ in $(seq 600); do [ -e "$reached" ] && break; sleep 0.1; done  # fails only once rank 0 has logged
  beside="$(dirname "$MLRECIPE_METRICS_FILE")"
  echo "Thread 0x7f (most recent call first): in sleepy_rank" > "$beside/stacks-node-1-$$.txt"
  echo "rank 1 fails" >&2
  exit 3
fi
"""
PREP = 'echo "prep sees token=$HF_TOKEN wandb=$WANDB_API_KEY service=$MY_SERVICE_PASSWORD"\n'


def _pipeline(directory: Path) -> Path:
    (directory / "node.sh").write_text(NODE)
    (directory / "prep.sh").write_text(PREP)
    (directory / "prep.yaml").write_text(
        f"process:\n  command: [bash, {directory / 'prep.sh'}]\n  env:\n    - {{name: HF_TOKEN, value: {FILE_TOKEN}}}\n"
        f"    - {{name: WANDB_API_KEY, value: {FILE_PLAIN}}}\n    - {{name: MODE, value: fast}}\n")
    (directory / "train.yaml").write_text(f"resources: {{nnodes: 2}}\nprocess:\n"
                                          f"  command: [bash, {directory / 'node.sh'}]\n")
    pipeline = directory / "pipeline.yaml"
    pipeline.write_text("release: dbt\nnamespace: default\nsteps:\n"
                        "  - {name: prep, chart: data-prep/data-process, recipe: prep.yaml}\n"
                        "  - {name: train, chart: data-prep/data-process, recipe: train.yaml}\n")
    return pipeline


def _mlrecipe(home: Path, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**cli_env(home), "MY_SERVICE_PASSWORD": ENV_SECRET}
    return subprocess.run([*MLRECIPE, *args], env=env, capture_output=True, text=True, timeout=180, cwd=cwd)


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name.split("/", 1)[1]: (tar.extractfile(m) or b"").read() for m in tar.getmembers() if m.isfile()}


def test_the_bundle_of_a_failed_two_node_pipeline(tmp_path: Path, mlhome: Path) -> None:
    pipeline = _pipeline(tmp_path)
    ran = _mlrecipe(mlhome, "run", str(pipeline), "--set", "train.process.env[0].name=DB_PASSWORD", "--set",
                    f"train.process.env[0].value={SET_SECRET}", "--keep-on-failure")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert (tmp_path / "rank-0-reached").exists(), "rank 1 failed only after rank 0 logged"
    assert "--keep-on-failure: step train left nothing on local to keep" in ran.stdout
    assert "mlrecipe debug-bundle local://default/dbt" in ran.stdout
    steps = mlhome / "releases" / "local" / "default" / "dbt" / "steps"
    assert FILE_TOKEN in (steps / "prep" / "node-0.log").read_text(), "the step printed its credentials"

    out = tmp_path / "bundle.tar.gz"
    made = _mlrecipe(mlhome, "debug-bundle", "dbt", "-o", str(out))
    assert made.returncode == 0, made.stderr
    assert made.stdout == f"{out}\n"
    assert "debug-bundle: step train: 4 file(s) of its directory" in made.stderr, made.stderr
    members = _members(out)

    assert b"rank 0 reached the all_reduce" in members["steps/train/node-0.log"]
    assert b"rank 1 fails" in members["steps/train/node-1.log"]
    stacks = [n for n in members if n.startswith("steps/train/stacks-node-1-")]
    assert len(stacks) == 1 and b"sleepy_rank" in members[stacks[0]], "files beside the logs come along"
    plans = members["plans/template.txt"].decode()
    assert "# step prep (data-prep/data-process)" in plans and "# step train (data-prep/data-process) on backend " \
        "local: 2 node(s)" in plans and "# node 1:" in plans
    assert b'"state": "failed"' in members["state.json"]
    versions = members["versions.txt"].decode()
    assert "\nmlrecipe\t" in versions and "\npython\t" in versions and "\ntorch\t" in versions
    assert "nvidia-driver" in versions or "# NVIDIA driver" in versions
    assert b"HF_TOKEN=******" in members["environment/prep.env"] and b"MODE=fast" in members["environment/prep.env"]
    assert b"DB_PASSWORD=******" in members["environment/train.env"]
    assert b"MY_SERVICE_PASSWORD=******" in members["environment/debug-bundle-process.env"]
    assert b"prep sees token=****** wandb=****** service=******" in members["steps/prep/node-0.log"]
    manifest = members["MANIFEST.txt"].decode()
    assert "steps/train/node-1.log" in manifest and "Not collected:" in manifest
    assert "export DB_PASSWORD" in manifest, "the plan of a step given a credential with --set cannot be compared"
    leaks = [(name, s) for name, data in members.items() for s in SECRETS if s.encode() in data]
    assert leaks == []

    default = _mlrecipe(mlhome, "debug-bundle", "local://default/dbt/train", cwd=tmp_path)
    assert default.returncode == 0, default.stderr
    (written,) = tmp_path.glob("dbt-debug-*.tar.gz")
    assert default.stdout == f"{written}\n"
    only = _members(written)
    assert "steps/train/node-1.log" in only and not any(n.startswith("steps/prep/") for n in only), \
        "a step's bundle: that step's files (and the whole release's plan and state)"
    assert "plans/template.txt" in only and "state.json" in only
