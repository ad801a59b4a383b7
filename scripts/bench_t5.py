"""Decoding speed and memory of a T5 of MADLAD-400-3B's shape, in nmt (whole and trimmed to the
pieces of a de/en corpus), Hugging Face `generate` and CTranslate2, on the CPU. Prints JSON.

    python scripts/bench_t5.py --text ../shared/data/multi30k/train.de \\
        --keep ../shared/data/multi30k/train.de ../shared/data/multi30k/train.en \\
        --src ../shared/data/multi30k/test_2016_flickr.de --work runs/madlad_bench

The model is the random-weight twin of `scripts/bench_import.py --kind madlad` (32+32 layers,
d 1024, 16 heads of 128, ff 8192 gated-GELU, 256,000 rows: 2.94B parameters; `--small` a 6+6
layer one), written into --work once and reused. nmt imports it twice: whole, and with
keep_text=--keep (`nmt.pretrained.trimming`); CTranslate2 runs both as `nmt-export
format=ctranslate2 quantization=int8` writes them (CTranslate2's own converter would hold the
11.8 GB model twice).

Each runner translates the first --sentences lines of --src into English ("<2en>" first on the
source), sorted by length in batches of --batch-size, greedy and with beam search (--beam-size),
at most --max-len target pieces: nmt's `Translator` (fp32, decode.precision=int8, and int8 with
decode.compile=true), Hugging Face `generate` on the twin itself (fp32; --hf), and a
`ctranslate2.Translator` (--ct2-types on each of --ct2-threads). Random weights seldom end a
sentence: nearly every output runs to the limit, and pieces/s is the fairer figure. Every runner
is a process of its own, runs once to warm up, then --repeats times; medians are reported, with
the process's peak resident memory (`peak_rss_mb`: loading included).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TGT = "en"


def nmt_runner(spec: dict, texts: list[str]):
    """A Translator loaded once; run(beam) translates with that beam (1: greedy)."""
    import torch

    from nmt.config import DecodeConfig, LengthPenalty, Strategy
    from nmt.translation.request import Request
    from nmt.translation.translator import Translator

    torch.set_num_threads(spec["threads"])

    def settings(beam: int) -> DecodeConfig:
        return DecodeConfig(
            strategy=Strategy.beam if beam > 1 else Strategy.greedy, beam_size=beam,
            length_penalty=LengthPenalty.average, max_len_a=0.0, max_len_b=spec["max_len"],
            batch_size=spec["batch_size"], precision=spec["precision"],
            compile=spec.get("compile", False),
        )  # fmt: skip

    translator = Translator.from_checkpoint(spec["model"], settings(1), "cpu")

    def run(beam: int) -> int:
        request = Request(texts, settings(beam), tgt_lang=TGT)
        results = translator.run(translator.prepare(request))
        return sum(len(r.tgt_pieces) - (r.tgt_pieces[-1:] == ["</s>"]) for r in results)

    return run


def _prompts(spec: dict, texts: list[str]) -> tuple[list[list[str]], list[int]]:
    """Each text as the twin's tokenizer cuts "<2en> " + text, then </s>; the order by length."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(Path(spec["twin"]) / "spiece.model"))
    pieces = [[*sp.Encode(f"<2{TGT}> {t}", out_type=str), "</s>"] for t in texts]
    return pieces, sorted(range(len(texts)), key=lambda i: len(texts[i]))


def ct2_runner(spec: dict, texts: list[str]):
    import ctranslate2

    translator = ctranslate2.Translator(
        spec["model"], device="cpu", compute_type=spec["precision"],
        intra_threads=spec["threads"], inter_threads=1,
    )  # fmt: skip
    prompts, order = _prompts(spec, texts)

    def run(beam: int) -> int:
        pieces = 0
        for k in range(0, len(order), spec["batch_size"]):
            batch = [prompts[i] for i in order[k : k + spec["batch_size"]]]
            results = translator.translate_batch(
                batch, beam_size=beam, max_decoding_length=spec["max_len"],
                max_batch_size=spec["batch_size"],
            )  # fmt: skip
            pieces += sum(len(r.hypotheses[0]) for r in results)
        return pieces

    return run


def hf_runner(spec: dict, texts: list[str]):
    """Hugging Face `generate` on the twin itself (fp32): the same prompts, batches, search and
    limit, what users of MADLAD-400 run today."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    torch.set_num_threads(spec["threads"])
    model = AutoModelForSeq2SeqLM.from_pretrained(spec["twin"]).eval()
    tokenizer = AutoTokenizer.from_pretrained(spec["twin"])
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))

    def run(beam: int) -> int:
        pieces = 0
        for k in range(0, len(order), spec["batch_size"]):
            rows = [f"<2{TGT}> {texts[i]}" for i in order[k : k + spec["batch_size"]]]
            batch = tokenizer(rows, padding=True, return_tensors="pt")
            with torch.inference_mode():
                out = model.generate(
                    **batch, num_beams=beam, do_sample=False,
                    max_new_tokens=spec["max_len"], length_penalty=1.0,
                    early_stopping=beam > 1 or None,
                )  # fmt: skip
            for row in out[:, 1:].tolist():  # after the decoder start, up to </s>
                pieces += next((n for n, i in enumerate(row) if i in (0, 1)), len(row))
        return pieces

    return run


def child(spec: dict) -> None:
    """--run: one runner in this process, loaded once, each search of spec["beams"] warmed up
    and timed; {beam: medians} as JSON on the last line."""
    texts = Path(spec["src"]).read_text("utf-8").splitlines()[: spec["sentences"]]
    runner = {"nmt": nmt_runner, "ct2": ct2_runner, "hf": hf_runner}[spec["engine"]]
    start = time.perf_counter()
    run = runner(spec, texts)
    load = time.perf_counter() - start
    rows = {}
    for beam in spec["beams"]:
        run(beam)  # warm-up (a compiled step compiles here)
        seconds, pieces = [], 0
        for _ in range(spec["repeats"]):
            start = time.perf_counter()
            pieces = run(beam)
            seconds.append(time.perf_counter() - start)
        median = statistics.median(seconds)
        rows[beam] = {"seconds": round(median, 2), "pieces_per_s": round(pieces / median, 1),
                      "pieces": pieces, "runs": [round(x, 2) for x in seconds]}  # fmt: skip
    print(json.dumps({"searches": rows, "load_s": round(load, 1), "peak_rss_mb": peak_rss_mb()}))


def peak_rss_mb() -> int:
    """This process's peak resident memory (VmHWM: its own, where ru_maxrss carries the parent's
    peak over fork and exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def run_child(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True, check=True, cwd=ROOT
    )
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}


