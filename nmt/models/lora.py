"""Low-rank adapters (LoRA, Hu et al. 2021) on a Transformer's linear layers (`train.lora`).

A target layer y = W x + b becomes y = W x + b + (alpha / r) B A x with A (r, in) and B (out, r)
trained, W and b frozen; B starts at zero, so training starts from the base model exactly. Only
A and B are trained and saved: a LoRA run's checkpoint holds the adapters (`adapters`) and names
its base (train.init_from), and `nmt.checkpoint.merged_weights` folds them into the base's weights,
W + (alpha / r) B A, when the checkpoint is read (`nmt.checkpoint.load_checkpoint`): every
command then decodes, exports or averages an ordinary model, with no adapter arithmetic per step.

nmt's own rather than peft's: peft installs transformers and accelerate with it (neither is a
dependency of nmt), wraps a model in its own classes (nmt's checkpoints, ensembles and search
read nmt's modules), and what nmt needs of it is this one layer and its merge.

Targets, by their place in nmt's Transformer (`nmt.models.transformer`): "q", "kv" (keys and
values, one projection), "out" of every attention (self and cross), "ff" both linear layers of
every feed-forward block.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from nmt.checkpoint import ADAPTER
from nmt.config import LoraConfig
from nmt.errors import NMTError

TARGETS = ("q", "kv", "out", "ff")


class LoraLinear(nn.Module):
    """A frozen linear layer with a trained low-rank update. Its own weight and bias keep the
    names of the layer it wraps (`base.weight` is saved as `weight`), so a LoRA model's state
    dict holds the base's keys and the adapters' beside them."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float) -> None:
        super().__init__()
        self.weight, self.bias = base.weight, base.bias
        self.weight.requires_grad_(False)
        if self.bias is not None:
            self.bias.requires_grad_(False)
        self.scale = alpha / rank
        self.lora_a = nn.Parameter(base.weight.new_empty(rank, base.in_features))
        self.lora_b = nn.Parameter(base.weight.new_zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))  # as nn.Linear's own weights
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """x (.., in) -> (.., out)."""
        base = nn.functional.linear(x, self.weight, self.bias)  # (.., out)
        low = self.dropout(x).reshape(-1, x.size(-1)) @ self.lora_a.T  # (N, r)
        # one fused product-and-sum: no (N, out) temporaries for B A x, its scaling and the sum
        # (they cost a fine-tune of OPUS-MT's size more memory than LoRA saved)
        update = torch.addmm(base.reshape(-1, base.size(-1)), low, self.lora_b.T, alpha=self.scale)
        return update.view(base.shape)


def add_adapters(model: nn.Module, cfg: LoraConfig) -> int:
    """Freeze every parameter of `model` and put an adapter on each target layer, in place;
    returns the number of trainable parameters. A model without the targets (a recurrent one)
    is refused by name."""
    from nmt.models.transformer import FeedForward, MultiHeadAttention

    unknown = sorted(set(cfg.targets) - set(TARGETS))
    if unknown or not cfg.targets:
        raise NMTError(f"train.lora.targets={list(cfg.targets)}: choose among {list(TARGETS)}")
    model.requires_grad_(False)
    alpha = cfg.alpha if cfg.alpha is not None else 2.0 * cfg.rank
    adapted = 0
    for module in list(model.modules()):
        if isinstance(module, MultiHeadAttention):
            names = [n for n in ("q", "kv", "out") if n in cfg.targets]
        elif isinstance(module, FeedForward) and "ff" in cfg.targets:
            names = ["0", "3"]  # its two nn.Linear (nn.Sequential's indices)
        else:
            continue
        for name in names:
            layer = module.get_submodule(name)
            module.register_module(name, LoraLinear(layer, cfg.rank, alpha, cfg.dropout))
            adapted += 1
    if not adapted:
        raise NMTError(
            "train.lora adapts a Transformer's attention and feed-forward layers; this model "
            "has none (a recurrent model: fine-tune it with train.freeze)"
        )
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def adapter_state(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """The adapters of a LoRA model's state dict: what its checkpoint saves."""
    return {k: v for k, v in state.items() if k.endswith(ADAPTER)}
