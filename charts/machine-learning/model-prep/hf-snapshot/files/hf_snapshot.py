"""Download one Hugging Face Hub snapshot into $SNAPSHOT_ROOT/$HF_MODEL_ID (mlrecipe hf-snapshot chart).

Environment: HF_MODEL_ID (required), HF_REVISION, HF_TENSORS ("true": also weight files),
SNAPSHOT_ROOT (default /fsx/pretrained-models), HF_TOKEN (from a Kubernetes Secret).
"""

import os
import sys


def main() -> int:
    model_id = os.environ.get("HF_MODEL_ID", "").strip()
    if not model_id:
        print("HF_MODEL_ID must be set", file=sys.stderr)
        return 2
    from huggingface_hub import snapshot_download

    with_tensors = os.environ.get("HF_TENSORS", "true").lower() in ("1", "true", "yes")
    ignore = ["*.msgpack", "*.h5"]
    if not with_tensors:
        ignore += ["*.bin", "*.safetensors", "*.pt", "*.pth", "*.gguf"]
    target = os.path.join(os.environ.get("SNAPSHOT_ROOT", "/fsx/pretrained-models"), model_id)
    os.makedirs(target, exist_ok=True)
    print(f"downloading {model_id} to {target} (tensors: {with_tensors})", flush=True)
    path = snapshot_download(
        repo_id=model_id,
        revision=os.environ.get("HF_REVISION") or None,
        local_dir=target,
        ignore_patterns=ignore,
        token=os.environ.get("HF_TOKEN") or None,
    )
    print(f"snapshot ready at {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
