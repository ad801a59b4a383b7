"""The training loop: `Trainer` runs the updates, validations and checkpoints of one run over the
model and data that `nmt.training.setup.prepare_run` made ready; `train_main` is what nmt-train
calls.

One update = `accum_steps` batches per process. The data position (epoch, batch index) and every
process's RNG state go into each checkpoint, and batches are a pure function of (seed, epoch), so
`train.resume=true` continues exactly where the last checkpoint left off. Under torchrun the
batches of an update are dealt out to the processes (see `Trainer.update`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from nmt.checkpoint import Checkpoint, load_checkpoint, point, prune, save_checkpoint
from nmt.config import Frozen, Metric, Optimizer, Precision
from nmt.data.batches import epoch_batches, fixed_shape
from nmt.data.starts import EDGES_FILE, STARTS_FILE
from nmt.device import autocast, check_precision, resolve_device
from nmt.distributed import (
    SINGLE,
    Dist,
    barrier,
    broadcast,
    from_environment,
    gather,
    init_process_group,
    shutdown,
)
from nmt.errors import NMTError
from nmt.models.lora import adapter_state, add_adapters
from nmt.models.seq2seq import Seq2Seq
from nmt.run_config import TrainRunConfig
from nmt.training.bad_updates import BadUpdates
from nmt.training.budget import Budget
from nmt.training.calibration import calibrate
from nmt.training.guided import Guide
from nmt.training.loss import batch_loss
from nmt.training.preemption import StopRequest
from nmt.training.resume import rng_state, set_rng_state
from nmt.training.run_log import RunLog, Window
from nmt.training.schedule import LRSchedule
from nmt.training.setup import RunData, prepare_run
from nmt.training.validation import save_alignments, validate

log = logging.getLogger(__name__)


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint."""

    step: int = 0  # optimizer updates done
    epoch: int = 0
    position: int = 0  # batches of `epoch` already consumed
    best: float | None = None  # best validation value of `train.metric`
    bad_validations: int = 0  # since `best` (early stopping)
    seconds: float = 0.0  # wall clock spent by the run at this checkpoint (train.max_minutes)


@dataclass
class Update:
    """What one update did, its tensors on the device and unread: this rank's summed (loss, nll),
    the target tokens of the whole update (all ranks; counted on the host), whether it reached
    the weights (a 0-d bool), and the gradient norm before clipping."""

    sums: torch.Tensor
    tokens: int
    applied: torch.Tensor
    norm: torch.Tensor


def _better(metric: Metric, new: float, best: float | None) -> bool:
    if best is None:
        return True
    return new > best if metric == Metric.bleu else new < best


def freeze(model: nn.Module, parts: list[Frozen]) -> None:
    """Leave `parts` out of training (train.freeze): their parameters get no gradient, so the
    optimizer never moves them. A table shared by both sides and the output layer is one
    parameter: freezing it freezes it everywhere."""
    for part in parts:
        if part == Frozen.encoder:
            modules = [model.encoder]
        else:
            modules = [m for m in model.modules() if isinstance(m, nn.Embedding)]
        for module in modules:
            module.requires_grad_(False)


