"""Query the quickstart's server: OpenAI completions and chat, and the Triton / KServe v2 generate route.

Standard library only (any Python can run it). Exits 1 unless every call returns a real, non-empty
completion; prints the answer and writes it to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def call(url: str, body: dict | None = None, timeout: float = 120) -> dict:
    headers = {"Content-Type": "application/json"}
    if os.environ.get("MLRECIPE_API_KEY"):
        headers["Authorization"] = f"Bearer {os.environ['MLRECIPE_API_KEY']}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers, method="POST" if body is not None else "GET")
    try:
        with OPENER.open(request, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        sys.exit(f"{request.method} {url}: HTTP {exc.code}: {exc.read().decode(errors='replace')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True, help="the server's base URL ($MLRECIPE_SERVE_URL)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", default="The return statement")
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    base = args.url.rstrip("/")

    models = [m["id"] for m in call(f"{base}/v1/models")["data"]]
    print(f"server {base} serves {models}", flush=True)
    if args.model not in models:
        sys.exit(f"model {args.model} is not served (have {models})")

    t0 = time.perf_counter()
    # min_tokens (a vLLM sampling parameter): a tiny model often predicts end-of-text at once
    completion = call(f"{base}/v1/completions", {"model": args.model, "prompt": args.prompt, "min_tokens": 8,
                                                  "max_tokens": args.max_tokens, "temperature": 0})
    seconds = time.perf_counter() - t0
    text = completion["choices"][0]["text"]
    tokens = completion["usage"]["completion_tokens"]
    chat = call(f"{base}/v1/chat/completions", {"model": args.model, "max_tokens": 16, "temperature": 0,
                                                 "min_tokens": 4,
                                                 "messages": [{"role": "user", "content": "What is a list?"}]})
    reply = chat["choices"][0]["message"]["content"]
    v2 = call(f"{base}/v2/models/{args.model}/generate",
              {"text_input": args.prompt, "parameters": {"max_tokens": 16, "min_tokens": 4, "temperature": 0,
                                                         "exclude_input_in_output": True}})
    problems = [name for name, value in (("completion", text), ("chat", reply), ("v2 generate", v2["text_output"]))
                if not value.strip()]
    answer = {"prompt": args.prompt, "completion": text, "completion_tokens": tokens, "seconds": round(seconds, 3),
              "chat_reply": reply, "v2_text_output": v2["text_output"], "url": base}
    print(f"ANSWER: {args.prompt!r} -> {text!r} ({tokens} tokens in {seconds:.2f} s)", flush=True)
    print(f"CHAT: 'What is a list?' -> {reply!r}", flush=True)
    print(f"TRITON GENERATE: {v2['text_output']!r}", flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(answer, indent=2))
    if problems or tokens <= 0:
        sys.exit(f"empty answer from: {', '.join(problems) or 'completion usage'}")


if __name__ == "__main__":
    main()
