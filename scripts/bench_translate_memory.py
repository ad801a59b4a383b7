"""Memory of a long-lived translation process: resident memory while one stream runs, as JSON.

    python scripts/bench_translate_memory.py runs/NAME/checkpoints/best \\
        --src data/demo/test.de --lines 10000 --decode greedy [--precision int8]
    python scripts/bench_translate_memory.py runs/nllb --src test.de --lines 64 \\
        --src-lang deu_Latn --tgt-lang eng_Latn --precision int8   # a model with language codes

Sends `--lines` lines (the lines of --src over and over) through one
`nmt.cli.lines.translate_stream`, as `nmt-translate` does for a long input or a server would for
a day of requests, and records the process's resident set size (VmRSS) every `--every` lines. Memory
that stays flat after the first thousand lines is the aim: growth after that is a leak (kept
results, caches, the allocator) that a long-lived process would eventually die of. The first
thousand lines are the warm-up (allocator pools, sentencepiece and torch caches): `growth_mb` is RSS
after all lines minus RSS after 1,000. `peak_rss_mb` is what the process needed at most (with
`--precision int8`, the model's int8 copy included). Linux only (reads /proc/self/status). One
torch process should run at a time.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from dataclasses import replace
from itertools import cycle, islice
from pathlib import Path

import torch

from nmt.checkpoint import CONFIG_FILE
from nmt.cli.lines import LineFormat, translate_stream
from nmt.config import DecodeConfig, Precision, Strategy
from nmt.data.splits import read_lines
from nmt.device import describe, resolve_device
from nmt.run_config import load_run_config
from nmt.translation.translator import Translator

WARM_UP = 1000  # lines after which memory should no longer grow


def memory_mb(key: str) -> float:
    """A /proc/self/status figure in MiB: VmRSS (resident now) or VmHWM (the peak of VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024  # reported in kB
    raise RuntimeError(f"no {key} in /proc/self/status (this benchmark needs Linux)")


def source_lines(path: Path, n: int) -> Iterator[str]:
    """The non-blank lines of `path`, repeated until there are `n`, as a file would give them."""
    lines = [line for line in read_lines(path) if line.strip()]
    if not lines:
        raise SystemExit(f"{path} has no text")
    return (line + "\n" for line in islice(cycle(lines), n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("--src", default="data/demo/test.de", help="one sentence per line")
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=1000, help="record RSS every N lines")
    parser.add_argument("--decode", choices=["greedy", "beam"], default="greedy")
    parser.add_argument("--precision", choices=[p.value for p in Precision], default="fp32")
    parser.add_argument("--src-lang", help="the sources' language code (an NLLB import)")
    parser.add_argument("--tgt-lang", help="the target language (a model with target tags)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    device = resolve_device(args.device)
    decode = DecodeConfig(precision=Precision(args.precision))
    if args.decode == "beam":
        decode = replace(decode, strategy=Strategy.beam, beam_size=5)
    # loaded as nmt-translate loads it, from its directory: the model takes the saved tensors
    translator = Translator.from_checkpoint(args.ckpt, decode, str(device), args.src_lang)
    model_name = load_run_config(Path(args.ckpt) / CONFIG_FILE).model.name

    rss = {0: round(memory_mb("VmRSS"), 1)}
    start = time.perf_counter()
    done = 0
    lines = source_lines(Path(args.src), args.lines)
    for _ in translate_stream(translator, lines, fmt=LineFormat(tgt_lang=args.tgt_lang)):
        done += 1
        if done % args.every == 0 or done == args.lines:
            rss[done] = round(memory_mb("VmRSS"), 1)
            print(json.dumps({"lines": done, "rss_mb": rss[done]}), flush=True)
    seconds = time.perf_counter() - start
    base = rss.get(WARM_UP, rss[0])
    print(
        json.dumps(
            {
                "benchmark": "translate_memory",
                "checkpoint": str(Path(args.ckpt).resolve()),
                "model": model_name,
                "precision": decode.precision.value,
                "source": args.src,
                "decode": decode.describe(),
                "lines": done,
                "seconds": round(seconds, 1),
                "rss_mb_by_lines": rss,
                "rss_mb_after_1k": rss.get(WARM_UP),
                "rss_mb_after_all": rss[done],
                "growth_mb": round(rss[done] - base, 1),
                "peak_rss_mb": round(memory_mb("VmHWM"), 1),
                "torch_threads": torch.get_num_threads(),
                **describe(device),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
