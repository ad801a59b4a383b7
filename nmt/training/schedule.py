"""Learning-rate schedule: linear warm-up, then constant, reduce-on-plateau, inverse sqrt (Noam),
or a linear or cosine decay to `min_lr` over the run's budget.

The decays follow the fraction of the budget spent, the larger of step / max_steps and, under
train.max_minutes, the minutes spent / max_minutes: a run that stops at its time budget ends at
`min_lr` however fast the machine was (training to a fixed budget is where decaying to the end
beats a constant or plateau rate). Its state is two numbers, so it checkpoints as primitives.
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

    def lr_at(self, step: int, spent: float = 0.0) -> float:
        """The learning rate for optimizer update number `step` (1-based), `spent` the fraction
        of the budget used (the decays only)."""
        cfg, warmup = self.cfg, self.cfg.warmup_steps
        if cfg.scheduler == Scheduler.noam:
            # peak at the end of warm-up equals cfg.lr, then decays as 1/sqrt(step)
            w = max(warmup, 1)
            return cfg.lr * min(step / w, math.sqrt(w / max(step, 1)))
        factor = min(1.0, step / warmup) if warmup else 1.0
        spent = min(max(spent, 0.0), 1.0)
        match cfg.scheduler:
            case Scheduler.linear:
                left = 1 - spent
            case Scheduler.cosine:
                left = (1 + math.cos(math.pi * spent)) / 2
            case _:
                return cfg.lr * factor * self.scale
        return factor * (cfg.min_lr + (cfg.lr - cfg.min_lr) * left)

    def set_step(self, step: int, spent: float = 0.0) -> float:
        lr = self.lr_at(step, spent)
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
