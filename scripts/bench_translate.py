"""Translation speed: sentences/s and generated target pieces/s of a checkpoint, printed as JSON.

    python scripts/bench_translate.py runs/NAME/checkpoints/best \\
        --src ../shared/data/multi30k/test_2016_flickr.de \\
        --ref ../shared/data/multi30k/test_2016_flickr.en \\
        --strategies greedy beam --batch-sizes 1 64 --precisions fp32,int8 --compile --repeats 3

Times `Translator.translate_full` without attention maps (tokenization, search and
detokenization: what a user waits for) on the whole file, once per (strategy, batch size,
precision) after a warm-up on the first sentences, `--repeats` times, and reports the median of
each. With `--compile` each precision is also timed with decode.compile=true, its row named
`<precision>-compiled`, after a warm-up over the whole file (compiling: its seconds are the
row's `warmup_s`), with `same_as_eager`, how many of its translations equal those of the same
precision uncompiled. The variants of a (strategy, batch size) alternate within each repeat, so
that a drift of the machine hits them alike. Beam search
uses --beam-size (5) and the gnmt length penalty with alpha 1, as decode=beam does. With `--ref`,
each row has the sacreBLEU score of its output (and the signature).

Batch size 1 is one sentence a call, as the REPL, the page and a single HTTP request translate:
each sentence is timed on its own and the row adds `latency_ms` (p50, p90, p99 over the
sentences of each one's median time). `--latency-limit N` (200) times only the first N sentences
at batch size 1.

With `--ensemble OTHER [OTHER ...]` it times the checkpoint alone and the ensemble of it with the
others (`Translator.from_checkpoints`, mean of probabilities), alternating, and reports each
ensemble time over K times the single model's (K members).

The JSON's `"headline"`: beam (batch 64 where timed, else the largest batch size) per variant
after the first, `<v>_speedup` (the first variant's time over its own) and, with `--ref`,
`<v>_bleu_delta` (its BLEU minus the first's); with batch size 1 timed, `latency_p50_ms` of beam
per variant. One torch process should run at a time: two share the cores badly.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch
from sacrebleu.metrics import BLEU

from nmt.checkpoint import load_checkpoint
from nmt.config import DecodeConfig, LengthPenalty, Precision, Strategy
from nmt.data.splits import read_lines
from nmt.device import describe, resolve_device
from nmt.metrics import percentiles
from nmt.models import restore_model
from nmt.translation.translator import Translation, Translator


def decode_config(
    strategy: str,
    beam_size: int,
    batch_size: int,
    shortlist: int = 0,
    frequent: int = 100,
    precision: str = "fp32",
    compile: bool = False,
) -> DecodeConfig:
    base = DecodeConfig(
        batch_size=batch_size,
        shortlist=shortlist,
        shortlist_frequent=frequent,
        precision=Precision(precision),
        compile=compile,
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


def precisions(text: str) -> list[str]:
    """ "fp32,int8" -> ["fp32", "int8"], each a decode.precision."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    valid = [p.value for p in Precision]
    for name in names:
        if name not in valid:
            raise argparse.ArgumentTypeError(f"{name!r} is not one of {', '.join(valid)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("--src", required=True, help="one sentence per line")
    parser.add_argument("--ref", help="references, one per line: BLEU beside each speed")
    parser.add_argument("--strategies", nargs="+", default=["greedy", "beam"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 64])
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, default=0, help="first N sentences only; 0 = all")
    parser.add_argument("--latency-limit", type=int, default=200, help="sentences at batch 1")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--shortlist", type=int, default=0, help="decode.shortlist (0: every target piece)"
    )
    parser.add_argument("--shortlist-frequent", type=int, default=100)
    parser.add_argument(
        "--tree", action="store_true", help="record each search tree (the API's beam_tree)"
    )
    parser.add_argument(
        "--precisions",
        "--precision",
        type=precisions,
        default=["fp32"],
        help="decode.precision values, comma-separated (fp32,int8): timed alternating",
    )
    parser.add_argument(
        "--compile", action="store_true", help="also time each precision with decode.compile"
    )
    parser.add_argument(
        "--ensemble", nargs="+", default=[], help="more checkpoints: also time the ensemble"
    )
    args = parser.parse_args()
    # (name, precision, compiled), in the order they are timed and compared
    variants = [(p, p, False) for p in args.precisions]
    if args.compile:
        variants += [(f"{p}-compiled", p, True) for p in args.precisions]
    names = [name for name, _, _ in variants]

    ckpt = load_checkpoint(args.ckpt)
    device = resolve_device(args.device)
    model = restore_model(ckpt, device)
    sentences = read_lines(Path(args.src))
    references = read_lines(Path(args.ref)) if args.ref else None
    if args.limit:
        sentences = sentences[: args.limit]
    if references is not None:
        references = references[: len(sentences)]
        if len(references) != len(sentences):
            parser.error(f"--ref has {len(references)} lines for {len(sentences)} sources")
    members = [args.ckpt, *args.ensemble]
    recording = {"tree": True} if args.tree else {}  # absent: also runs against older versions

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    def run(translator: Translator, texts: list[str]) -> tuple[list[Translation], float]:
        start = time.perf_counter()
        out = translator.translate_full(texts, attention=False, **recording)
        sync()
        return out, time.perf_counter() - start

    def whole(translator: Translator, batch_size: int) -> Callable[[], tuple[list, list[float]]]:
        """A timed pass over the file: (translations, [its time]) or, at batch size 1, one time
        per sentence (the first --latency-limit), each translated alone."""

        def at_once() -> tuple[list, list[float]]:
            out, seconds = run(translator, sentences)
            return out, [seconds]

        def one_by_one() -> tuple[list, list[float]]:
            pairs = [run(translator, [s]) for s in sentences[: args.latency_limit]]
            return [t for out, _ in pairs for t in out], [s for _, s in pairs]

        return at_once if batch_size > 1 else one_by_one

    results = []
    for strategy in args.strategies:
        for batch_size in args.batch_sizes:
            passes, warmup = {}, {}
            for name, precision, compiled in variants:
                cfg = decode_config(
                    strategy,
                    args.beam_size,
                    batch_size,
                    args.shortlist,
                    args.shortlist_frequent,
                    precision,
                    compiled,
                )
                translator = Translator(model, ckpt.vocabs, device, ckpt.lexicon, cfg)
                # warm-up: allocator, kernels, caches; compiled, every kind of batch the file has
                start = time.perf_counter()
                warm = sentences if compiled and batch_size > 1 else sentences[:16]
                translator.translate(warm)
                sync()
                warmup[name] = time.perf_counter() - start
                passes[name] = (cfg, whole(translator, batch_size))
                if args.ensemble:
                    together = Translator.from_checkpoints(members, cfg, args.device)
                    together.translate(warm)
                    passes[name, "ensemble"] = (cfg, whole(together, batch_size))
            times = {key: [] for key in passes}
            outputs = {}
            for _ in range(args.repeats):  # alternating: a drift of the machine hits them alike
                for key, (_, timed_pass) in passes.items():
                    outputs[key], seconds = timed_pass()
                    times[key].append(seconds)
            for name, precision, compiled in variants:
                cfg = passes[name][0]
                results.append(row(strategy, batch_size, cfg, outputs[name], times[name], args))
                results[-1].update(variant=name, warmup_s=round(warmup[name], 2))
                if compiled:
                    eager = [t.text for t in outputs[precision]]
                    same = sum(t.text == e for t, e in zip(outputs[name], eager))
                    results[-1]["same_as_eager"] = f"{same}/{len(eager)}"
                if references is not None:
                    metric = BLEU()
                    texts = [t.text for t in outputs[name]]
                    results[-1]["bleu"] = round(
                        metric.corpus_score(texts, [references[: len(texts)]]).score, 2
                    )
                    results[-1]["bleu_signature"] = str(metric.get_signature())
                if args.ensemble:
                    alone = statistics.median(whole_times(times[name]))
                    together_s = statistics.median(whole_times(times[name, "ensemble"]))
                    results[-1]["ensemble"] = {
                        "members": len(members),
                        "median_s": round(together_s, 3),
                        "over_k_single": round(together_s / (len(members) * alone), 3),
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
                "headline": headline(results, names),
                "results": results,
                **describe(device),
            },
            indent=2,
        )
    )