def prepare(args: argparse.Namespace) -> dict[str, Path]:
    """The twin, its two imports and their CTranslate2 exports, each made once into --work."""
    from nmt.checkpoint import load_checkpoint
    from nmt.export.exporter import export_checkpoint
    from nmt.pretrained.importer import import_model
    from nmt.run_config import ExportFormat

    names = ("twin", "nmt", "nmt_trimmed", "ct2", "ct2_trimmed")
    paths = {name: args.work / name for name in names}
    if not paths["twin"].is_dir():
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "bench_import.py"), "--kind", "madlad",
             "--text", str(args.text), "--write-twin", str(paths["twin"]),
             *(["--small"] if args.small else [])],
            check=True, cwd=ROOT,
        )  # fmt: skip
    if not paths["nmt"].is_dir():
        import_model(str(paths["twin"]), paths["nmt"])
    if not paths["nmt_trimmed"].is_dir():
        import_model(str(paths["twin"]), paths["nmt_trimmed"], [str(k) for k in args.keep])
    for model, export in (("nmt", "ct2"), ("nmt_trimmed", "ct2_trimmed")):
        if not paths[export].is_dir() and "ct2" in args.engines:
            # weights stored in int8 (quantization=int8), as CTranslate2's int8 users deploy it
            export_checkpoint(load_checkpoint(paths[model], mmap=True), ExportFormat.ctranslate2,
                              paths[export], quantization="int8")  # fmt: skip
    return paths


def main() -> None:
    if sys.argv[1:2] == ["--run"]:  # a runner in a process of its own
        child(json.loads(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", type=Path, required=True, help="trains the twin's tokenizer")
    parser.add_argument("--keep", type=Path, nargs="+", required=True, help="keep_text files")
    parser.add_argument("--src", type=Path, required=True, help="German sources to translate")
    parser.add_argument("--work", type=Path, required=True, help="the twin and its conversions")
    parser.add_argument("--small", action="store_true", help="a 6+6 layer twin, for a quick run")
    parser.add_argument("--sentences", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--max-len", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ct2-threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--ct2-types", nargs="+", default=["int8"], help="compute types")
    parser.add_argument("--engines", nargs="+", default=["nmt", "hf", "ct2"])
    parser.add_argument("--searches", nargs="+", default=["greedy", "beam"])
    parser.add_argument("--only", nargs="+", help="run only these runners (names as printed)")
    args = parser.parse_args()
    paths = prepare(args)
    from nmt.checkpoint import load_checkpoint

    base = {
        "src": str(args.src), "sentences": args.sentences, "batch_size": args.batch_size,
        "max_len": args.max_len, "repeats": args.repeats, "twin": str(paths["twin"]),
        "threads": args.threads,
    }  # fmt: skip
    runners = []
    if "nmt" in args.engines:
        for name in ("nmt", "nmt_trimmed"):
            model = str(paths[name])
            for precision in ("fp32", "int8"):
                spec = {"engine": "nmt", "model": model, "precision": precision}
                runners.append((f"{name}_{precision}", spec))
            compiled = {"engine": "nmt", "model": model, "precision": "int8", "compile": True}
            runners.append((f"{name}_int8_compiled", compiled))
    if "hf" in args.engines:
        runners.append(("hf_generate_fp32", {"engine": "hf"}))
    if "ct2" in args.engines:
        for threads in args.ct2_threads:
            for precision in args.ct2_types:
                for name in ("ct2", "ct2_trimmed"):
                    runners.append((f"{name}_{precision}_{threads}t", {
                        "engine": "ct2", "model": str(paths[name]), "precision": precision,
                        "threads": threads}))  # fmt: skip
    if args.only:
        runners = [(name, spec) for name, spec in runners if name in args.only]
    kept = load_checkpoint(paths["nmt_trimmed"]).payload["imported"].get("pieces", "all")
    beams = {"greedy": 1, "beam": args.beam_size}
    wanted = [beams[search] for search in args.searches]
    result: dict = {"pieces_kept": kept, "settings": base, "runners": {}}
    for name, spec in runners:
        print(f"{name} ...", file=sys.stderr, flush=True)
        row = run_child("--run", json.dumps({**base, **spec, "beams": wanted}))
        row["searches"] = {s: row["searches"][str(b)] for s, b in beams.items() if b in wanted}
        result["runners"][name] = row
        print(f"{name} {row}", file=sys.stderr, flush=True)
    import torch

    result["torch"] = torch.__version__
    result["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
