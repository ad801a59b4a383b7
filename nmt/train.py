"""Training: `prepare_run` gets a run ready (directory, corpora, tokenizer, model, the checkpoint to
resume), `Trainer` runs the loop over what it is given.

One update = `accum_steps` batches per process. The data position (epoch, batch index) and every
process's RNG state go into each checkpoint, and batches are a pure function of (seed, epoch), so
`train.resume=true` continues exactly where the last checkpoint left off. Under torchrun the
batches of an update are dealt out to the processes (see `Trainer.update`).
"""

from __future__ import annotations

import contextlib
import math
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from nmt.attention_map import save_heatmap, select_map
from nmt.checkpoint import (
    Checkpoint,
    load_resume_point,
    point,
    prune,
    save_checkpoint,
    step_name,
)
from nmt.config import (
    DecodeConfig,
    Metric,
    Optimizer,
    Precision,
    Split,
    TrainRunConfig,
    TransformerConfig,
)
from nmt.data import (
    Encoded,
    collate,
    encode,
    epoch_batches,
    filter_length,
    read_split,
    token_batches,
)
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
    sum_across,
)
from nmt.errors import NMTError
from nmt.evaluate import bleu
from nmt.loss import smoothed_cross_entropy
from nmt.models import build_model
from nmt.models.seq2seq import Seq2Seq
from nmt.preemption import StopRequest
from nmt.resume import check_resume, load_init
from nmt.run_log import RunLog, remove_logs
from nmt.schedule import LRSchedule
from nmt.search import decode_all
from nmt.tokenizer import EOS, PAD, Vocabs, load_vocabs, prune_vocabs, train_vocabs

MIN_LOSS_SCALE = 1e-4  # below this an fp16 run cannot recover (fairseq stops at the same point)


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint."""

    step: int = 0  # optimizer updates done
    epoch: int = 0
    position: int = 0  # batches of `epoch` already consumed
    best: float | None = None  # best validation value of `train.metric`
    bad_validations: int = 0  # since `best` (early stopping)
    seconds: float = 0.0  # wall clock spent by the run at this checkpoint (train.max_minutes)


def _better(metric: Metric, new: float, best: float | None) -> bool:
    if best is None:
        return True
    return new > best if metric == Metric.bleu else new < best


def _check_run_dir(cfg: TrainRunConfig) -> Path:
    """Refuse to clobber an existing run unless asked; returns the checkpoint root. Read-only, so
    every rank can run it and fail the same way."""
    run_dir = Path(cfg.run_dir)
    root = run_dir / "checkpoints"
    has_run = (root / "last").exists()
    if cfg.train.resume and not has_run:
        raise NMTError(f"train.resume=true but {root}/last does not exist")
    if has_run and not cfg.train.resume and not cfg.train.overwrite:
        raise NMTError(
            f"{run_dir} already holds a run: pass train.resume=true to continue it, "
            "train.overwrite=true to start over, or another run_dir"
        )
    return root


def _reset_run_dir(cfg: TrainRunConfig, root: Path) -> None:
    """train.overwrite: remove the old checkpoints and log (rank 0 only)."""
    if (root / "last").exists() and not cfg.train.resume:
        shutil.rmtree(root)
        remove_logs(Path(cfg.run_dir))
    Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)


def _loss(model: Seq2Seq, batch, smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed training loss (label-smoothed) and summed NLL (for perplexity) of one batch, both
    from one log-softmax (nmt/loss.py)."""
    logits, _ = model(batch.src, batch.src_lens, batch.tgt_in)  # (B, T, V)
    target = batch.tgt_out.reshape(-1)  # (B*T,)
    return smoothed_cross_entropy(logits.reshape(target.size(0), -1), target, smoothing, PAD)


