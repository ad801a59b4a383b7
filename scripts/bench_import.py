"""Time and memory of `nmt-import` on a Marian model of OPUS-MT's size, or an NLLB-200 model of
nllb-200-distilled-600M's, printed as JSON.

    python scripts/bench_import.py                      # a random-weight opus-mt-de-en twin
    python scripts/bench_import.py --kind nllb          # a random-weight NLLB-600M twin
    python scripts/bench_import.py --kind madlad        # a random-weight MADLAD-400-3B twin
    python scripts/bench_import.py --source DIR         # a directory of your own

Without --source, a MarianMTModel with OPUS-MT de-en's shape (6+6 layers, d 512, 8 heads, ff
2048, swish, 58,101 pieces: 74M parameters) and random weights is saved with `transformers`'
save_pretrained (safetensors) and also as pytorch_model.bin, with sentencepiece models trained
on the text given by --text (tokenization does not change the import's cost). Each format is
imported --repeats times in a fresh process (`nmt-import`); the figures are the medians of its
wall time, of its peak resident memory, and of that peak less the peak before the import (the
interpreter with torch and nmt loaded), beside the size of the weights file.

The NLLB twin (`--kind nllb`: an M2M100ForConditionalGeneration of 12+12 layers, d 1024, 16 heads,
ff 4096, ReLU, 256,203 pieces: 615M parameters) has a sentencepiece model trained on --text and a
tokenizer.json listing its pieces, 202 language codes and <mask>, as NLLB's does.

The MADLAD twin (`--kind madlad`: a T5ForConditionalGeneration of madlad400-3b-mt's configuration,
32+32 layers, d 1024, 16 heads of 128, ff 8192 gated-GELU, an output layer of its own, 256,000
rows: 2.94B parameters, 11.8 GB in fp32) has a sentencepiece model trained on --text holding 419
`<2xx>` language pieces (MADLAD-400's count), the rows past its pieces unnamed as mT5's are
(`--small`: 6+6 layers, d 512, ff 2048, for a quick run). Saved as safetensors only.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent

# the command in a fresh process: its wall time from the start of the import, the peak resident
# memory, and the peak before the import (the interpreter, torch and nmt loaded)
MEASURE = """
import resource, sys, time
from nmt.cli import main
import nmt.pretrained.importer
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
code = main.import_model(sys.argv[1:])
seconds = time.perf_counter() - start
print(seconds, base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, code)
"""


def opus_twin(out: Path, text: Path, pieces: int) -> None:
    """A random-weight Marian model of opus-mt-de-en's configuration, in the Hugging Face layout."""
    import sentencepiece as spm
    import transformers

    out.mkdir(parents=True)
    lines = text.read_text("utf-8").splitlines()[:20000]
    for name in ("source", "target"):
        spm.SentencePieceTrainer.Train(
            sentence_iterator=iter(lines), model_prefix=str(out / name), vocab_size=4000,
            num_threads=1, minloglevel=2, hard_vocab_limit=False,
        )  # fmt: skip
        (out / f"{name}.model").rename(out / f"{name}.spm")
        (out / f"{name}.vocab").unlink()
    vocab = {"</s>": 0, "<unk>": 1}
    sp = spm.SentencePieceProcessor(model_file=str(out / "source.spm"))
    for i in range(sp.GetPieceSize()):
        vocab.setdefault(sp.IdToPiece(i), len(vocab))
    while len(vocab) < pieces - 1:  # OPUS-MT's size: pieces no text here uses
        vocab[f"▁filler{len(vocab)}"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), "utf-8")
    config = transformers.MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=512, encoder_layers=6,
        decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
        encoder_ffn_dim=2048, decoder_ffn_dim=2048, activation_function="swish",
        max_position_embeddings=512, pad_token_id=vocab["<pad>"], eos_token_id=0,
        decoder_start_token_id=vocab["<pad>"], scale_embedding=True,
    )  # fmt: skip
    model = transformers.MarianMTModel(config)
    model.save_pretrained(out)
    torch.save(model.state_dict(), out / "pytorch_model.bin")


