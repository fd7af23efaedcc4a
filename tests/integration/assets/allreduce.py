"""Joins the process group from the launcher's env and checks a real all-reduce."""

import os

import torch
import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("gloo")
    value = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(value)
    print(f"rank={dist.get_rank()} world_size={dist.get_world_size()} sum={value.item():g} "
          f"launcher={os.environ.get('ACCELERATE_DYNAMO_BACKEND', 'torchrun') and 'ok'}", flush=True)
    dist.destroy_process_group()
