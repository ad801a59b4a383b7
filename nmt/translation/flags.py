"""Flags for translations that look degenerate: a hallucination's or a broken search's marks, each
with its reason.

    flagger = Flagger(low=0.45, high=2.3)
    flagger.check("Ein Hund läuft.", "a dog a dog a dog a dog", src_pieces=5, tgt_pieces=9)
    # ["repeats"]

- "repeats": a run of the same word n-gram (n <= 4) three times in a row, or a 3-gram or
  longer four times anywhere (OPUS-MT #89's "a man a man a man");
- "copies the source": at least COPY_SHARE of the translation's words of three letters or more
  (at least COPY_WORDS of them) are the source's: an untranslated line;
- "too short" / "too long": its length in pieces over the source's outside [low, high]: the
  0.5th and 99.5th percentiles of the references' ratio on the validation split, widened by
  MARGIN (`nmt.translation.confidence.fit`): a truncated translation, or one that runs on.

Thresholds were set so that clean held-out translations are rarely flagged and constructed
degenerate ones are (docs/confidence.md, `scripts/bench_confidence.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

COPY_SHARE = 0.7
MARGIN = 1.15  # the bounds, low / MARGIN and high * MARGIN: a reference's extremes are not flags
COPY_WORDS = 3
_WORD = re.compile(r"[^\W\d_]{3,}")


@dataclass
class Flagger:
    low: float = 0.3  # target pieces / source pieces below this: "too short" (unfitted: loose)
    high: float = 3.5  # above this: "too long"

    @classmethod
    def fitted(cls, ratios: list[float]) -> Flagger:
        """Bounds from the references' length ratios (their 0.5th and 99.5th percentiles)."""
        if len(ratios) < 20:
            return cls()
        ordered = sorted(ratios)
        at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
        return cls(round(at(0.005) / MARGIN, 4), round(at(0.995) * MARGIN, 4))

    def check(self, source: str, text: str, src_pieces: int, tgt_pieces: int) -> list[str]:
        """The reasons `text` looks degenerate as a translation of `source` ([] for none);
        lengths in pieces, the end of sentence counted on both sides."""
        flags = []
        if repeats(text):
            flags.append("repeats")
        if copies(source, text):
            flags.append("copies the source")
        if src_pieces > 2 and text.strip():
            ratio = tgt_pieces / src_pieces
            if ratio < self.low:
                flags.append("too short")
            elif ratio > self.high:
                flags.append("too long")
        elif src_pieces > 2:
            flags.append("too short")
        return flags


def repeats(text: str) -> bool:
    words = text.lower().split()
    for n in range(1, 5):
        for start in range(len(words) - 3 * n + 1):
            gram = words[start : start + n]
            if words[start + n : start + 2 * n] == gram == words[start + 2 * n : start + 3 * n]:
                return True
    for n in range(3, 7):
        counts: dict[tuple[str, ...], int] = {}
        for start in range(len(words) - n + 1):
            gram = tuple(words[start : start + n])
            counts[gram] = counts.get(gram, 0) + 1
            if counts[gram] >= 4:
                return True
    return False


def copies(source: str, text: str) -> bool:
    words = [w.lower() for w in _WORD.findall(text)]
    if len(words) < COPY_WORDS:
        return False
    seen = {w.lower() for w in _WORD.findall(source)}
    return sum(w in seen for w in words) >= COPY_SHARE * len(words)
