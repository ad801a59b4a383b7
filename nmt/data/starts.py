"""The words that start sentences of a model's training text, and almost never occur inside them:
where such a word follows another word mid-line, a sentence without final punctuation ended
before it (`nmt.documents.sentences`). Case counts: "Der" starts German sentences, "der" is
inside them.

Learned from the training sources once per run, before the first update (seconds; Multi30k's
German: "Ein" 13,893 times first and 8 times inside, "Die" 334 and 8, "Mann" 74 and 7,359), and
kept in every checkpoint as STARTS_FILE, one word a line, most frequent first.

Beside them, how often each word starts a training sentence, ends one and occurs at all
(`SentenceEdges`, kept as EDGES_FILE): weaker evidence than a start word, read only where the
model's attention says it skipped part of a sentence (`nmt.documents.recovery`): "treffen" ends
7 of the 17 Multi30k sentences it is in and "Kinder" starts 135 of 776, "Mann" starts 77 of
7,761 and "der" ends none.
"""

from __future__ import annotations

import collections
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

STARTS_FILE = "sentence_starts.txt"
EDGES_FILE = "sentence_edges.json"
MOST_EDGES = 100_000  # words kept in EDGES_FILE, those most often first or last
CLOSING = ".!?…,;:\"'»”’)]"  # taken off a word before it is counted: "Hintergrund." is one
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
    _write(path, "".join(f"{w}\n" for w in words))


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)  # a reader sees the whole file or none


@dataclass(frozen=True)
class SentenceEdges:
    """For each word (closing punctuation off): how many training sentences it starts, how many
    it ends, and how many times it occurs. Empty for a model without them (an import, a
    checkpoint from before them): then no share is known and nothing reads them."""

    counts: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.counts)

    def start_share(self, word: str) -> float:
        """The share of `word`'s occurrences that start a sentence (0 for a word not kept); one
        occurrence more in the denominator, so that a word seen once is not a certainty."""
        first, _, total = self.counts.get(word.rstrip(CLOSING), (0, 0, 0))
        return first / (total + 1)

    def end_share(self, word: str) -> float:
        """The share of `word`'s occurrences that end a sentence, as `start_share`'s."""
        _, last, total = self.counts.get(word.rstrip(CLOSING), (0, 0, 0))
        return last / (total + 1)


def learn_edges(sources: Iterable[str], most: int = MOST_EDGES) -> SentenceEdges:
    """The counts of the `most` words that start or end the most of `sources`."""
    first, last, total = collections.Counter(), collections.Counter(), collections.Counter()
    for line in sources:
        words = [w.rstrip(CLOSING) for w in line.split()]
        if words and _TAG.match(words[0]):
            words = words[1:]
        words = [w for w in words if w]
        if words:
            first[words[0]] += 1
            last[words[-1]] += 1
            total.update(words)
    edges = (first + last).most_common(most)
    return SentenceEdges({w: (first[w], last[w], total[w]) for w, _ in edges})


def write_sentence_files(sources: list[str], directory: Path) -> None:
    """The start words (STARTS_FILE) and sentence edges (EDGES_FILE) of `sources` (sentences, one
    a string, in the language a model reads) written into `directory`: a run's, or an imported
    checkpoint's (nmt-import sentence_text=...)."""
    write_starts(learn_starts(sources), Path(directory) / STARTS_FILE)
    write_edges(learn_edges(sources), Path(directory) / EDGES_FILE)


def write_edges(edges: SentenceEdges, path: Path) -> None:
    _write(path, json.dumps(edges.counts, ensure_ascii=False, separators=(",", ":")))


def read_edges(directory: Path) -> SentenceEdges:
    """The sentence edges kept in a run or checkpoint directory; empty where it has none."""
    path = Path(directory) / EDGES_FILE
    if not path.is_file():
        return SentenceEdges()
    counts = json.loads(path.read_text(encoding="utf-8"))
    return SentenceEdges({w: tuple(c) for w, c in counts.items()})


def read_starts(directory: Path) -> frozenset[str]:
    """The sentence starts kept in a run or checkpoint directory; none where it has no file (a
    checkpoint from before them, an import)."""
    path = Path(directory) / STARTS_FILE
    if not path.is_file():
        return frozenset()
    return frozenset(path.read_text(encoding="utf-8").split())