def nllb_twin(out: Path, text: Path, pieces: int = 256_000, languages: int = 202) -> None:
    """A random-weight M2M-100 model of nllb-200-distilled-600M's configuration, in the Hugging
    Face layout (sentencepiece.bpe.model, tokenizer.json, model.safetensors, pytorch_model.bin)."""
    import itertools
    import string

    import sentencepiece as spm
    import transformers

    out.mkdir(parents=True)
    lines = text.read_text("utf-8").splitlines()[:20000]
    spm.SentencePieceTrainer.Train(
        sentence_iterator=iter(lines), model_prefix=str(out / "sp"), vocab_size=4000,
        model_type="bpe", num_threads=1, minloglevel=2, hard_vocab_limit=False,
    )  # fmt: skip
    (out / "sp.model").rename(out / "sentencepiece.bpe.model")
    (out / "sp.vocab").unlink()
    sp = spm.SentencePieceProcessor(model_file=str(out / "sentencepiece.bpe.model"))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(3, sp.GetPieceSize()):  # fairseq's offset: sentencepiece id + 1
        vocab[sp.IdToPiece(i)] = i + 1
    while len(vocab) < pieces:  # NLLB's size: pieces no text here uses
        vocab[f"▁filler{len(vocab)}"] = len(vocab)
    names = ["deu_Latn", "eng_Latn"] + [
        "".join(letters) + "_Latn"
        for letters in itertools.islice(
            itertools.product(string.ascii_lowercase, repeat=3), languages - 2
        )  # fmt: skip
    ]
    added = [{"id": i, "content": p, "special": True} for p, i in list(vocab.items())[:4]]
    added += [{"id": len(vocab) + k, "content": c, "special": True} for k, c in enumerate(names)]
    added.append({"id": len(vocab) + len(names), "content": "<mask>", "special": True})
    table = {"added_tokens": added, "model": {"type": "BPE", "vocab": vocab, "merges": []}}
    (out / "tokenizer.json").write_text(json.dumps(table, ensure_ascii=False), "utf-8")
    config = transformers.M2M100Config(
        vocab_size=len(vocab) + len(names) + 1, d_model=1024, encoder_layers=12,
        decoder_layers=12, encoder_attention_heads=16, decoder_attention_heads=16,
        encoder_ffn_dim=4096, decoder_ffn_dim=4096, activation_function="relu",
        max_position_embeddings=1024, pad_token_id=1, eos_token_id=2, bos_token_id=0,
        decoder_start_token_id=2, scale_embedding=True,
    )  # fmt: skip
    model = transformers.M2M100ForConditionalGeneration(config)
    model.save_pretrained(out)
    torch.save(model.state_dict(), out / "pytorch_model.bin")


def madlad_twin(out: Path, text: Path, small: bool = False, languages: int = 419) -> None:
    """A random-weight T5 of madlad400-3b-mt's configuration (or a small one), in the Hugging
    Face layout (spiece.model, tokenizer files, model.safetensors)."""
    import itertools
    import string

    import sentencepiece as spm
    import transformers

    out.mkdir(parents=True)
    lines = text.read_text("utf-8").splitlines()[:20000]
    codes = ["<2de>", "<2en>"] + [
        "<2" + "".join(letters) + ">"
        for letters in itertools.islice(
            itertools.product(string.ascii_lowercase, repeat=3), languages - 2
        )  # fmt: skip
    ]
    spm.SentencePieceTrainer.Train(
        sentence_iterator=iter(lines), model_prefix=str(out / "spiece"), vocab_size=8000,
        model_type="unigram", num_threads=1, minloglevel=2, hard_vocab_limit=False, pad_id=0,
        eos_id=1, unk_id=2, bos_id=-1, user_defined_symbols=codes,
    )  # fmt: skip
    (out / "spiece.vocab").unlink()
    transformers.T5Tokenizer.from_pretrained(str(out), extra_ids=100).save_pretrained(out)
    shape = dict(d_model=512, d_kv=64, d_ff=2048, num_layers=6) if small else dict(
        d_model=1024, d_kv=128, d_ff=8192, num_layers=32)  # fmt: skip
    config = transformers.T5Config(
        vocab_size=256_000, num_heads=8 if small else 16, feed_forward_proj="gated-gelu",
        tie_word_embeddings=False, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
        **shape,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(config)
    # an output layer of its own (transformers ties equal tensors)
    model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.shared.weight) * 0.05)
    model.save_pretrained(out)
    _untied(out / "config.json")


