"""Serving throughput and latency: mlrecipe.serve (vLLM + gateway) vs ``vllm serve`` vs a naive engine.

    python benchmarks/bench_serving.py [--serve-env .venv-vllm] [--model DIR] [--levels 1 8 32]

All servers run on 127.0.0.1 on the same model (the quickstart's tiny Llama: built with the quickstart's
own scripts unless ``--model`` names an export; ``--hidden``/``--layers`` widen it), are warmed up at the
highest concurrency, then driven with non-streaming ``/v1/completions`` requests of ``--max-tokens``
generated tokens each (``ignore_eos``) at each concurrency level, one server at a time, in ``--rounds``
rounds that rotate the servers' order (so that drift on a shared machine hits every server alike).
Reported per server and level, as medians over the rounds: generated tokens per second (all tokens / wall
time, with the min-max over rounds), p50 and p99 request latency.

Every server gets the whole machine; the client runs on the last CPU. Servers:

- ``mlrecipe``: ``python -m mlrecipe.serve --engine vllm`` (vLLM's OpenAI server with the gateway middleware),
  which places itself: vLLM's engine on all CPUs but the last, the HTTP front on the last
  (``mlrecipe.serve.placement``);
- ``vllm``: vLLM's own server (``python -m vllm.entrypoints.openai.api_server``), same engine arguments,
  placed by this script exactly as mlrecipe.serve places itself;
- ``vllm-default``: the same server with vLLM's own CPU placement (everything on every CPU);
- ``naive``: ``python -m mlrecipe.serve --engine transformers`` (sequential transformers generation, same API),
  placed by mlrecipe.serve: generation thread on the engine CPUs, event loop on the last;
- ``naive-engine-cpus``: the same with ``--no-cpu-placement``, the whole process on the engine CPUs (away from
  the client).

Ratios, level by level: against ``vllm`` (same placement: what the gateway costs), against ``vllm-default``
(what a plain ``vllm serve`` on this machine gives), and against the better of the two naive variants.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from mlrecipe.ports import free_port
from mlrecipe.serve.placement import SWITCH_VAR, VLLM_BIND_VAR, CpuPlacement, cpu_list, pin_all_threads

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "examples" / "quickstart" / "scripts"


def build_model(root: Path) -> Path:
    """The quickstart's model shape (vocab 2048, 2 layers, hidden 128), trained for 20 steps."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, str(SCRIPTS / "prepare_data.py"), "--out", str(root / "data"),
                    "--vocab-size", "2048"], check=True, capture_output=True, env=env)
    subprocess.run([sys.executable, str(SCRIPTS / "train.py"), "--data", str(root / "data"), "--ckpt-dir",
                    str(root / "ckpt"), "--export", str(root / "model"), "--steps", "20", "--batch", "4"],
                   check=True, capture_output=True, env=env)
    return root / "model"


def widen(model: Path, out: Path, hidden: int, layers: int) -> Path:
    """The quickstart's tokenizer with a larger (random) Llama: where batching, not Python overhead, dominates."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(model)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 8 // 3,
                         num_hidden_layers=layers, num_attention_heads=max(1, hidden // 64),
                         num_key_value_heads=max(1, hidden // 64), max_position_embeddings=512, bos_token_id=0,
                         eos_token_id=0, pad_token_id=0, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


VLLM_KINDS = ("vllm", "vllm-default")
NAIVE_KINDS = ("naive", "naive-engine-cpus")
KINDS = ("mlrecipe", *VLLM_KINDS, *NAIVE_KINDS)


def server_argv(kind: str, python: str, model: Path, port: int) -> list[str]:
    common = ["--model", str(model), "--served-model-name", "m", "--host", "127.0.0.1", "--port", str(port)]
    if kind in VLLM_KINDS:
        return [python, "-m", "vllm.entrypoints.openai.api_server", *common, "--gpu-memory-utilization", "0.2"]
    if kind == "mlrecipe":
        return [python, "-m", "mlrecipe.serve", "--engine", "vllm", *common]
    placement = ["--no-cpu-placement"] if kind == "naive-engine-cpus" else []
    return [python, "-m", "mlrecipe.serve", "--engine", "transformers", *common, *placement]


def start(kind: str, python: str, model: Path, log: Path,
          placement: CpuPlacement | None) -> tuple[subprocess.Popen, str]:
    """Start one server on the CPUs its kind gets (see the module's docstring) and wait for its health route."""
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    for var in ("MLRECIPE_API_KEY", SWITCH_VAR, VLLM_BIND_VAR):
        env.pop(var, None)
    if placement is None:
        env[SWITCH_VAR] = "off"
    cpus = sorted(os.sched_getaffinity(0))
    if placement and kind in ("vllm", "naive-engine-cpus"):
        cpus = sorted(placement.engine)
    if placement and kind == "vllm":
        env[VLLM_BIND_VAR] = cpu_list(placement.engine)
    with open(log, "wb") as out:
        proc = subprocess.Popen(["taskset", "-c", cpu_list(cpus), *server_argv(kind, python, model, port)],
                                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{kind} server exited; see {log}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                if placement and kind == "vllm":  # what mlrecipe.serve's gateway does once vLLM's engine is up
                    pin_all_threads(placement.front, proc.pid)
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(1)
    stop(proc)
    raise RuntimeError(f"{kind} server not ready after 600 s; see {log}")


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


async def drive(url: str, concurrency: int, requests: int, max_tokens: int) -> dict:
    body = {"model": "m", "prompt": "The return statement", "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}
    latencies: list[float] = []
    tokens = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(i)

    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=concurrency + 4)) as client:
        async def worker() -> None:
            nonlocal tokens
            while not queue.empty():
                queue.get_nowait()
                t0 = time.perf_counter()
                r = await client.post(url + "/v1/completions", json=body)
                latencies.append(time.perf_counter() - t0)
                r.raise_for_status()
                tokens += r.json()["usage"]["completion_tokens"]

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))]
    return {"concurrency": concurrency, "requests": requests, "tokens": tokens, "seconds": round(wall, 3),
            "tokens_per_s": round(tokens / wall, 1), "p50_s": round(statistics.median(latencies), 3),
            "p99_s": round(p99, 3)}


