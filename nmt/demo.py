"""Deterministic toy German -> English parallel corpus that needs real attention.

A translation model cannot solve this corpus by copying or by monotone word-for-word
substitution, because two kinds of reordering are built into every sentence:

* Inside German number words units come before tens: "einundzwanzig" is literally
  "one-and-twenty" but must become "twenty-one", and in "dreihundertzwölftausend..." the
  model has to segment one long German token stream into several English words while
  swapping units and tens within each group.
* In subordinate clauses German puts the finite verb last ("..., dass wir vierzig alte
  Häuser kaufen."), so the English verb must be emitted before an object phrase whose
  German source lies *after* it - a long-range jump that grows with the number's length.

Usage: ``python -m nmt.demo --out data/demo [--train N --valid N --test N --seed S]``
writes train/valid/test .de/.en files (one sentence per line, line-aligned, UTF-8).
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

# Bump when templates or word lists change, so cached corpora get regenerated.
GENERATOR_VERSION = 1
SPLITS = ("train", "valid", "test")
LANGS = ("de", "en")

_DE_ONES = ["", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun"]
_DE_TEENS = ["zehn", "elf", "zwölf", "dreizehn", "vierzehn", "fünfzehn", "sechzehn",
             "siebzehn", "achtzehn", "neunzehn"]  # fmt: skip
_DE_TENS = ["", "", "zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig",
            "achtzig", "neunzig"]  # fmt: skip
_EN_ONES = ["", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
_EN_TEENS = ["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
             "seventeen", "eighteen", "nineteen"]  # fmt: skip
_EN_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty",
            "ninety"]  # fmt: skip

# (German subject, German verb, English subject, English verb); the German verb form is the
# same in main and subordinate clauses, only its position differs.
SUBJECTS_VERBS: list[tuple[str, str, str, str]] = [
    ("ich", "sehe", "I", "see"),
    ("du", "kaufst", "you", "buy"),
    ("er", "zählt", "he", "counts"),
    ("sie", "hat", "she", "has"),
    ("wir", "kaufen", "we", "buy"),
    ("die Kinder", "malen", "the children", "paint"),
    ("mein Vater", "verkauft", "my father", "sells"),
    ("meine Schwester", "braucht", "my sister", "needs"),
]
# Strong plural (no article) accusative adjectives all end in -e.
ADJECTIVES: list[tuple[str, str]] = [
    ("rote", "red"), ("kleine", "small"), ("alte", "old"), ("grüne", "green"),
    ("große", "big"), ("neue", "new"), ("schwarze", "black"), ("blaue", "blue"),
]  # fmt: skip
NOUNS: list[tuple[str, str]] = [
    ("Äpfel", "apples"), ("Häuser", "houses"), ("Bücher", "books"), ("Katzen", "cats"),
    ("Vögel", "birds"), ("Autos", "cars"), ("Steine", "stones"), ("Blumen", "flowers"),
]  # fmt: skip
MATRIX_CLAUSES: list[tuple[str, str]] = [
    ("Ich glaube, dass", "I think that"),
    ("Sie sagt, dass", "She says that"),
    ("Er weiß, dass", "He knows that"),
]


def _de_below_100(n: int, final: bool) -> str:
    # A lone 1 is "eins" only at the very end of the word; before "und"/"tausend" it is "ein".
    if n == 1:
        return "eins" if final else "ein"
    if n < 10:
        return _DE_ONES[n]
    if n < 20:
        return _DE_TEENS[n - 10]
    tens, ones = divmod(n, 10)
    if ones == 0:
        return _DE_TENS[tens]
    unit = "ein" if ones == 1 else _DE_ONES[ones]
    return f"{unit}und{_DE_TENS[tens]}"  # units before tens: the reordering the model learns


def _de_below_1000(n: int, final: bool) -> str:
    hundreds, rest = divmod(n, 100)
    if hundreds == 0:
        return _de_below_100(rest, final)
    if rest == 0:
        return f"{_DE_ONES[hundreds] if hundreds > 1 else 'ein'}hundert"
    # Both "hundert" and "einhundert" are standard; use the short form when more follows.
    head = "hundert" if hundreds == 1 else f"{_DE_ONES[hundreds]}hundert"
    return head + _de_below_100(rest, final)


def german_number(n: int) -> str:
    """Spell 1 <= n <= 999_999 as one German word, e.g. 21 -> "einundzwanzig"."""
    if not 1 <= n <= 999_999:
        raise ValueError(f"german_number supports 1..999999, got {n}")
    thousands, rest = divmod(n, 1000)
    head = f"{_de_below_1000(thousands, final=False)}tausend" if thousands else ""
    return head + (_de_below_1000(rest, final=True) if rest else "")


def _en_below_1000(n: int) -> str:
    hundreds, rest = divmod(n, 100)
    words = [f"{_EN_ONES[hundreds]} hundred"] if hundreds else []
    if 10 <= rest < 20:
        words.append(_EN_TEENS[rest - 10])
    elif rest:
        tens, ones = divmod(rest, 10)
        words.append("-".join(w for w in (_EN_TENS[tens], _EN_ONES[ones]) if w))
    return " ".join(words)


def english_number(n: int) -> str:
    """Spell 1 <= n <= 999_999 in American English without "and", e.g. 101 -> "one hundred one"."""
    if not 1 <= n <= 999_999:
        raise ValueError(f"english_number supports 1..999999, got {n}")
    thousands, rest = divmod(n, 1000)
    words = [f"{_en_below_1000(thousands)} thousand"] if thousands else []
    if rest:
        words.append(_en_below_1000(rest))
    return " ".join(words)


def _capitalise(s: str) -> str:
    return s[:1].upper() + s[1:]


def _random_quantity(rng: random.Random) -> int:
    # Uniform digit count first, so 2-digit and 6-digit numbers are equally common
    # (a uniform draw over 2..999999 would be almost all 6-digit numbers).
    digits = rng.randint(1, 6)
    return rng.randint(max(2, 10 ** (digits - 1)), 10**digits - 1)


def _random_pair(rng: random.Random) -> tuple[str, str]:
    de_subj, de_verb, en_subj, en_verb = rng.choice(SUBJECTS_VERBS)
    n = _random_quantity(rng)
    de_noun, en_noun = rng.choice(NOUNS)
    de_obj, en_obj = [german_number(n)], [english_number(n)]
    if rng.random() < 0.5:
        de_adj, en_adj = rng.choice(ADJECTIVES)
        de_obj.append(de_adj)
        en_obj.append(en_adj)
    de_obj.append(de_noun)
    en_obj.append(en_noun)
    en_words = [en_subj, en_verb, *en_obj]
    if rng.random() < 0.5:
        de_words = [de_subj, de_verb, *de_obj]  # main clause: verb second
    else:
        de_matrix, en_matrix = rng.choice(MATRIX_CLAUSES)
        de_words = [de_matrix, de_subj, *de_obj, de_verb]  # subordinate clause: verb last
        en_words = [en_matrix, *en_words]
    return _capitalise(" ".join(de_words)) + ".", _capitalise(" ".join(en_words)) + "."


def generate_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """Return n (German, English) pairs with distinct German sides, determined by seed."""
    rng = random.Random(seed)
    seen: set[str] = set()
    pairs: list[tuple[str, str]] = []
    attempts = 0
    while len(pairs) < n:
        attempts += 1
        if attempts > 20 * n + 1000:  # the space is ~10^9 sentences; this only guards bugs
            raise RuntimeError(f"could not generate {n} distinct sentences")
        de, en = _random_pair(rng)
        if de not in seen:  # dedupe so splits cut from one list are disjoint
            seen.add(de)
            pairs.append((de, en))
    return pairs


def _atomic_write(path: Path, text: str) -> None:
    # Temp file in the same directory so os.replace is an atomic rename on one filesystem;
    # plain open() (not mkstemp) so the final file gets the usual umask permissions.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _is_up_to_date(out: Path, manifest: dict[str, object], sizes: dict[str, int]) -> bool:
    # Cheap check (small files) so a damaged or truncated corpus is rebuilt, not trusted.
    try:
        old = json.loads((out / "MANIFEST.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    files = [(out / f"{s}.{lang}", n) for s, n in sizes.items() for lang in LANGS]
    return old == manifest and all(
        p.is_file() and p.read_bytes().count(b"\n") == n for p, n in files
    )


def write_demo_corpus(
    out_dir: str | os.PathLike[str],
    n_train: int = 20000,
    n_valid: int = 500,
    n_test: int = 500,
    seed: int = 1,
) -> Path:
    """Write {train,valid,test}.{de,en} and MANIFEST.json into out_dir; return out_dir.

    Does nothing if MANIFEST.json already records the same parameters and the files match.
    """
    sizes = {"train": n_train, "valid": n_valid, "test": n_test}
    if any(v < 0 for v in sizes.values()):
        raise ValueError(f"split sizes must be >= 0, got {sizes}")
    out = Path(out_dir)
    manifest = {"generator_version": GENERATOR_VERSION, "seed": seed, "lines": sizes}
    if _is_up_to_date(out, manifest, sizes):
        return out
    out.mkdir(parents=True, exist_ok=True)
    # Drop the old manifest first: if we are interrupted, the next run must not trust it.
    (out / "MANIFEST.json").unlink(missing_ok=True)
    pairs = generate_pairs(n_train + n_valid + n_test, seed)
    start = 0
    for split in SPLITS:
        chunk = pairs[start : start + sizes[split]]
        start += sizes[split]
        for i, lang in enumerate(LANGS):
            _atomic_write(out / f"{split}.{lang}", "".join(p[i] + "\n" for p in chunk))
    _atomic_write(out / "MANIFEST.json", json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="Write the toy German->English demo corpus.")
    parser.add_argument("--out", required=True, help="output directory, e.g. data/demo")
    parser.add_argument("--train", type=int, default=20000, help="training sentence pairs")
    parser.add_argument("--valid", type=int, default=500, help="validation sentence pairs")
    parser.add_argument("--test", type=int, default=500, help="test sentence pairs")
    parser.add_argument("--seed", type=int, default=1, help="random seed")
    args = parser.parse_args()
    out = write_demo_corpus(args.out, args.train, args.valid, args.test, args.seed)
    counts = ", ".join(
        f"{out / s}.{{de,en}} ({n} lines)"
        for s, n in zip(SPLITS, (args.train, args.valid, args.test), strict=True)
    )
    print(f"demo corpus: {counts}")


if __name__ == "__main__":
    main()
