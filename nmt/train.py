"""The training loop, written out.

One update = `accum_steps` batches. The data position (epoch, batch index) and all RNG states go
into every checkpoint, and batches are a pure function of (seed, epoch), so `train.resume=true`
continues exactly where the last checkpoint left off.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from nmt.checkpoint import load_checkpoint, point, prune, save_checkpoint
from nmt.config import Metric, Optimizer, Precision, Split, TrainRunConfig
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
from nmt.errors import NMTError
from nmt.evaluate import bleu
from nmt.models import build_model
from nmt.models.seq2seq import Seq2Seq
from nmt.schedule import LRSchedule
from nmt.search import decode_all
from nmt.tokenizer import PAD, Vocabs, train_vocabs


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint."""

    step: int = 0  # optimizer updates done
    epoch: int = 0
    position: int = 0  # batches of `epoch` already consumed
    best: float | None = None  # best validation value of `train.metric`
    bad_validations: int = 0  # since `best` (early stopping)


def _better(metric: Metric, new: float, best: float | None) -> bool:
    if best is None:
        return True
    return new > best if metric == Metric.bleu else new < best


def _prepare_run_dir(cfg: TrainRunConfig) -> Path:
    """Refuse to clobber an existing run unless asked; returns the checkpoint root."""
    run_dir = Path(cfg.run_dir)
    root = run_dir / "checkpoints"
    has_run = (root / "last").exists()
    if cfg.train.resume and not has_run:
        raise NMTError(f"train.resume=true but {root}/last does not exist")
    if has_run and not cfg.train.resume:
        if not cfg.train.overwrite:
            raise NMTError(
                f"{run_dir} already holds a run: pass train.resume=true to continue it, "
                "train.overwrite=true to start over, or another run_dir"
            )
        shutil.rmtree(root)
        (run_dir / "metrics.jsonl").unlink(missing_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    return root


def _loss(model: Seq2Seq, batch, smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed training loss (label-smoothed) and summed NLL (for perplexity) of one batch."""
    logits, _ = model(batch.src, batch.src_lens, batch.tgt_in)  # (B, T, V)
    logits = logits.float().view(-1, logits.size(-1))
    target = batch.tgt_out.reshape(-1)
    loss = F.cross_entropy(
        logits, target, ignore_index=PAD, label_smoothing=smoothing, reduction="sum"
    )
    with torch.no_grad():
        nll = F.cross_entropy(logits, target, ignore_index=PAD, reduction="sum")
    return loss, nll


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
    nll, tokens = 0.0, 0
    lens_src, lens_tgt = [len(s) for s in data.src], [len(t) for t in data.tgt]
    for index in token_batches(lens_src, lens_tgt, cfg.train.batch_tokens):
        batch = collate(index, data.src, data.tgt).to(device)
        with autocast(device, cfg.train.precision):
            _, batch_nll = _loss(model, batch, 0.0)
        nll += float(batch_nll)
        tokens += batch.n_tgt_tokens
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


def _check_same_model(cfg: TrainRunConfig, stored: TrainRunConfig) -> None:
    """Resuming with another architecture would fail deep in load_state_dict; say it plainly."""
    if cfg.model != stored.model:
        now, then = vars(cfg.model), vars(stored.model)
        diff = ", ".join(
            f"model.{k}={then[k]} (now {now.get(k)})" for k in then if now.get(k) != then[k]
        )
        raise NMTError(f"train.resume: the checkpoint was trained with {diff}")


class Trainer:
    """Owns the model, optimizer, schedule and data of one run; `run()` is the loop."""

    def __init__(self, cfg: TrainRunConfig) -> None:
        self.cfg = cfg
        self.device = resolve_device(cfg.device)
        check_precision(self.device, cfg.train.precision)
        if cfg.train.metric == Metric.bleu and not cfg.train.valid_bleu:
            raise NMTError("train.metric=bleu needs train.valid_bleu=true")
        self.root = _prepare_run_dir(cfg)
        self.run_dir = Path(cfg.run_dir)
        torch.manual_seed(cfg.seed)

        train_corpus = read_split(cfg.data, Split.train)
        self.valid_corpus = read_split(cfg.data, Split.valid)
        resume = load_checkpoint(self.root / "last") if cfg.train.resume else None
        if resume is not None:
            _check_same_model(cfg, resume.config)
            self.vocabs = resume.vocabs
        else:
            self.vocabs = train_vocabs(
                train_corpus.src, train_corpus.tgt, self.run_dir, cfg.data.tokenizer
            )
        self.train_data = filter_length(encode(train_corpus, self.vocabs), cfg.data.max_len)
        self.valid_data = encode(self.valid_corpus, self.vocabs)
        if len(self.train_data) == 0:
            raise NMTError("no training pairs left after length filtering (data.max_len)")

        self.model = build_model(
            cfg.model, len(self.vocabs.src), len(self.vocabs.tgt), self.vocabs.joint
        )
        self.model.to(self.device)
        opt = torch.optim.AdamW if cfg.train.optimizer == Optimizer.adamw else torch.optim.Adam
        self.optimizer = opt(
            self.model.parameters(),
            lr=cfg.train.lr,
            betas=tuple(cfg.train.betas),
            weight_decay=cfg.train.weight_decay,
        )
        self.schedule = LRSchedule(cfg.train, self.optimizer)
        fp16 = cfg.train.precision == Precision.fp16
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=fp16)
        self.progress = Progress()
        self.saved_step = -1  # step of the newest checkpoint
        if resume is not None:
            self.model.load_state_dict(resume.payload["model"])
            self.optimizer.load_state_dict(resume.payload["optimizer"])
            self.schedule.load_state_dict(resume.payload["scheduler"])
            self.scaler.load_state_dict(resume.payload["scaler"])
            self.progress = Progress(**resume.payload["progress"])
            self.saved_step = self.progress.step
            _set_rng_state(resume.payload["rng"])
            self._truncate_log(self.progress.step)
        self.log = open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115

    def _truncate_log(self, step: int) -> None:
        """Drop log lines written after the checkpoint we resume from (the run died later)."""
        path = self.run_dir / "metrics.jsonl"
        if path.exists():
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
            kept = [line for line in lines if json.loads(line)["step"] <= step]
            path.write_text("".join(kept), encoding="utf-8")

    def record(self, entry: dict) -> None:
        row = {
            "step": self.progress.step,
            "epoch": self.progress.epoch,
            "time": time.time(),
            **entry,
        }
        self.log.write(json.dumps(row) + "\n")
        self.log.flush()

    def update(self, group: list[list[int]]) -> tuple[float, float, int]:
        """One optimizer update over `group` (accum_steps batches); returns loss, nll, tokens."""
        cfg = self.cfg.train
        parts = [
            collate(i, self.train_data.src, self.train_data.tgt).to(self.device) for i in group
        ]
        tokens = sum(b.n_tgt_tokens for b in parts)
        self.schedule.set_step(self.progress.step + 1)
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = nll_sum = 0.0
        for batch in parts:
            with autocast(self.device, cfg.precision):
                loss, nll = _loss(self.model, batch, cfg.label_smoothing)
            # normalise by the tokens of the whole update, so accumulation = one big batch
            self.scaler.scale(loss / tokens).backward()
            loss_sum, nll_sum = loss_sum + loss.item(), nll_sum + nll.item()
        if cfg.clip_grad_norm > 0:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.progress.step += 1
        return loss_sum, nll_sum, tokens

    def save(self, metrics: dict, improved: bool) -> None:
        payload = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.schedule.state_dict(),
            "scaler": self.scaler.state_dict(),
            "progress": vars(self.progress).copy(),
            "rng": _rng_state(),
            "metrics": metrics,
        }
        path = save_checkpoint(self.root, self.progress.step, payload, self.cfg, self.vocabs)
        if improved:
            point(self.root, "best", path)
        point(self.root, "last", path)
        prune(self.root, self.cfg.train.keep_last)
        self.saved_step = self.progress.step

    def validate_and_save(self) -> str:
        """Validate, checkpoint, move best/last; returns a line for the console."""
        metrics = validate(
            self.model, self.valid_data, self.valid_corpus.tgt, self.vocabs, self.cfg, self.device
        )
        metric = self.cfg.train.metric
        improved = _better(metric, metrics[metric.value], self.progress.best)
        if improved:
            self.progress.best, self.progress.bad_validations = metrics[metric.value], 0
        else:
            self.progress.bad_validations += 1
        self.schedule.report(improved)
        self.record({"split": "valid", **metrics, "best": improved})
        self.save(metrics, improved)
        shown = "  ".join(f"{k} {v:.2f}" for k, v in metrics.items())
        return f"step {self.progress.step}: valid {shown}{'  (best)' if improved else ''}"

    def run(self) -> Path:
        """Train until max_steps, max_epochs or early stopping; returns the best checkpoint."""
        cfg, progress = self.cfg.train, self.progress
        params = sum(p.numel() for p in self.model.parameters())
        print(
            f"nmt-train: {len(self.train_data)} training pairs, vocab {len(self.vocabs.src)}/"
            f"{len(self.vocabs.tgt)}, {params / 1e6:.2f}M parameters, device {self.device}, "
            f"run {self.run_dir}",
            file=sys.stderr,
        )
        bar = tqdm(total=cfg.max_steps, initial=progress.step, desc="train", disable=None)
        say = bar.write if not bar.disable else lambda s: print(s, file=sys.stderr)
        window = Window()
        self.model.train()
        try:
            while progress.step < cfg.max_steps:
                if cfg.max_epochs and progress.epoch >= cfg.max_epochs:
                    break
                batches = epoch_batches(
                    self.train_data, cfg.batch_tokens, self.cfg.seed, progress.epoch
                )
                while progress.position < len(batches) and progress.step < cfg.max_steps:
                    group = batches[progress.position : progress.position + cfg.accum_steps]
                    progress.position += len(group)
                    window.add(*self.update(group))
                    bar.update(1)
                    if progress.step % cfg.log_every == 0:
                        entry = window.flush(self.optimizer.param_groups[0]["lr"])
                        self.record(entry)
                        bar.set_postfix_str(Window.describe(entry))
                        if bar.disable:  # no terminal (a log file, CI): print plain lines
                            say(f"step {progress.step}: train {Window.describe(entry)}")
                    if progress.step % cfg.valid_every == 0 or progress.step == cfg.max_steps:
                        with window.paused():  # validation is not training time
                            say(self.validate_and_save())
                        patience = cfg.early_stopping_patience
                        if patience and progress.bad_validations >= patience:
                            say(f"early stopping: no {cfg.metric.value} gain in {patience} checks")
                            return self.root / "best"
                if progress.position >= len(batches):
                    progress.epoch, progress.position = progress.epoch + 1, 0
            if self.saved_step != progress.step:  # stopped between validations (max_epochs)
                say(self.validate_and_save())
        finally:
            bar.close()
            self.log.close()
        return self.root / "best"


class Window:
    """Training statistics since the last log line."""

    def __init__(self) -> None:
        self.loss = self.nll = 0.0
        self.tokens = 0
        self.start = time.perf_counter()

    def add(self, loss: float, nll: float, tokens: int) -> None:
        self.loss, self.nll, self.tokens = self.loss + loss, self.nll + nll, self.tokens + tokens

    @contextlib.contextmanager
    def paused(self):
        started = time.perf_counter()
        yield
        self.start += time.perf_counter() - started

    def flush(self, lr: float) -> dict:
        tokens = max(self.tokens, 1)
        entry = {
            "split": "train",
            "loss": self.loss / tokens,  # label-smoothed, per target token
            "ppl": math.exp(min(self.nll / tokens, 50.0)),
            "lr": lr,
            "tokens": self.tokens,  # target tokens in this window
            "tokens_per_s": self.tokens / (time.perf_counter() - self.start),
        }
        self.__init__()
        return entry

    @staticmethod
    def describe(entry: dict) -> str:
        return f"loss {entry['loss']:.3f} lr {entry['lr']:.2e} {entry['tokens_per_s']:.0f} tok/s"


def train_main(cfg: TrainRunConfig) -> Path:
    """Train as configured; returns the path of the best checkpoint."""
    return Trainer(cfg).run()
