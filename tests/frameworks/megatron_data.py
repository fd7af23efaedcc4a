"""Helpers of the megatron data-preparation tests: a real HTTP server for shards, the corpus, the script runner.

The shards and the BPE tokenizer come from :mod:`mlrecipe_scripts.megatron.data.sample_corpus` (text that ships
with Python); the server is ``http.server`` on 127.0.0.1 and records every request it answers.
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PREPARE = REPO / "charts" / "machine-learning" / "data-prep" / "mpijob-data-process" / "scripts" / "megatron" / \
    "data" / "prepare.py"
RANK_VARS = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "RANK", "WORLD_SIZE",
             "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")


@dataclass
class ShardServer:
    """Serves ``root`` on 127.0.0.1; ``delay`` seconds after every ``chunk`` bytes sent (a slow mirror)."""

    root: Path
    delay: float = 0.0
    chunk: int = 4096
    requests: list[str] = field(default_factory=list)
    port: int = 0

    def __enter__(self) -> ShardServer:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests.append(self.path)
                path = server.root / self.path.lstrip("/")
                if not path.is_file():
                    self.send_error(404)
                    return
                body = path.read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    for start in range(0, len(body), server.chunk):
                        self.wfile.write(body[start:start + server.chunk])
                        if server.delay:
                            self.wfile.flush()
                            time.sleep(server.delay)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, format: str, *args: object) -> None:
                return None

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def count(self, name: str) -> int:
        """How many requests asked for ``name``."""
        return sum(1 for r in self.requests if r.rstrip("/").endswith("/" + name))


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any rank or launcher variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARS and not k.startswith("OMPI_")}
    env.update(extra)
    return env


def prepare_command(*args: str) -> list[str]:
    """The chart tree's ``data/prepare.py`` with ``args`` (as a recipe runs it)."""
    return [sys.executable, str(PREPARE), *args]


def run_prepare(*args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``data/prepare.py`` once (rank variables only from ``env``)."""
    return subprocess.run(prepare_command(*args), env=clean_env(**env), capture_output=True, text=True,
                          timeout=timeout, check=False)


def error_lines(stderr: str) -> list[str]:
    """The ``error:`` lines of a run's stderr."""
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@dataclass(frozen=True)
class Corpus:
    """Served shards (``NN.jsonl.zst`` + ``sha256sums.txt``) and a BPE tokenizer folder."""

    shards: Path
    tokenizer: Path

    def texts(self, number: int) -> list[str]:
        """The documents of shard ``number``, in order."""
        import json

        import zstandard

        raw = zstandard.ZstdDecompressor().decompressobj().decompress((self.shards / f"{number:02d}.jsonl.zst")
                                                                      .read_bytes())
        return [json.loads(line)["text"] for line in raw.decode().splitlines() if line.strip()]


def make_corpus(folder: Path, shards: int = 4, repeat: int = 1) -> Corpus:
    """``shards`` Pile-shaped shards and a tokenizer trained on the same text, below ``folder``."""
    from mlrecipe_scripts.megatron.data import sample_corpus

    sample_corpus.write_shards(folder / "mirror", shards, repeat)
    sample_corpus.train_tokenizer(folder / "tokenizer")
    return Corpus(folder / "mirror", folder / "tokenizer")


def stage_shards(corpus: Corpus, data: Path, numbers: tuple[int, ...]) -> None:
    """Place the corpus's ``NN.jsonl.zst`` in ``data`` as a finished download stage would (no server needed)."""
    import shutil

    data.mkdir(parents=True, exist_ok=True)
    for number in numbers:
        shutil.copyfile(corpus.shards / f"{number:02d}.jsonl.zst", data / f"{number:02d}.jsonl.zst")
