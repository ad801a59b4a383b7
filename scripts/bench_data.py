"""How fast the training data path makes batches: target tokens/s of `TokenizedCorpus.batch` (the
rows read from the Arrow cache entry and padded), with no model; printed as JSON.

    python scripts/bench_data.py data=multi30k data.local_dir=../shared/data/multi30k
    python scripts/bench_data.py data=files data.src_lang=de data.tgt_lang=en data.local_dir=DIR

Prepares the run as nmt-train does (tokenizer and tokenized split from the cache, built when
missing), then reads the first `--batches` batches of epoch 0's shuffled plan `--repeats` times
per batch size and reports the median. On a GPU the host makes each batch while the device runs
the last update, so this rate bounds the training tokens/s the data path can feed; comparing a
big corpus (scripts/make_corpus.py) with a small one shows whether its size slows the path.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

from nmt.cli import main as cli
from nmt.data.batches import epoch_batches
from nmt.device import cpu_name
from nmt.training.setup import prepare_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--batch-tokens", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_intermixed_args()
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = cli.compose_config("train", [*args.overrides, f"run_dir={run_dir}"])
        data, _, _ = prepare_run(cfg)
        train = data.train
        rows = []
        for batch_tokens in args.batch_tokens:
            plan = epoch_batches(train.src_lens, train.tgt_lens, batch_tokens, cfg.seed, 0)
            plan = plan[: args.batches]
            rates = []
            for _ in range(args.repeats):
                tokens, start = 0, time.perf_counter()
                for index in plan:
                    tokens += train.batch(index).n_tgt_tokens
                rates.append(tokens / (time.perf_counter() - start))
            rows.append(
                {
                    "batch_tokens": batch_tokens,
                    "batches": len(plan),
                    "median_tgt_tokens_per_s": round(statistics.median(rates)),
                    "tgt_tokens_per_s": [round(r) for r in rates],
                }
            )
    report = {"benchmark": "data_path", "data": cfg.data.name, "pairs": len(train), "rows": rows}
    print(json.dumps({**report, "cpu": cpu_name()}, indent=2))


if __name__ == "__main__":
    main()
