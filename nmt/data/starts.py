"""The words that start sentences of a model's training text, and almost never occur inside them:
where such a word follows another word mid-line, a sentence without final punctuation ended
before it (`nmt.documents.sentences`). Case counts: "Der" starts German sentences, "der" is
inside them.

Learned from the training sources once per run, before the first update (seconds; Multi30k's
German: "Ein" 13,893 times first and 8 times inside, "Die" 334 and 8, "Mann" 74 and 7,359), and
kept in every checkpoint as STARTS_FILE, one word a line, most frequent first.
"""

from __future__ import annotations

import collections
import os
import re
from collections.abc import Iterable
from pathlib import Path

STARTS_FILE = "sentence_starts.txt"
LEAST_STARTS = 10  # sentences a word must start
INSIDE_SHARE = 0.05  # times it may occur inside sentences, per time it starts one
_TAG = re.compile(r"^>>\S+<<$")  # a target tag before a multilingual model's source


def learn_starts(
    sources: Iterable[str], least: int = LEAST_STARTS, share: float = INSIDE_SHARE
) -> list[str]:
    """The words that begin at least `least` of `sources` and occur inside them at most `share`
    times as often, most frequent first."""
    first, inside = collections.Counter(), collections.Counter()
    for line in sources:
        words = line.split()
        if words and _TAG.match(words[0]):
            words = words[1:]
        if words:
            first[words[0]] += 1
            inside.update(words[1:])
    return [w for w, n in first.most_common() if n >= least and inside[w] <= share * n]


def write_starts(words: list[str], path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text("".join(f"{w}\n" for w in words), encoding="utf-8")
    os.replace(tmp, path)  # a reader sees the whole file or none


def read_starts(directory: Path) -> frozenset[str]:
    """The sentence starts kept in a run or checkpoint directory; none where it has no file (a
    checkpoint from before them, an import)."""
    path = Path(directory) / STARTS_FILE
    if not path.is_file():
        return frozenset()
    return frozenset(path.read_text(encoding="utf-8").split())
