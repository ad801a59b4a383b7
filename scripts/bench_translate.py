"""Translation speed: sentences/s and generated target pieces/s of a checkpoint, printed as JSON.

    python scripts/bench_translate.py runs/NAME/checkpoints/best \\
        --src ../shared/data/multi30k/test_2016_flickr.de --strategies greedy beam \\
        --batch-sizes 1 64 --repeats 3

With `--ensemble OTHER [OTHER ...]` it times the checkpoint alone and the ensemble of it with the
others (`Translator.from_checkpoints`, mean of probabilities), alternating, and reports each
ensemble time over K times the single model's (K members).

Times `Translator.translate_full` without attention maps (tokenization, search and
detokenization: what a user waits for) on the whole file, once per (strategy, batch size) after a
warm-up on the first sentences, `--repeats` times, and reports the median of each. Beam search
uses --beam-size (5) and the gnmt length penalty with alpha 1, as decode=beam does. One torch
process should run at a time: two share the cores badly.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from nmt.checkpoint import load_checkpoint
from nmt.config import DecodeConfig, LengthPenalty, Precision, Strategy
from nmt.data import read_lines
from nmt.device import describe, resolve_device
from nmt.models import restore_model
from nmt.translate import Translator


def decode_config(
    strategy: str,
    beam_size: int,
    batch_size: int,
    shortlist: int = 0,
    frequent: int = 100,
    precision: str = "fp32",
) -> DecodeConfig:
    base = DecodeConfig(
        batch_size=batch_size,
        shortlist=shortlist,
        shortlist_frequent=frequent,
        precision=Precision(precision),
    )
    if strategy == "beam":
        return replace(
            base,
            strategy=Strategy.beam,
            beam_size=beam_size,
            length_penalty=LengthPenalty.gnmt,
            alpha=1.0,
        )
    return replace(base, strategy=Strategy(strategy))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("--src", required=True, help="one sentence per line")
    parser.add_argument("--strategies", nargs="+", default=["greedy", "beam"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 64])
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, default=0, help="first N sentences only; 0 = all")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--shortlist", type=int, default=0, help="decode.shortlist (0: every target piece)"
    )
    parser.add_argument("--shortlist-frequent", type=int, default=100)
    parser.add_argument(
        "--tree", action="store_true", help="record each search tree (the API's beam_tree)"
    )
    parser.add_argument(
        "--precision", default="fp32", choices=[p.value for p in Precision], help="decode.precision"
    )
    parser.add_argument(
        "--ensemble", nargs="+", default=[], help="more checkpoints: also time the ensemble"
    )
    args = parser.parse_args()

    ckpt = load_checkpoint(args.ckpt)
    device = resolve_device(args.device)
    model = restore_model(ckpt, device)
    sentences = read_lines(Path(args.src))
    if args.limit:
        sentences = sentences[: args.limit]
    results = []
    recording = {"tree": True} if args.tree else {}  # absent: also runs against older versions
    for strategy in args.strategies:
        for batch_size in args.batch_sizes:
            cfg = decode_config(
                strategy,
                args.beam_size,
                batch_size,
                args.shortlist,
                args.shortlist_frequent,
                args.precision,
            )
            translator = Translator(model, ckpt.vocabs, device, ckpt.lexicon, cfg)
            translator.translate(sentences[:16])  # warm-up: allocator, kernels, caches
            if args.ensemble:
                members = [args.ckpt, *args.ensemble]
                together = Translator.from_checkpoints(members, cfg, args.device)
                together.translate(sentences[:16])
            times, ensemble_times = [], []
            for _ in range(args.repeats):  # alternating: a drift of the machine hits both
                start = time.perf_counter()
                outputs = translator.translate_full(sentences, attention=False, **recording)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
                if args.ensemble:
                    start = time.perf_counter()
                    together.translate_full(sentences, attention=False, **recording)
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    ensemble_times.append(time.perf_counter() - start)
            pieces = sum(len(t.tgt_pieces) for t in outputs)  # generated tokens, EOS included
            seconds = statistics.median(times)
            results.append(
                {
                    "strategy": strategy,
                    "beam_size": cfg.beam_size if strategy == "beam" else 1,
                    "batch_size": batch_size,
                    "decode": cfg.describe(),
                    "tree": args.tree,
                    "sentences": len(sentences),
                    "median_s": round(seconds, 3),
                    "sentences_per_s": round(len(sentences) / seconds, 1),
                    "tgt_tokens": pieces,
                    "tgt_tokens_per_s": round(pieces / seconds, 1),
                    "runs_s": [round(t, 3) for t in times],
                }
            )
            if args.ensemble:
                alone = statistics.median(ensemble_times)
                results[-1]["ensemble"] = {
                    "members": len(members),
                    "median_s": round(alone, 3),
                    "runs_s": [round(t, 3) for t in ensemble_times],
                    "over_k_single": round(alone / (len(members) * seconds), 3),
                }
            print(json.dumps(results[-1]), flush=True)
    print(
        json.dumps(
            {
                "benchmark": "translate_speed",
                "checkpoint": str(Path(args.ckpt).resolve()),
                "model": ckpt.config.model.name,
                "parameters": sum(p.numel() for p in model.parameters()),
                "source": args.src,
                "results": results,
                **describe(device),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
