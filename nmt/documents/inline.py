"""Inline codes: what a block of text holds that is not text to translate, lifted out before the
search and put back around the words of the translation it belongs to.

Localisation tools call them inline codes (XLIFF's <g> pairs and <x/> points): here a `Code` is
an opening or closing tag (a pair: `<b>` ... `</b>`, `<a href="...">` ... `</a>`) or a point
(a self-closing `<br/>`, `<x id="1"/>`, an unpaired tag, a comment, and every protected span:
a URL, an e-mail address, a number, `{name}`, `%s`; `nmt.documents.protect`). Its bytes are
kept as they were, attributes and all. A `Block` is the text a model reads (codes out, HTML
entities decoded) and each code's place in it.

They are put back around the translation's words by `nmt.documents.placing`.

A tag is `<name`, its attributes and `>` (or `/>`); an attribute's name and an unquoted value
hold no `<` and no quote (a quoted value may hold `<`, `>` and the other quote), so "<a b<c>"
is the text "<a b" and the tag "<c>". A comment or a CDATA section runs to its first end
(`-->`, `]]>`); one that never ends is text. Whatever a block holds (a server reads it from
anyone), it is read in linear time: a `<` that starts no tag ends the reading of any tag before it,
where a comment ends is looked up (not scanned for from every `<!--`), and a close finds its
open by its name.
"""

from __future__ import annotations

import html
import re
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field

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
# HTML elements whose content is not text to translate (code, styles): one code, whole
RAW_TEXT = {"script", "style"}


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
        return self.source or apply_inserts(self.text, inserts, self.markup)


def lift_markup(raw: str, xml: bool = False, entities: bool = True) -> Block:
    """A block of inline HTML (or `xml`) as text and codes: tags, comments and CDATA lifted out,
    entities decoded. Tags pair up by name (a close without its open, or an open never closed,
    is a point); self-closing tags are points, and in HTML its void elements (<br>, <img>).
    entities=False: text with tags but no entities (a subtitle's `Tom & Jerry <i>laufen</i>`:
    its `&` is a character, read and written as it is)."""
    decode = html.unescape if entities else str
    void = set() if xml else VOID
    text, codes, at, opened = [], [], [], Opened()
    length, end = 0, 0
    for start, stop, tag in find_codes(raw):
        if start < end:
            continue  # inside a script or style element, passed over whole
        if tag and not xml and not tag.group(1) and tag.group(2).lower() in RAW_TEXT:
            # a script or style element is one code, its content never translated (as an HTML
            # file's are): up to its close tag, or to the end when it has none
            close = re.compile(rf"</{tag.group(2)}\s*>", re.IGNORECASE).search(raw, stop)
            stop = close.end() if close else len(raw)
            tag = None
        chunk = decode(raw[end:start])
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
    chunk = decode(raw[end:])
    text.append(chunk)
    for k in opened:  # never closed
        codes[k] = Code(codes[k].raw, "point")
    return Block("".join(text), codes, at, markup=entities, source=raw)


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


def apply_inserts(text: str, inserts: list[tuple[int, int, str]], markup: bool) -> str:
    """`text` (escaped for markup) with each insert at its offset; at one offset, by order:
    closes (innermost first), points, then opens (outermost first)."""
    out, done = [], 0
    for offset, _, piece in sorted(inserts, key=lambda i: (i[0], i[1])):
        chunk = text[done:offset]
        out += [escape(chunk) if markup else chunk, piece]
        done = offset
    rest = text[done:]
    out.append(escape(rest) if markup else rest)
    return "".join(out)


def escape(text: str) -> str:
    return html.escape(text, quote=False)