@torch.inference_mode()
def validate(
    model: Seq2Seq,
    data: Encoded,
    references: list[str],
    vocabs: Vocabs,
    cfg: TrainRunConfig,
    device: torch.device,
) -> dict:
    """Validation loss/perplexity (teacher forcing) and, optionally, BLEU decoded with the run's
    `decode` settings (greedy by default; `decode=beam` validates with beam search)."""
    model.eval()
    nll, tokens = torch.zeros((), device=device), 0  # summed on the device, read once
    lens_src, lens_tgt = [len(s) for s in data.src], [len(t) for t in data.tgt]
    for index in token_batches(lens_src, lens_tgt, cfg.train.batch_tokens):
        batch = collate(index, data.src, data.tgt).to(device)
        with autocast(device, cfg.train.precision):
            _, batch_nll = _loss(model, batch, 0.0)
        nll += batch_nll
        tokens += batch.n_tgt_tokens
    nll = nll.item()
    result = {"loss": nll / tokens, "ppl": math.exp(min(nll / tokens, 50.0))}
    if cfg.train.valid_bleu:
        with autocast(device, cfg.train.precision):
            hyps = decode_all(model, data.src, cfg.decode, device)
        result["bleu"] = bleu(vocabs.tgt.decode([h[0].tokens for h in hyps]), references)
    model.train()
    return result


def _rng_state() -> dict:
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass
class RunData:
    """What a run trains and validates on: the tokenizer and the encoded corpora."""

    vocabs: Vocabs
    train: Encoded
    valid: Encoded
    valid_references: list[str]  # raw target side of the validation split, for BLEU


