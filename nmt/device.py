"""Device choice and mixed precision, decided in one place for train, evaluate and translate."""

from __future__ import annotations

import contextlib
import os
import platform
from pathlib import Path

import torch

from nmt.config import Precision
from nmt.errors import NMTError


def resolve_device(name: str, local_rank: int | None = None) -> torch.device:
    """The one place that decides where tensors live; everything else follows the tensors it is
    given. `auto` takes CUDA when present, else the CPU; an explicit device must exist. Under
    torchrun (`local_rank` set), a CUDA device means this process's own GPU, cuda:LOCAL_RANK."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise NMTError(f"device={name} but CUDA is not available here; use device=auto or cpu")
    if name == "mps" and not torch.backends.mps.is_available():
        raise NMTError("device=mps but MPS is not available here; use device=auto or cpu")
    if local_rank is not None and name.startswith("cuda"):
        if name != "cuda":
            raise NMTError(f"device={name} under torchrun: use device=cuda (one GPU per process)")
        if local_rank >= torch.cuda.device_count():
            raise NMTError(
                f"LOCAL_RANK={local_rank} but only {torch.cuda.device_count()} GPU(s) are visible"
            )
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device(name)
    if device.type == "cuda":
        _no_cudnn_attention()
    return device


def _no_cudnn_attention() -> None:
    """Keep scaled_dot_product_attention off cuDNN's kernel. PyTorch prefers it for bf16/fp16 on
    Hopper GPUs, but it builds an execution plan for every new tensor shape, and batches of
    sentences have a new shape almost every update: on an H200, bf16 Transformer training ran at
    14k target tokens/s with it, against 185k in fp32 (scripts/bench_gpu.sh, docs/gpu.md). The
    flash and memory-efficient kernels need no plan."""
    torch.backends.cuda.enable_cudnn_sdp(False)


def check_precision(
    device: torch.device, precision: Precision, key: str = "train.precision"
) -> None:
    if precision == Precision.fp16 and device.type != "cuda":
        raise NMTError(f"{key}=fp16 needs a CUDA device; use bf16 or fp32 on the CPU")
    if precision == Precision.int8 and not key.startswith("decode"):
        raise NMTError(f"{key}=int8: int8 is a decoding setting (decode.precision=int8)")
    if precision == Precision.int8 and device.type != "cpu":
        raise NMTError(
            f"{key}=int8 runs on the CPU (torch's x86 int8 kernels); on {device.type}, use "
            "bf16, fp16 or fp32"
        )


def autocast(device: torch.device, precision: Precision) -> contextlib.AbstractContextManager:
    """Autocast for bf16/fp16; parameters and the optimizer stay in fp32 either way."""
    match precision:
        case Precision.fp32 | Precision.int8:  # int8 is the model's own (nmt.models.int8)
            return contextlib.nullcontext()
        case Precision.bf16:
            return torch.autocast(device.type, dtype=torch.bfloat16)
        case Precision.fp16:
            return torch.autocast(device.type, dtype=torch.float16)


def cpu_name() -> str:
    """The CPU's model name ("AMD EPYC ..."), from /proc/cpuinfo where there is one."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def describe(device: torch.device) -> dict:
    """Where a figure was measured: printed with every benchmark result."""
    info = {
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cpu": cpu_name(),
        "cpu_cores": os.cpu_count(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info
