"""Translation speed of nmt (PyTorch) against the same Transformer converted to CTranslate2.

    python scripts/bench_ctranslate2.py runs/m30k_transformer/checkpoints/best \\
        --data-dir ../shared/data/multi30k --split test --repeats 3

Converts the checkpoint (`nmt-export format=ctranslate2`, into a temporary directory unless
--ct2-dir names an existing export), reads the split through nmt's data loader (the checkpoint's
data config, with --data-dir as its local_dir), and translates every source sentence with greedy
search and beam search (--beam-size 5, --length-penalty none or average: the settings that map
exactly onto CTranslate2; see docs/export.md), both with batches of --batch-size (64) sentences
sorted by length, on the CPU, in one process: nmt's `Translator` with torch's thread count, and a
`ctranslate2.Translator` with intra_threads = that count (--threads sets both; --compute-type int8
quantizes CTranslate2's weights on load). CTranslate2 takes one length limit per call and ours grows
with the source, so each batch goes to it in one call per run of sentences with the same limit
(`nmt.export.ct2.translate_pieces`; --one-call-per-batch: one call with the batch's largest limit,
where sentences that reach their own limit may go on). Each timing covers tokenization, search and
detokenization, after a warm-up; the runs of the two alternate (so that a change of load on a shared
machine hits both), and the median of --repeats runs is reported as sentences/s and target pieces/s
(EOS not counted), with the sacreBLEU score of each output against the references and the fraction
of identical output lines, as one JSON object.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from sacrebleu.metrics import BLEU

from nmt.checkpoint import load_checkpoint
from nmt.config import DecodeConfig, LengthPenalty, Split, Strategy
from nmt.data import read_split
from nmt.device import cpu_name
from nmt.export.ct2 import CT2Translator
from nmt.export.exporter import export_checkpoint
from nmt.models import restore_model
from nmt.run_config import ExportFormat
from nmt.tokenizer import EOS
from nmt.translate import Translator


def timed(runners: dict, repeats: int) -> dict:
    """{name: fn() -> (texts, generated pieces)} -> {name: (last result, time of each run)}.
    The runs alternate between the runners, so that a machine whose load changes during the
    benchmark slows them alike."""
    for fn in runners.values():
        fn()  # warm-up: allocator, kernels, caches
    results = {name: [None, []] for name in runners}
    for _ in range(repeats):
        for name, fn in runners.items():
            start = time.perf_counter()
            results[name][0] = fn()
            results[name][1].append(time.perf_counter() - start)
    return {name: tuple(r) for name, r in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt", help="a Transformer checkpoint directory")
    parser.add_argument("--data-dir", help="local_dir of the data (default: the checkpoint's)")
    parser.add_argument("--split", default="test", choices=[s.value for s in Split])
    parser.add_argument("--limit", type=int, default=0, help="first N sentences only; 0 = all")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--length-penalty", default="none", choices=["none", "average"])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="0 = torch's default")
    parser.add_argument("--ct2-dir", help="an existing ctranslate2 export of the checkpoint")
    parser.add_argument("--one-call-per-batch", action="store_true")
    parser.add_argument(
        "--compute-type", default="default", help="CTranslate2's (default: the stored float32)"
    )
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    ckpt = load_checkpoint(args.ckpt)
    data_cfg = ckpt.config.data
    if args.data_dir:
        data_cfg = replace(data_cfg, local_dir=args.data_dir, hub_id=None)
    corpus = read_split(data_cfg, Split(args.split))
    sources, references = corpus.src, corpus.tgt
    if args.limit:
        sources, references = sources[: args.limit], references[: args.limit]

    tmp = None
    ct2_dir = args.ct2_dir
    convert_s = None
    if ct2_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="nmt-ct2-")
        start = time.perf_counter()
        ct2_dir = str(export_checkpoint(ckpt, ExportFormat.ctranslate2, Path(tmp.name) / "ct2"))
        convert_s = round(time.perf_counter() - start, 2)
    device = torch.device("cpu")
    model = restore_model(ckpt, device)
    ct2 = CT2Translator(ct2_dir, threads=threads, compute_type=args.compute_type)
    eos = ckpt.vocabs.tgt.id_to_piece([EOS])[0]

    def nmt_translate(translator: Translator, cfg: DecodeConfig) -> tuple[list[str], int]:
        out = translator.translate_full(sources, attention=False, decode=cfg)
        return [t.text for t in out], sum(
            len(t.tgt_pieces) - (t.tgt_pieces[-1:] == [eos]) for t in out
        )

    def ct2_translate(cfg: DecodeConfig) -> tuple[list[str], int]:
        exact = not args.one_call_per_batch
        best = [
            n[0][0] if n else [] for n in ct2.hypotheses(sources, decode=cfg, exact_limits=exact)
        ]
        return ct2.detokenize(best), sum(len(p) for p in best)

    load_before = os.getloadavg()
    results = []
    for strategy in ("greedy", "beam"):
        cfg = DecodeConfig(
            strategy=Strategy(strategy),
            beam_size=args.beam_size,
            length_penalty=LengthPenalty(args.length_penalty),
            batch_size=args.batch_size,
        )
        translator = Translator(model, ckpt.vocabs, device)
        runs = timed(
            {
                "nmt": lambda t=translator, c=cfg: nmt_translate(t, c),
                "ctranslate2": lambda c=cfg: ct2_translate(c),
            },
            args.repeats,
        )
        outputs = {name: texts for name, ((texts, _), _) in runs.items()}
        same = sum(a == b for a, b in zip(outputs["nmt"], outputs["ctranslate2"]))
        entry = {"strategy": cfg.describe(), "identical_lines": f"{same}/{len(sources)}"}
        for name, ((out, pieces), times) in runs.items():
            seconds = statistics.median(times)
            metric = BLEU()
            bleu = metric.corpus_score(out, [references]).score
            entry[name] = {
                "median_s": round(seconds, 3),
                "sentences_per_s": round(len(sources) / seconds, 1),
                "tgt_pieces_per_s": round(pieces / seconds, 1),
                "runs_s": [round(t, 3) for t in times],
                "bleu": round(bleu, 2),
            }
        entry["speedup"] = round(entry["nmt"]["median_s"] / entry["ctranslate2"]["median_s"], 2)
        entry["bleu_signature"] = str(metric.get_signature())
        results.append(entry)

    print(
        json.dumps(
            {
                "benchmark": "nmt_vs_ctranslate2",
                "checkpoint": str(Path(args.ckpt).resolve()),
                "model": ckpt.config.model.name,
                "data": f"{data_cfg.name} {args.split} ({len(sources)} sentences)",
                "batch_size": args.batch_size,
                "ctranslate2_calls": "one per batch" if args.one_call_per_batch else "per limit",
                "ctranslate2_compute_type": ct2.translator.compute_type,
                "threads": {"torch": threads, "ctranslate2_intra": threads},
                "ctranslate2": importlib.metadata.version("ctranslate2"),
                "torch": torch.__version__,
                "cpu": cpu_name(),
                "conversion_s": convert_s,
                # other processes on the machine: 1-minute load average before and after
                "load_average": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
                "results": results,
            },
            indent=2,
        )
    )
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
