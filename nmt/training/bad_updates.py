"""Updates that cannot be applied: a loss or gradient norm that is NaN/inf, a batch that runs out of
memory, an fp16 step that overflows. Each is skipped and counted, so one bad batch costs one update
and not the run; a run that keeps failing stops with advice, and its last checkpoint stays intact.

Whether an update is finite is decided on the device and never read by the update itself: the
fused optimizer skips a bad step on its own (see `Trainer.update`; under fp16 on GradScaler's
verdict), and the counts kept here stay on the device until `settle` reads them, once per log
window and before each checkpoint. So the host never waits for the GPU inside the training loop,
and can queue the next batch's kernels while this one runs. An out-of-memory batch is known on
the host (an exception) and handled there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from nmt.errors import NMTError

log = logging.getLogger(__name__)

MIN_LOSS_SCALE = 1e-4  # below this an fp16 run cannot recover (fairseq stops at the same point)
# Under fp16 an overflow skipped while the loss scale is above this is GradScaler finding its scale
# (it starts at 2^16 and halves per overflow until the scaled gradients fit): routine, it neither
# counts toward train.max_bad_updates nor breaks a row, so a healthy start never stops the run. At
# or below 1 the gradients are no longer scaled up, so an overflow is the gradients' own and counts
# like a NaN in fp32; a NaN/inf loss counts at any scale (no loss scale mends a forward pass that
# went wrong). A run whose gradients overflow at every scale thus stops after about
# 16 + max_bad_updates updates; one whose overflows come between applied updates (never a row)
# stops when the scale falls below MIN_LOSS_SCALE. `settle` checks the row first.
FP16_SCALE_FLOOR = 1.0

NAN_ADVICE = (
    "usual causes: a learning rate too high or too little warm-up (train.lr, train.warmup_steps), "
    "no gradient clipping (train.clip_grad_norm), fp16 overflow (train.precision=bf16 or fp32)"
)
NAN_REASON = "the loss or gradient norm is NaN/inf"
FP16_REASON = (
    f"the loss is NaN/inf, or the gradients overflow fp16 at a loss scale of {FP16_SCALE_FLOOR:g} "
    "or below"
)
OVERFLOW_REASON = "fp16 overflow (GradScaler lowers the scale)"

# the device-side record, one long vector so that `settle` reads it in one copy
# (the ones `settle` clears come last, so that it clears them as one slice)
_IN_ROW, _STOP_AT, _PENDING, _FAULTS, _FIRST, _LAST = range(6)


class BadUpdates:
    """The skipped updates of one run: `limit` of them in a row stop it (train.max_bad_updates).
    `saved_step` gives the newest checkpoint's step, for the message that stops the run.

    `skipped` counts the skipped updates known on the host since the last log line (the trainer
    reads and resets it); `settle` brings the device-side ones over and logs them as a warning
    (fp16 overflows alone, GradScaler's routine, as an info line).
    """

    def __init__(
        self, limit: int, saved_step: Callable[[], int], device: torch.device, fp16: bool = False
    ) -> None:
        self.limit = limit
        self.saved_step = saved_step
        self.fp16 = fp16  # overflow skips above FP16_SCALE_FLOOR are GradScaler's routine
        self.reason = FP16_REASON if fp16 else NAN_REASON
        # faults in a row now (skips that count, see FP16_SCALE_FLOOR; a routine fp16 overflow
        # neither counts nor ends the row, an applied update ends it); the step at which `limit`
        # in a row were reached (0 = not yet); updates skipped since the last settle, the faults
        # among them, and the first and last of their steps
        self.state = torch.zeros(6, dtype=torch.long, device=device)
        self.skipped = 0
        self.oom_in_row = 0  # out-of-memory updates in a row, counted on the host

    def record(
        self,
        applied: torch.Tensor,
        step: int,
        scale: torch.Tensor | None = None,
        loss_finite: torch.Tensor | None = None,
    ) -> None:
        """Update `step` reached the weights or not (`applied`, a 0-d bool device tensor); nothing
        is read. Under fp16 also `scale`, the loss scale its gradients were taken at (0-d, on the
        device), and `loss_finite`, whether the loss was finite (None under torchrun: the ranks'
        losses differ and every rank must count alike)."""
        self.oom_in_row = 0
        bad = ~applied
        fault = bad
        if self.fp16:
            if scale is None:
                raise ValueError("fp16: record needs the loss scale of the update")
            fault = scale <= FP16_SCALE_FLOOR
            if loss_finite is not None:
                fault = fault | ~loss_finite
            fault = bad & fault
        old = self.state
        in_row = (old[_IN_ROW] + fault) * bad
        stop_at = old[_STOP_AT]
        stop_at = torch.where((stop_at == 0) & (in_row >= self.limit), step, stop_at)
        self.state = torch.stack(
            [
                in_row,
                stop_at,
                old[_PENDING] + bad,
                old[_FAULTS] + fault,
                torch.where((old[_FIRST] == 0) & bad, step, old[_FIRST]),
                torch.where(bad, step, old[_LAST]),
            ]
        )

    def settle(self, loss_scale: float | None = None) -> None:
        """Read the device-side record (one copy): warn about the updates skipped since the last
        settle, and stop the run (NMTError) if `limit` faults came in a row, or if the fp16
        `loss_scale` has collapsed."""
        in_row, stop_at, pending, faults, first, last = self.state.tolist()
        if pending:
            self.skipped += pending
            self.state[_PENDING:] = 0
            # an fp16 overflow is how GradScaler finds its scale: worth a line, not a warning
            level = logging.WARNING if faults else logging.INFO
            reason = self.reason if faults else OVERFLOW_REASON
            if self.fp16 and faults and faults < pending:
                reason += f" ({pending - faults} of them {OVERFLOW_REASON})"
            if pending == 1:
                log.log(level, "step %d: %s; update skipped", first, reason)
            else:
                log.log(
                    level, "steps %d-%d: %s; %d updates skipped (%d in a row at the end)",
                    first, last, reason, pending, in_row,
                )  # fmt: skip
        if stop_at:
            raise NMTError(
                f"stopping at step {stop_at}: {self.limit} updates in a row were skipped "
                f"({self.reason}); {NAN_ADVICE}. The last checkpoint (step "
                f"{max(self.saved_step(), 0)}) is intact"
            )
        if loss_scale is not None and loss_scale < MIN_LOSS_SCALE:
            raise NMTError(
                f"stopping: the fp16 loss scale collapsed to {loss_scale:.1e} (the gradients "
                "overflow at any scale); train with train.precision=bf16 or fp32, or a lower "
                "train.lr"
            )

    def out_of_memory(
        self, step: int, sentences: int, tokens: int, batch_tokens: int, rank: int | None
    ) -> None:
        """This rank's batches of update `step` ran out of memory: skip the update, or stop the
        run when `limit` did in a row. Under torchrun (`rank` set) the other ranks wait in the
        all-reduce for this one's gradients, so it cannot be skipped."""
        advice = (
            f"lower train.batch_tokens (now {batch_tokens}) and raise train.accum_steps to keep "
            "the update size, or lower data.max_len"
        )
        if rank is not None:
            raise NMTError(
                f"out of memory at step {step} on rank {rank}; under torchrun a batch cannot be "
                f"skipped on one rank alone: {advice}"
            )
        self.oom_in_row += 1
        self.skipped += 1
        reason = f"out of memory on {sentences} sentences, {tokens} target tokens"
        log.warning("step %d: %s; update skipped (%d in a row)", step, reason, self.oom_in_row)
        if self.oom_in_row >= self.limit:
            raise NMTError(
                f"stopping at step {step}: {self.limit} updates in a row were skipped ({reason}); "
                f"{advice}. The last checkpoint (step {max(self.saved_step(), 0)}) is intact"
            )
