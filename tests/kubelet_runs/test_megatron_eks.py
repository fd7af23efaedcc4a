"""The NeMo-on-EKS source system's data step, as its example renders it for EKS, run by the harness: the MPIJob of
``examples/frameworks/megatron`` (``data.yaml`` + ``eks/data-mpijob.yaml``, sizes cut to 2 workers x 1 slot and the
shard source pointed at a mirror on 127.0.0.1) prepares two Pile-shaped shards on two sshd workers into
``/fsx/<release>/data`` and rank 0 writes the manifest."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.frameworks.megatron_data import ShardServer, make_corpus
from tests.repo import BIN, EXAMPLES, REPO, cli_env

pytest.importorskip("zstandard")
pytest.importorskip("tokenizers")
pytestmark = [pytest.mark.integration, pytest.mark.slow]

MEGATRON = EXAMPLES / "frameworks" / "megatron"


def test_the_examples_eks_data_step_runs_on_sshd_workers(tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "corpus", shards=2)
    claim = tmp_path / "fsx"
    shutil.copytree(corpus.tokenizer, claim / "tokenizer")
    with ShardServer(corpus.shards) as server:
        sizes = tmp_path / "here.yaml"
        sizes.write_text(textwrap.dedent(f"""\
            resources: {{nnodes: 2, nproc_per_node: 1, requests: {{cpu: "1"}}, limits: {{}}}}
            process:
              env:
                - name: DATA_DIR
                  value: "/fsx/{{{{ .Release.Name }}}}/data"
                - name: PILE_URL
                  value: {server.url}
                - name: TOKENIZER_DIR
                  value: /fsx/tokenizer
            launcher:
              args: [--source-url $PILE_URL, --file-numbers 0-1, --data-dir $DATA_DIR, --output-prefix pile,
                     --tokenizer-dir $TOKENIZER_DIR, --append-eod, --rm-downloaded]
            """))
        rendered = subprocess.run(
            [str(BIN / "mlrecipe"), "template", "gpt", "data-prep/mpijob-data-process",
             "-f", str(MEGATRON / "data.yaml"), "-f", str(MEGATRON / "eks" / "data-mpijob.yaml"), "-f", str(sizes),
             "-b", "kubernetes"],
            env=cli_env(tmp_path / "mlhome"), capture_output=True, text=True, timeout=120, check=True).stdout
        objects = [o for o in yaml.safe_load_all(rendered) if o]
        mpijob = next(o for o in objects if o["kind"] == "MPIJob")
        worker = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        assert worker["command"] == ["/usr/sbin/sshd", "-De"] and worker["image"] == "nvcr.io/nvidia/nemo:25.09"
        stream = tmp_path / "stream.yaml"
        stream.write_text(rendered)
        done = subprocess.run([sys.executable, "-m", "tests.kubelet", str(stream), "--logs", str(tmp_path / "logs"),
                               "--timeout", "240", "--pvc", f"pv-fsx={claim}"],
                              cwd=REPO, capture_output=True, text=True, timeout=300)
        assert sorted(server.requests) == ["/00.jsonl.zst", "/01.jsonl.zst"]
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((claim / "gpt" / "data" / "manifest.json").read_text())
    assert manifest["ranks"] == 2 and [p["file_number"] for p in manifest["prefixes"]] == [0, 1]
    assert manifest["documents"] == sum(len(corpus.texts(n)) for n in (0, 1))
    launcher = next((tmp_path / "logs").glob("dist-data-process-gpt-launcher-*/launcher.log")).read_text()
    assert "[rank 0/2] file numbers [0] of 2" in launcher and "[rank 1/2] file numbers [1] of 2" in launcher
