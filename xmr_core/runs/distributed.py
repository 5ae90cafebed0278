"""Multi-GPU training with torch's DistributedDataParallel, launched by `torchrun`; one process otherwise.

`torchrun --nproc_per_node=4 script.py` sets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT;
`init_distributed()` then joins the process group through `env://` (NCCL on CUDA, Gloo on CPU) and pins
each process to its GPU. Without those variables it returns a single-process `DistEnv` and changes nothing,
so the same script runs on a laptop CPU. `xmr_core.runs.train.fit` reads `current_env()`: it wraps the model in
DDP, shards every epoch's sampled order across ranks (`ShardedSampler`, DistributedSampler's rule applied
to any base sampler) and lets rank 0 alone validate, log and write checkpoints. See docs/training.md.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Sampler

from xmr_core.config import select_device


@dataclass(frozen=True)
class DistEnv:
    """This process's place in the job: rank, world size, local rank (GPU index on its node)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def current_env() -> DistEnv:
    """The process group's view when one is initialised, else a single process."""
    if dist.is_available() and dist.is_initialized():
        return DistEnv(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))
    return DistEnv()


def init_distributed(device: str = "auto") -> tuple[DistEnv, torch.device]:
    """Join the torchrun process group (env://) when WORLD_SIZE > 1; return the env and this rank's device."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistEnv(), select_device(device)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch_device = select_device(device)
    if torch_device.type == "cuda":
        torch_device = torch.device("cuda", local_rank)
        torch.cuda.set_device(torch_device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if torch_device.type == "cuda" else "gloo", init_method="env://")
    return current_env(), torch_device


def cleanup_distributed() -> None:
    """Leave the process group (no-op in a single process)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def barrier(env: DistEnv) -> None:
    if env.distributed:
        dist.barrier()


def all_reduce_sum(value: float, env: DistEnv, device: torch.device) -> float:
    """Sum a Python number over ranks (itself in a single process)."""
    if not env.distributed:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t.item())


def wrap_model(model: nn.Module, env: DistEnv, device: torch.device) -> nn.Module:
    """DDP around `model` (its forward must produce everything the loss needs) when distributed."""
    if not env.distributed:
        return model
    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=True)


class ShardedSampler(Sampler[int]):
    """Rank r's share of a base sampler's epoch order: positions r, r + W, r + 2W, ... after padding the order
    (by wrapping around) to a multiple of W, so every rank gets the same number of items (DistributedSampler's
    rule). `set_epoch` is passed on to the base sampler."""

    def __init__(self, base: Sampler[int], env: DistEnv) -> None:
        self.base = base
        self.env = env

    def set_epoch(self, epoch: int) -> None:
        self.base.set_epoch(epoch)  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return math.ceil(len(self.base) / self.env.world_size)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[int]:
        order = list(self.base)
        total = len(self) * self.env.world_size
        order += order[: total - len(order)]
        return iter(order[self.env.rank : total : self.env.world_size])
