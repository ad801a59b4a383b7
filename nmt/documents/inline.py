"""Inline codes: what a block of text holds that is not text to translate, lifted out before the
search and put back around the words of the translation it belongs to.

Localisation tools call them inline codes (XLIFF's <g> pairs and <x/> points): here a `Code` is
an opening or closing tag (a pair: `<b>` ... `</b>`, `<a href="...">` ... `</a>`) or a point
(a self-closing `<br/>`, `<x id="1"/>`, an unpaired tag, a comment, and every protected span:
a URL, an e-mail address, a number, `{name}`, `%s`; `nmt.documents.protect`). Its bytes are
kept as they were, attributes and all. A `Block` is the text a model reads (codes out, HTML
entities decoded) and each code's place in it.

Putting them back (`place`): the translation's words are aligned to the source's
(`nmt.documents.alignment`); a pair wraps the target words aligned to the words it wrapped (the
span from the first to the last), a point goes after the target words of the source word before
it (or before those of the word after it); a pair around no words (a link whose text is a
URL) goes as a point does, with what it holds. Pairs nest as in the source, whatever the alignment:
a pair is kept within its parent's span and after its earlier sibling, so the output is
well-formed and every code is in it exactly once; a pair whose words are not aligned is put,
empty, where a point would be. A translation that equals its source (an untranslated line, or
an identity translator) gets every code back where it was, byte for byte.

A tag is `<name`, its attributes and `>` (or `/>`); an attribute's name and an unquoted value
hold no `<` and no quote (a quoted value may hold `<`, `>` and the other quote), so "<a b<c>"
is the text "<a b" and the tag "<c>". A comment or a CDATA section runs to its first end
(`-->`, `]]>`); one that never ends is text. Whatever a block holds (a server reads it from
anyone), it is read and its codes put back in linear time, or n log n: a `<` that starts no tag
ends the reading of any tag before it, where a comment ends is looked up (not scanned for from
every `<!--`), a close finds its open by its name, and a code its words by bisection.
"""

from __future__ import annotations

import html
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property

# a tag as HTML and XML write it (quoted attribute values may hold ">" and "<"). An attribute's
# name and unquoted value hold no "<" and no quote, so that a match tried from a "<" stops at the
# next "<" outside quotes: any character is read by at most three tries (one outside quotes, one
# inside each kind), not by one from every "<" before it ("<a " * 33333 took 92 s)
TAG = re.compile(
    r"<(/?)([A-Za-z][\w:.-]*)"
    r"""((?:\s+[^\s=>/<"']+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'<>]+))?)*)\s*(/?)>"""
)
# the other codes, each (what starts it, a pattern of what ends it: the first one after): a
# comment, a CDATA section
Spans = tuple[tuple[re.Pattern, str], ...]
SPANS: Spans = ((re.compile("<!--"), "-->"), (re.compile(r"<!\[CDATA\["), r"\]\]>"))
# HTML's elements that never close (as <br>, not only <br/>)
VOID = {
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
    "wbr",
}  # fmt: skip
# points that part the words on either side, though no space does
BREAKS = {"br", "hr"}
# punctuation that ends a word ("hier,"): a close tag or a point goes before it
_TRAILING = ".,;:!?…)]}\"'»”’"


@dataclass(frozen=True)
class Code:
    raw: str  # its bytes in the source, put back as they were
    kind: str  # "open", "close" or "point"
    pair: int = -1  # the index of its partner among the block's codes (a pair's), else -1


@dataclass
class Block:
    """A block's text to translate and its codes: codes[k] sits at character at[k] of text
    (non-decreasing: in the source's order). `markup`: the text's characters are escaped when
    written back (HTML and XML: `&` is `&amp;`)."""

    text: str
    codes: list[Code] = field(default_factory=list)
    at: list[int] = field(default_factory=list)
    markup: bool = False
    source: str = ""  # the block as read, for a translation that changes nothing

    def render(self) -> str:
        """The block as read: its text with its codes where they were."""
        inserts = [(at, k, code.raw) for k, (at, code) in enumerate(zip(self.at, self.codes))]
        return self.source or _apply(self.text, inserts, self.markup)


def lift_markup(raw: str, xml: bool = False) -> Block:
    """A block of inline HTML (or `xml`) as text and codes: tags, comments and CDATA lifted out,
    entities decoded. Tags pair up by name (a close without its open, or an open never closed,
    is a point); self-closing tags are points, and in HTML its void elements (<br>, <img>)."""
    void = set() if xml else VOID
    text, codes, at, opened = [], [], [], Opened()
    length, end = 0, 0
    for start, stop, tag in find_codes(raw):
        chunk = html.unescape(raw[end:start])
        text.append(chunk)
        length += len(chunk)
        end = stop
        closing, name, _, self_closing = tag.groups() if tag else ("", "", "", "")
        name = name.lower()
        if not name or self_closing or (name in void and not closing):
            codes.append(Code(raw[start:stop], "point"))
            glued = text and text[-1][-1:].strip() and raw[stop : stop + 1].strip()
            if name in BREAKS and glued:  # "eins<br/>zwei" is two words, not "einszwei"
                at.append(length)
                text.append(" ")
                length += 1
                continue
        elif closing:
            closed = opened.close(name)
            if closed is None:
                codes.append(Code(raw[start:stop], "point"))
            else:
                partner, inside = closed
                for k in inside:  # the opens left inside it (never closed) become points
                    codes[k] = Code(codes[k].raw, "point")
                codes[partner] = Code(codes[partner].raw, "open", len(codes))
                codes.append(Code(raw[start:stop], "close", partner))
        else:
            opened.push(len(codes), name)
            codes.append(Code(raw[start:stop], "open"))
        at.append(length)
    chunk = html.unescape(raw[end:])
    text.append(chunk)
    for k in opened:  # never closed
        codes[k] = Code(codes[k].raw, "point")
    return Block("".join(text), codes, at, markup=True, source=raw)