def prepare_run(
    cfg: TrainRunConfig, where: Dist = SINGLE
) -> tuple[RunData, Seq2Seq, Checkpoint | None]:
    """Everything before the first update: the run directory, the corpora, the tokenizer (trained
    by rank 0, read by the others), the model, and the checkpoint to resume from (or None).

    Every rank builds the same model from `cfg.seed`; DistributedDataParallel then makes sure of it
    by broadcasting rank 0's weights.
    """
    root = _check_run_dir(cfg)
    if where.main:
        _reset_run_dir(cfg, root)
    barrier(where)
    torch.manual_seed(cfg.seed)
    run_dir = Path(cfg.run_dir)
    train_corpus = read_split(cfg.data, Split.train)
    valid_corpus = read_split(cfg.data, Split.valid)
    say = _print_err if where.main else _silent
    resume = load_resume_point(root, say) if cfg.train.resume else None
    init = load_init(cfg, say) if cfg.train.init_from else None
    if resume is not None:
        check_resume(cfg, resume)
        vocabs = resume.vocabs
    elif init is not None:
        vocabs = init.vocabs
    else:
        if where.main:
            tok = cfg.data.tokenizer
            vocabs = train_vocabs(train_corpus.src, train_corpus.tgt, run_dir, tok)
            if tok.prune_unseen:
                shared = isinstance(cfg.model, TransformerConfig) and cfg.model.share_embeddings
                prune_vocabs(vocabs, train_corpus.src, train_corpus.tgt, run_dir, shared)
        barrier(where)  # the others read what rank 0 wrote
        vocabs = load_vocabs(run_dir)
    train_data = filter_length(encode(train_corpus, vocabs), cfg.data.max_len)
    if len(train_data) == 0:
        raise NMTError("no training pairs left after length filtering (data.max_len)")
    data = RunData(vocabs, train_data, encode(valid_corpus, vocabs), valid_corpus.tgt)
    model = build_model(cfg.model, len(vocabs.src), len(vocabs.tgt), vocabs.joint)
    if init is not None:
        model.load_state_dict(init.payload["model"])
    return data, model, resume


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
        self.train_model: torch.nn.Module = self.model  # what the training forward calls
        if where.active:
            ids = [device.index] if device.type == "cuda" else None
            self.train_model = DistributedDataParallel(self.model, device_ids=ids)
            # rank 0 keeps the stream of a single-process run; the others draw their own dropout
            if not where.main:
                torch.manual_seed(cfg.seed + 1_000_003 * where.rank)
        if cfg.train.compile:
            self.train_model = torch.compile(self.train_model)
        opt = torch.optim.AdamW if cfg.train.optimizer == Optimizer.adamw else torch.optim.Adam
        self.optimizer = opt(
            self.model.parameters(),
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
        self.log: RunLog | None = None  # rank 0's, while the loop runs
        self.resumed_at: int | None = None  # the step a resumed run continues from
        self.bad_in_row = 0  # consecutive skipped updates (NaN/inf, out of memory)
        self.skipped = 0  # skipped updates since the last log line
        self.norms: list[float] = []  # gradient norms of the updates since the last log line
        self.say = _print_err if where.main else _silent
        self.started = time.monotonic() if started is None else started  # for train.max_minutes
        self.valid_seconds = 0.0  # how long the last validation (and its checkpoint) took
        self.trained = (0, 0.0)  # target tokens and seconds of training in this command
        self.valid_tokens = sum(len(t) + 1 for t in data.valid.tgt)  # for _validation_estimate
        # seconds of the time budget spent, one validation ahead, agreed by all ranks (_must_stop)
        self.spent_seconds = 0.0

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
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.schedule.load_state_dict(payload["scheduler"])
        self.scaler.load_state_dict(payload["scaler"])
        self.progress = Progress(**payload["progress"])
        self.started -= self.progress.seconds  # max_minutes counts the whole run, not this command
        self.spent_seconds = self.progress.seconds  # the first update's LR, before _must_stop runs
        self.saved_step = self.progress.step
        ranks = payload.get("rng_ranks") or [payload["rng"]]
        _set_rng_state(ranks[self.where.rank])
        self.resumed_at = self.progress.step  # the logs are cut back to it when they open

    def record(self, entry: dict) -> None:
        if self.log is not None:
            self.log.write(self.progress.step, self.progress.epoch, entry)

    def update(self, group: list[list[int]]) -> tuple[torch.Tensor, int]:
        """One optimizer update over `group`, the batches of this update on all ranks together
        (accum_steps per rank); this rank takes every world-th one. Returns this rank's summed
        (loss, nll) as a device tensor, unread, and the target tokens of the whole group; a skipped
        update (NaN/inf, out of memory) returns zeros and 0 tokens."""
        cfg, world = self.cfg.train, self.where.world
        train = self.data.train
        mine = group[self.where.rank :: world]
        # tokens of the whole update, counted from the index lists on the host: no device sync
        # and no communication, since every rank knows every rank's batches
        tokens = sum(len(train.tgt[i]) + 1 for batch in group for i in batch)
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
            return torch.zeros(2, device=self.device), 0
        self.scaler.unscale_(self.optimizer)  # a no-op unless fp16
        params = [p for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        if cfg.clip_grad_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(params, cfg.clip_grad_norm, norm)
        # one host read per update (GradScaler makes one too): a NaN must not reach the weights.
        # Under DDP the norm is of the all-reduced gradients, so every rank decides alike.
        norm_value, loss_value = torch.stack([norm.float(), sums[0]]).tolist()
        ok = math.isfinite(norm_value) and (self.where.active or math.isfinite(loss_value))
        if ok:
            self.norms.append(norm_value)  # before clipping: how hard the clip works
        if cfg.precision == Precision.fp16:
            self.scaler.step(self.optimizer)  # skips the step itself on overflow
            self.scaler.update()  # and lowers the scale
            if not ok:
                self._fp16_overflow()
        elif ok:
            self.optimizer.step()
            self.bad_in_row = 0
        else:
            self._skip(
                "the loss or gradient norm is NaN/inf",
                "usual causes: a learning rate too high or too little warm-up (train.lr, "
                "train.warmup_steps), no gradient clipping (train.clip_grad_norm), fp16 overflow "
                "(train.precision=bf16 or fp32)",
            )
        if not ok:
            return torch.zeros(2, device=self.device), 0
        return sums, tokens

    def _backward(self, mine: list[list[int]], tokens: int) -> torch.Tensor:
        """Forward and backward over this rank's batches of the update; summed (loss, nll)."""
        cfg, world, train = self.cfg.train, self.where.world, self.data.train
        parts = [collate(index, train.src, train.tgt).to(self.device) for index in mine]
        sums = torch.zeros(2, device=self.device)  # loss, nll
        for n, batch in enumerate(parts):
            last = n == len(parts) - 1
            # gradients are all-reduced once per update, after the last batch
            sync = contextlib.nullcontext() if last or not self.where.active else self._no_sync()
            with sync:
                with autocast(self.device, cfg.precision):
                    loss, nll = _loss(self.train_model, batch, cfg.label_smoothing)
                # DDP averages gradients over ranks: dividing by tokens / world makes the sum
                # over ranks equal one big batch normalised by all of its tokens
                self.scaler.scale(loss / (tokens / world)).backward()
            sums += torch.stack([loss.detach(), nll.detach()])
        return sums

    def _skip(self, reason: str, advice: str) -> None:
        """Count a skipped update; too many in a row stop the run (the last checkpoint stays)."""
        self.optimizer.zero_grad(set_to_none=True)
        self.bad_in_row += 1
        self.skipped += 1
        step, limit = self.progress.step, self.cfg.train.max_bad_updates
        self.say(f"warning: step {step}: {reason}; update skipped ({self.bad_in_row} in a row)")
        if self.bad_in_row >= limit:
            raise NMTError(
                f"stopping at step {step}: {limit} updates in a row were skipped ({reason}); "
                f"{advice}. The last checkpoint (step {max(self.saved_step, 0)}) is intact"
            )

    def _skip_out_of_memory(self, mine: list[list[int]]) -> None:
        train = self.data.train
        sentences = sum(len(batch) for batch in mine)
        tokens = sum(len(train.tgt[i]) + 1 for batch in mine for i in batch)
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        advice = (
            f"lower train.batch_tokens (now {self.cfg.train.batch_tokens}) and raise "
            "train.accum_steps to keep the update size, or lower data.max_len"
        )
        if self.where.active:  # the other ranks wait in the all-reduce for this one's gradients
            raise NMTError(
                f"out of memory at step {self.progress.step} on rank {self.where.rank}; under "
                f"torchrun a batch cannot be skipped on one rank alone: {advice}"
            )
        self._skip(f"out of memory on {sentences} sentences, {tokens} target tokens", advice)

    def _fp16_overflow(self) -> None:
        """GradScaler skipped the step and halved the scale; that is routine unless the scale has
        collapsed, which means the gradients are not finite at any scale."""
        self.skipped += 1
        scale = self.scaler.get_scale()
        if scale < MIN_LOSS_SCALE:
            raise NMTError(
                f"stopping at step {self.progress.step}: the fp16 loss scale collapsed to "
                f"{scale:.1e} (the gradients overflow at any scale); train with "
                "train.precision=bf16 or fp32, or a lower train.lr"
            )

    def _no_sync(self) -> contextlib.AbstractContextManager:
        ddp = self.train_model
        ddp = getattr(ddp, "_orig_mod", ddp)  # under torch.compile
        return ddp.no_sync()

    def save(self, metrics: dict, improved: bool) -> None:
        """Rank 0 writes the checkpoint, with the RNG state of every rank (collected from all)."""
        rng = gather(_rng_state(), self.where)
        if not self.where.main:
            return
        payload = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.schedule.state_dict(),
            "scaler": self.scaler.state_dict(),
            "progress": vars(self.progress) | {"seconds": time.monotonic() - self.started},
            "rng": rng[0],
            "world_size": self.where.world,
            "metrics": metrics,
        }
        if self.where.active:
            payload["rng_ranks"] = rng
        path = save_checkpoint(self.root, self.progress.step, payload, self.cfg, self.data.vocabs)
        if improved:
            point(self.root, "best", path)
        point(self.root, "last", path)
        prune(self.root, self.cfg.train.keep_last)

    def _save_alignments(self) -> None:
        """train.valid_heatmaps=K: the greedy attention of the first K validation sentences, one
        PNG each per validation (run_dir/attention/step-N.k.png), to watch alignment emerge."""
        src = self.data.valid.src[: self.cfg.train.valid_heatmaps]
        vocabs, step = self.data.vocabs, self.progress.step
        self.model.eval()
        with torch.inference_mode():
            nbests = decode_all(self.model, src, DecodeConfig(), self.device, attention=True)
        self.model.train()
        for k, (ids, nbest) in enumerate(zip(src, nbests)):
            best = nbest[0]
            if best.attention is None:  # model.attention=none
                return
            save_heatmap(
                vocabs.src.id_to_piece(ids),
                vocabs.tgt.id_to_piece(best.tokens + [EOS] * best.ended),
                select_map(best.attention, -1, None),  # the top layer, heads averaged
                self.run_dir / "attention" / f"{step_name(step)}.{k}.png",
                f"step {step}: {vocabs.tgt.decode([best.tokens])[0]}",
            )

    def validate_and_save(self) -> str:
        """Rank 0 validates; every rank takes its metrics (the LR schedule and early stopping must
        agree everywhere); rank 0 checkpoints. Returns a line for the console."""
        metrics, began = None, time.monotonic()  # valid_seconds: validation and saving
        if self.where.main:
            metrics = validate(
                self.model, self.data.valid, self.data.valid_references, self.data.vocabs,
                self.cfg, self.device,
            )  # fmt: skip
            if self.cfg.train.valid_heatmaps:
                self._save_alignments()
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
        self.valid_seconds = time.monotonic() - began
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
            ranks = f" x {where.world} processes" if where.active else ""
            print(
                f"nmt-train: {len(self.data.train)} training pairs, vocab "
                f"{len(self.data.vocabs.src)}/{len(self.data.vocabs.tgt)}, {params / 1e6:.2f}M "
                f"parameters, device {self.device}{ranks}, run {self.run_dir}",
                file=sys.stderr,
            )
        bar = tqdm(
            total=cfg.max_steps, initial=progress.step, desc="train",
            disable=None if where.main else True,
        )  # fmt: skip
        if where.main and not bar.disable:
            self.say = bar.write
        window = Window(self.device)
        self.model.train()
        with StopRequest(announce=where.main) as stop, bar, self._metrics_log():
            while progress.step < cfg.max_steps:
                if cfg.max_epochs and progress.epoch >= cfg.max_epochs:
                    break
                batches = epoch_batches(
                    self.data.train, cfg.batch_tokens, self.cfg.seed, progress.epoch, where.world
                )
                while progress.position < len(batches) and progress.step < cfg.max_steps:
                    group = batches[progress.position : progress.position + per_update]
                    progress.position += len(group)
                    began = time.monotonic()
                    sums, tokens = self.update(group)
                    window.add(sums, tokens)
                    done, seconds = self.trained
                    self.trained = (done + tokens, seconds + time.monotonic() - began)
                    bar.update(1)
                    if progress.step % cfg.log_every == 0:
                        entry = window.flush(self.optimizer.param_groups[0]["lr"], where)
                        entry["skipped"], self.skipped = self.skipped, 0
                        if self.norms:
                            entry["grad_norm"] = sum(self.norms) / len(self.norms)
                        self.norms = []
                        self.record(entry)
                        bar.set_postfix_str(Window.describe(entry))
                        if bar.disable:  # no terminal (a log file, CI): print plain lines
                            self.say(f"step {progress.step}: train {Window.describe(entry)}")
                    if progress.step % cfg.valid_every == 0 or progress.step == cfg.max_steps:
                        with window.paused():  # validation is not training time
                            self.say(self.validate_and_save())
                        patience = cfg.early_stopping_patience
                        if patience and progress.bad_validations >= patience:
                            gain = f"no {cfg.metric.value} gain in {patience} checks"
                            self.say(f"early stopping: {gain}")
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
                self.say(self.validate_and_save())
        return self._result()

    @contextlib.contextmanager
    def _metrics_log(self):
        """metrics.jsonl (and TensorBoard events), appended to by rank 0 while the loop runs."""
        if self.where.main:
            self.log = RunLog(self.run_dir, self.cfg.train.tensorboard, self.resumed_at)
        try:
            yield
        finally:
            if self.log is not None:
                self.log.close()
                self.log = None

    def _result(self) -> Path:
        best = self.root / "best"
        return best if best.exists() else self.root / "last"

    def _spent(self) -> float:
        """The fraction of the budget (steps or time, whichever binds first) used: the decaying
        LR schedules follow it."""
        steps = self.progress.step / self.cfg.train.max_steps
        budget = self.cfg.train.max_minutes * 60
        return max(steps, self.spent_seconds / budget) if budget else steps

    def _validation_estimate(self) -> float:
        """Seconds the closing validation will take: the last one's, or before the first, the
        validation targets at the training speed so far (measured: greedy validation of Multi30k
        took 4.9 s, its 15k target tokens at 3,300 tokens/s are 4.5 s)."""
        if self.valid_seconds or not self.trained[0]:
            return self.valid_seconds
        return self.valid_tokens * self.trained[1] / self.trained[0]

    def _must_stop(self, stop: StopRequest) -> tuple[bool, bool]:
        """(a stop signal came, the time budget is spent), agreed by all ranks: every rank must
        stop after the same update, and use the same learning rate. The budget keeps room for
        one more validation, timed on the last one, so that the run ends within it."""
        spent = time.monotonic() - self.started + self._validation_estimate()
        signalled = stop.signal is not None
        if self.where.active:
            flags = torch.tensor([float(signalled), spent], device=self.device)
            total = sum_across(flags, self.where).tolist()
            signalled, spent = total[0] > 0, total[1] / self.where.world
        self.spent_seconds = spent
        budget = self.cfg.train.max_minutes * 60
        return signalled, bool(budget) and spent >= budget

    def _out_of_time(self) -> Path:
        """train.max_minutes: validate and save the update just finished, as at max_steps."""
        if self.saved_step != self.progress.step:
            self.say(self.validate_and_save())
        minutes = (time.monotonic() - self.started) / 60
        self.say(
            f"nmt-train: time budget of {self.cfg.train.max_minutes:g} min reached after step "
            f"{self.progress.step} ({minutes:.1f} min since the start)"
        )
        return self._result()

    def _stop(self, stop: StopRequest) -> Path:
        """Checkpoint the update just finished (no validation: preemption grace periods are short)
        and say how to continue."""
        step = self.progress.step
        if self.saved_step != step:
            self.save({}, improved=False)
            self.saved_step = step
            barrier(self.where)
        self.say(
            f"nmt-train: stopped by {stop.signal or 'a signal to another rank'} after step "
            f"{step}; checkpoint {(self.root / 'last').resolve()}. To continue, run the same "
            "command with train.resume=true"
        )
        return self._result()


def _print_err(line: str) -> None:
    print(line, file=sys.stderr)


def _silent(line: str) -> None:
    pass


class Window:
    """Training statistics since the last log line; loss sums stay on the device until read."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.sums = torch.zeros(2, device=device)  # loss, nll
        self.tokens = 0
        self.start = time.perf_counter()

    def add(self, sums: torch.Tensor, tokens: int) -> None:
        self.sums += sums
        self.tokens += tokens

    @contextlib.contextmanager
    def paused(self):
        started = time.perf_counter()
        yield
        self.start += time.perf_counter() - started

    def flush(self, lr: float, where: Dist = SINGLE) -> dict:
        """The window's entry for the log (one device read, one all-reduce under DDP); resets."""
        loss, nll = sum_across(self.sums, where).tolist()
        tokens = max(self.tokens, 1)  # already counted over all ranks
        entry = {
            "split": "train",
            "loss": loss / tokens,  # label-smoothed, per target token
            "ppl": math.exp(min(nll / tokens, 50.0)),
            "lr": lr,
            "tokens": self.tokens,  # target tokens in this window, all ranks
            "tokens_per_s": self.tokens / (time.perf_counter() - self.start),
        }
        self.__init__(self.device)
        return entry

    @staticmethod
    def describe(entry: dict) -> str:
        return f"loss {entry['loss']:.3f} lr {entry['lr']:.2e} {entry['tokens_per_s']:.0f} tok/s"


def train_main(cfg: TrainRunConfig, started: float | None = None) -> Path:
    """Train as configured, on one process or as one rank under torchrun; returns the path of
    the best checkpoint. train.max_minutes counts from `started` (time.monotonic(); default now),
    so the tokenizer and data preparation are inside the budget."""
    started = time.monotonic() if started is None else started
    where = from_environment()
    device = resolve_device(cfg.device, where.local_rank if where.active else None)
    check_precision(device, cfg.train.precision)
    init_process_group(where, device)
    try:
        data, model, resume = prepare_run(cfg, where)
        trainer = Trainer(cfg, model, data, device, where, started)
        if resume is not None:
            trainer.restore(resume)
        return trainer.run()
    finally:
        shutdown()
