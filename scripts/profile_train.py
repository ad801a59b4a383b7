"""Where an update's time goes: torch.profiler over training updates, the top ops as JSON.

    python scripts/profile_train.py data=multi30k data.local_dir=../shared/data/multi30k \
        model=gru_bahdanau train.batch_tokens=2048 model.dropout=0.0 --steps 20 --top 15

Prepares the run as nmt-train does (as scripts/bench_train.py), runs `--warmup` updates, then
profiles `--steps` updates and prints the ops with the largest self CPU time: their share of the
profiled time, total milliseconds and number of calls. `--table` also prints torch's own table on
stderr. CPU ops only (on CUDA, the kernels' time is not in this view).

It also counts, per update, the leaf ops (ops that call no other op: on a GPU each launches at
least one kernel, so at small batches their number bounds the update's time) and among them the
dtype casts (`aten::copy_` under `aten::_to_copy`), which is what `train.precision=bf16` adds.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile

from torch.profiler import ProfilerActivity, profile

from nmt.cli import main as cli
from nmt.data.batches import epoch_batches
from nmt.device import describe, resolve_device
from nmt.training.setup import prepare_run
from nmt.training.trainer import Trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--table", action="store_true")
    args = parser.parse_intermixed_args()
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = cli.compose_config("train", [*args.overrides, f"run_dir={run_dir}"])
        device = resolve_device(cfg.device)
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
        need = args.warmup + args.steps
        batches = [batches[i % len(batches)] for i in range(need)]
        trainer.model.train()
        for group in batches[: args.warmup]:
            trainer.update([group])
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for group in batches[args.warmup :]:
                trainer.update([group])
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    leaves = [e for e in prof.events() if not e.cpu_children]
    casts = [e for e in leaves if e.name == "aten::copy_" and _under(e, "aten::_to_copy")]
    top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[: args.top]
    if args.table:
        print(events.table(sort_by="self_cpu_time_total", row_limit=args.top), file=sys.stderr)
    print(
        json.dumps(
            {
                "benchmark": "train_profile",
                "model": cfg.model.name,
                "batch_tokens": cfg.train.batch_tokens,
                "steps": args.steps,
                "self_cpu_ms_per_step": round(total / 1000 / args.steps, 1),
                "leaf_ops_per_step": round(len(leaves) / args.steps, 1),
                "casts_per_step": round(len(casts) / args.steps, 1),
                "top": [
                    {
                        "op": e.key,
                        "self_cpu_pct": round(100 * e.self_cpu_time_total / total, 2),
                        "self_cpu_ms": round(e.self_cpu_time_total / 1000, 1),
                        "calls": e.count,
                    }
                    for e in top
                ],
                **describe(device),
            },
            indent=2,
        )
    )


def _under(event, name: str) -> bool:
    """Whether `event` runs inside an op called `name`."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name == name:
            return True
        parent = parent.cpu_parent
    return False


if __name__ == "__main__":
    main()
