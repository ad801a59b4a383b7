"""Rebuild the fixed Tatoeba English-French split (configs/data/tatoeba.yaml) from its source.

    python scripts/make_tatoeba.py --source fra-eng.zip --out data/tatoeba-eng-fra
    python scripts/make_tatoeba.py --source fra.txt --out data/tatoeba-eng-fra --reserved

The input is manythings.org's "fra-eng" release of 2017-09-29: fra-eng.zip (2,951,390 bytes,
sha256 16c4f7d0df9e7c5e6c54cdb0447f3f4a18a55052ff5e2e0b27dd4a06c0e49d04) or the fra.txt inside
it (142,787 `English<TAB>French` lines, sha256 below). https://www.manythings.org/anki/ serves
only its newest release, so take this one from the copy committed in genimind/seq2seq:

    curl -LO https://github.com/genimind/seq2seq/raw/4f3f8eb0adde54fcc8b89394336b002e7961244c/fra-eng.zip

The data is Tatoeba's, under CC BY 2.0 (attribution: www.manythings.org/anki and tatoeba.org).

Every pair goes to the split given by its English side: sha1 of the English, whitespace stripped
at both ends, lowercased and encoded as UTF-8, read as an integer, modulo 1000: below 14 dev,
14-27 test, 28-41 reserved (not written unless --reserved), the rest train. So an English
sentence with several French translations never sits in two splits. Both sides are stripped;
pairs keep their order in fra.txt, duplicates included. Writes OUT/{train,dev,test}.{en,fr}
(UTF-8, one sentence a line, LF) and prints one JSON line per file: name, lines, sha256, ok (the
sha256 equals the one stored here; null when the input is another release). Exits with status 1
if a file differs. Another release of fra.txt is refused unless --any-release is given.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import zipfile
from pathlib import Path

SOURCE_SHA256 = "2546838ae46e0eac4c02ab7032ea0a02a006074a5340077a36a9444f41e02888"  # fra.txt
MEMBER = "fra.txt"  # the corpus inside fra-eng.zip (beside _about.txt)

# (upper bound of the sha1 bucket, split); buckets 0..999
SPLITS = ((14, "dev"), (28, "test"), (42, "reserved"), (1000, "train"))
WRITTEN = ("train", "dev", "test")

# name: (lines, sha256) of each file built from the 2017-09-29 release; train, dev and test are
# those of the shipped split, the reserved split (never shipped) is as this script first built it
EXPECTED: dict[str, tuple[int, str]] = {
    "train.en": (136747, "175c2b638329a24dab22a1c2d753a421250b58a053010a2ee959165573267c95"),
    "train.fr": (136747, "427df816f185eb0ef26399777dd4cac01b722ddac0fa76a5f04ea6a7f7c2b92c"),
    "dev.en": (2023, "566304d5390e1eac70ca0552dfbc280c5e3a32f879db8ab7f7af37e16095083a"),
    "dev.fr": (2023, "6735cc8fd4d1a6e2db395168d2c569327c0ba9ca5f7cfe0de942be04028bac1c"),
    "test.en": (1962, "ac468a170d6127f6f98b39a25aa9a4b2abbc4252dde0d75f6dfa237133e8da83"),
    "test.fr": (1962, "fe7f7f6cb287776740c2833cd5781d9223bc4473d0a90bc9b0c9848a2ca0fcc5"),
    "reserved.en": (2055, "cd7b9827a81210d41240dabb31f0ab4c935d6b9487e371605466632d0bcb4154"),
    "reserved.fr": (2055, "9c8056ab6bfc5626f69716d4b0759e71480b2bdae569435e4c6dc49928de6739"),
}


def read_source(path: Path) -> bytes:
    """The bytes of fra.txt, from the zip or from the extracted file."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return archive.read(MEMBER)
    return path.read_bytes()


def split_of(english: str) -> str:
    """The split of every pair whose English side is `english` (already stripped)."""
    bucket = int(hashlib.sha1(english.lower().encode("utf-8")).hexdigest(), 16) % 1000
    return next(name for bound, name in SPLITS if bucket < bound)


def make_splits(text: str) -> dict[str, list[tuple[str, str]]]:
    """Pairs of each split, in their order in fra.txt."""
    splits: dict[str, list[tuple[str, str]]] = {name: [] for _, name in SPLITS}
    for number, line in enumerate(text.split("\n"), start=1):
        if not line:  # the end of the file
            continue
        fields = line.split("\t")
        if len(fields) < 2:
            raise SystemExit(f"{MEMBER} line {number}: expected English<TAB>French, got {line!r}")
        # newer releases add a third column (attribution): only the first two are used
        english, french = fields[0].strip(), fields[1].strip()
        splits[split_of(english)].append((english, french))
    return splits


def write_lines(path: Path, lines: list[str]) -> bytes:
    """Writes one line each (UTF-8, LF) and returns the bytes written."""
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(data)
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, required=True, help="fra-eng.zip or its fra.txt")
    parser.add_argument("--out", type=Path, required=True, help="directory for the split files")
    parser.add_argument("--reserved", action="store_true", help="also write reserved.{en,fr}")
    parser.add_argument(
        "--any-release", action="store_true",
        help="split another release of fra.txt too (its files are not checked)",
    )  # fmt: skip
    args = parser.parse_args()

    raw = read_source(args.source)
    digest = hashlib.sha256(raw).hexdigest()
    same_release = digest == SOURCE_SHA256
    if not same_release:
        message = (
            f"{args.source}: {MEMBER} has sha256 {digest}, not {SOURCE_SHA256} (release "
            "2017-09-29); the split it gives will not be the project's"
        )
        if not args.any_release:
            raise SystemExit(f"error: {message} (pass --any-release to split it anyway)")
        print(f"warning: {message}", file=sys.stderr)

    splits = make_splits(raw.decode("utf-8"))
    args.out.mkdir(parents=True, exist_ok=True)
    failed = False
    for split in WRITTEN + (("reserved",) if args.reserved else ()):
        for index, lang in enumerate(("en", "fr")):
            name = f"{split}.{lang}"
            data = write_lines(args.out / name, [pair[index] for pair in splits[split]])
            sha256 = hashlib.sha256(data).hexdigest()
            lines = len(splits[split])
            ok = (lines, sha256) == EXPECTED[name] if same_release else None
            failed = failed or ok is False
            print(json.dumps({"name": name, "lines": lines, "sha256": sha256, "ok": ok}))
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
