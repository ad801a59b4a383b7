"""Write a big parallel corpus for memory and speed figures, from real sentence pairs you have.

    python scripts/make_corpus.py --pairs 1000000 --out data/big1m
    python scripts/make_corpus.py --pairs 5000000 --out data/big5m --src ../shared/data/multi30k

Writes OUT/train.{de,en} with --pairs pairs: the training pairs of --src (a directory of
train/val/test_2016_flickr .de/.en files; Multi30k's by default) repeated and shuffled with
--seed, every repetition in a new order so that batches differ; and OUT/valid.{de,en},
OUT/test.{de,en}, copies of --src's validation and test sets. Then
`nmt-train data=files data.local_dir=OUT data.src_lang=de data.tgt_lang=en ...` trains on it.
Repeated sentences make the corpus no better for translation than its source: it is for
measuring how nmt scales, not for quality. Streams the output, so it runs in little memory.
Prints one JSON line: the files written, their pairs and bytes.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}  # ours -> Multi30k's


def read_lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8", newline="\n") as f:
        return [line.rstrip("\n") for line in f]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, required=True, help="training pairs to write")
    parser.add_argument("--out", type=Path, required=True, help="a new directory")
    parser.add_argument("--src", type=Path, default=ROOT.parent / "shared" / "data" / "multi30k")
    parser.add_argument("--src-lang", default="de")
    parser.add_argument("--tgt-lang", default="en")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs must be positive")
    langs = (args.src_lang, args.tgt_lang)
    source = [read_lines(args.src / f"{SPLITS['train']}.{lang}") for lang in langs]
    if len(source[0]) != len(source[1]) or not source[0]:
        parser.error(f"{args.src}: the training files are empty or of different lengths")
    args.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    order = list(range(len(source[0])))
    outs = [open(args.out / f"train.{lang}", "w", encoding="utf-8") for lang in langs]  # noqa: SIM115
    try:
        written = 0
        while written < args.pairs:
            rng.shuffle(order)  # each repetition in another order
            for i in order[: args.pairs - written]:
                for out, side in zip(outs, source):
                    out.write(side[i] + "\n")
            written += min(len(order), args.pairs - written)
    finally:
        for out in outs:
            out.close()
    for ours, theirs in SPLITS.items():
        if ours != "train":
            for lang in langs:
                shutil.copyfile(args.src / f"{theirs}.{lang}", args.out / f"{ours}.{lang}")
    files = sorted(args.out.iterdir())
    print(
        json.dumps(
            {
                "out": str(args.out),
                "train_pairs": args.pairs,
                "source": str(args.src),
                "seed": args.seed,
                "files": {p.name: p.stat().st_size for p in files},
            }
        )
    )


if __name__ == "__main__":
    main()
