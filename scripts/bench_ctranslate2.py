"""Translation speed of nmt (PyTorch) against the same Transformer converted to CTranslate2.

    python scripts/bench_ctranslate2.py runs/m30k_transformer/checkpoints/best \\
        --data-dir ../shared/data/multi30k --split test --repeats 3 [--compute-type int8] \\
        [--compile]

Converts the checkpoint (`nmt-export format=ctranslate2`, into a temporary directory unless
--ct2-dir names an existing export), reads the split through nmt's data loader (the checkpoint's
data config, with --data-dir as its local_dir) or the files --src and --ref name (any
checkpoint, an imported one included), and translates every source sentence with greedy
search and beam search (--beam-size 5, --length-penalty none or average: the settings that map
exactly onto CTranslate2; see docs/export.md), both with batches of --batch-size (64) sentences
sorted by length, on the CPU: nmt's `Translator` with torch's thread count in this process, and a
`ctranslate2.Translator` with intra_threads = that count (--threads sets both; --ct2-threads
CTranslate2's alone: on a 2-core machine it may run faster on one thread) in a child process
that waits while nmt runs. Each in its own process, as a user runs them: CTranslate2's wheel
brings a second OpenMP runtime, and once it has run in a process, torch's parallel kernels there
slow down (small element-wise ops 17 -> 121 us; nmt int8 beam search 2.4 -> 4.6 s on 500
sentences, fp32 3.8 -> 4.8 s; AMD EPYC, 2 cores).

Each precision is a pair run side by side: nmt fp32 against CTranslate2 float32 always, and with
--compute-type int8 also nmt `decode.precision=int8` against CTranslate2 int8 (its weights
quantized on load; `bfloat16` pairs with nmt bf16); with --compile, nmt with decode.compile=true
at each precision joins its pair (compiled during its warm-up).
CTranslate2 takes one length limit per call and ours grows with the source, so each batch goes to
it in one call per run of sentences with the same limit (`nmt.export.ct2.translate_pieces`;
--one-call-per-batch: one call with the batch's largest limit, where sentences that reach their own
limit may go on). Each timing covers tokenization, search and detokenization, after a warm-up; the
runs of every runner alternate (so that a change of load on a shared machine hits them alike), and
the median of --repeats runs is reported as sentences/s and target pieces/s (EOS not counted), with
the sacreBLEU score of each output against the references and the fraction of identical output
lines of each pair.

The JSON's `"headline"` (beam search, and the same for greedy under `"greedy"`): `fp32_vs_ct2` and
`int8_vs_ct2`, nmt's sentences/s over CTranslate2's at the same precision (`fp32_compiled_vs_ct2`
and `int8_compiled_vs_ct2` with --compile), and `int8_bleu_delta`, nmt int8's BLEU minus nmt
fp32's.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from dataclasses import replace
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path

import torch
from sacrebleu.metrics import BLEU

from nmt.checkpoint import load_checkpoint
from nmt.config import DecodeConfig, LengthPenalty, Precision, Split, Strategy
from nmt.data.splits import read_lines, read_split
from nmt.device import cpu_name
from nmt.export.ct2 import CT2Translator
from nmt.export.exporter import export_checkpoint
from nmt.models import restore_model
from nmt.run_config import ExportFormat
from nmt.tokenizer import EOS
from nmt.translation.request import Request
from nmt.translation.translator import Translator

# CTranslate2's compute types that nmt has a precision for
NMT_PRECISION = {"int8": Precision.int8, "int8_float32": Precision.int8, "bfloat16": Precision.bf16}


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


def ct2_worker(
    conn: Connection, ct2_dir: str, threads: int, kinds: list[str], sources: list[str], exact: bool
):
    """The child process: CTranslate2 translators of each compute type, answering (kind, cfg)
    with the sources' (texts, generated pieces) until it receives None."""
    ct2 = {kind: CT2Translator(ct2_dir, threads=threads, compute_type=kind) for kind in kinds}
    conn.send({kind: c.translator.compute_type for kind, c in ct2.items()})
    while (job := conn.recv()) is not None:
        kind, cfg = job
        hypotheses = ct2[kind].hypotheses(Request(sources, cfg), exact_limits=exact)
        best = [n[0][0] if n else [] for n in hypotheses]
        conn.send((ct2[kind].detokenize(best), sum(len(p) for p in best)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt", help="a Transformer checkpoint directory")
    parser.add_argument("--data-dir", help="local_dir of the data (default: the checkpoint's)")
    parser.add_argument("--split", default="test", choices=[s.value for s in Split])
    parser.add_argument("--src", help="sources, one a line: instead of the checkpoint's data")
    parser.add_argument("--ref", help="their references (with --src)")
    parser.add_argument("--limit", type=int, default=0, help="first N sentences only; 0 = all")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--length-penalty", default="none", choices=["none", "average"])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="0 = torch's default")
    parser.add_argument(
        "--ct2-threads", type=int, default=0, help="CTranslate2's intra_threads (0 = --threads)"
    )
    parser.add_argument("--ct2-dir", help="an existing ctranslate2 export of the checkpoint")
    parser.add_argument("--one-call-per-batch", action="store_true")
    parser.add_argument("--compile", action="store_true", help="also nmt with decode.compile")
    parser.add_argument(
        "--compute-type",
        default="default",
        help="a second pair: CTranslate2 int8 (int8_float32, bfloat16) against nmt's precision",
    )
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    ct2_threads = args.ct2_threads or threads
    ckpt = load_checkpoint(args.ckpt)
    if args.src:  # any checkpoint, an import included: it has no data of its own to read
        if not args.ref:
            parser.error("--src needs --ref")
        sources, references = read_lines(Path(args.src)), read_lines(Path(args.ref))
        if len(sources) != len(references):
            parser.error(f"--src has {len(sources)} lines, --ref {len(references)}")
        described = f"{args.src} / {args.ref}"
    else:
        data_cfg = ckpt.config.data
        if args.data_dir:
            data_cfg = replace(data_cfg, local_dir=args.data_dir, hub_id=None)
        corpus = read_split(data_cfg, Split(args.split))
        sources, references = corpus.src, corpus.tgt
        described = f"{data_cfg.name} {args.split}"
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
    # (nmt's decode.precision, CTranslate2's compute type) of each pair
    pairs = [(Precision.fp32, "float32")]
    if args.compute_type not in ("default", "float32"):
        if args.compute_type not in NMT_PRECISION:
            parser.error(f"--compute-type: one of default, float32, {', '.join(NMT_PRECISION)}")
        pairs.append((NMT_PRECISION[args.compute_type], args.compute_type))
    conn, child_conn = multiprocessing.Pipe()
    kinds = [kind for _, kind in pairs]
    child = multiprocessing.get_context("spawn").Process(
        target=ct2_worker,
        args=(child_conn, ct2_dir, ct2_threads, kinds, sources, not args.one_call_per_batch),
        daemon=True,
    )
    child.start()
    compute_types = conn.recv()  # the child has loaded its translators
    eos = ckpt.vocabs.tgt.id_to_piece([EOS])[0]
    translator = Translator(model, ckpt.vocabs, device)

    def nmt_translate(cfg: DecodeConfig) -> tuple[list[str], int]:
        out = translator.translate_full(sources, attention=False, decode=cfg)
        return [t.text for t in out], sum(
            len(t.tgt_pieces) - (t.tgt_pieces[-1:] == [eos]) for t in out
        )

    def ct2_translate(kind: str, cfg: DecodeConfig) -> tuple[list[str], int]:
        conn.send((kind, cfg))  # the child has the sources; only its output comes back
        return conn.recv()

    load_before = os.getloadavg()
    results = []
    # (name in the JSON, nmt's runner, CTranslate2's runner) of each comparison
    compared = [(p.value, f"nmt {p.value}", f"ctranslate2 {kind}") for p, kind in pairs]
    if args.compile:
        compared += [
            (f"{p.value}_compiled", f"nmt {p.value} compiled", f"ctranslate2 {kind}")
            for p, kind in pairs
        ]
    for strategy in ("greedy", "beam"):
        cfg = DecodeConfig(
            strategy=Strategy(strategy),
            beam_size=args.beam_size,
            length_penalty=LengthPenalty(args.length_penalty),
            batch_size=args.batch_size,
        )
        runners = {}
        for precision, kind in pairs:
            ours = replace(cfg, precision=precision)
            runners[f"nmt {precision.value}"] = partial(nmt_translate, ours)
            runners[f"ctranslate2 {kind}"] = partial(ct2_translate, kind, cfg)
            if args.compile:
                compiled = replace(ours, compile=True)
                runners[f"nmt {precision.value} compiled"] = partial(nmt_translate, compiled)
        runs = timed(runners, args.repeats)
        entry: dict = {"strategy": cfg.describe()}
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
        entry["bleu_signature"] = str(metric.get_signature())
        for name, nmt_name, ct2_name in compared:
            ours, theirs = runs[nmt_name], runs[ct2_name]
            same = sum(a == b for a, b in zip(ours[0][0], theirs[0][0]))
            entry[f"{name}_identical_lines"] = f"{same}/{len(sources)}"
            entry[f"{name}_vs_ct2"] = round(
                statistics.median(theirs[1]) / statistics.median(ours[1]), 3
            )
        results.append(entry)

    print(
        json.dumps(
            {
                "benchmark": "nmt_vs_ctranslate2",
                "checkpoint": str(Path(args.ckpt).resolve()),
                "model": ckpt.config.model.name,
                "data": f"{described} ({len(sources)} sentences)",
                "batch_size": args.batch_size,
                "ctranslate2_calls": "one per batch" if args.one_call_per_batch else "per limit",
                "ctranslate2_compute_types": list(compute_types.values()),
                "ctranslate2_process": "its own",
                "threads": {"torch": threads, "ctranslate2_intra": ct2_threads},
                "ctranslate2": importlib.metadata.version("ctranslate2"),
                "torch": torch.__version__,
                "cpu": cpu_name(),
                "conversion_s": convert_s,
                # other processes on the machine: 1-minute load average before and after
                "load_average": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
                "headline": headline(results, [name for name, _, _ in compared]),
                "results": results,
            },
            indent=2,
        )
    )
    conn.send(None)
    child.join()
    if tmp is not None:
        tmp.cleanup()


def headline(results: list[dict], precisions: list[str]) -> dict:
    """Beam search's pairs (greedy's under "greedy"): nmt over CTranslate2 at each precision,
    and each other precision's BLEU minus nmt fp32's."""

    def of(entry: dict) -> dict:
        out = {"strategy": entry["strategy"]}
        for name in precisions:
            out[f"{name}_vs_ct2"] = entry[f"{name}_vs_ct2"]
            out[f"{name}_identical_lines"] = entry[f"{name}_identical_lines"]
            if not name.startswith("fp32"):
                ours = entry[f"nmt {name.replace('_', ' ')}"]
                delta = ours["bleu"] - entry["nmt fp32"]["bleu"]
                out[f"{name}_bleu_delta"] = round(delta, 2)
        return out

    greedy, beam = results
    return {**of(beam), "greedy": of(greedy)}


if __name__ == "__main__":
    main()
