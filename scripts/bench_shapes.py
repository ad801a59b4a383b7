"""What fixed batch shapes cost (train.length_step): for each length step, the share of padded
positions that hold real target tokens and the number of distinct batch shapes in one epoch's
plan; printed as JSON.

    python scripts/bench_shapes.py data=multi30k data.local_dir=../shared/data/multi30k \
        --batch-tokens 4096 16384 --steps 0 4 8 16

A batch costs rows x W positions, W its longest side (source, or target + 1) as nmt trains it:
with length_step 0 the batch as planned; with N, padded by `fixed_shape` to W rounded up to a
multiple of N and to batch_tokens // W rows. Nothing is timed: this is the padding a compiled or
graph-captured step must win back.
"""

from __future__ import annotations

import argparse
import json
import tempfile

import numpy as np

from nmt.cli import main as cli
from nmt.data.batches import epoch_batches
from nmt.training.setup import prepare_run


def plan_cost(src: np.ndarray, tgt: np.ndarray, batch_tokens: int, step: int, seed: int) -> dict:
    """Real target tokens over padded positions, and distinct (rows, W) shapes, of epoch 0."""
    plan = epoch_batches(src, tgt, batch_tokens, seed, 0, length_step=step)
    real = padded = 0
    shapes = set()
    for batch in plan:
        index = np.asarray(batch)
        width = int(max(src[index].max(), tgt[index].max() + 1))
        rows = len(index)
        if step:
            width = -(-width // step) * step
            rows = max(rows, batch_tokens // width)
        real += int((tgt[index] + 1).sum())
        padded += rows * width
        shapes.add((rows, width))
    return {
        "batch_tokens": batch_tokens,
        "length_step": step,
        "batches": len(plan),
        "real_target_share": round(real / padded, 4),
        "shapes": len(shapes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--batch-tokens", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--steps", type=int, nargs="+", default=[0, 4, 8, 16])
    args = parser.parse_intermixed_args()
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = cli.compose_config("train", [*args.overrides, f"run_dir={run_dir}"])
        data, _, _ = prepare_run(cfg)
        src, tgt = np.asarray(data.train.src_lens), np.asarray(data.train.tgt_lens)
    rows = [
        plan_cost(src, tgt, batch_tokens, step, cfg.seed)
        for batch_tokens in args.batch_tokens
        for step in args.steps
    ]
    print(json.dumps({"benchmark": "batch_shapes", "data": cfg.data.name, "pairs": len(src),
                      "rows": rows}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
