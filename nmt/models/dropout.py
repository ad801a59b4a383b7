"""Dropout whose random mask is cheap to draw on the CPU; elsewhere it is `F.dropout`.

On the CPU, `F.dropout` draws its mask with `bernoulli_`: one draw from the generator per element,
which on these machines costs more than the matrix product the dropout precedes
(scripts/bench_dropout.py, 2 threads: forward and backward on 8192 x 1024 floats take 137 ms, the
forward of the 1024 -> 256 product after it 52 ms). Here one 64-bit draw serves four elements:
the words are read as 16-bit integers, and an element is dropped when its integer falls in the
lowest round(p * 65536) of the 65536 values. Its drop probability is p to within 1 / 131072, and
the draws come from the same default generator (torch.manual_seed, the checkpointed RNG state),
so runs stay reproducible and resume exactly.

CUDA's `F.dropout` is one fused kernel already, and tiny tensors (a decoder step's) are not worth
the custom function's Python: both keep `F.dropout`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_LEVELS = 1 << 16  # values of a 16-bit integer
# below this F.dropout is as fast or faster: break-even near 32k elements (docs/benchmarks.md)
MIN_ELEMENTS = 1 << 16


def drop_mask(shape: torch.Size, p: float, device: torch.device) -> Tensor:
    """A bool tensor of `shape`, True (drop) with probability p, from 16 random bits each."""
    n = shape.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device)
    words.random_(-(1 << 63), None)  # the full 64-bit range: all four 16-bit parts uniform
    below = round(p * _LEVELS) - (_LEVELS // 2)  # int16 values run from -32768 to 32767
    return (words.view(torch.int16)[:n] < below).view(shape)


class _CheapMaskDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, p: float) -> Tensor:
        drop = drop_mask(x.shape, p, x.device)
        ctx.save_for_backward(drop)
        ctx.scale = 1.0 / (1.0 - p)
        return x.mul(ctx.scale).masked_fill_(drop, 0.0)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        (drop,) = ctx.saved_tensors
        return grad.mul(ctx.scale).masked_fill_(drop, 0.0), None


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout, as `F.dropout(x, p, training)`: kept elements are scaled by 1 / (1 - p)."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or x.numel() < MIN_ELEMENTS or torch.compiler.is_compiling():
        return F.dropout(x, p, training)
    return _CheapMaskDropout.apply(x, p)


class Dropout(nn.Module):
    """`nn.Dropout` with the cheap CPU mask of `dropout`."""

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability {p} is not in [0, 1)")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
