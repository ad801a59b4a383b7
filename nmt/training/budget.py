"""The time budget of a run, `train.max_minutes`: wall clock from the start of the command, the
tokenizer and data preparation included, which is what a user of a shared machine or a cluster
books (Lightning's `max_time`, fairseq's `--stop-time-hours`).

The run stops after the update that leaves no room for one more validation, timed on the last
one (or, before the first, estimated from the training speed), so that the closing validation and
checkpoint still end within the minutes. A resumed run counts the seconds its checkpoint had
already spent, and the decaying learning-rate schedules follow the fraction spent.
"""

from __future__ import annotations

import time

import torch

from nmt.distributed import Dist, sum_across

AGREE_EVERY = 8  # updates between the ranks' agreements on stopping (under torchrun)


class Budget:
    """Seconds spent and to spend; `check` after every update says whether to stop."""

    def __init__(self, minutes: float, started: float, valid_tokens: int) -> None:
        self.seconds = minutes * 60  # 0: no time budget
        self.started = started  # time.monotonic() at the start of the command
        self.valid_tokens = valid_tokens  # target tokens of the validation split (EOS included)
        self.valid_seconds = 0.0  # how long the last validation (and its checkpoint) took
        self.trained = (0, 0.0)  # target tokens and seconds of training in this command
        self.spent = 0.0  # seconds spent, one validation ahead, agreed by all ranks (`check`)

    def resume(self, seconds: float) -> None:
        """Continue a run whose checkpoint had spent `seconds`: the budget counts the whole run,
        and the first update's learning rate already follows them (before any `check`)."""
        self.started -= seconds
        self.spent = seconds

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def add_training(self, tokens: int, seconds: float) -> None:
        done, spent = self.trained
        self.trained = (done + tokens, spent + seconds)

    def validation_estimate(self) -> float:
        """Seconds the closing validation will take: the last one's, or before the first, the
        validation targets at the training speed so far (measured: greedy validation of Multi30k
        took 4.9 s, its 15k target tokens at 3,300 tokens/s are 4.5 s)."""
        tokens, seconds = self.trained
        if self.valid_seconds or not tokens:
            return self.valid_seconds
        return self.valid_tokens * seconds / tokens

    def fraction(self) -> float:
        """The part of the budget spent (0 without one)."""
        return self.spent / self.seconds if self.seconds else 0.0

    def check(
        self, signalled: bool, step: int, where: Dist, device: torch.device
    ) -> tuple[bool, bool]:
        """(a stop signal came, the budget is spent) after update `step`, agreed by all ranks in
        one all-reduce: every rank must stop after the same update, and use the same learning
        rate. The all-reduce's result is read on the host, which waits for the device to finish
        the update, so the ranks agree only every AGREE_EVERY updates (answering no stop, and
        keeping the agreed seconds, in between): the host queues the next updates meanwhile, and
        a signal or the budget's end is acted on at most AGREE_EVERY - 1 updates later."""
        if where.active and step % AGREE_EVERY:
            return False, False
        spent = self.elapsed() + self.validation_estimate()
        if where.active:
            flags = torch.tensor([float(signalled), spent], device=device)
            total = sum_across(flags, where).tolist()
            signalled, spent = total[0] > 0, total[1] / where.world
        self.spent = spent
        return signalled, bool(self.seconds) and spent >= self.seconds