def whole_times(runs: list[list[float]]) -> list[float]:
    """Each repeat's time for its whole pass (the sum of its sentences' at batch size 1)."""
    return [sum(r) for r in runs]


def row(
    strategy: str,
    batch_size: int,
    cfg: DecodeConfig,
    outputs: list[Translation],
    runs: list[list[float]],
    args: argparse.Namespace,
) -> dict:
    totals = whole_times(runs)
    seconds = statistics.median(totals)
    pieces = sum(len(t.tgt_pieces) for t in outputs)  # generated tokens, EOS included
    entry = {
        "strategy": strategy,
        "beam_size": cfg.beam_size if strategy == "beam" else 1,
        "batch_size": batch_size,
        "precision": cfg.precision.value,
        "decode": cfg.describe(),
        "tree": args.tree,
        "sentences": len(outputs),
        "median_s": round(seconds, 3),
        "sentences_per_s": round(len(outputs) / seconds, 1),
        "tgt_tokens": pieces,
        "tgt_tokens_per_s": round(pieces / seconds, 1),
        "runs_s": [round(t, 3) for t in totals],
    }
    if batch_size == 1:  # each sentence's median over the repeats, then over the sentences
        each = [statistics.median(times) * 1000 for times in zip(*runs)]
        entry["latency_ms"] = percentiles(each, digits=2)
    return entry


def headline(results: list[dict], names: list[str]) -> dict:
    """Beam search at batch 64 (else the largest batch size): each variant after the first
    against the first; batch-1 latency p50 per variant."""
    beam = [r for r in results if r["strategy"] == "beam"]
    if not beam:
        return {}
    sizes = {r["batch_size"] for r in beam}
    size = 64 if 64 in sizes else max(sizes)
    at = {r["variant"]: r for r in beam if r["batch_size"] == size}
    out: dict = {"strategy": "beam", "batch_size": size}
    base = at[names[0]]
    for name in names[1:]:
        out[f"{name}_speedup"] = round(base["median_s"] / at[name]["median_s"], 3)
        if "bleu" in base:
            out[f"{name}_bleu_delta"] = round(at[name]["bleu"] - base["bleu"], 2)
    for r in beam:
        if r["batch_size"] == 1:
            out[f"latency_p50_ms_{r['variant']}"] = r["latency_ms"]["p50"]
    return out


if __name__ == "__main__":
    main()
