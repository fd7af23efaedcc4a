"""Stand-in for the ``logger.py`` beside neuronx-distributed's pretraining script (its TensorBoard ``Logger``):
prints each logged step."""

from __future__ import annotations


class Logger:
    """``Logger(args, world_size, model_dtype)``; ``log(epoch, step, loss, lr, throughput, grad_norm)``."""

    def __init__(self, args: object, world_size: int, model_dtype: str) -> None:
        self.throughputs: list[float] = []

    def log(self, epoch: int, step: int, loss: float, lr: float, throughput: float, grad_norm: object) -> None:
        self.throughputs.append(throughput)
        print(f"epoch {epoch} step {step} loss {loss} lr {lr} throughput {throughput}", flush=True)
