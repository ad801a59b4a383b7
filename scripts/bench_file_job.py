"""Translating a file with one process and with N torchrun processes, side by side, as JSON: lines
per second, the speed-up, whether the outputs are the same bytes, peak memory, and what a resume
after a kill redoes.

    python scripts/bench_file_job.py runs/NAME/checkpoints/best \\
        --src ../shared/data/multi30k/train.de --lines 100000 --procs 2 [decode=greedy ...]

The input is the first `--lines` lines of --src (cycled when it is shorter), written once beside
the outputs in --work (default: a temporary directory). Each run is `nmt-translate ckpt=...
input=... output=...` with every process at one torch thread (OMP_NUM_THREADS=1): one process,
then `torchrun --standalone --nproc_per_node N`, then one process again, so a drift of the
machine shows; key=value arguments are nmt-translate overrides for all of them (decode=greedy,
chunk_lines=...). `peak_rss_mb` is the largest resident memory of one process of a run (Linux
reports the largest child's). With `--kill-after S`, one more single-process run is killed with
SIGKILL after S seconds and run again: the chunks it kept, the seconds the second run took, and
whether its output is the uninterrupted run's bytes. Nothing else should run on the machine.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def write_input(src: Path, lines: int, path: Path) -> None:
    """The first `lines` lines of `src`, cycled when it has fewer."""
    pool = src.read_text(encoding="utf-8").splitlines() or [""]
    with open(path, "w", encoding="utf-8") as f:
        for i in range(lines):
            f.write(pool[i % len(pool)] + "\n")


def run(command: list[str], env: dict[str, str]) -> dict:
    """Run a command to its end: wall seconds and the largest child's peak memory so far."""
    began = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:6])} ... failed:\n{done.stderr[-3000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"seconds": round(seconds, 2), "peak_rss_mb_so_far": round(peak, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("--src", type=Path, required=True)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--work", type=Path, help="where the input and outputs go")
    parser.add_argument("--kill-after", type=float, default=0.0, help="seconds; 0: no kill")
    parser.add_argument("overrides", nargs="*", help="nmt-translate key=value overrides")
    args = parser.parse_intermixed_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-file-job-"))
    work.mkdir(parents=True, exist_ok=True)
    source = work / "input.txt"
    write_input(args.src, args.lines, source)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    base = [f"ckpt={args.ckpt}", f"input={source}", "device=cpu", "progress=false"]
    base += args.overrides

    def translate(out: str, procs: int = 1) -> list[str]:
        if procs == 1:
            return [str(BIN / "nmt-translate"), *base, f"output={work / out}"]
        return [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
            str(procs), "--no-python", str(BIN / "nmt-translate"), *base, f"output={work / out}",
        ]  # fmt: skip

    runs = {
        "one_process": run(translate("one.txt"), env),
        f"{args.procs}_processes": run(translate("ranks.txt", args.procs), env),
        "one_process_again": run(translate("again.txt"), env),
    }
    for result in runs.values():
        result["lines_per_s"] = round(args.lines / result["seconds"], 1)
    single = min(runs["one_process"]["seconds"], runs["one_process_again"]["seconds"])
    report: dict = {
        "benchmark": "file_job",
        "checkpoint": args.ckpt,
        "lines": args.lines,
        "overrides": args.overrides,
        "runs": runs,
        # against the faster of the two single-process runs
        "speedup": round(single / runs[f"{args.procs}_processes"]["seconds"], 3),
        "same_bytes": filecmp.cmp(work / "one.txt", work / "ranks.txt", shallow=False)
        and filecmp.cmp(work / "one.txt", work / "again.txt", shallow=False),
        "cpus": os.cpu_count(),
    }
    if args.kill_after:
        killed = subprocess.Popen(translate("killed.txt"), env=env, stderr=subprocess.DEVNULL)
        time.sleep(args.kill_after)
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        parts = work / "killed.txt.parts"
        kept = sum(p.name.startswith("chunk-") for p in parts.iterdir()) if parts.is_dir() else 0
        resumed = run(translate("killed.txt"), env)
        report["kill"] = {
            "after_s": args.kill_after,
            "chunks_kept": kept,
            "resume_seconds": resumed["seconds"],
            "same_bytes": filecmp.cmp(work / "one.txt", work / "killed.txt", shallow=False),
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