def find_codes(raw: str, spans: Spans = SPANS) -> Iterator[tuple[int, int, re.Match | None]]:
    """Each code of `raw` in order, as (start, end, the tag's match): a tag, or (match None) a
    span of `spans` (a comment, a CDATA section)."""
    marks = Marks(raw)
    start = raw.find("<")
    while start >= 0:
        found = code_at(raw, start, marks, spans)
        if found is None:
            start = raw.find("<", start + 1)
            continue
        end, tag = found
        yield start, end, tag
        start = raw.find("<", end)


def code_at(
    raw: str, start: int, marks: Marks, spans: Spans = SPANS
) -> tuple[int, re.Match | None] | None:
    """The code that starts at `start` of `raw`: (its end, the tag's match, or None for a span
    of `spans`); None when none does (a "<" in the text, a comment that never ends)."""
    for opener, closer in spans:
        head = opener.match(raw, start)
        if head:
            found = marks.next(closer, head.end())
            return (found[1], None) if found else None
    tag = TAG.match(raw, start)
    return (tag.end(), tag) if tag else None


class Marks:
    """Where patterns match in a text (a fixed string or a character class, whose matches do not
    overlap): each pattern's places found in one pass when first asked for, then the next one
    after any place by bisection. A pattern that scans for an end (`<!--.*?-->`) scans from every
    start to the text's end when there is none; this finds it once."""

    def __init__(self, text: str):
        self.text = text
        self.found: dict[str, tuple[list[int], list[int]]] = {}  # pattern: (starts, ends)

    def next(self, pattern: str, start: int) -> tuple[int, int] | None:
        """(start, end) of the first match of `pattern` at or after `start`; None if none."""
        if pattern not in self.found:
            matches = list(re.finditer(pattern, self.text))
            self.found[pattern] = ([m.start() for m in matches], [m.end() for m in matches])
        starts, ends = self.found[pattern]
        k = bisect_left(starts, start)
        return (starts[k], ends[k]) if k < len(starts) else None


class Opened:
    """Open codes not yet closed, in order, and by name: a close finds its open (the innermost of
    its name) without a pass over all the others."""

    def __init__(self):
        self.order: list[int] = []  # code indices, innermost last
        self.by_name: dict[str, list[int]] = {}
        self.names: dict[int, str] = {}

    def push(self, k: int, name: str) -> None:
        self.order.append(k)
        self.by_name.setdefault(name, []).append(k)
        self.names[k] = name

    def __contains__(self, name: str) -> bool:
        return bool(self.by_name.get(name))

    def __iter__(self) -> Iterator[int]:
        return iter(self.order)

    def close(self, name: str) -> tuple[int, list[int]] | None:
        """The innermost open `name` and the opens inside it (never closed, in order), all taken
        off; None when no `name` is open."""
        if name not in self:
            return None
        partner, inside = self.by_name[name][-1], []
        while self.order[-1] != partner:
            inside.append(self._pop())
        self._pop()
        return partner, inside[::-1]

    def _pop(self) -> int:
        k = self.order.pop()
        self.by_name[self.names.pop(k)].pop()
        return k


def plain(text: str) -> Block:
    """A block of plain text: no codes (protected spans are added by `nmt.documents.protect`)."""
    return Block(text, source=text)


def place(block: Block, translation: str, pairs: list[tuple[int, int]]) -> str:
    """The translation with the block's codes put back (see the module's notes); `pairs`:
    (source word, target word) of the block's text and `translation`."""
    if not block.codes:
        return _escape(translation) if block.markup else translation
    if translation == block.text:
        return block.render()
    source_words = _word_spans(block.text)
    target_words = _word_spans(translation)
    if not target_words:  # nothing to wrap: every code at the start, in order
        return "".join(c.raw for c in block.codes) + (_escape(translation) if block.markup
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
                raw = _apply(held, codes, block.markup)
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
    return _apply(translation, inserts, block.markup)


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
            targets = where.targets.within(*words, low, high) if words else None
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


def _word_spans(text: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


def _apply(text: str, inserts: list[tuple[int, int, str]], markup: bool) -> str:
    """`text` (escaped for markup) with each insert at its offset; at one offset, by order:
    closes (innermost first), points, then opens (outermost first)."""
    out, done = [], 0
    for offset, _, piece in sorted(inserts, key=lambda i: (i[0], i[1])):
        chunk = text[done:offset]
        out += [_escape(chunk) if markup else chunk, piece]
        done = offset
    rest = text[done:]
    out.append(_escape(rest) if markup else rest)
    return "".join(out)


def _escape(text: str) -> str:
    return html.escape(text, quote=False)
