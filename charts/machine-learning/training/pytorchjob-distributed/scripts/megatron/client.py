"""Query the served export and check it is the trained model: greedy completions of fixed prompts through the
OpenAI API (temperature 0) must be token for token what transformers' greedy ``generate`` of the same export gives.

Prints one ``ANSWER`` line per prompt, writes the comparison to ``--out`` (JSON) and exits 1 on any difference
(or when the model decodes nothing at all). Needs torch and transformers (the export is read from ``--model-dir``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
PROMPTS = ("The return statement", "A list is", "Raise an exception when", "import sys\n")


def complete(base: str, model: str, prompt: str, max_tokens: int) -> dict:
    headers = {"Content-Type": "application/json"}
    if os.environ.get("MLRECIPE_API_KEY"):
        headers["Authorization"] = f"Bearer {os.environ['MLRECIPE_API_KEY']}"
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "return_token_ids": True}
    request = urllib.request.Request(f"{base}/v1/completions", data=json.dumps(body).encode(), headers=headers)
    try:
        with OPENER.open(request, timeout=300) as resp:
            return json.loads(resp.read())["choices"][0]
    except urllib.error.HTTPError as exc:
        sys.exit(f"POST {base}/v1/completions: HTTP {exc.code}: {exc.read().decode(errors='replace')}")


def until_eos(ids: list[int], eos: int | None) -> list[int]:
    return ids[:ids.index(eos) + 1] if eos is not None and eos in ids else ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the server's base URL ($MLRECIPE_SERVE_URL)")
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument("--model-dir", required=True, help="the exported Hugging Face folder")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--out")
    args = parser.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32).eval()
    rows, same = [], True
    for prompt in PROMPTS:
        ids = tok(prompt, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=args.max_tokens, do_sample=False, pad_token_id=tok.eos_token_id)
        expected = until_eos(out[0, ids.shape[1]:].tolist(), tok.eos_token_id)
        choice = complete(args.url.rstrip("/"), args.model, prompt, args.max_tokens)
        served = until_eos(list(choice.get("token_ids") or []), tok.eos_token_id)
        match = served == expected and choice.get("prompt_token_ids") == ids[0].tolist()
        same = same and match and bool(served)
        print(f"ANSWER {prompt!r} -> {choice['text']!r} ({len(served)} tokens; "
              f"{'same as' if match else 'DIFFERENT from'} transformers' greedy generate)", flush=True)
        rows.append({"prompt": prompt, "served": served, "transformers": expected, "text": choice["text"],
                     "identical": match})
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"identical": same, "prompts": rows}, indent=2) + "\n")
    print(f"served greedy decoding {'is' if same else 'is NOT'} token-identical to transformers' on "
          f"{len(PROMPTS)} prompts", flush=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
