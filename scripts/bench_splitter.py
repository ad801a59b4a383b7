"""Sentence splitters side by side: how well each finds the sentences of paragraphs, and how fast,
printed as JSON. The candidates are multilingual splitters on the package index: sentencex (the
one nmt uses), pysbd and sentence-splitter; each that is installed is measured.

    python scripts/bench_splitter.py --multi30k ../shared/data/multi30k \\
        [--tatoeba ../shared/data/tatoeba-eng-fra] [--join 3]

Paragraphs: consecutive test sentences joined `--join` at a time with a space (Multi30k test2016
de and en, Tatoeba test en and fr). `paragraphs_exact` is the share of paragraphs split into
exactly their sentences; `boundaries_found` the share of the joins the splitter cut at;
`extra_cuts` the cuts it made elsewhere, per paragraph (some are real: a Multi30k line may hold
two sentences). `edge_cases` are hand-written lines (abbreviations, ordinals, decimals, quotes,
no final punctuation, CJK full stops) with their sentences. `us_per_paragraph`: the median of 3
passes over the paragraphs, one thread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

# (language, the sentences of a line): the line is them joined with a space
EDGE_CASES = [
    ("de", ["Dr. Müller kam am 1. Mai.", "Er blieb."]),
    ("de", ["Es kostet 3.50 Euro, z. B. im Laden.", "Gut."]),
    ("de", ["Er sagte: „Wir gehen.“", "Dann ging er"]),
    ("de", ["Wer kommt?", "Niemand!", "Schade."]),
    ("de", ["Ein Hund läuft über die Wiese"]),
    ("de", ["Das ist Nr. 5 der Liste.", "Sie ist lang."]),
    ("de", ["Um 10 Uhr usw. beginnt es.", "Dann Pause."]),
    ("en", ["Mr. Smith arrived at 5 p.m. on Monday.", "He left."]),
    ("en", ["It costs $3.50, e.g. at the shop.", "Fine."]),
    ("en", ['"Stop!" she said.', "He stopped."]),
    ("en", ["See www.example.com for more.", "Thanks"]),
    ("en", ["The U.S. team won.", "The U.K. lost."]),
    ("en", ["A dog runs...", "A cat sleeps."]),
    ("en", ["Version 2.0 is out.", "Get it."]),
    ("fr", ["M. Dupont est arrivé.", "Il est parti."]),
    ("fr", ["« Viens ! » dit-il.", "Elle vint."]),
    ("zh", ["我们去吧。", "他说好的！", "然后走了"]),
    ("ja", ["今日は晴れです。", "明日は雨でしょう。"]),
]


def candidates() -> dict[str, Callable[[str, str], list[str]]]:
    """Each installed splitter as split(language, text) -> sentences (stripped)."""
    found: dict[str, Callable[[str, str], list[str]]] = {}
    try:
        import sentencex

        found["sentencex"] = lambda lang, text: [
            s.strip() for s in sentencex.segment(lang, text) if s.strip()
        ]
    except ImportError:
        pass
    try:
        import pysbd

        segmenters: dict[str, object] = {}

        def pysbd_split(lang: str, text: str) -> list[str]:
            if lang not in segmenters:
                segmenters[lang] = pysbd.Segmenter(language=lang, clean=False)
            return [s.strip() for s in segmenters[lang].segment(text) if s.strip()]

        found["pysbd"] = pysbd_split
    except ImportError:
        pass
    try:
        from sentence_splitter import SentenceSplitter

        splitters: dict[str, object] = {}

        def moses_split(lang: str, text: str) -> list[str]:
            if lang not in splitters:
                splitters[lang] = SentenceSplitter(language=lang)
            return [s.strip() for s in splitters[lang].split(text) if s.strip()]

        found["sentence-splitter"] = moses_split
    except ImportError:
        pass
    return found


def _split_or_none(split, lang: str, text: str) -> list[str] | None:
    """The splitter's sentences, None where it does not take the language."""
    try:
        return split(lang, text)
    except Exception:  # noqa: BLE001 - a language the splitter lacks counts as wrong
        return None


def paragraphs(path: Path, join: int) -> list[list[str]]:
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    lines = [line for line in lines if line]
    return [lines[i : i + join] for i in range(0, len(lines) - join + 1, join)]


def score(split, lang: str, groups: list[list[str]]) -> dict:
    exact = found = joins = extra = 0
    for group in groups:
        got = split(lang, " ".join(group))
        exact += got == group
        # cut points as character offsets into the joined text (spaces dropped)
        want_cuts = set()
        offset = 0
        for sentence in group[:-1]:
            offset += len(sentence.replace(" ", ""))
            want_cuts.add(offset)
        got_cuts = set()
        offset = 0
        for sentence in got[:-1]:
            offset += len(sentence.replace(" ", ""))
            got_cuts.add(offset)
        joins += len(want_cuts)
        found += len(want_cuts & got_cuts)
        extra += len(got_cuts - want_cuts)
    start = []
    for _ in range(3):
        begin = time.perf_counter()
        for group in groups:
            split(lang, " ".join(group))
        start.append(time.perf_counter() - begin)
    return {
        "paragraphs": len(groups),
        "paragraphs_exact": round(exact / len(groups), 4),
        "boundaries_found": round(found / max(joins, 1), 4),
        "extra_cuts": round(extra / len(groups), 4),
        "us_per_paragraph": round(1e6 * statistics.median(start) / len(groups), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--multi30k", type=Path, required=True)
    parser.add_argument("--tatoeba", type=Path)
    parser.add_argument("--join", type=int, default=3)
    args = parser.parse_args()
    sets = {
        ("de", "multi30k test2016 de"): args.multi30k / "test_2016_flickr.de",
        ("en", "multi30k test2016 en"): args.multi30k / "test_2016_flickr.en",
    }
    if args.tatoeba:
        sets[("en", "tatoeba test en")] = args.tatoeba / "test.en"
        sets[("fr", "tatoeba test fr")] = args.tatoeba / "test.fr"
    report: dict = {"join": args.join, "splitters": {}}
    for name, split in candidates().items():
        rows = {label: score(split, lang, paragraphs(path, args.join))
                for (lang, label), path in sets.items() if path.is_file()}  # fmt: skip
        joiner = {"zh": "", "ja": ""}
        lines = [(lang, joiner.get(lang, " ").join(want), want) for lang, want in EDGE_CASES]
        edge = [_split_or_none(split, lang, text) == want for lang, text, want in lines]
        rows["edge_cases"] = {
            "right": sum(edge),
            "of": len(edge),
            "wrong": [lines[i][1] for i, ok in enumerate(edge) if not ok],
        }
        report["splitters"][name] = rows
    print(json.dumps(report, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
