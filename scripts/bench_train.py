"""Training throughput: target tokens per second of optimizer updates, printed as JSON.

    python scripts/bench_train.py data=multi30k data.local_dir=../shared/data/multi30k \
        model=gru_bahdanau train.batch_tokens=2048 --windows 5 --steps 20

Prepares the run and builds the Trainer as nmt-train does (tokenizer, bucketed batches, model,
optimizer; `train.precision=bf16`, `train.compile=true` and `device=cuda` apply) in a temporary
run directory, then times `--windows` windows of `--steps` updates each after one warm-up window,
and reports the median and every window. Validation is not included. On CUDA the clock waits for
the device at each window's end, and the peak memory of the timed windows is reported.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time

import torch

from nmt.batches import epoch_batches
from nmt.cli import main as cli
from nmt.device import check_precision, describe, resolve_device
from nmt.training.setup import prepare_run
from nmt.training.trainer import Trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_intermixed_args()  # overrides may come after the options too
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = cli.compose_config("train", [*args.overrides, f"run_dir={run_dir}"])
        device = resolve_device(cfg.device)
        check_precision(device, cfg.train.precision)
        data, model, _ = prepare_run(cfg)
        trainer = Trainer(cfg, model, data, device)
        batches = epoch_batches(
            data.train.src_lens,
            data.train.tgt_lens,
            cfg.train.batch_tokens,
            cfg.seed,
            0,
            length_step=cfg.train.length_step,
        )
        need = (args.windows + 1) * args.steps
        batches = [batches[i % len(batches)] for i in range(need)]
        trainer.model.train()
        rates = []
        for w in range(args.windows + 1):
            if w == 1 and device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            tokens, start = 0, time.perf_counter()
            for group in batches[w * args.steps : (w + 1) * args.steps]:
                tokens += trainer.update([group]).tokens
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if w > 0:  # window 0 warms up allocators, caches and compilation
                rates.append(tokens / (time.perf_counter() - start))
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    print(
        json.dumps(
            {
                "benchmark": "train_tokens_per_s",
                "model": cfg.model.name,
                "model_config": dataclasses.asdict(cfg.model),
                "parameters": sum(p.numel() for p in trainer.model.parameters()),
                "data": cfg.data.name,
                "batch_tokens": cfg.train.batch_tokens,
                "precision": cfg.train.precision.value,
                "compile": cfg.train.compile,
                "steps_per_window": args.steps,
                "median_tgt_tokens_per_s": round(statistics.median(rates), 1),
                "windows_tgt_tokens_per_s": [round(r, 1) for r in rates],
                "peak_memory_mib": None if peak is None else round(peak / 2**20, 1),
                **describe(device),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
