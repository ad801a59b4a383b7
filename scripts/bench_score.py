"""Scoring speed against search speed: sentences/s of `Translator.score` (teacher forcing) and of
the nmt-score command, against beam search on the same sentences and model, printed as JSON.

    python scripts/bench_score.py runs/demo/checkpoints/best --src data/demo/test.de

Beam search (--beam-size 5, gnmt length penalty with alpha 1, batch 64: decode=beam) translates
the file; its translations are then scored, in process (`Translator.score`, the same decode
settings) and through the command (`nmt-score ckpt=... src=... hyp=...`, run in this process
with its output discarded: composition, checkpoint loading, file reading and formatting
included, Python's and torch's start excluded). Each is timed --repeats times after a warm-up
on the first sentences; the medians are reported, with the ratio to beam search. The check
that the scores are the search's own is in tests/test_score.py; this only says how fast.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from nmt.checkpoint import load_checkpoint
from nmt.cli import main as cli
from nmt.config import DecodeConfig, LengthPenalty, Strategy
from nmt.data.splits import read_lines
from nmt.device import describe, resolve_device
from nmt.models import restore_model
from nmt.translation.translator import Translator


def timed(action, repeats: int, device: torch.device) -> float:
    """The median wall time of `action()` over `repeats` runs."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("--src", required=True, help="one sentence per line")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, default=0, help="first N sentences only; 0 = all")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    ckpt = load_checkpoint(args.ckpt)
    device = resolve_device(args.device)
    model = restore_model(ckpt, device)
    sources = read_lines(Path(args.src))
    if args.limit:
        sources = sources[: args.limit]
    decode = replace(
        DecodeConfig(batch_size=args.batch_size),
        strategy=Strategy.beam,
        beam_size=args.beam_size,
        length_penalty=LengthPenalty.gnmt,
        alpha=1.0,
    )
    translator = Translator(model, ckpt.vocabs, device, ckpt.lexicon, decode)
    translator.translate(sources[:16])  # warm-up: allocator, kernels, caches
    hyps = translator.translate(sources)
    beam_s = timed(lambda: translator.translate(sources), args.repeats, device)

    translator.score(sources[:16], hyps[:16])
    scored = translator.score(sources, hyps)
    score_s = timed(lambda: translator.score(sources, hyps), args.repeats, device)

    with tempfile.TemporaryDirectory() as tmp:
        src, hyp = Path(tmp) / "src", Path(tmp) / "hyp"
        src.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
        hyp.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
        argv = [f"ckpt={args.ckpt}", f"src={src}", f"hyp={hyp}", f"device={args.device}"]
        argv += [f"decode.beam_size={args.beam_size}", f"decode.batch_size={args.batch_size}"]

        def command() -> None:
            with contextlib.redirect_stdout(io.StringIO()):
                assert cli.score(argv) == 0

        command_s = timed(command, args.repeats, device)

    pieces = sum(len(s.pieces) for s in scored)  # target pieces, EOS included
    n = len(sources)
    report = {
        "checkpoint": args.ckpt,
        "src": args.src,
        "sentences": n,
        "tgt_pieces": pieces,
        "decode": decode.describe(),
        "repeats": args.repeats,
        "beam": {"median_s": round(beam_s, 3), "sentences_per_s": round(n / beam_s, 1)},
        "score": {
            "median_s": round(score_s, 3),
            "sentences_per_s": round(n / score_s, 1),
            "tgt_pieces_per_s": round(pieces / score_s, 1),
            "x_beam": round(beam_s / score_s, 2),
        },
        "nmt_score_command": {
            "median_s": round(command_s, 3),
            "sentences_per_s": round(n / command_s, 1),
            "x_beam": round(beam_s / command_s, 2),
        },
        **describe(device),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
