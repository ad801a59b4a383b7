"""Inline codes put back: a block's codes (`nmt.documents.inline`) placed around the words of its
translation by the word alignment (`place`).

The translation's words are aligned to the source's
(`nmt.documents.alignment`); a pair wraps the target words aligned to the words it wrapped (the
span from the first to the last), a point goes after the target words of the source word before
it (or before those of the word after it); a pair around no words (a link whose text is a
URL) goes as a point does, with what it holds. Pairs nest as in the source, whatever the alignment:
a pair is kept within its parent's span and after its earlier sibling, so the output is
well-formed and every code is in it exactly once; a pair whose words are not aligned is put,
empty, where a point would be. A translation that equals its source (an untranslated line, or
an identity translator) gets every code back where it was, byte for byte.

Whatever a block holds (a server reads it from anyone), its codes are put back in n log n
time: a code finds its words by bisection, and a pair its target words in a merge-sort tree.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from functools import cached_property

from nmt.documents.inline import Block, apply_inserts, escape

# a pair around fewer source words than this finds its targets by reading them (`_Where.within`)
SCAN_WORDS = 64
# punctuation that ends a word ("hier,"): a close tag or a point goes before it
_TRAILING = ".,;:!?…)]}\"'»”’"


def place(
    block: Block,
    translation: str,
    pairs: list[tuple[int, int]],
    breaks: tuple[Sequence[int], Sequence[int]] = ((), ()),
) -> str:
    """The translation with the block's codes put back (see the module's notes); `pairs`:
    (source word, target word) of the block's text and `translation`. `breaks`: the character
    offsets of the block's text and of the translation where a word ends though no whitespace
    does (a sentence glued to the one before it, "Blumen.</h1><p>Wir": the sentences' words,
    which `pairs` count, are "Blumen." and "Wir")."""
    if not block.codes:
        return escape(translation) if block.markup else translation
    if translation == block.text:
        return block.render()
    source_words = _word_spans(block.text, breaks[0])
    target_words = _word_spans(translation, breaks[1])
    if not target_words:  # nothing to wrap: every code at the start, in order
        return "".join(c.raw for c in block.codes) + (escape(translation) if block.markup
                                                      else translation)  # fmt: skip
    aligned: dict[int, list[int]] = {}
    for s, t in pairs:
        if s < len(source_words) and t < len(target_words):
            aligned.setdefault(s, []).append(t)
    where = _Where(source_words, aligned, len(target_words))
    spans = _pair_spans(block, where)
    cuts = _trailing_starts(translation, target_words)
    inserts: list[tuple[int, int, str]] = []  # (character offset in translation, order, text)
    inside = -1  # the last code of a wordless pair under way: its codes go with it
    for k, code in enumerate(block.codes):
        if k <= inside:
            continue
        if code.kind == "point" or (code.kind == "open" and spans[k][0] > spans[k][1]):
            # a pair around no words (a link whose text is a URL) or none aligned: one unit with
            # the codes it holds (and its whitespace, not its words), placed as a point is
            raw = code.raw
            if code.kind == "open":
                inside = code.pair
                held = block.text[block.at[k] : block.at[inside]]
                held = "" if held.strip() else held  # words not aligned are not written twice
                codes = [(block.at[j] - block.at[k], j, block.codes[j].raw)
                         for j in range(k, inside + 1)]  # fmt: skip
                raw = apply_inserts(held, codes, block.markup)
            word, after = where.point(block.at[k])
            if after:
                # before the word's trailing punctuation when the source had the point before
                # its own ("Nummer 1." -> "number 1.", not "number. 1")
                offset = _before_trailing(cuts[word], target_words[word][1], block, k)
                text = raw if _glued_left(block, k) else " " + raw
            else:
                offset, text = target_words[word][0], raw + " "
                if _glued_right(block, k):
                    text = raw
            inserts.append((offset, 1, text))
        elif code.kind == "open":
            first, last, depth = spans[k]
            inserts.append((target_words[first][0], 2 + depth, code.raw))
            end = _before_trailing(cuts[last], target_words[last][1], block, code.pair)
            inserts.append((end, -depth, block.codes[code.pair].raw))
    return apply_inserts(translation, inserts, block.markup)


class _Where:
    """Target positions of source words by the alignment, each found by bisection (a block of
    30,000 codes and words asks for them 30,000 times)."""

    def __init__(self, words: list[tuple[int, int]], aligned: dict[int, list[int]], n: int):
        self.starts = [start for start, _ in words]
        self.ends = [end for _, end in words]
        self.aligned, self.n = aligned, n
        self.least = {s: min(targets) for s, targets in aligned.items()}
        self.most = {s: max(targets) for s, targets in aligned.items()}
        # the nearest aligned source word at or before each word, and at or after it (-1: none)
        self.back, self.ahead = [-1] * len(words), [-1] * len(words)
        last = -1
        for s in range(len(words)):
            last = s if s in aligned else last
            self.back[s] = last
        last = -1
        for s in reversed(range(len(words))):
            last = s if s in aligned else last
            self.ahead[s] = last

    @cached_property
    def targets(self) -> _Targets:
        return _Targets(self.aligned, len(self.starts))

    def within(self, first: int, last: int, low: int, high: int) -> tuple[int, int] | None:
        """The least and the greatest target in [low, high] of source words first..last; None
        if there is none. A pair around a few words reads them (a sentence's tag: building the
        tree would cost more); around more, the tree answers (`_Targets`)."""
        if last - first < SCAN_WORDS:
            found = [t for s in range(first, last + 1) for t in self.aligned.get(s, ())
                     if low <= t <= high]  # fmt: skip
            return (min(found), max(found)) if found else None
        return self.targets.within(first, last, low, high)

    def point(self, offset: int) -> tuple[int, bool]:
        """(target word, after it) for a point at character `offset` of the source."""
        before = bisect_right(self.ends, offset)  # the words that end by the offset
        after = bisect_left(self.starts, offset)  # the first word that starts at or after it
        if before and self.back[before - 1] >= 0:
            return self.most[self.back[before - 1]], True
        if after < len(self.starts) and self.ahead[after] >= 0:
            return self.least[self.ahead[after]], False
        return (self.n - 1, True) if before else (0, False)

    def covered(self, start: int, end: int) -> tuple[int, int] | None:
        """The source words (first, last) that overlap characters [start, end); None if none."""
        first, last = bisect_right(self.ends, start), bisect_left(self.starts, end) - 1
        return (first, last) if first <= last else None


class _Targets:
    """The target words aligned to a run of source words, within a range: a merge-sort tree (each
    node the sorted targets of the source words below it), so that a pair asks O(log² words)
    steps, not one for every word it wraps (8,000 nested pairs around 20,000 words)."""

    def __init__(self, aligned: dict[int, list[int]], n: int):
        self.size = 1
        while self.size < n:
            self.size *= 2
        self.nodes: list[list[int]] = [[] for _ in range(2 * self.size)]
        for s, targets in aligned.items():
            self.nodes[self.size + s] = sorted(targets)
        for node in range(self.size - 1, 0, -1):
            self.nodes[node] = sorted(self.nodes[2 * node] + self.nodes[2 * node + 1])

    def within(self, first: int, last: int, low: int, high: int) -> tuple[int, int] | None:
        """The least and the greatest target in [low, high] of source words first..last; None
        if there is none."""
        least, most = None, None
        left, right = first + self.size, last + self.size + 1
        while left < right:  # the nodes that together hold words first..last
            if left & 1:
                least, most = self._bounds(self.nodes[left], low, high, least, most)
                left += 1
            if right & 1:
                right -= 1
                least, most = self._bounds(self.nodes[right], low, high, least, most)
            left, right = left // 2, right // 2
        return None if least is None else (least, most)

    @staticmethod
    def _bounds(targets: list[int], low: int, high: int, least, most):
        k = bisect_left(targets, low)
        if k < len(targets) and targets[k] <= high:
            least = targets[k] if least is None else min(least, targets[k])
            top = targets[bisect_right(targets, high) - 1]
            most = top if most is None else max(most, top)
        return least, most


def _pair_spans(block: Block, where: _Where) -> dict[int, tuple[int, int, int]]:
    """For each open code: (first, last) target word of its pair, within its parent's span and
    after its earlier siblings (first > last: empty, placed at `first`), and its depth."""
    spans: dict[int, tuple[int, int, int]] = {}
    stack: list[tuple[int, int, int]] = [(-1, 0, where.n - 1)]  # (code, first, last) of parents
    floor = {-1: 0}  # the next free target word within each open parent
    for k, code in enumerate(block.codes):
        if code.kind == "open":
            parent, low, high = stack[-1]
            start = floor[parent]
            words = where.covered(block.at[k], block.at[code.pair])
            targets = where.within(*words, low, high) if words else None
            if targets:
                first, last = max(targets[0], start), min(targets[1], high)
            else:
                first, last = start, start - 1
            if first > last:
                first, last = min(start, high + 1), min(start, high + 1) - 1
            spans[k] = (first, last, len(stack) - 1)
            floor[parent] = last + 1 if last >= first else start
            floor[k] = first
            stack.append((k, first, last))
        elif code.kind == "close":
            stack.pop()
    return spans


def _trailing_starts(text: str, words: list[tuple[int, int]]) -> list[int]:
    """Where each word's trailing punctuation starts ("hier," -> before the comma); its end when
    it has none or is nothing but punctuation. A pass over the text, once for all codes."""
    cuts = []
    for start, end in words:
        kept = len(text[start:end].rstrip(_TRAILING))
        cuts.append(start + kept if kept else end)
    return cuts


def _before_trailing(cut: int, end: int, block: Block, code: int) -> int:
    """Where a close tag or a point goes after a target word: at its `end`, or before its
    trailing punctuation (at `cut`) when the source had the code before punctuation
    ("<b>here</b>," -> "<b>hier</b>,")."""
    offset = block.at[code]
    if offset < len(block.text) and block.text[offset] in _TRAILING:
        return cut
    return end


def _glued_left(block: Block, k: int) -> bool:
    offset = block.at[k]
    return offset > 0 and not block.text[offset - 1].isspace()


def _glued_right(block: Block, k: int) -> bool:
    offset = block.at[k]
    return offset < len(block.text) and not block.text[offset].isspace()


def _word_spans(text: str, breaks: Sequence[int] = ()) -> list[tuple[int, int]]:
    """(start, end) of each whitespace word of `text`, cut at each of `breaks` inside one."""
    spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    if not breaks:
        return spans
    cuts, out = sorted(breaks), []
    for start, end in spans:
        edges = [start, *cuts[bisect_right(cuts, start) : bisect_left(cuts, end)], end]
        out += zip(edges, edges[1:])
    return out
