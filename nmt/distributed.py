"""Data-parallel training across processes: torchrun's environment, the process group, and the
few collectives the trainer needs.

`torchrun --nproc_per_node=N --no-python nmt-train ...` starts N copies of `nmt-train` with
WORLD_SIZE, RANK and LOCAL_RANK set; each joins one process group (nccl on CUDA, gloo on the CPU)
and wraps the model in DistributedDataParallel. Without those variables nothing here does any
communication, and `Dist()` describes the single process.

Rank 0 alone validates, logs and writes checkpoints; the others wait for it at a barrier. (The
commands print log records of rank 0 only: `nmt.cli.logs`.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from nmt.errors import NMTError


@dataclass(frozen=True)
class Dist:
    """Where this process stands among the training processes."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0  # index among the processes of this machine (its GPU)

    @property
    def main(self) -> bool:
        """The process that validates, logs and saves."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1


SINGLE = Dist()  # one process, no communication


def from_environment() -> Dist:
    """The ranks torchrun (or SLURM via torchrun) put in the environment; one process if none."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return SINGLE
    try:
        return Dist(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))
    except KeyError as err:
        raise NMTError(f"WORLD_SIZE={world} but {err} is not set: start with torchrun") from err


def init_process_group(where: Dist, device: torch.device) -> None:
    """Join the process group (no-op for one process). nccl needs one GPU per process."""
    if not where.active or dist.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=where.rank, world_size=where.world)


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def barrier(where: Dist) -> None:
    if where.active:
        dist.barrier()


def broadcast(obj: Any, where: Dist) -> Any:
    """Rank 0's `obj` on every rank (small picklable values: validation metrics, a flag)."""
    if not where.active:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def agree_once(obj: Any, where: Dist) -> Any:
    """Rank 0's `obj` on every rank, for work that otherwise needs no process group (a file job:
    its ranks meet once at the start, then share only a directory): a gloo group is made for it
    when none is up, and stays, idle, for the process's life. Its timeout is long: the ranks
    check their share of the input before they meet."""
    if not where.active:
        return obj
    if not dist.is_initialized():
        dist.init_process_group(
            "gloo", rank=where.rank, world_size=where.world, timeout=timedelta(hours=2)
        )
    return broadcast(obj, where)


def gather(obj: Any, where: Dist) -> list[Any]:
    """Every rank's `obj`, in rank order, on every rank (per-rank RNG states for a checkpoint)."""
    if not where.active:
        return [obj]
    out: list[Any] = [None] * where.world
    dist.all_gather_object(out, obj)
    return out


def sum_across(values: torch.Tensor, where: Dist) -> torch.Tensor:
    """Element-wise sum over the ranks (training statistics of a log window)."""
    if where.active:
        values = values.clone()
        dist.all_reduce(values)
    return values
