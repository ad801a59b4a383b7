"""Terminology benchmark: constraints met, BLEU and speed of constrained beam search, as JSON.

    python scripts/bench_constraints.py runs/fast/checkpoints/best \\
        --src ../shared/data/multi30k/test_2016_flickr.de \\
        --ref ../shared/data/multi30k/test_2016_flickr.en

Constraint sets, built from the files given (seeded, so every run builds the same ones):

- `oracle-1`, `oracle-2`: for each sentence, 1 or 2 reference words that the unconstrained beam
  output lacks, as the oracle experiments of Post & Vilar (2018) and Hu et al. (2019) do. A
  sentence whose output lacks fewer reference words takes reference words it has to make up the
  count (still constraints, to time the search fairly), and one with no usable reference word
  (letters only, 3 or more of them, that the model's target vocabulary can write) gets none.
- `glossary`: a source word -> target word list (`--glossary`, a TSV file; a small built-in
  German -> English one by default), applied wherever the source word occurs in a sentence.

For each set it decodes the whole file with beam 5 (gnmt length penalty, alpha 1, as decode=beam)
at every `--batch-sizes` value, with and without the constraints, `--repeats` times alternating,
and reports the median seconds. `constraints_met` is the share of constraints whose text appears
in the output where a word starts (what the search guarantees, piece for piece); `time_ratio` is
constrained seconds over unconstrained seconds at the same batch size. `"headline"` holds both
for beam 5, batch 64, `oracle-2`. BLEU is sacreBLEU on the detokenized output against the raw
references, signature printed. One torch process should run at a time: two share the cores
badly.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import time
from dataclasses import replace
from pathlib import Path

from sacrebleu.metrics import BLEU

from nmt.checkpoint import load_checkpoint
from nmt.config import DecodeConfig, LengthPenalty, Strategy
from nmt.data.splits import read_lines
from nmt.device import describe, resolve_device
from nmt.errors import NMTError
from nmt.models import restore_model
from nmt.tokenizer import Vocab
from nmt.translation.phrases import constraint_ids
from nmt.translation.translator import Translator

# a fixed glossary for Multi30k-like German: frequent caption words with one fixed translation,
# as a client's glossary would impose (the references do not always agree with it)
GLOSSARY_DE_EN = {
    "Mann": "man",
    "Frau": "woman",
    "Hund": "dog",
    "Kinder": "children",
    "Straße": "street",
    "Wasser": "water",
    "Gebäude": "building",
    "Fahrrad": "bicycle",
    "Strand": "beach",
    "Gitarre": "guitar",
    "Ball": "ball",
    "Auto": "car",
}
WORD = re.compile(r"[^\W\d_]{3,}")  # a usable constraint word: letters only, 3 or more


def writable(vocab: Vocab, word: str) -> bool:
    """Whether the model can write `word` as a constraint (its target vocabulary, pruned to the
    pieces the training text used, may lack a piece of a rare word)."""
    try:
        constraint_ids(vocab, word)
    except NMTError:
        return False
    return True


def oracle(
    refs: list[str], outputs: list[str], count: int, seed: int, vocab: Vocab
) -> list[list[str]]:
    """Up to `count` reference words per sentence, those the output lacks first."""
    rng = random.Random(seed)
    sets = []
    for ref, out in zip(refs, outputs):
        have = set(out.split())
        words = [w for w in dict.fromkeys(WORD.findall(ref)) if writable(vocab, w)]
        missing = [w for w in words if w not in have]
        present = [w for w in words if w in have]
        rng.shuffle(missing)
        rng.shuffle(present)
        sets.append((missing + present)[:count])
    return sets


def glossary_sets(sources: list[str], glossary: dict[str, str]) -> list[list[str]]:
    sets = []
    for src in sources:
        words = re.findall(r"\w+", src)
        sets.append(list(dict.fromkeys(glossary[w] for w in words if w in glossary)))
    return sets


def met(outputs: list[str], sets: list[list[str]]) -> tuple[int, int]:
    """(constraints whose text starts a word of the output, constraints in all)."""
    hits = total = 0
    for out, phrases in zip(outputs, sets):
        for phrase in phrases:
            total += 1
            hits += re.search(r"(?:^|\s)" + re.escape(phrase), out) is not None
    return hits, total


def timed(
    translator: Translator,
    sources: list[str],
    decode: DecodeConfig,
    sets: list[list[str]] | None,
) -> tuple[float, list[str]]:
    start = time.perf_counter()
    results = translator.translate_full(sources, False, decode=decode, constraints=sets)
    return time.perf_counter() - start, [r.text for r in results]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("--src", required=True, help="one sentence per line")
    parser.add_argument("--ref", required=True, help="its references, one per line")
    parser.add_argument("--glossary", help="TSV: source word<TAB>target word (default: built-in)")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[64, 1])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, default=0, help="first N sentences only; 0 = all")
    parser.add_argument(
        "--batch1-limit", type=int, default=200, help="first N sentences at batch size 1"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    ckpt = load_checkpoint(args.ckpt)
    device = resolve_device(args.device)
    model = restore_model(ckpt, device)
    sources, refs = read_lines(Path(args.src)), read_lines(Path(args.ref))
    if len(sources) != len(refs):
        raise SystemExit(f"{args.src} has {len(sources)} lines, {args.ref} {len(refs)}")
    if args.limit:
        sources, refs = sources[: args.limit], refs[: args.limit]
    if args.glossary:
        rows = [line.split("\t") for line in read_lines(Path(args.glossary)) if line.strip()]
        glossary = {row[0].strip(): row[1].strip() for row in rows}
    else:
        glossary = GLOSSARY_DE_EN
    glossary = {k: v for k, v in glossary.items() if writable(ckpt.vocabs.tgt, v)}
    beam = DecodeConfig(
        strategy=Strategy.beam,
        beam_size=args.beam_size,
        length_penalty=LengthPenalty.gnmt,
        alpha=1.0,
    )
    translator = Translator(model, ckpt.vocabs, device, ckpt.lexicon, beam)
    translator.translate(sources[:16])  # warm-up: allocator, kernels, caches

    _, plain = timed(translator, sources, beam, None)
    sets = {
        "oracle-1": oracle(refs, plain, 1, args.seed, ckpt.vocabs.tgt),
        "oracle-2": oracle(refs, plain, 2, args.seed, ckpt.vocabs.tgt),
        "glossary": glossary_sets(sources, glossary),
    }
    metric = BLEU()
    bleu_plain = metric.corpus_score(plain, [refs]).score
    signature = str(metric.get_signature())
    settings = []
    for name, constraints in sets.items():
        for batch_size in args.batch_sizes:
            n = args.batch1_limit if batch_size == 1 and args.batch1_limit else len(sources)
            texts, wanted = sources[:n], constraints[:n]
            decode = replace(beam, batch_size=batch_size)
            free, bound = [], []
            for _ in range(args.repeats):  # alternating, so drifts of the machine hit both
                seconds, _ = timed(translator, texts, decode, None)
                free.append(seconds)
                seconds, outputs = timed(translator, texts, decode, wanted)
                bound.append(seconds)
            hits, total = met(outputs, wanted)
            row = {
                "constraints": name,
                "batch_size": batch_size,
                "sentences": n,
                "constraints_total": total,
                "sentences_constrained": sum(bool(c) for c in wanted),
                "constraints_met": round(hits / total, 4) if total else None,
                "unconstrained_s": round(statistics.median(free), 3),
                "constrained_s": round(statistics.median(bound), 3),
                "time_ratio": round(statistics.median(bound) / statistics.median(free), 3),
                "unconstrained_sentences_per_s": round(n / statistics.median(free), 1),
                "constrained_sentences_per_s": round(n / statistics.median(bound), 1),
            }
            if n == len(sources):
                row["bleu_unconstrained"] = round(bleu_plain, 2)
                row["bleu_constrained"] = round(metric.corpus_score(outputs, [refs]).score, 2)
            settings.append(row)
            print(json.dumps(row), flush=True)
    headline = next(
        (r for r in settings if r["constraints"] == "oracle-2" and r["batch_size"] == 64), None
    )
    print(
        json.dumps(
            {
                "benchmark": "constraints",
                "checkpoint": str(Path(args.ckpt)),
                "model": ckpt.config.model.name,
                "source": args.src,
                "decode": beam.describe(),
                "bleu_signature": signature,
                "headline": None
                if headline is None
                else {k: headline[k] for k in ("constraints_met", "time_ratio")},
                "settings": settings,
                **describe(device),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