def _untied(path: Path) -> None:
    """config.json saying the output layer is the model's own (T5 v1.1's, MADLAD's): transformers
    5 writes tie_word_embeddings=true whatever the model, which would also mean the original
    T5's output scaling."""
    config = json.loads(path.read_text("utf-8"))
    config["tie_word_embeddings"] = False
    path.write_text(json.dumps(config, indent=1), "utf-8")


def measure(source: Path, repeats: int) -> dict:
    runs = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run(
                [sys.executable, "-c", MEASURE, f"source={source}", f"out={tmp}/imported"],
                capture_output=True, text=True, check=True, cwd=ROOT,
            )  # fmt: skip
            seconds, base, peak, code = done.stdout.split()[-4:]
            if code != "0":
                raise SystemExit(done.stderr)
            runs.append((float(seconds), int(base) / 1024, int(peak) / 1024))
    return {
        "seconds": round(statistics.median(s for s, _, _ in runs), 2),
        "peak_rss_mb": round(statistics.median(p for _, _, p in runs), 1),
        "before_import_rss_mb": round(statistics.median(b for _, b, _ in runs), 1),
        "import_mb": round(statistics.median(p - b for _, b, p in runs), 1),
        "runs": [[round(s, 2), round(b, 1), round(p, 1)] for s, b, p in runs],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, help="a model's directory (default: a twin)")
    parser.add_argument(
        "--kind",
        choices=["marian", "nllb", "madlad"],
        default="marian",
        help="the twin: opus-mt-de-en's shape, nllb-200-distilled-600M's or madlad400-3b-mt's",
    )
    parser.add_argument("--small", action="store_true", help="--kind madlad: a small T5")
    parser.add_argument("--text", type=Path, default=ROOT / "data" / "demo" / "train.de")
    parser.add_argument("--pieces", type=int, default=58101)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write-twin", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write_twin:
        if args.kind == "nllb":
            nllb_twin(args.write_twin, args.text)
        elif args.kind == "madlad":
            madlad_twin(args.write_twin, args.text, args.small)
        else:
            opus_twin(args.write_twin, args.text, args.pieces)
        return
    work = Path(tempfile.mkdtemp())
    try:
        source = args.source
        if source is None:
            source = work / "twin"
            # written by a process of its own: a child's peak RSS starts at its parent's (Linux
            # carries ru_maxrss over fork and exec), and this one would hold the model
            subprocess.run(
                [sys.executable, __file__, "--kind", args.kind, "--text", str(args.text),
                 "--pieces", str(args.pieces), "--write-twin", str(source),
                 *(["--small"] if args.small else [])],
                check=True, cwd=ROOT,
            )  # fmt: skip
        weights = {}
        for name in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"):
            if (source / name).is_file():
                weights[name] = source / name
        twin = {"marian": "opus-mt-de-en", "nllb": "nllb-200-distilled-600M",
                "madlad": "madlad400-3b-mt"}[args.kind]  # fmt: skip
        result = {"source": str(args.source or f"random {twin} twin"), "formats": {}}
        for name, path in weights.items():
            alone = work / name.replace(".", "_")
            alone.mkdir()
            for item in source.iterdir():  # the directory with this one weights file
                if item.is_file() and (item.name == name or item.name not in weights):
                    (alone / item.name).symlink_to(item.resolve())
            row = measure(alone, args.repeats)
            files = [path]
            if name.endswith(".index.json"):  # a sharded model: the shards it names
                shards = json.loads(path.read_text("utf-8"))["weight_map"].values()
                files = [source / shard for shard in set(shards)]
            row["weights_mb"] = round(sum(f.stat().st_size for f in files) / 2**20, 1)
            row["peak_over_weights"] = round(row["peak_rss_mb"] / row["weights_mb"], 2)
            row["import_over_weights"] = round(row["import_mb"] / row["weights_mb"], 2)
            result["formats"][name] = row
        result["torch"] = torch.__version__
        result["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        print(json.dumps(result, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
