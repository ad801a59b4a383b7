"""How much single-reference BLEU a corpus allows when a source sentence repeats with different
references: one output per distinct source can match only one of them. Prints JSON.

    python scripts/reference_ceiling.py ../shared/data/tatoeba-eng-fra test en fr

The ceiling is the corpus BLEU of giving every copy of a source its first reference as output
(sacreBLEU, 13a, cased), an upper bound in practice for any system that translates a sentence
the same way each time it sees it.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import sacrebleu

from nmt.data.splits import read_lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("split", help="file stem: test for test.en + test.fr")
    parser.add_argument("src", help="source language suffix")
    parser.add_argument("tgt", help="target language suffix")
    args = parser.parse_args()
    # read and cleaned as nmt-evaluate reads a local split's references
    sources, references = (
        read_lines(args.directory / f"{args.split}.{lang}") for lang in (args.src, args.tgt)
    )
    by_source: dict[str, list[str]] = defaultdict(list)
    for source, reference in zip(sources, references, strict=True):
        by_source[source].append(reference)
    oracle = [by_source[source][0] for source in sources]
    bleu = sacrebleu.BLEU()
    score = bleu.corpus_score(oracle, [references])
    print(json.dumps({
        "pairs": len(sources),
        "distinct_sources": len(by_source),
        "pairs_whose_source_repeats": sum(len(r) for r in by_source.values() if len(r) > 1),
        "ceiling_bleu": round(score.score, 2),
        "signature": str(bleu.get_signature()),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
