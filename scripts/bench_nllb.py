"""Decoding speed of an NLLB-200 model of nllb-200-distilled-600M's shape, in nmt (whole and
trimmed to the pieces of a de/en corpus) and in CTranslate2, on the CPU. Prints JSON.

    python scripts/bench_nllb.py --text ../shared/data/multi30k/train.de \\
        --keep ../shared/data/multi30k/train.de ../shared/data/multi30k/train.en \\
        --src ../shared/data/multi30k/test_2016_flickr.de --work runs/nllb_bench

The model is the random-weight twin of `scripts/bench_import.py --kind nllb` (12+12 layers, d 1024,
16 heads, ff 4096, 256,203 pieces: 615M parameters; its sentencepiece model trained on --text),
written into --work once and reused. nmt imports it twice: whole, and with keep_text=--keep
(`nmt.pretrained.trimming`). CTranslate2 converts it with its own Transformers converter (the
twin's tokenizer.json read for the vocabulary, as transformers' NLLB tokenizer would give it),
and runs the trimmed import too, exported by `nmt-export format=ctranslate2` (`ct2_trimmed_*`):
trimming is nmt's, and a CTranslate2 user gets it through the export.

Each runner translates the first --sentences lines of --src from deu_Latn into eng_Latn, sorted
by length in batches of --batch-size, with greedy search and beam search (--beam-size), at most
--max-len target pieces: nmt's `Translator` (fp32, and decode.precision=int8) and a
`ctranslate2.Translator` (--ct2-types, int8 by default, on each of --ct2-threads: 1 and 2) with
the source code first and the target code as the target prefix (`*_int8_compiled`: nmt's int8
with decode.compile=true, the warm-up run compiling its graphs); with --hf, Hugging Face
`generate` on the twin itself (fp32, forced_bos_token_id). Random weights seldom end a
sentence, so nearly every output runs to the limit: the work per sentence is the same in every
runner, and pieces/s is the fairer figure. Every
runner is a process of its own (CTranslate2's OpenMP runtime slows torch's kernels in a process
where it has run), runs once to warm up, then --repeats times; medians are reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC, TGT = "deu_Latn", "eng_Latn"


def nmt_runner(spec: dict, texts: list[str]):
    import torch

    from nmt.config import DecodeConfig, LengthPenalty, Strategy
    from nmt.translation.translator import Translator

    torch.set_num_threads(spec["threads"])
    decode = DecodeConfig(
        strategy=Strategy.beam if spec["beam"] > 1 else Strategy.greedy,
        beam_size=spec["beam"], length_penalty=LengthPenalty.average, max_len_a=0.0,
        max_len_b=spec["max_len"], batch_size=spec["batch_size"], precision=spec["precision"],
        compile=spec.get("compile", False),
    )  # fmt: skip
    translator = Translator.from_checkpoint(spec["model"], decode, "cpu", src_lang=SRC)

    def run() -> int:
        results = translator.translate_full(texts, attention=False, tgt_lang=TGT)
        return sum(len(r.tgt_pieces) - 1 for r in results)  # the code not counted

    return run


def ct2_runner(spec: dict, texts: list[str]):
    import ctranslate2
    import sentencepiece as spm

    translator = ctranslate2.Translator(
        spec["model"], device="cpu", compute_type=spec["precision"],
        intra_threads=spec["threads"], inter_threads=1,
    )  # fmt: skip
    sp = spm.SentencePieceProcessor(model_file=str(Path(spec["twin"]) / "sentencepiece.bpe.model"))
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))

    def run() -> int:
        pieces = 0
        for k in range(0, len(order), spec["batch_size"]):
            rows = order[k : k + spec["batch_size"]]
            batch = [[SRC, *sp.Encode(texts[i], out_type=str), "</s>"] for i in rows]
            results = translator.translate_batch(
                batch, target_prefix=[[TGT]] * len(batch), beam_size=spec["beam"],
                max_decoding_length=spec["max_len"], max_batch_size=spec["batch_size"],
            )  # fmt: skip
            pieces += sum(len(r.hypotheses[0]) - 1 for r in results)
            _ = [sp.DecodePieces(r.hypotheses[0][1:]) for r in results]
        return pieces

    return run


def hf_runner(spec: dict, texts: list[str]):
    """Hugging Face `generate` on the twin itself (fp32), what users of an imported model run
    today: the same sources, batches, code first and forced target code, greedy or beam search
    with the same limit; the pieces are the twin's ids, read through its tokenizer.json as
    `convert_ct2` reads them (the twin has no tokenizer files AutoTokenizer would load)."""
    import sentencepiece as spm
    import torch
    from transformers import AutoModelForSeq2SeqLM

    torch.set_num_threads(spec["threads"])
    twin = Path(spec["twin"])
    model = AutoModelForSeq2SeqLM.from_pretrained(twin).eval()
    table = json.loads((twin / "tokenizer.json").read_text("utf-8"))
    vocab = dict(table["model"]["vocab"]) | {t["content"]: t["id"] for t in table["added_tokens"]}
    sp = spm.SentencePieceProcessor(model_file=str(twin / "sentencepiece.bpe.model"))
    pad, eos = vocab["<pad>"], vocab["</s>"]
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))

    def run() -> int:
        pieces = 0
        for k in range(0, len(order), spec["batch_size"]):
            rows = [
                [vocab[SRC]]
                + [vocab.get(p, vocab["<unk>"]) for p in sp.Encode(texts[i], out_type=str)]
                + [eos]
                for i in order[k : k + spec["batch_size"]]
            ]
            width = max(len(r) for r in rows)
            ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
            with torch.inference_mode():
                out = model.generate(
                    input_ids=ids, attention_mask=ids != pad, forced_bos_token_id=vocab[TGT],
                    num_beams=spec["beam"], do_sample=False, max_new_tokens=spec["max_len"],
                    length_penalty=1.0, early_stopping=spec["beam"] > 1 or None,
                )  # fmt: skip
            # after the decoder start and the forced code: the pieces generated, up to </s>
            # (the limit counts the code, as nmt's and CTranslate2's do)
            for row in out[:, 2:].tolist():
                pieces += next((n for n, i in enumerate(row) if i in (eos, pad)), len(row))
        return pieces

    return run


def child(spec: dict) -> None:
    """--run: one runner in this process; its medians as JSON on the last line."""
    texts = Path(spec["src"]).read_text("utf-8").splitlines()[: spec["sentences"]]
    runner = {"nmt": nmt_runner, "ct2": ct2_runner, "hf": hf_runner}[spec["engine"]]
    run = runner(spec, texts)
    run()  # warm-up
    seconds, pieces = [], 0
    for _ in range(spec["repeats"]):
        start = time.perf_counter()
        pieces = run()
        seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    print(json.dumps({
        "seconds": round(median, 2), "sentences_per_s": round(len(texts) / median, 2),
        "pieces_per_s": round(pieces / median, 1), "pieces": pieces,
    }))  # fmt: skip


def convert_ct2(twin: Path, out: Path) -> None:
    """--convert: CTranslate2's Transformers converter, given the twin's vocabulary (a
    tokenizer object with what its M2M-100 loader reads) in place of AutoTokenizer."""
    from types import SimpleNamespace

    from ctranslate2.converters import TransformersConverter

    table = json.loads((twin / "tokenizer.json").read_text("utf-8"))
    vocab = dict(table["model"]["vocab"]) | {t["content"]: t["id"] for t in table["added_tokens"]}
    codes = [t["content"] for t in table["added_tokens"] if t["content"].endswith("_Latn")]
    piece_of = {i: p for p, i in vocab.items()}
    tokenizer = SimpleNamespace(
        get_vocab=lambda: vocab, unk_token="<unk>", unk_token_id=3, bos_token="<s>",
        eos_token="</s>", pad_token="<pad>", special_tokens_map={
            "additional_special_tokens": codes}, num_madeup_words=0,
        convert_ids_to_tokens=lambda i: piece_of[i],
    )  # fmt: skip

    class Converter(TransformersConverter):
        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):  # noqa: ANN001, ANN201, ARG002
            return tokenizer

    Converter(str(twin)).convert(str(out), force=True)


def run_child(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True, check=True, cwd=ROOT
    )
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}


def main() -> None:
    if sys.argv[1:2] == ["--run"]:  # a runner in a process of its own
        child(json.loads(sys.argv[2]))
        return
    if sys.argv[1:2] == ["--convert"]:
        convert_ct2(Path(sys.argv[2]), Path(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", type=Path, required=True, help="trains the twin's tokenizer")
    parser.add_argument("--keep", type=Path, nargs="+", required=True, help="keep_text files")
    parser.add_argument("--src", type=Path, required=True, help="German sources to translate")
    parser.add_argument("--work", type=Path, required=True, help="the twin and its conversions")
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--max-len", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ct2-threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--ct2-types", nargs="+", default=["int8"], help="compute types")
    parser.add_argument("--hf", action="store_true", help="time Hugging Face generate too")
    parser.add_argument("--only", nargs="+", help="run only these runners (names as printed)")
    args = parser.parse_args()
    work = args.work
    names = ("twin", "nmt", "nmt_trimmed", "ct2", "ct2_trimmed")
    twin, whole, trimmed, ct2, ct2_trimmed = (work / n for n in names)
    if not twin.is_dir():
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "bench_import.py"), "--kind", "nllb",
             "--text", str(args.text), "--write-twin", str(twin)],
            check=True, cwd=ROOT,
        )  # fmt: skip
        (twin / "pytorch_model.bin").unlink()  # the safetensors file is enough here
    from nmt.checkpoint import load_checkpoint
    from nmt.pretrained.importer import import_model

    if not whole.is_dir():
        import_model(str(twin), whole)
    if not trimmed.is_dir():
        import_model(str(twin), trimmed, [str(k) for k in args.keep])
    if not ct2.is_dir():
        run_child("--convert", str(twin), str(ct2))
    if not ct2_trimmed.is_dir():
        from nmt.export.exporter import export_checkpoint
        from nmt.run_config import ExportFormat

        export_checkpoint(load_checkpoint(trimmed), ExportFormat.ctranslate2, ct2_trimmed)
    pieces = {
        name: load_checkpoint(d).payload["imported"].get("pieces", "all")
        for name, d in (("nmt", whole), ("nmt_trimmed", trimmed))
    }
    base = {
        "src": str(args.src), "sentences": args.sentences, "batch_size": args.batch_size,
        "max_len": args.max_len, "repeats": args.repeats, "twin": str(twin),
    }  # fmt: skip
    runners = []
    for name, model in (("nmt", whole), ("nmt_trimmed", trimmed)):
        for precision in ("fp32", "int8"):
            runners.append((f"{name}_{precision}", {"engine": "nmt", "model": str(model),
                            "precision": precision, "threads": args.threads}))  # fmt: skip
        # the compiled int8 step (decode.compile=true), nmt's fastest path on the CPU
        compiled = {"engine": "nmt", "model": str(model), "precision": "int8", "compile": True}
        runners.append((f"{name}_int8_compiled", {**compiled, "threads": args.threads}))
    if args.hf:
        runners.append(("hf_generate_fp32", {"engine": "hf", "threads": args.threads}))
    for threads in args.ct2_threads:
        for precision in args.ct2_types:
            for name, model in (("ct2", ct2), ("ct2_trimmed", ct2_trimmed)):
                runners.append((f"{name}_{precision}_{threads}t", {"engine": "ct2",
                                "model": str(model), "precision": precision,
                                "threads": threads}))  # fmt: skip
    if args.only:
        runners = [(name, spec) for name, spec in runners if name in args.only]
    result: dict = {"pieces_kept": pieces, "settings": base}
    for search, beam in (("greedy", 1), ("beam", args.beam_size)):
        rows = {}
        for name, spec in runners:
            rows[name] = run_child("--run", json.dumps({**base, **spec, "beam": beam}))
            print(name, search, rows[name], file=sys.stderr)
        result[search] = rows
    import torch

    result["torch"] = torch.__version__
    result["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
