"""A tiny training on the node's GPU slice: reports the devices the launcher gave this rank, then trains."""

import os

import torch
import torch.distributed as dist

if __name__ == "__main__":
    mode = os.environ.get("MODE", "torchrun")
    if mode == "accelerate":
        from accelerate import Accelerator

        acc = Accelerator()
        model = torch.nn.Linear(64, 64)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        model, opt = acc.prepare(model, opt)
        for _ in range(20):
            loss = model(torch.randn(32, 64, device=acc.device)).pow(2).mean()
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
        print(f"rank={acc.process_index} device={acc.device} mixed_precision={acc.mixed_precision} "
              f"visible={os.environ.get('CUDA_VISIBLE_DEVICES')} gpu={torch.cuda.get_device_name(acc.device)} "
              f"loss={loss.item():.4f}", flush=True)
    else:
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        dist.init_process_group("nccl")
        value = torch.tensor([float(dist.get_rank() + 1)], device="cuda")
        dist.all_reduce(value)
        print(f"rank={dist.get_rank()} world_size={dist.get_world_size()} sum={value.item():g} "
              f"device=cuda:{torch.cuda.current_device()} visible={os.environ.get('CUDA_VISIBLE_DEVICES')} "
              f"uuid={torch.cuda.get_device_properties(local).uuid}", flush=True)
        dist.destroy_process_group()
