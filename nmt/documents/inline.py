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
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

# a tag as HTML and XML write it (quoted attribute values may hold ">"), a comment, a CDATA section
TAG = re.compile(
    r"<!--.*?-->|<!\[CDATA\[.*?\]\]>|<(/?)([A-Za-z][\w:.-]*)"
    r"""((?:\s+[^\s=>/]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'>]+))?)*)\s*(/?)>""",
    re.DOTALL,
)
# HTML's elements that never close (as <br>, not only <br/>)
VOID = {
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
    "wbr",
}  # fmt: skip
# points that part the words on either side, though no space does
BREAKS = {"br", "hr"}
_TRAILING = re.compile(r"[.,;:!?…)\]}\"'»”’]+$")


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
    text, codes, at, opened = [], [], [], []  # opened: indices of open codes, by name
    length, end = 0, 0
    for match in TAG.finditer(raw):
        chunk = html.unescape(raw[end : match.start()])
        text.append(chunk)
        length += len(chunk)
        end = match.end()
        closing, name, _, self_closing = match.groups()
        name = (name or "").lower()
        if not name or self_closing or (name in void and not closing):
            codes.append(Code(match.group(), "point"))
            glued = text and text[-1][-1:].strip() and raw[match.end() : match.end() + 1].strip()
            if name in BREAKS and glued:  # "eins<br/>zwei" is two words, not "einszwei"
                at.append(length)
                text.append(" ")
                length += 1
                continue
        elif closing:
            partner = _partner(codes, opened, name)
            if partner is None:
                codes.append(Code(match.group(), "point"))
            else:
                # the opens left inside it (never closed) become points
                for k in opened[opened.index(partner) + 1 :]:
                    codes[k] = Code(codes[k].raw, "point")
                del opened[opened.index(partner) :]
                codes[partner] = Code(codes[partner].raw, "open", len(codes))
                codes.append(Code(match.group(), "close", partner))
        else:
            opened.append(len(codes))
            codes.append(Code(match.group(), "open"))
        at.append(length)
    chunk = html.unescape(raw[end:])
    text.append(chunk)
    for k in opened:  # never closed
        codes[k] = Code(codes[k].raw, "point")
    return Block("".join(text), codes, at, markup=True, source=raw)


def _partner(codes: list[Code], opened: list[int], name: str) -> int | None:
    for k in reversed(opened):
        if _name(codes[k].raw) == name:
            return k
    return None


def _name(raw: str) -> str:
    match = TAG.match(raw)
    return (match.group(2) or "").lower() if match else ""


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
                offset = _before_trailing(translation, target_words[word], block, k)
                text = raw if _glued_left(block, k) else " " + raw
            else:
                offset, text = target_words[word][0], raw + " "
                if _glued_right(block, k):
                    text = raw
            inserts.append((offset, 1, text))
        elif code.kind == "open":
            first, last, depth = spans[k]
            inserts.append((target_words[first][0], 2 + depth, code.raw))
            end = _before_trailing(translation, target_words[last], block, code.pair)
            inserts.append((end, -depth, block.codes[code.pair].raw))
    return _apply(translation, inserts, block.markup)


class _Where:
    """Target positions of source words by the alignment."""

    def __init__(self, words: list[tuple[int, int]], aligned: dict[int, list[int]], n: int):
        self.words, self.aligned, self.n = words, aligned, n

    def targets(self, first: int, last: int) -> list[int]:
        return [t for s in range(first, last + 1) for t in self.aligned.get(s, [])]

    def point(self, offset: int) -> tuple[int, bool]:
        """(target word, after it) for a point at character `offset` of the source."""
        before = [i for i, (_, end) in enumerate(self.words) if end <= offset]
        after = [i for i, (start, _) in enumerate(self.words) if start >= offset]
        for s in reversed(before):
            if self.aligned.get(s):
                return max(self.aligned[s]), True
        for s in after:
            if self.aligned.get(s):
                return min(self.aligned[s]), False
        return (self.n - 1, True) if before else (0, False)


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
            words = _covered(block, k, where)
            targets = [t for t in where.targets(*words) if low <= t <= high] if words else []
            if targets:
                first, last = max(min(targets), start), min(max(targets), high)
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


def _covered(block: Block, k: int, where: _Where) -> tuple[int, int] | None:
    """The source words (first, last) inside the pair opened by code k; None if none."""
    start, end = block.at[k], block.at[block.codes[k].pair]
    inside = [i for i, (s, e) in enumerate(where.words) if s < end and e > start]
    return (inside[0], inside[-1]) if inside else None


def _before_trailing(text: str, word: tuple[int, int], block: Block, code: int) -> int:
    """Where a close tag or a point goes after a target word: at its end, or before its trailing
    punctuation when the source had the code before punctuation ("<b>here</b>," ->
    "<b>hier</b>,")."""
    start, end = word
    offset = block.at[code]
    if offset < len(block.text) and _TRAILING.match(block.text[offset : offset + 1] or " "):
        mark = _TRAILING.search(text[start:end])
        if mark and mark.start() > 0:
            return start + mark.start()
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