class Trainer:
    """The loop of one run over the model and data it is given; `run()` trains.

    Under torchrun each process runs a Trainer over its own share of every update's batches; the
    gradients are summed by DistributedDataParallel and each rank's loss is scaled so that the sum
    equals the single-process loss over all those batches, normalised by all of their tokens.
    """

    def __init__(
        self,
        cfg: TrainRunConfig,
        model: Seq2Seq,
        data: RunData,
        device: torch.device,
        where: Dist = SINGLE,
        started: float | None = None,
    ) -> None:
        self.cfg, self.data, self.device, self.where = cfg, data, device, where
        self.run_dir = Path(cfg.run_dir)
        self.root = self.run_dir / "checkpoints"
        self.model = model.to(device)  # the module itself: validation, search, checkpoints
        freeze(self.model, cfg.train.freeze)
        lora = cfg.train.lora
        # a LoRA run's checkpoints name its base: train.init_from, or (resumed) its own's
        self.lora_base = str(Path(cfg.train.init_from).resolve()) if cfg.train.init_from else None
        if lora.rank:
            trainable = add_adapters(self.model, lora)
            total = sum(p.numel() for p in self.model.parameters()) - trainable
            log.info("train.lora: rank %d on %s, %d trainable parameters (%.2f%% of %d)",
                     lora.rank, ",".join(lora.targets), trainable, 100 * trainable / total,
                     total)  # fmt: skip
        self.train_model: torch.nn.Module = self.model  # what the training forward calls
        self.guide = None  # train.guided_alignment: its loss term over the corpus's links
        if data.links is not None:
            prefixes = tuple(len(p) for p in data.train.prefixes)
            self.guide = Guide(data.links, cfg.train.guided_alignment, prefixes)
        if where.active:
            ids = [device.index] if device.type == "cuda" else None
            self.train_model = DistributedDataParallel(self.model, device_ids=ids)
            # rank 0 keeps the stream of a single-process run; the others draw their own dropout
            if not where.main:
                torch.manual_seed(cfg.seed + 1_000_003 * where.rank)
        if cfg.train.compile:
            mode = "reduce-overhead" if cfg.train.cuda_graphs else None
            self.train_model = torch.compile(self.train_model, mode=mode)
        opt = torch.optim.AdamW if cfg.train.optimizer == Optimizer.adamw else torch.optim.Adam
        # a LoRA run's optimizer holds the adapters' state alone (the rest is frozen)
        params = [p for p in self.model.parameters() if p.requires_grad or not lora.rank]
        self.optimizer = opt(
            params,
            lr=cfg.train.lr,
            betas=tuple(cfg.train.betas),
            weight_decay=cfg.train.weight_decay,
            fused=True,  # one kernel per parameter group, on the CPU too
        )
        self.schedule = LRSchedule(cfg.train, self.optimizer)
        fp16 = cfg.train.precision == Precision.fp16
        self.scaler = torch.amp.GradScaler(device.type, enabled=fp16)
        self.progress = Progress()
        self.saved_step = -1  # step of the newest checkpoint
        self.run_log: RunLog | None = None  # rank 0's, while the loop runs
        self.resumed_at: int | None = None  # the step a resumed run continues from
        self.bad = BadUpdates(cfg.train.max_bad_updates, lambda: self.saved_step, device, fp16)
        valid_tokens = sum(len(t) + 1 for t in data.valid.tgt)
        began = time.monotonic() if started is None else started
        self.budget = Budget(cfg.train.max_minutes, began, valid_tokens)  # train.max_minutes

    def restore(self, ckpt: Checkpoint) -> None:
        """Continue exactly where `ckpt` left off: weights, optimizer, schedule, data position and
        every rank's RNG state; the metrics log is cut back to the checkpoint's step."""
        payload = ckpt.payload
        stored_world = payload.get("world_size", 1)
        if stored_world != self.where.world:
            raise NMTError(
                f"train.resume: the checkpoint was written by {stored_world} training "
                f"process(es), this run has {self.where.world}; the data order and random "
                "streams depend on it, so resume with the same number"
            )
        if "lora" in payload:  # the base's weights, and the adapters trained so far
            self.lora_base = payload["lora"]["base"]
            base = load_checkpoint(self.lora_base).payload["model"]
            self.model.load_state_dict({**base, **payload["adapters"]})
        else:
            self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.schedule.load_state_dict(payload["scheduler"])
        self.scaler.load_state_dict(payload["scaler"])
        self.progress = Progress(**payload["progress"])
        self.budget.resume(self.progress.seconds)
        self.saved_step = self.progress.step
        ranks = payload.get("rng_ranks") or [payload["rng"]]
        set_rng_state(ranks[self.where.rank])
        self.resumed_at = self.progress.step  # the logs are cut back to it when they open

    def record(self, entry: dict) -> None:
        if self.run_log is not None:
            self.run_log.write(self.progress.step, self.progress.epoch, entry)

    def update(self, group: list[list[int]]) -> Update:
        """One optimizer update over `group`, the batches of this update on all ranks together
        (accum_steps per rank); this rank takes every world-th one. Nothing in it waits for the
        device: whether the update was applied stays a device tensor (see nmt/training/
        bad_updates.py), so the host can prepare the next batch while this one runs."""
        cfg, world = self.cfg.train, self.where.world
        train = self.data.train
        mine = group[self.where.rank :: world]
        # tokens of the whole update, counted from the index lists on the host: no device sync
        # and no communication, since every rank knows every rank's batches
        tokens = train.target_tokens(group, self.progress.epoch)
        self.schedule.set_step(self.progress.step + 1, self._spent())
        self.optimizer.zero_grad(set_to_none=True)
        self.progress.step += 1  # a skipped update still consumes its batches: resume stays exact
        out_of_memory = False
        try:
            sums = self._backward(mine, tokens)
        except torch.OutOfMemoryError:
            out_of_memory = True  # handled outside the except: the traceback pins the activations
        if out_of_memory:
            self._skip_out_of_memory(mine)
            zero = torch.zeros((), device=self.device)
            return Update(torch.zeros(2, device=self.device), tokens, zero.bool(), zero)
        self.scaler.unscale_(self.optimizer)  # a no-op unless fp16
        params = [p for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        if cfg.clip_grad_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(params, cfg.clip_grad_norm, norm)
        # A NaN must not reach the weights. Under DDP the norm is of the all-reduced gradients,
        # so every rank decides alike (their losses differ, and a NaN loss makes a NaN norm).
        finite = torch.isfinite(norm)
        loss_finite = None if self.where.active else torch.isfinite(sums[0])
        if loss_finite is not None:
            finite &= loss_finite
        if cfg.precision == Precision.fp16:
            applied = self._fp16_step(finite, loss_finite)
        else:
            applied = finite
            # the fused optimizer skips the whole step (moments and step count too) where
            # found_inf is nonzero, on the device: the protocol GradScaler drives it with
            self.optimizer.found_inf = (~applied).float()
            try:
                self.optimizer.step()
            finally:
                del self.optimizer.found_inf
            self.bad.record(applied, self.progress.step)
        return Update(sums, tokens, applied, norm)

    def _fp16_step(self, finite: torch.Tensor, loss_finite: torch.Tensor | None) -> torch.Tensor:
        """Step and rescale through GradScaler; whether the update was applied (0-d bool), which is
        GradScaler's own verdict, read on the device. Its found_inf (from `unscale_`: 1.0 where a
        gradient is inf/NaN) also takes in what the fp32 path checks, a NaN/inf loss or norm, so
        one verdict skips the fused step, lowers the scale and is counted: a NaN loss whose
        gradients are finite is skipped as in fp32, not applied."""
        scaler = self.scaler
        # a model on one device: GradScaler recorded one found_inf tensor for this optimizer
        (found_inf,) = scaler._found_inf_per_device(self.optimizer).values()
        # the fused kernels skip only where found_inf == 1 (2 would step, and move the step count
        # back by 2): fold with a maximum, not a sum
        torch.maximum(found_inf, (~finite).to(found_inf.dtype), out=found_inf)
        applied = found_inf == 0
        scaler.step(self.optimizer)  # the fused optimizer: hands found_inf over, no host read
        # recorded before update(), which lowers or raises the scale in place
        scale = scaler._get_scale_async()
        self.bad.record(applied, self.progress.step, scale, loss_finite)
        scaler.update()
        return applied

    def _backward(self, mine: list[list[int]], tokens: int) -> torch.Tensor:
        """Forward and backward over this rank's batches of the update; summed (loss, nll)."""
        cfg, world, train = self.cfg.train, self.where.world, self.data.train
        # the epoch picks the segmentation under subword sampling (data.tokenizer.sample_alpha)
        parts = [train.batch(index, self.progress.epoch) for index in mine]
        if cfg.length_step:
            parts = [fixed_shape(b, cfg.batch_tokens, cfg.length_step) for b in parts]
        parts = [batch.to(self.device) for batch in parts]
        sums = torch.zeros(2, device=self.device)  # loss, nll
        for n, batch in enumerate(parts):
            last = n == len(parts) - 1
            # gradients are all-reduced once per update, after the last batch
            sync = contextlib.nullcontext() if last or not self.where.active else self._no_sync()
            with sync:
                if cfg.cuda_graphs:  # a new step: the last replay's outputs may be overwritten
                    torch.compiler.cudagraph_mark_step_begin()
                with autocast(self.device, cfg.precision):
                    loss, nll = batch_loss(self.train_model, batch, cfg.label_smoothing, self.guide)
                # DDP averages gradients over ranks: dividing by tokens / world makes the sum
                # over ranks equal one big batch normalised by all of its tokens
                self.scaler.scale(loss / (tokens / world)).backward()
            sums += torch.stack([loss.detach(), nll.detach()])
        return sums

    def _skip_out_of_memory(self, mine: list[list[int]]) -> None:
        """Free what the failed batches left (outside the `except`, whose traceback pins the
        activations), then skip the update, or stop under torchrun."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        train = self.data.train
        self.bad.out_of_memory(
            self.progress.step,
            sentences=sum(len(batch) for batch in mine),
            tokens=train.target_tokens(mine, self.progress.epoch),
            batch_tokens=self.cfg.train.batch_tokens,
            rank=self.where.rank if self.where.active else None,
        )

    def _no_sync(self) -> contextlib.AbstractContextManager:
        ddp = self.train_model
        ddp = getattr(ddp, "_orig_mod", ddp)  # under torch.compile
        return ddp.no_sync()

    def save(self, metrics: dict, improved: bool) -> None:
        """Rank 0 writes the checkpoint, with the RNG state of every rank (collected from all)."""
        self._settle()  # a run that has been failing stops before it writes
        rng = gather(rng_state(), self.where)
        if not self.where.main:
            return
        lora = self.cfg.train.lora
        state = self.model.state_dict()
        weights = {"model": state}
        if lora.rank:  # the adapters alone, and their base (see nmt.models.lora)
            alpha = lora.alpha if lora.alpha is not None else 2.0 * lora.rank
            weights = {
                "adapters": adapter_state(state),
                "lora": {"base": self.lora_base, "rank": lora.rank, "alpha": alpha},
            }
        payload = {
            **weights,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.schedule.state_dict(),
            "scaler": self.scaler.state_dict(),
            "progress": vars(self.progress) | {"seconds": self.budget.elapsed()},
            "rng": rng[0],
            "world_size": self.where.world,
            "metrics": metrics,
        }
        if self.where.active:
            payload["rng_ranks"] = rng
        path = save_checkpoint(
            self.root,
            self.progress.step,
            payload,
            self.cfg,
            self.data.vocabs,
            self.data.lexicon,
            (Path(self.cfg.run_dir) / STARTS_FILE, Path(self.cfg.run_dir) / EDGES_FILE),
        )
        if improved:
            point(self.root, "best", path)
        point(self.root, "last", path)
        prune(self.root, self.cfg.train.keep_last)

    def validate_and_save(self) -> str:
        """Rank 0 validates; every rank takes its metrics (the LR schedule and early stopping must
        agree everywhere); rank 0 checkpoints. Returns a line for the console."""
        metrics, began = None, time.monotonic()  # valid_seconds: validation and saving
        if self.where.main:
            metrics = validate(
                self.model, self.data.valid, self.data.valid_references, self.data.vocabs,
                self.cfg, self.device, self.data.lexicon, self.data.valid_directions,
            )  # fmt: skip
            if self.cfg.train.valid_heatmaps:
                src = self.data.valid.src[: self.cfg.train.valid_heatmaps]
                out = self.run_dir / "attention"
                save_alignments(
                    self.model, src, self.data.vocabs, self.device, out, self.progress.step
                )
        metrics = broadcast(metrics, self.where)
        metric = self.cfg.train.metric
        improved = _better(metric, metrics[metric.value], self.progress.best)
        if improved:
            self.progress.best, self.progress.bad_validations = metrics[metric.value], 0
        else:
            self.progress.bad_validations += 1
        self.schedule.report(improved)
        self.record({"split": "valid", **metrics, "best": improved})
        self.save(metrics, improved)
        self.saved_step = self.progress.step
        barrier(self.where)  # nobody trains on while rank 0 is still writing
        self.budget.valid_seconds = time.monotonic() - began
        shown = "  ".join(f"{k} {v:.2f}" for k, v in metrics.items())
        return f"step {self.progress.step}: valid {shown}{'  (best)' if improved else ''}"

    def run(self) -> Path:
        """Train until max_steps, max_epochs, max_minutes, early stopping or a stop signal
        (SIGTERM, SIGINT: the update in flight finishes and a checkpoint is written); returns the
        best checkpoint (the last one when the run stopped before its first validation)."""
        cfg, progress, where = self.cfg.train, self.progress, self.where
        per_update = cfg.accum_steps * where.world  # batches consumed by one update
        if where.main:
            params = sum(p.numel() for p in self.model.parameters())
            frozen = sum(p.numel() for p in self.model.parameters() if not p.requires_grad)
            ranks = f" x {where.world} processes" if where.active else ""
            log.info(
                "%d training pairs, vocab %d/%d, %.2fM parameters%s, device %s%s, run %s",
                len(self.data.train), len(self.data.vocabs.src), len(self.data.vocabs.tgt),
                params / 1e6, f" ({frozen / 1e6:.2f}M frozen)" if frozen else "", self.device,
                ranks, self.run_dir,
            )  # fmt: skip
        bar = tqdm(
            total=cfg.max_steps, initial=progress.step, desc="train",
            disable=None if where.main else True,
        )  # fmt: skip
        # while the bar is drawn, log records are written above it instead of through it
        quiet_bar = logging_redirect_tqdm([logging.getLogger("nmt")])
        window = Window(self.device)
        self.model.train()
        with (
            StopRequest() as stop,
            bar,
            contextlib.nullcontext() if bar.disable else quiet_bar,
            self._metrics_log(),
        ):
            while progress.step < cfg.max_steps:
                if cfg.max_epochs and progress.epoch >= cfg.max_epochs:
                    break
                # the epoch's lengths: under subword sampling (data.tokenizer.sample_alpha), those
                # of its draws, a pure function of (seed, epoch) like the plan made from them
                src_lens, tgt_lens = self.data.train.lengths(progress.epoch)
                batches = epoch_batches(
                    src_lens, tgt_lens, cfg.batch_tokens, self.cfg.seed, progress.epoch,
                    where.world, cfg.length_step,
                )  # fmt: skip
                while progress.position < len(batches) and progress.step < cfg.max_steps:
                    group = batches[progress.position : progress.position + per_update]
                    progress.position += len(group)
                    began = time.monotonic()
                    done = self.update(group)
                    window.add(done.sums, done.tokens, done.applied, done.norm)
                    self.budget.add_training(done.tokens, time.monotonic() - began)
                    bar.update(1)
                    if progress.step % cfg.log_every == 0:
                        entry = window.flush(self.optimizer.param_groups[0]["lr"], where)
                        self._settle()
                        entry["skipped"], self.bad.skipped = self.bad.skipped, 0
                        self.record(entry)
                        bar.set_postfix_str(Window.describe(entry))
                        if bar.disable:  # no terminal (a log file, CI): print plain lines
                            log.info("step %d: train %s", progress.step, Window.describe(entry))
                    if progress.step % cfg.valid_every == 0 or progress.step == cfg.max_steps:
                        with window.paused():  # validation is not training time
                            log.info(self.validate_and_save())
                        patience = cfg.early_stopping_patience
                        if patience and progress.bad_validations >= patience:
                            gain = f"no {cfg.metric.value} gain in {patience} checks"
                            log.info("early stopping: %s", gain)
                            return self._result()
                    signalled, out_of_time = self._must_stop(stop)
                    if signalled:
                        return self._stop(stop)
                    if out_of_time:
                        with window.paused():
                            return self._out_of_time()
                if progress.position >= len(batches):
                    progress.epoch, progress.position = progress.epoch + 1, 0
            if self.saved_step != progress.step:  # stopped between validations (max_epochs)
                log.info(self.validate_and_save())
        return self._result()

    @contextlib.contextmanager
    def _metrics_log(self):
        """metrics.jsonl (and TensorBoard events), appended to by rank 0 while the loop runs."""
        if self.where.main:
            self.run_log = RunLog(self.run_dir, self.cfg.train.tensorboard, self.resumed_at)
        try:
            yield
        finally:
            if self.run_log is not None:
                self.run_log.close()
                self.run_log = None

    def _settle(self) -> None:
        """Read the device-side count of skipped updates: warn, or stop a run that keeps failing
        (nmt/training/bad_updates.py). Once per log window and before each checkpoint."""
        scale = self.scaler.get_scale() if self.scaler.is_enabled() else None
        self.bad.settle(scale)

    def _result(self) -> Path:
        best = self.root / "best"
        return best if best.exists() else self.root / "last"

    def _spent(self) -> float:
        """The fraction of the budget (steps or time, whichever binds first) used: the decaying
        LR schedules follow it."""
        return max(self.progress.step / self.cfg.train.max_steps, self.budget.fraction())

    def _must_stop(self, stop: StopRequest) -> tuple[bool, bool]:
        """(a stop signal came, the time budget is spent), the same answer on every rank."""
        return self.budget.check(
            stop.signal is not None, self.progress.step, self.where, self.device
        )

    def _out_of_time(self) -> Path:
        """train.max_minutes: validate and save the update just finished, as at max_steps."""
        if self.saved_step != self.progress.step:
            log.info(self.validate_and_save())
        minutes = self.budget.elapsed() / 60
        log.info(
            "time budget of %g min reached after step %d (%.1f min since the start)",
            self.cfg.train.max_minutes, self.progress.step, minutes,
        )  # fmt: skip
        return self._result()

    def _stop(self, stop: StopRequest) -> Path:
        """Checkpoint the update just finished (no validation: preemption grace periods are short)
        and say how to continue."""
        step = self.progress.step
        if self.saved_step != step:
            self.save({}, improved=False)
            self.saved_step = step
            barrier(self.where)
        log.info(
            "stopped by %s after step %d; checkpoint %s. To continue, run the same command with "
            "train.resume=true",
            stop.signal or "a signal to another rank", step, (self.root / "last").resolve(),
        )  # fmt: skip
        return self._result()


def train_main(cfg: TrainRunConfig, started: float | None = None) -> Path:
    """Train as configured, on one process or as one rank under torchrun; returns the path of
    the best checkpoint. train.max_minutes counts from `started` (time.monotonic(); default now),
    so the tokenizer and data preparation are inside the budget."""
    started = time.monotonic() if started is None else started
    where = from_environment()
    device = resolve_device(cfg.device, where.local_rank if where.active else None)
    check_precision(device, cfg.train.precision)
    check_precision(device, cfg.decode.precision, "decode.precision")
    if cfg.train.cuda_graphs and where.active:
        # DistributedDataParallel's gradient hooks and all-reduces inside captured graphs are not
        # something nmt has run: refuse, before any work, rather than risk a hang across ranks
        raise NMTError("train.cuda_graphs is for one process; under torchrun leave it false")
    if cfg.train.cuda_graphs and device.type != "cuda":
        log.warning("train.cuda_graphs has no effect on %s: the step runs compiled", device)
    init_process_group(where, device)
    try:
        return _train(cfg, device, where, started)
    finally:
        shutdown()


def _train(cfg: TrainRunConfig, device: torch.device, where: Dist, started: float) -> Path:
    data, model, resume = prepare_run(cfg, where)
    with data.train:  # the corpus's open files, closed however the run ends
        trainer = Trainer(cfg, model, data, device, where, started)
        if resume is not None:
            trainer.restore(resume)
        best = trainer.run()
    if cfg.train.calibrate and where.main:
        calibrate(cfg, best, device)
    return best
