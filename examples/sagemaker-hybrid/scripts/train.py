"""DDP training of the small CNN on the digits, one process per host or GPU (torchrun), SageMaker-style paths.

Reads ``train.npz`` / ``test.npz`` from ``--data-dir`` (default: the ``training`` channel, ``SM_CHANNEL_TRAINING``),
writes ``model.pth`` and the serving code (``code/inference.py`` with ``preprocess.py`` and ``model.py``) to
``--model-dir`` (default ``SM_MODEL_DIR``), so that the packed ``model.tar.gz`` is what the endpoint serves.
gloo on CPU, NCCL on GPUs. At the end every rank's weights are hashed and compared: a mismatch fails the step.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the example's own modules, beside this file

from model import build_model  # noqa: E402
from preprocess import to_model_input  # noqa: E402

SERVING_CODE = ("inference.py", "preprocess.py", "model.py")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("SM_CHANNEL_TRAINING", "data")))
    parser.add_argument("--model-dir", type=Path, default=Path(os.environ.get("SM_MODEL_DIR", "model")))
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def load(path: Path) -> TensorDataset:
    with np.load(path) as data:
        return TensorDataset(to_model_input(data["images"]), torch.as_tensor(data["labels"]))


def report(step: int, total: int, **metrics: float) -> None:
    """One progress line for mlrecipe's live display, when the step has a metrics file."""
    path = os.environ.get("MLRECIPE_METRICS_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"time": time.time(), "step": step, "total": total, "metrics": metrics}) + "\n")


def weights_digest(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def accuracy(model: nn.Module, data: TensorDataset, device: torch.device) -> float:
    model.eval()
    with torch.no_grad():
        images, labels = data.tensors
        predicted = model(images.to(device)).argmax(dim=1).cpu()
    return float((predicted == labels).float().mean())


def main() -> int:
    args = parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    torch.manual_seed(args.seed)
    train, test = load(args.data_dir / "train.npz"), load(args.data_dir / "test.npz")
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    model = DistributedDataParallel(build_model().to(device), device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    total = args.epochs * len(loader)
    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for images, labels in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(images.to(device)), labels.to(device))
            loss.backward()
            optimizer.step()
            step += 1
        held_out = accuracy(model.module, test, device)
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs} loss {loss.item():.4f} held-out accuracy {held_out:.3f}",
                  flush=True)
            report(step, total, loss=round(loss.item(), 4), accuracy=round(held_out, 4))
    digests: list[str | None] = [None] * world
    dist.all_gather_object(digests, weights_digest(model.module))
    identical = len(set(digests)) == 1
    if rank == 0:
        print(f"final held-out accuracy {held_out:.4f}")
        print(f"weights identical on all {world} ranks: {identical} (sha256 {digests[0]})")
        args.model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(model.module.state_dict(), args.model_dir / "model.pth")
        (args.model_dir / "weights.sha256.json").write_text(json.dumps(digests), encoding="utf-8")
        code = args.model_dir / "code"
        code.mkdir(exist_ok=True)
        for name in SERVING_CODE:
            shutil.copy2(HERE / name, code / name)
    dist.destroy_process_group()
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
