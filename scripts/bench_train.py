"""Training throughput: target tokens per second of optimizer updates, printed as JSON.

    python scripts/bench_train.py data=multi30k data.local_dir=../shared/data/multi30k \
        model=gru_bahdanau train.batch_tokens=2048 --windows 5 --steps 20

Builds the same Trainer as nmt-train (tokenizer, bucketed batches, model, optimizer) in a
temporary run directory, then times `--windows` windows of `--steps` updates each after one
warm-up window, and reports the median and every window. Validation is not included.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time

from nmt import cli
from nmt.data import epoch_batches
from nmt.device import describe
from nmt.train import Trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = cli._compose("train", [*args.overrides, f"run_dir={run_dir}"], None)
        trainer = Trainer(cfg)
        batches = epoch_batches(trainer.train_data, cfg.train.batch_tokens, cfg.seed, 0)
        need = (args.windows + 1) * args.steps
        batches = (batches * (need // len(batches) + 1))[:need]
        trainer.model.train()
        rates = []
        for w in range(args.windows + 1):
            tokens, start = 0, time.perf_counter()
            for group in batches[w * args.steps : (w + 1) * args.steps]:
                tokens += trainer.update([group])[2]
            if w > 0:  # window 0 warms up allocators and caches
                rates.append(tokens / (time.perf_counter() - start))
        trainer.log.close()
    print(
        json.dumps(
            {
                "benchmark": "train_tokens_per_s",
                "model": cfg.model.name,
                "model_config": dataclasses.asdict(cfg.model),
                "parameters": sum(p.numel() for p in trainer.model.parameters()),
                "data": cfg.data.name,
                "batch_tokens": cfg.train.batch_tokens,
                "steps_per_window": args.steps,
                "median_tgt_tokens_per_s": round(statistics.median(rates), 1),
                "windows_tgt_tokens_per_s": [round(r, 1) for r in rates],
                **describe(trainer.device),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
