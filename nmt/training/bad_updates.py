"""Updates that cannot be applied: a loss or gradient norm that is NaN/inf, a batch that runs out of
memory, an fp16 step that overflows. Each is skipped and counted, so one bad batch costs one update
and not the run; a run that keeps failing stops with advice, and its last checkpoint stays intact.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from nmt.errors import NMTError

log = logging.getLogger(__name__)

MIN_LOSS_SCALE = 1e-4  # below this an fp16 run cannot recover (fairseq stops at the same point)

NAN_ADVICE = (
    "usual causes: a learning rate too high or too little warm-up (train.lr, train.warmup_steps), "
    "no gradient clipping (train.clip_grad_norm), fp16 overflow (train.precision=bf16 or fp32)"
)


class BadUpdates:
    """The skipped updates of one run: `limit` of them in a row stop it (train.max_bad_updates).
    Each is logged as a warning; `saved_step` gives the newest checkpoint's step, for the message
    that stops the run."""

    def __init__(self, limit: int, saved_step: Callable[[], int]):
        self.limit = limit
        self.saved_step = saved_step
        self.in_row = 0  # consecutive skipped updates
        self.skipped = 0  # skipped updates since the last log line (the trainer resets it)

    def applied(self) -> None:
        """An update reached the weights: the run is healthy again."""
        self.in_row = 0

    def skip(self, step: int, reason: str, advice: str) -> None:
        """Count a skipped update; the limit-th in a row raises NMTError with `advice`."""
        self.in_row += 1
        self.skipped += 1
        log.warning("step %d: %s; update skipped (%d in a row)", step, reason, self.in_row)
        if self.in_row >= self.limit:
            raise NMTError(
                f"stopping at step {step}: {self.limit} updates in a row were skipped ({reason}); "
                f"{advice}. The last checkpoint (step {max(self.saved_step(), 0)}) is intact"
            )

    def out_of_memory(
        self, step: int, sentences: int, tokens: int, batch_tokens: int, rank: int | None
    ) -> None:
        """This rank's batches of update `step` ran out of memory. Under torchrun (`rank` set) the
        other ranks wait in the all-reduce for this one's gradients, so it cannot be skipped."""
        advice = (
            f"lower train.batch_tokens (now {batch_tokens}) and raise train.accum_steps to keep "
            "the update size, or lower data.max_len"
        )
        if rank is not None:
            raise NMTError(
                f"out of memory at step {step} on rank {rank}; under torchrun a batch cannot be "
                f"skipped on one rank alone: {advice}"
            )
        self.skip(step, f"out of memory on {sentences} sentences, {tokens} target tokens", advice)

    def fp16_overflow(self, step: int, scale: float) -> None:
        """GradScaler skipped the step and lowered the scale to `scale`. That is routine unless the
        scale has collapsed, which means the gradients are not finite at any scale."""
        self.skipped += 1
        if scale < MIN_LOSS_SCALE:
            raise NMTError(
                f"stopping at step {step}: the fp16 loss scale collapsed to {scale:.1e} (the "
                "gradients overflow at any scale); train with train.precision=bf16 or fp32, or a "
                "lower train.lr"
            )
