"""How nmt-train scales with the corpus: start-up time and memory from thousands to millions of
pairs, one JSON line per size.

    python scripts/bench_corpus.py --sizes 100000 1000000 5000000 --work runs/bench_corpus

For each size, `scripts/make_corpus.py` writes that many training pairs (Multi30k's, repeated and
shuffled; --src), then `nmt-train data=files ... train.max_steps=100` runs twice on them into new
run directories: once with an empty cache (the tokenizer is trained and the corpus tokenized:
the cold start) and once more with the cache the first run left (the warm start). Each line
reports, per run:

- `first_update_s`: seconds from starting the command to the end of its first update (the
  `time` of the first row of metrics.jsonl, logged every update);
- `peak_rss_mb`: the command's peak resident memory (VmHWM of /proc, polled until it exits),
  and `peak_pss_mb`, its peak proportional share (smaps_rollup: memory-mapped corpus pages shared
  with the page cache count in part); `workers_peak_rss_mb`, the largest of its child processes
  (the tokenizing workers of the cold start);
- `tokens_per_s`: training target tokens/s over updates 11 to 100;
- `wall_s`: the whole command.

Other settings go after `--`: `python scripts/bench_corpus.py --sizes 1000000 -- data.num_proc=1`.
Linux only (reads /proc). Run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from nmt.device import cpu_name

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
KEPT = re.compile(r"nmt-train: (\d+) training pairs")  # the trainer's first line: pairs kept
MODEL = ["model=transformer_small", "train.max_steps=100", "train.valid_every=100000"]


def memory(pid: int) -> tuple[float, float]:
    """(peak RSS, current PSS) of a process in MB; zeros once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0.0, 0.0
    hwm = next((line.split()[1] for line in status.splitlines() if line.startswith("VmHWM")), 0)
    pss = next((line.split()[1] for line in rollup.splitlines() if line.startswith("Pss:")), 0)
    return int(hwm) / 1024, int(pss) / 1024


def children(pid: int) -> list[int]:
    try:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    kids = [int(p) for p in found]
    return kids + [g for k in kids for g in children(k)]


def train(corpus: Path, run_dir: Path, cache: Path, extra: list[str]) -> dict:
    """One nmt-train run, watched from outside; its figures."""
    command = [
        str(BIN / "nmt-train"), "data=files", f"data.local_dir={corpus}", "data.src_lang=de",
        "data.tgt_lang=en", f"data.cache_dir={cache}", f"run_dir={run_dir}", *MODEL,
        "train.log_every=1", "train.tensorboard=false", *extra,
    ]  # fmt: skip
    print("+", " ".join(command), file=sys.stderr, flush=True)
    began_wall, began = time.time(), time.monotonic()
    log = run_dir.parent / f"{run_dir.name}.log"  # a file, not a pipe: a full pipe would block
    with open(log, "w", encoding="utf-8") as sink:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=sink)
        peak_rss = peak_pss = workers = 0.0
        while proc.poll() is None:
            rss, pss = memory(proc.pid)
            peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            for kid in children(proc.pid):
                workers = max(workers, memory(kid)[0])
            time.sleep(0.2)
    wall = time.monotonic() - began
    err = log.read_text(encoding="utf-8")
    if proc.returncode != 0:
        raise SystemExit(f"bench_corpus: nmt-train failed ({proc.returncode}):\n{err[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("split") == "train"]
    later = [r for r in rows if 10 < r["step"] <= 100]
    seconds = later[-1]["time"] - rows[9]["time"] if len(rows) > 10 else None
    return {
        "first_update_s": round(rows[0]["time"] - began_wall, 1),
        "peak_rss_mb": round(peak_rss),
        "peak_pss_mb": round(peak_pss),
        "workers_peak_rss_mb": round(workers),
        "tokens_per_s": round(sum(r["tokens"] for r in later) / seconds) if seconds else None,
        "training_pairs": int(m.group(1)) if (m := KEPT.search(err)) else None,
        "wall_s": round(wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", required=True, help="training pairs")
    parser.add_argument("--work", type=Path, default=Path("runs") / "bench_corpus")
    parser.add_argument("--src", type=Path, default=ROOT.parent / "shared" / "data" / "multi30k")
    parser.add_argument("--keep", action="store_true", help="keep the corpora and runs")
    parser.add_argument("extra", nargs="*", help="nmt-train overrides (after --)")
    args = parser.parse_args()
    for pairs in args.sizes:
        work = args.work / str(pairs)
        shutil.rmtree(work, ignore_errors=True)
        corpus, cache = work / "corpus", work / "cache"
        made = time.monotonic()
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "make_corpus.py"), "--pairs", str(pairs),
             "--out", str(corpus), "--src", str(args.src)],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        made = time.monotonic() - made
        cold = train(corpus, work / "cold", cache, args.extra)
        warm = train(corpus, work / "warm", cache, args.extra)
        print(
            json.dumps({
                "pairs": pairs, "cold": cold, "warm": warm, "make_corpus_s": round(made, 1),
                "corpus_mb": round(sum(p.stat().st_size for p in corpus.iterdir()) / 2**20),
                "cache_mb": round(sum(p.stat().st_size for p in cache.rglob("*")
                                      if p.is_file()) / 2**20),
                "overrides": args.extra, "cpu": cpu_name(),
            }),
            flush=True,
        )  # fmt: skip
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
