"""Learning-rate schedule: linear warm-up, then constant, reduce-on-plateau or inverse sqrt (Noam).

Its state is two numbers, so it checkpoints as plain primitives.
"""

from __future__ import annotations

import math

import torch

from nmt.config import Scheduler, TrainConfig


class LRSchedule:
    def __init__(self, cfg: TrainConfig, optimizer: torch.optim.Optimizer) -> None:
        self.cfg = cfg
        self.optimizer = optimizer
        self.scale = 1.0  # product of plateau reductions
        self.bad = 0  # validations since the last improvement (plateau only)

    def lr_at(self, step: int) -> float:
        """The learning rate for optimizer update number `step` (1-based)."""
        warmup = self.cfg.warmup_steps
        if self.cfg.scheduler == Scheduler.noam:
            # peak at the end of warm-up equals cfg.lr, then decays as 1/sqrt(step)
            w = max(warmup, 1)
            factor = min(step / w, math.sqrt(w / max(step, 1)))
        else:
            factor = min(1.0, step / warmup) if warmup else 1.0
        return self.cfg.lr * factor * self.scale

    def set_step(self, step: int) -> float:
        lr = self.lr_at(step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def report(self, improved: bool) -> None:
        """Called after each validation; plateau lowers the LR after `patience` misses."""
        if self.cfg.scheduler != Scheduler.plateau:
            return
        self.bad = 0 if improved else self.bad + 1
        if self.bad >= self.cfg.plateau_patience:
            # never below min_lr: a run that keeps stalling still makes progress
            self.scale = max(self.scale * self.cfg.plateau_factor, self.cfg.min_lr / self.cfg.lr)
            self.bad = 0

    def state_dict(self) -> dict:
        return {"scale": self.scale, "bad": self.bad}

    def load_state_dict(self, state: dict) -> None:
        self.scale, self.bad = float(state["scale"]), int(state["bad"])
