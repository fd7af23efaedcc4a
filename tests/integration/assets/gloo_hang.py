"""One rank per node joins a gloo group; rank 1 sleeps in ``stuck_before_allreduce`` before the all-reduce (always,
or only while the file ``$HANG_ONCE`` does not exist yet: it is created then, so the next attempt goes through)."""

import os
import time

print(f"node {os.environ['PET_NODE_RANK']} importing torch", flush=True)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def stuck_before_allreduce() -> None:
    time.sleep(3600)


def main() -> None:
    rank, world = int(os.environ["PET_NODE_RANK"]), int(os.environ["PET_NNODES"])
    address = f"tcp://{os.environ['PET_MASTER_ADDR']}:{os.environ['PET_MASTER_PORT']}"
    dist.init_process_group("gloo", init_method=address, rank=rank, world_size=world)
    print(f"rank {rank} joined at {time.time():.3f}", flush=True)
    once = os.environ.get("HANG_ONCE")
    if rank == 1 and not (once and os.path.exists(once)):
        if once:
            open(once, "w").close()
        stuck_before_allreduce()
    total = torch.ones(1)
    dist.all_reduce(total)
    print(f"rank {rank} sum={total.item():.0f}", flush=True)
    dist.destroy_process_group()


main()
