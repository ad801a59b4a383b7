"""The training loop, written out.

One update = `accum_steps` batches. The data position (epoch, batch index) and all RNG states go
into every checkpoint, and batches are a pure function of (seed, epoch), so `train.resume=true`
continues exactly where the last checkpoint left off.
"""

from __future__ import annotations

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
from nmt.config import Metric, Optimizer, Split, TrainRunConfig
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
    """Validation loss/perplexity (teacher forcing) and, optionally, greedy BLEU."""
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
        result["bleu"] = bleu(vocabs.tgt.decode([h.tokens for h in hyps]), references)
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


def train_main(cfg: TrainRunConfig) -> Path:
    """Train as configured; returns the path of the best checkpoint."""
    device = resolve_device(cfg.device)
    check_precision(device, cfg.train.precision)
    if cfg.train.metric == Metric.bleu and not cfg.train.valid_bleu:
        raise NMTError("train.metric=bleu needs train.valid_bleu=true")
    root = _prepare_run_dir(cfg)
    run_dir = Path(cfg.run_dir)
    torch.manual_seed(cfg.seed)

    train_corpus = read_split(cfg.data, Split.train)
    valid_corpus = read_split(cfg.data, Split.valid)
    resume = load_checkpoint(root / "last") if cfg.train.resume else None
    if resume is not None:
        vocabs = resume.vocabs
    else:
        vocabs = train_vocabs(train_corpus.src, train_corpus.tgt, run_dir, cfg.data.tokenizer)
    train_data = filter_length(encode(train_corpus, vocabs), cfg.data.max_len)
    valid_data = encode(valid_corpus, vocabs)
    if len(train_data) == 0:
        raise NMTError("no training pairs left after length filtering (data.max_len)")

    model = build_model(cfg.model, len(vocabs.src), len(vocabs.tgt)).to(device)
    opt_cls = torch.optim.AdamW if cfg.train.optimizer == Optimizer.adamw else torch.optim.Adam
    optimizer = opt_cls(
        model.parameters(),
        lr=cfg.train.lr,
        betas=tuple(cfg.train.betas),
        weight_decay=cfg.train.weight_decay,
    )
    schedule = LRSchedule(cfg.train, optimizer)
    scaler = torch.amp.GradScaler(device.type, enabled=cfg.train.precision.value == "fp16")
    progress = Progress()
    if resume is not None:
        model.load_state_dict(resume.payload["model"])
        optimizer.load_state_dict(resume.payload["optimizer"])
        schedule.load_state_dict(resume.payload["scheduler"])
        scaler.load_state_dict(resume.payload["scaler"])
        progress = Progress(**resume.payload["progress"])
        _set_rng_state(resume.payload["rng"])

    params = sum(p.numel() for p in model.parameters())
    print(
        f"nmt-train: {len(train_data)} training pairs, vocab {len(vocabs.src)}/{len(vocabs.tgt)}, "
        f"{params / 1e6:.2f}M parameters, device {device}, run {run_dir}",
        file=sys.stderr,
    )

    def checkpoint(metrics: dict) -> Path:
        payload = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": schedule.state_dict(),
            "scaler": scaler.state_dict(),
            "progress": vars(progress).copy(),
            "rng": _rng_state(),
            "metrics": metrics,
        }
        return save_checkpoint(root, progress.step, payload, cfg, vocabs)

    log = open(run_dir / "metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115 - closed below

    def record(entry: dict) -> None:
        log.write(json.dumps({"step": progress.step, "epoch": progress.epoch, **entry}) + "\n")
        log.flush()

    saved_step = progress.step if resume is not None else -1

    def validate_and_save() -> float:
        """Validate, checkpoint, update best/last; returns the seconds it took."""
        nonlocal saved_step
        started = time.perf_counter()
        metrics = validate(model, valid_data, valid_corpus.tgt, vocabs, cfg, device)
        value = metrics[cfg.train.metric.value]
        improved = _better(cfg.train.metric, value, progress.best)
        if improved:
            progress.best, progress.bad_validations = value, 0
        else:
            progress.bad_validations += 1
        schedule.report(improved)
        record({"split": "valid", **metrics, "best": improved})
        path = checkpoint(metrics)
        if improved:
            point(root, "best", path)
        point(root, "last", path)
        prune(root, cfg.train.keep_last)
        saved_step = progress.step
        shown = "  ".join(f"{k} {v:.2f}" for k, v in metrics.items())
        bar.write(
            f"step {progress.step}: valid {shown}{'  (best)' if improved else ''}", file=sys.stderr
        )
        return time.perf_counter() - started

    bar = tqdm(
        total=cfg.train.max_steps,
        initial=progress.step,
        desc="train",
        dynamic_ncols=True,
        disable=None,
        file=sys.stderr,
    )
    window = {"loss": 0.0, "nll": 0.0, "tokens": 0, "start": time.perf_counter()}
    stop = False
    model.train()
    try:
        while not stop and progress.step < cfg.train.max_steps:
            if cfg.train.max_epochs and progress.epoch >= cfg.train.max_epochs:
                break
            batches = epoch_batches(train_data, cfg.train.batch_tokens, cfg.seed, progress.epoch)
            while progress.position < len(batches) and progress.step < cfg.train.max_steps:
                group = batches[progress.position : progress.position + cfg.train.accum_steps]
                progress.position += len(group)
                parts = [
                    collate(index, train_data.src, train_data.tgt).to(device) for index in group
                ]
                tokens = sum(b.n_tgt_tokens for b in parts)
                lr = schedule.set_step(progress.step + 1)
                optimizer.zero_grad(set_to_none=True)
                for batch in parts:
                    with autocast(device, cfg.train.precision):
                        loss, nll = _loss(model, batch, cfg.train.label_smoothing)
                    scaler.scale(loss / tokens).backward()
                    window["loss"] += loss.item()
                    window["nll"] += nll.item()
                if cfg.train.clip_grad_norm > 0:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.clip_grad_norm)
                scaler.step(optimizer)
                scaler.update()
                progress.step += 1
                window["tokens"] += tokens
                bar.update(1)

                if progress.step % cfg.train.log_every == 0:
                    elapsed = time.perf_counter() - window["start"]
                    entry = {
                        "split": "train",
                        "loss": window["loss"] / window["tokens"],
                        "ppl": math.exp(min(window["nll"] / window["tokens"], 50.0)),
                        "lr": lr,
                        "tokens_per_s": window["tokens"] / elapsed,
                    }
                    record(entry)
                    shown = (
                        f"loss {entry['loss']:.3f} lr {lr:.2e} {entry['tokens_per_s']:.0f} tok/s"
                    )
                    bar.set_postfix_str(shown)
                    if bar.disable:  # no terminal (a log file, CI): print a plain line instead
                        print(f"step {progress.step}: train {shown}", file=sys.stderr)
                    window = {"loss": 0.0, "nll": 0.0, "tokens": 0, "start": time.perf_counter()}

                if (
                    progress.step % cfg.train.valid_every == 0
                    or progress.step == cfg.train.max_steps
                ):
                    window["start"] += validate_and_save()  # validation is not training time
                    patience = cfg.train.early_stopping_patience
                    if patience and progress.bad_validations >= patience:
                        bar.write(
                            f"early stopping: no {cfg.train.metric.value} improvement "
                            f"in {patience} validations",
                            file=sys.stderr,
                        )
                        stop = True
                        break
            if progress.position >= len(batches):
                progress.epoch, progress.position = progress.epoch + 1, 0
        if saved_step != progress.step:  # stopped between validations (max_epochs)
            validate_and_save()
    finally:
        bar.close()
        log.close()
    return root / "best"
    if not (root / "best").exists():  # stopped before the first validation (max_epochs)
        path = checkpoint({})
        point(root, "best", path)
        point(root, "last", path)
    return root / "best"
