"""Training throughput: target tokens per second of optimizer updates, printed as JSON.

    python scripts/bench_train.py data=multi30k data.local_dir=../shared/data/multi30k \
        model=gru_bahdanau train.batch_tokens=2048 --windows 5 --steps 20

Prepares the run and builds the Trainer as nmt-train does (tokenizer, bucketed batches, model,
optimizer; `train.precision=bf16`, `train.compile=true` and `device=cuda` apply) in a temporary
run directory, then times `--windows` windows of `--steps` updates each after one warm-up window,
and reports the median and every window. Validation is not included. On CUDA the clock waits for
the device at each window's end, and the peak memory of the timed windows is reported.

Subword regularization's cost: with `data.tokenizer.sample_alpha` set, `--against-off` alternates
the windows between epoch 0's sampled batches and the best segmentation's batches (the same model
and optimizer; in the order on, off, off, on, ..., which cancels a steady drift of a shared
machine's speed: use a multiple of 4 windows), and reports the ratios of target tokens/s as the
trainer counts them (the pieces trained on, sampled or not), of pairs/s, and of tokens per second
of this process's CPU time (steadier on a shared machine). `sampled_tgt_pieces_per_best` says how
much longer epoch 0's sampled targets are than the best ones:

    python scripts/bench_train.py data=multi30k data.local_dir=../shared/data/multi30k \
        model=gru_bahdanau train.batch_tokens=2048 data.tokenizer.sample_alpha=0.1 \
        data.tokenizer.sample_nbest=16 --against-off --windows 8 --steps 20
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time

import torch

from nmt.cli import main as cli
from nmt.data.batches import epoch_batches
from nmt.device import check_precision, describe, resolve_device
from nmt.training.setup import prepare_run
from nmt.training.trainer import Trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument(
        "--against-off", action="store_true",
        help="alternate windows with subword sampling off (needs data.tokenizer.sample_alpha)",
    )  # fmt: skip
    args = parser.parse_intermixed_args()  # overrides may come after the options too
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = cli.compose_config("train", [*args.overrides, f"run_dir={run_dir}"])
        device = resolve_device(cfg.device)
        check_precision(device, cfg.train.precision)
        data, model, _ = prepare_run(cfg)
        sampling = data.train.sampling
        if args.against_off and sampling is None:
            parser.error("--against-off needs data.tokenizer.sample_alpha > 0")
        trainer = Trainer(cfg, model, data, device)
        need = (args.windows + 1) * args.steps

        def plan(epoch: int | None) -> list[list[int]]:  # epoch 0's, sampled; None: best
            batches = epoch_batches(
                *data.train.lengths(epoch), cfg.train.batch_tokens, cfg.seed, 0,
                length_step=cfg.train.length_step,
            )  # fmt: skip
            return [batches[i % len(batches)] for i in range(need)]

        batches = plan(0)
        off_batches = plan(None) if args.against_off else batches
        trainer.model.train()
        rates, off_rates, pairs, off_pairs, cpu, off_cpu = [], [], [], [], [], []
        for w in range(args.windows + 1):
            if w == 1 and device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            # --against-off: windows on, off, off, on, on, off, ... after an off warm-up, so that
            # a steady drift of the machine's speed favours neither
            off = args.against_off and (w == 0 or (w - 1) % 4 in (1, 2))
            data.train.sampling = None if off else sampling
            window = (off_batches if off else batches)[w * args.steps : (w + 1) * args.steps]
            tokens, start, start_cpu = 0, time.perf_counter(), time.process_time()
            for group in window:
                tokens += trainer.update([group]).tokens
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if w > 0:  # window 0 warms up allocators, caches and compilation
                seconds = time.perf_counter() - start
                (off_rates if off else rates).append(tokens / seconds)
                (off_pairs if off else pairs).append(sum(map(len, window)) / seconds)
                # per second of this process's CPU time: steadier than the clock where other
                # work shares the cores
                (off_cpu if off else cpu).append(tokens / (time.process_time() - start_cpu))
        data.train.sampling = sampling
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
        growth = None
        if sampling is not None:  # target pieces of epoch 0's draws against the best ones
            growth = data.train.lengths(0)[1].sum() / data.train.lengths()[1].sum()
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
                "median_pairs_per_s": round(statistics.median(pairs), 1),
                "sample_alpha": cfg.data.tokenizer.sample_alpha,
                "sample_nbest": cfg.data.tokenizer.sample_nbest,
                "sampled_tgt_pieces_per_best": None if growth is None else round(float(growth), 3),
                "median_tgt_tokens_per_cpu_s": round(statistics.median(cpu), 1),
                **(
                    _against_off(rates, off_rates, pairs, off_pairs, cpu, off_cpu)
                    if args.against_off
                    else {}
                ),
                "peak_memory_mib": None if peak is None else round(peak / 2**20, 1),
                **describe(device),
            },
            indent=2,
        )
    )


def _against_off(*on_off: list[float]) -> dict:
    """The sampled windows' median rates against the unsampled ones': (tokens/s, pairs/s,
    tokens per CPU second), each as (on, off) lists of windows."""
    rates, off_rates, pairs, off_pairs, cpu, off_cpu = map(statistics.median, on_off)
    return {
        "off_median_tgt_tokens_per_s": round(off_rates, 1),
        "off_windows_tgt_tokens_per_s": [round(r, 1) for r in on_off[1]],
        "off_median_pairs_per_s": round(off_pairs, 1),
        "off_median_tgt_tokens_per_cpu_s": round(off_cpu, 1),
        "on_against_off_tokens": round(rates / off_rates, 3),
        "on_against_off_pairs": round(pairs / off_pairs, 3),
        "on_against_off_tokens_per_cpu_s": round(cpu / off_cpu, 3),
    }


if __name__ == "__main__":
    main()
