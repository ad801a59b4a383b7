"""The metrics log of a run: every row goes to `metrics.jsonl` and, with `train.tensorboard`, to
TensorBoard event files in the run directory (`tensorboard --logdir runs` shows every run by name).
`Window` gathers the training statistics of one log row.

`metrics.jsonl` is the record the project reads back (nmt-plot, sweeps, tests); the event files
are a view of the same rows, written with PyTorch's own `torch.utils.tensorboard` writer: numeric
fields become scalars tagged `<split>/<field>` at the row's step and wall time.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from types import TracebackType

import torch

from nmt.distributed import SINGLE, Dist, sum_across
from nmt.metrics import perplexity

METRICS = "metrics.jsonl"
EVENTS_GLOB = "events.out.tfevents.*"
# row fields that are bookkeeping, not curves
_NOT_SCALARS = {"step", "epoch", "time", "split", "best"}


class RunLog:
    """Appends rows to one run's logs; a context manager that closes them."""

    def __init__(self, run_dir: Path, tensorboard: bool, resumed_at: int | None = None) -> None:
        """`resumed_at`: the step of the checkpoint a resumed run continues from; rows written
        after it by the run that died are dropped from both logs."""
        self.path = run_dir / METRICS
        if resumed_at is not None:
            self._truncate(resumed_at)
        self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step makes TensorBoard discard the older files' events from that step on
            purge = None if resumed_at is None else resumed_at + 1
            self.writer = SummaryWriter(log_dir=str(run_dir), purge_step=purge)

    def write(self, step: int, epoch: int, entry: dict) -> None:
        row = {"step": step, "epoch": epoch, "time": time.time(), **entry}
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()
        if self.writer is None:
            return
        split = entry.get("split", "train")
        for key, value in entry.items():
            if key in _NOT_SCALARS or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            self.writer.add_scalar(f"{split}/{key}", value, step, walltime=row["time"])
        self.writer.flush()  # a run killed at any moment keeps what it logged

    def close(self) -> None:
        self.file.close()
        if self.writer is not None:
            self.writer.close()

    def __enter__(self) -> RunLog:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _truncate(self, step: int) -> None:
        if self.path.exists():
            lines = self.path.read_text(encoding="utf-8").splitlines(keepends=True)
            kept = [line for line in lines if json.loads(line)["step"] <= step]
            self.path.write_text("".join(kept), encoding="utf-8")


def remove_logs(run_dir: Path) -> None:
    """train.overwrite: the old run's metrics and event files go with its checkpoints."""
    (run_dir / METRICS).unlink(missing_ok=True)
    for events in run_dir.glob(EVENTS_GLOB):
        events.unlink()


class Window:
    """Training statistics since the last log line, on the device until read (once per window).

    `stats` holds this rank's summed loss and nll of the applied updates, then the target tokens,
    summed gradient norm and count of the applied updates, which every rank has alike (an update
    is applied or skipped on all ranks together).
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stats = torch.zeros(5, device=device)
        self.tokens = 0  # target tokens of every update, skipped ones too (all ranks)
        self.start = time.perf_counter()

    def add(
        self, sums: torch.Tensor, tokens: int, applied: torch.Tensor, norm: torch.Tensor
    ) -> None:
        """One update (see `Trainer.update`): its (loss, nll) sums (2,), its target tokens, whether
        it was applied and its gradient norm (0-d device tensors); nothing is read."""
        one = torch.stack([*sums, applied * float(tokens), norm.float(), applied.float()])
        self.stats += torch.where(applied, one, 0.0)  # a NaN of a skipped update stays out
        self.tokens += tokens

    @contextlib.contextmanager
    def paused(self):
        started = time.perf_counter()
        yield
        self.start += time.perf_counter() - started

    def flush(self, lr: float, where: Dist = SINGLE) -> dict:
        """The window's entry for the log (one device read, one all-reduce under DDP); resets."""
        loss, nll, tokens, norms, applied = sum_across(self.stats, where).tolist()
        tokens, norms, applied = tokens / where.world, norms / where.world, applied / where.world
        entry = {
            "split": "train",
            "loss": loss / max(tokens, 1),  # label-smoothed, per target token
            "ppl": perplexity(nll / max(tokens, 1)),
            "lr": lr,
            "tokens": round(tokens),  # target tokens of the applied updates, all ranks
            "tokens_per_s": self.tokens / (time.perf_counter() - self.start),
        }
        if applied:
            entry["grad_norm"] = norms / applied  # before clipping: how hard the clip works
        self.__init__(self.device)
        return entry

    @staticmethod
    def describe(entry: dict) -> str:
        return f"loss {entry['loss']:.3f} lr {entry['lr']:.2e} {entry['tokens_per_s']:.0f} tok/s"