def median_row(rows: list[dict]) -> dict:
    """One level's figures over the rounds: the median of each (tokens/s, p50, p99), and the spread of tokens/s."""
    rates = [r["tokens_per_s"] for r in rows]
    return {"concurrency": rows[0]["concurrency"], "requests": rows[0]["requests"], "rounds": len(rows),
            "tokens_per_s": round(statistics.median(rates), 1), "tokens_per_s_min": min(rates),
            "tokens_per_s_max": max(rates), "p50_s": round(statistics.median(r["p50_s"] for r in rows), 3),
            "p99_s": round(statistics.median(r["p99_s"] for r in rows), 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve-env", default=str(REPO / ".venv-vllm"))
    parser.add_argument("--model", default=None, help="a Hugging Face export (default: build the quickstart model)")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--requests-per-worker", type=int, default=8, help="requests = max(8, this * concurrency)")
    parser.add_argument("--rounds", type=int, default=5, help="measurement rounds (servers interleaved); medians")
    parser.add_argument("--servers", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--no-pin", dest="pin", action="store_false",
                        help="no CPU placement: the client and every server on every CPU")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds of quiet before each measurement")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--hidden", type=int, default=None, help="serve a larger random Llama of this width ...")
    parser.add_argument("--layers", type=int, default=8, help="... and this depth (with --hidden)")
    args = parser.parse_args()
    python = str(Path(args.serve_env) / "bin" / "python")
    work = Path(tempfile.mkdtemp(prefix="bench-serving-"))
    model = Path(args.model) if args.model else build_model(work)
    if args.hidden:
        model = widen(model, work / f"llama-{args.hidden}x{args.layers}", args.hidden, args.layers)
    placement = CpuPlacement.plan() if args.pin else None
    servers: dict[str, tuple[subprocess.Popen, str]] = {}
    raw: dict[str, dict[int, list[dict]]] = {kind: {c: [] for c in args.levels} for kind in args.servers}
    try:
        for kind in args.servers:  # all up at once (idle servers take no CPU), so that rounds can interleave
            servers[kind] = start(kind, python, model, work / f"{kind}.log", placement)
            peak = max(args.levels)
            asyncio.run(drive(servers[kind][1], peak, 2 * peak, args.max_tokens))  # warm-up at the peak level
        if placement:  # the client on the front CPU, started servers keep their own masks
            os.sched_setaffinity(0, placement.front)
        for r in range(args.rounds):
            order = args.servers[r % len(args.servers):] + args.servers[:r % len(args.servers)]
            for c in args.levels:
                for kind in order:
                    time.sleep(args.settle)  # let the previous server's spinning OpenMP threads go idle
                    row = asyncio.run(drive(servers[kind][1], c, max(8, args.requests_per_worker * c),
                                            args.max_tokens))
                    raw[kind][c].append(row)
                    print(f"round {r + 1}/{args.rounds} {kind:17s} c={c:<3d} {row['tokens_per_s']:8.1f} tok/s  "
                          f"p50 {row['p50_s']:.3f} s  p99 {row['p99_s']:.3f} s", flush=True)
    finally:
        for proc, _ in servers.values():
            stop(proc)
    results = {kind: [median_row(raw[kind][c]) for c in args.levels] for kind in args.servers}
    print(f"\nmedians over {args.rounds} rounds, {args.max_tokens} generated tokens per request, model {model.name}")
    print("| server | concurrency | generated tok/s (min-max) | p50 latency | p99 latency |")
    print("|---|---|---|---|---|")
    for kind, rows in results.items():
        for row in rows:
            print(f"| {kind} | {row['concurrency']} | {row['tokens_per_s']:.0f} ({row['tokens_per_s_min']:.0f}-"
                  f"{row['tokens_per_s_max']:.0f}) | {row['p50_s'] * 1000:.0f} ms | {row['p99_s'] * 1000:.0f} ms |")
    ratios = {}
    comparisons = (("vllm", ["vllm"]), ("vllm_default_placement", ["vllm-default"]),
                   ("naive_best_placement", [k for k in NAIVE_KINDS if k in results]))
    for name, others in comparisons:
        if "mlrecipe" in results and others and all(k in results for k in others):
            best = [max((results[k][i] for k in others), key=lambda row: row["tokens_per_s"])
                    for i in range(len(args.levels))]
            ratios[f"mlrecipe_vs_{name}"] = {r["concurrency"]: round(r["tokens_per_s"] / b["tokens_per_s"], 2)
                                             for r, b in zip(results["mlrecipe"], best, strict=True)}
    for name, values in ratios.items():
        print(f"{name}: " + ", ".join(f"c={c}: {v}x" for c, v in values.items()))
    if args.out:
        Path(args.out).write_text(json.dumps({"results": results, "raw": raw, "ratios": ratios,
                                              "max_tokens": args.max_tokens, "rounds": args.rounds}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
