"""Start a local inference server: vLLM's OpenAI server (default) or the transformers engine, with the gateway.

    python -m mlrecipe.serve --model /fsx/quickstart/model --served-model-name quickstart [ENGINE ARGS...]

The port comes from ``--port``, else ``$PORT`` / ``$MLRECIPE_SERVER_PORT`` (the local backend sets both),
else 8000; the host from ``--host``, else ``$MLRECIPE_SERVER_HOST``, else 127.0.0.1. Arguments this
command does not know are vLLM engine arguments (``--max-model-len 128``, ``--chat-template FILE`` ...).
The API key is read from the environment variable named by ``--api-key-env`` (default
``MLRECIPE_API_KEY``) or from ``--api-key-file``; it never appears on a command line or in a log.
On a machine with several CPUs the engine runs on all but the last and the HTTP front on the last
(``mlrecipe.serve.placement``; ``--no-cpu-placement`` to share them).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys

from mlrecipe.serve.gateway import CONFIG_VAR, GatewayConfig
from mlrecipe.serve.placement import VLLM_BIND_VAR, CpuPlacement, cpu_list

VLLM_SERVER = "vllm.entrypoints.openai.api_server"
# On vLLM's CPU build the "GPU" memory fraction is the memory reserved on the NUMA node; the KV cache size
# itself comes from VLLM_CPU_KVCACHE_SPACE (GiB).
CPU_MEMORY_FRACTION = "0.2"
CPU_KVCACHE_GIB = "1"


def _default_port() -> int:
    return int(os.environ.get("PORT") or os.environ.get("MLRECIPE_SERVER_PORT") or 8000)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mlrecipe.serve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", choices=["vllm", "transformers"], default="vllm")
    p.add_argument("--model", required=True, help="Hugging Face directory (config, weights, tokenizer)")
    p.add_argument("--served-model-name", default=None, help="model id in the API (default: --model)")
    p.add_argument("--host", default=os.environ.get("MLRECIPE_SERVER_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--max-inflight", type=int, default=64,
                   help="generation requests admitted at once; beyond: 429 with Retry-After")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, help="larger request bodies get 413")
    p.add_argument("--retry-after", type=int, default=1, help="Retry-After seconds of a 429")
    p.add_argument("--api-key-env", default="MLRECIPE_API_KEY", help="env var holding the API key (if set)")
    p.add_argument("--api-key-file", default=None, help="file holding the API key")
    p.add_argument("--chat-template", default=None, help="Jinja chat template file (both engines)")
    p.add_argument("--no-cpu-placement", dest="cpu_placement", action="store_false",
                   help="leave the engine and the HTTP front on every CPU (default on CPU machines: the engine on "
                        "all CPUs but the last, the front on the last; also MLRECIPE_SERVE_CPU_PLACEMENT=off)")
    return p


def gateway_config(args: argparse.Namespace) -> GatewayConfig:
    return GatewayConfig(max_body_bytes=args.max_body_bytes, max_inflight=args.max_inflight,
                         retry_after_s=args.retry_after, api_key_env=args.api_key_env,
                         api_key_file=args.api_key_file, server_name=f"mlrecipe-{args.engine}")


def vllm_argv(args: argparse.Namespace, extra: list[str]) -> list[str]:
    argv = [sys.executable, "-m", VLLM_SERVER, "--model", args.model, "--host", args.host,
            "--port", str(args.port), "--middleware", "mlrecipe.serve.gateway.Gateway"]
    if args.served_model_name:
        argv += ["--served-model-name", args.served_model_name]
    if args.chat_template:
        argv += ["--chat-template", args.chat_template]
    if on_cpu() and not any(a.startswith("--gpu-memory-utilization") for a in extra):
        argv += ["--gpu-memory-utilization", CPU_MEMORY_FRACTION]
    return argv + extra


PARALLEL_FLAGS = {"--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp"}


def engine_ranks(extra: list[str]) -> int:
    """How many engine ranks vLLM's arguments ask for (tensor x pipeline x data parallel); 1 by default."""
    ranks = 1
    for i, arg in enumerate(extra):
        flag, eq, value = arg.partition("=")
        if flag in PARALLEL_FLAGS:
            value = value if eq else (extra[i + 1] if i + 1 < len(extra) else "1")
            ranks *= int(value) if value.isdigit() else 1
    return ranks


def on_cpu() -> bool:
    """Whether vLLM runs its CPU build here (no NVIDIA GPU)."""
    return shutil.which("nvidia-smi") is None


def set_cpu_env() -> None:
    """vLLM CPU settings unless the user chose: a 1 GiB KV cache (``VLLM_CPU_KVCACHE_SPACE``)."""
    if on_cpu():
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", CPU_KVCACHE_GIB)


def announce(placement: CpuPlacement) -> None:
    print(f"mlrecipe.serve: engine on CPUs {cpu_list(placement.engine)}, HTTP front on CPU "
          f"{cpu_list(placement.front)} (--no-cpu-placement to share them)", flush=True)


def main(argv: list[str] | None = None) -> int:
    args, extra = parser().parse_known_args(argv)
    if args.port is None:
        args.port = _default_port()
    config = gateway_config(args)
    try:
        config.api_key()
    except OSError as exc:
        print(f"mlrecipe.serve: cannot read the API key file: {exc.strerror}", file=sys.stderr)
        return 2
    os.environ[CONFIG_VAR] = config.to_env()
    placement = CpuPlacement.plan() if args.cpu_placement else None
    if args.engine == "vllm":
        if importlib.util.find_spec("vllm") is None:
            print(f"mlrecipe.serve: vLLM is not installed in {sys.prefix}. Create the serving environment with "
                  "'make serve-env' (.venv-vllm) and map the recipe's image to it (local.images in "
                  "$MLRECIPE_HOME/config.yaml or MLRECIPE_IMAGES), or use --engine transformers.", file=sys.stderr)
            return 2
        set_cpu_env()
        vllm_places = on_cpu() and engine_ranks(extra) == 1 and VLLM_BIND_VAR not in os.environ
        if placement and vllm_places:
            placement.start_vllm_engine_here(os.environ)
            announce(placement)
        cmd = vllm_argv(args, extra)
        print("mlrecipe.serve: exec " + " ".join(cmd), flush=True)
        os.execv(cmd[0], cmd)
    if extra:
        print(f"mlrecipe.serve: unknown arguments for the transformers engine: {' '.join(extra)}", file=sys.stderr)
        return 2
    from mlrecipe.serve.hf_engine import run

    if placement:
        announce(placement)
    return run(args, config, placement)
