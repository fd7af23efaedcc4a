"""Embeddings throughput: the Triton encoder_transformers embeddings model vs mlrecipe.serve's transformers engine.

    python benchmarks/bench_triton_embeddings.py [--levels 1 16] [--requests 600] [--seconds 15] [--rounds 2]

One random BERT built from a config (``--hidden``/``--layers``; no hub), its tokenizer saved beside it, behind:

- ``triton``: the real ``tritonserver`` of ``make triton-env`` (``.venv-triton``) with
  ``scripts/encoder_transformers/embeddings.py`` as a python-backend model (mean pooling, L2-normalised;
  config.pbtxt ``max_batch_size: 8``, ``dynamic_batching``), KServe v2 ``POST /v2/models/embeddings/infer``;
- ``mlrecipe-serve``: ``python -m mlrecipe.serve --engine transformers`` from ``.venv-vllm`` (``make serve-env``),
  the same pooling, OpenAI ``POST /v1/embeddings``; it places itself (engine thread on all CPUs but the last).

Each request embeds one sentence of ``--words`` words. Per concurrency level the client sends at most
``--requests`` requests or for at most ``--seconds`` (whichever ends first), after a warm-up; servers run one at
a time, in ``--rounds`` rounds that alternate their order. Reported: requests per second (median over rounds,
min-max) and p50 latency. Both servers run on 127.0.0.1 and get the whole machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mlrecipe.ports import free_port  # noqa: E402
from tests.integration.triton_models import WORDS, add_model, build_model  # noqa: E402


def start(kind: str, model: Path, repo: Path, log: Path, triton_env: Path,
          serve_env: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    if kind == "triton":
        env.update(MLRECIPE_SERVER_PORT=str(port), PATH=f"{triton_env / 'bin'}:{env.get('PATH', '')}")
        argv = [str(triton_env / "bin" / "tritonserver"), f"--model-repository={repo}",
                "--disable-auto-complete-config"]
        health = "/v2/health/ready"
    else:
        argv = [str(serve_env / "bin" / "python"), "-m", "mlrecipe.serve", "--engine", "transformers", "--model",
                str(model), "--served-model-name", "embeddings", "--port", str(port), "--max-inflight", "256"]
        health = "/health"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{kind} exited with {proc.returncode}; log:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + health, timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"{kind} not ready in 180 s; log:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, 9)
        proc.wait()


def request(kind: str, url: str, text: str) -> tuple[str, dict]:
    if kind == "triton":
        return (url + "/v2/models/embeddings/infer",
                {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1, 1], "data": [text]}]})
    return url + "/v1/embeddings", {"model": "embeddings", "input": text}


async def drive(kind: str, url: str, texts: list[str], concurrency: int, limit: int, seconds: float,
                hidden: int) -> tuple[float, float, int]:
    """(requests/s, p50 latency s, requests done) at ``concurrency``."""
    latencies: list[float] = []
    sent = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:
        start = time.perf_counter()
        deadline = start + seconds

        async def worker() -> None:
            nonlocal sent
            while sent < limit and time.perf_counter() < deadline:
                sent += 1
                target, body = request(kind, url, texts[sent % len(texts)])
                t0 = time.perf_counter()
                resp = await client.post(target, json=body)
                latencies.append(time.perf_counter() - t0)
                resp.raise_for_status()
                data = resp.json()
                size = len(data["outputs"][0]["data"]) if kind == "triton" else len(data["data"][0]["embedding"])
                assert size == hidden, f"{kind}: embedding of {size} values, expected {hidden}"

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return len(latencies) / wall, statistics.median(latencies), len(latencies)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--levels", type=int, nargs="+", default=[1, 16])
    p.add_argument("--requests", type=int, default=600, help="most requests per level and round")
    p.add_argument("--seconds", type=float, default=15.0, help="most seconds per level and round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--words", type=int, default=16)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--triton-env", type=Path, default=REPO / ".venv-triton")
    p.add_argument("--serve-env", type=Path, default=REPO / ".venv-vllm")
    args = p.parse_args()
    for env, target in ((args.triton_env, "triton-env"), (args.serve_env, "serve-env")):
        if not (env / "bin" / "python").exists():
            raise SystemExit(f"no environment at {env}: run 'make {target}'")
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(args.words)) for _ in range(64)]
    results: dict[tuple[str, int], list[tuple[float, float, int]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-triton-") as tmp:
        root = Path(tmp)
        model = build_model("embeddings", root / "model", hidden=args.hidden, layers=args.layers, heads=4)
        add_model(root / "repo", "embeddings", model)
        kinds = ["triton", "mlrecipe-serve"]
        for rnd in range(args.rounds):
            for kind in kinds if rnd % 2 == 0 else kinds[::-1]:
                proc, url = start(kind, model, root / "repo", root / f"{kind}.log", args.triton_env, args.serve_env)
                try:
                    asyncio.run(drive(kind, url, texts, max(args.levels), 2 * max(args.levels), 30, args.hidden))
                    for level in args.levels:
                        got = asyncio.run(drive(kind, url, texts, level, args.requests, args.seconds, args.hidden))
                        results.setdefault((kind, level), []).append(got)
                        print(f"round {rnd + 1} {kind:15s} c={level:<3d} {got[0]:8.1f} req/s  p50 "
                              f"{got[1] * 1000:7.1f} ms  ({got[2]} requests)", flush=True)
                finally:
                    stop(proc)
    print(f"\nembeddings, BERT hidden {args.hidden} x {args.layers} layers, {args.words}-word sentences, "
          f"{os.cpu_count()} CPUs; medians over {args.rounds} round(s)")
    print(f"{'server':15s} {'conc':>4s} {'req/s':>8s} {'(min-max)':>15s} {'p50 ms':>8s}")
    for level in args.levels:
        for kind in ("triton", "mlrecipe-serve"):
            runs = results[(kind, level)]
            rps = [r[0] for r in runs]
            print(f"{kind:15s} {level:4d} {statistics.median(rps):8.1f} {f'({min(rps):.1f}-{max(rps):.1f})':>15s} "
                  f"{statistics.median(r[1] for r in runs) * 1000:8.1f}")
        ratio = statistics.median(r[0] for r in results[("triton", level)]) / \
            statistics.median(r[0] for r in results[("mlrecipe-serve", level)])
        print(f"{'triton / serve':15s} {level:4d} {ratio:8.2f}x")


if __name__ == "__main__":
    main()
