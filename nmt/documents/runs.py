"""Runs: a paragraph of an Office file (PowerPoint's a:p, Excel's rich-text si) as one text to
translate, each run's formatting carried by the word alignment; and an Office XML part read and
written back.

    text, fmt = marked(["Ich sehe ", "rote", " Äpfel."])
    # "<r0>Ich sehe </r0><r1>rote</r1><r2> Äpfel.</r2>", TextFormat.xml
    run_texts("<r0>I see </r0><r1>red</r1><r2> apples.</r2>", ["Ich sehe ", "rote", " Äpfel."])
    # ["I see ", "red", " apples."]

A run is a stretch of text with one formatting (bold here, a font there). A paragraph of one run
is its text; a paragraph of several is read as XML with each run a pair of codes `<rK>`...`</rK>`,
so that the word alignment (`nmt.documents.placing`) puts each run's formatting on the words its
text became. What a paragraph holds besides runs (a line break, a field such as a slide number)
is a `Point`: a code the translation places (`<br/>`, `<x id="0"/>`), while the element itself
stays where it is. Written back, the text between two points goes to the runs between them, each
piece to the run whose pair wraps it; a piece outside every pair joins the run before it, and a
piece on the wrong side of a point joins the nearest run on the right side. Only the runs' text
changes: the elements of the paragraph, their order and their properties are kept.

Parts are read with lxml (no entities resolved, no DTD, nothing fetched) and written back by it
with the part's own XML declaration, so a part nmt changes differs from the original only where
text changed (and in how lxml writes the rest: `&#196;` as `Ä`).
"""

from __future__ import annotations

import html
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from lxml import etree

from nmt.config import TextFormat
from nmt.errors import NMTError

XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
BREAK = "<br/>"  # a line break inside a paragraph: it parts the words on either side
# a code of a translation: a run's open or close, a line break, a field (or other point)
_CODE = re.compile(r'<(/?)r(\d+)>|<br/>|<x id="\d+"/>')
_DECLARATION = re.compile(rb"\s*<\?xml[^>]*\?>[ \t\r\n]*")
_PARSER = etree.XMLParser(
    resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False, remove_comments=False
)


@dataclass(frozen=True)
class Point:
    """A child of a paragraph that is not text to translate (a line break, a field), kept where
    it is: the code its text shows it as."""

    code: str


Piece = str | Point  # a run's text (never empty), or a point


def field(k: int) -> Point:
    """The `k`th point of a paragraph that is not a line break (a field, an equation)."""
    return Point(f'<x id="{k}"/>')


@dataclass
class Paragraph:
    """A paragraph's runs in a part of a package: the element holding each run's text (in
    order, runs with text only) and the paragraph as pieces (runs' texts and points)."""

    part: str  # the package member it is in
    texts: list[etree._Element]  # each run's text element (a:t, t)
    pieces: list[Piece]

    def segment(self) -> tuple[str, TextFormat]:
        return marked(self.pieces)

    def has_words(self) -> bool:
        """Whether its runs hold a letter: one of digits and signs ("12 %", "—") is kept."""
        return any(ch.isalpha() for piece in self.pieces if isinstance(piece, str) for ch in piece)

    def write(self, translation: str, preserve: bool = False) -> bool:
        """Its runs holding `translation`; True when a run's text changed. `preserve`: a text
        with outer whitespace is marked xml:space="preserve" (SpreadsheetML drops it otherwise;
        DrawingML keeps every space and has no such attribute)."""
        changed = False
        for element, text in zip(self.texts, run_texts(translation, self.pieces)):
            if element.text == text:
                continue
            element.text, changed = text, True
            if preserve and text != text.strip():
                element.set(XML_SPACE, "preserve")
        return changed


def marked(pieces: list[Piece]) -> tuple[str, TextFormat]:
    """A paragraph's text and how it is read: one run alone is plain text; several, or any
    point, XML with run codes (see the module's notes)."""
    if _plain(pieces):
        return pieces[0], TextFormat.text
    out, k = [], 0
    for piece in pieces:
        if isinstance(piece, Point):
            out.append(piece.code)
        else:
            out.append(f"<r{k}>{html.escape(piece, quote=False)}</r{k}>")
            k += 1
    return "".join(out), TextFormat.xml


def run_texts(translation: str, pieces: list[Piece]) -> list[str]:
    """Each run's text from the translation of the paragraph `pieces` (`marked`): the text of a
    point's side goes to that side's runs, each piece to the run its pair names."""
    if _plain(pieces):
        return [translation]
    runs = sum(isinstance(p, str) for p in pieces)
    side, sides = [], 0  # each run's side: how many points are before it
    for piece in pieces:
        if isinstance(piece, Point):
            sides += 1
        else:
            side.append(sides)
    texts = [""] * runs
    current, at, done = 0, 0, 0  # the run a pair last opened, the points passed, where we are
    for match in _CODE.finditer(translation):
        piece = translation[done : match.start()]
        if piece:
            texts[_home(side, current, at)] += html.unescape(piece)
        done = match.end()
        if match.group(2) is None:
            at = min(at + 1, sides)
        elif not match.group(1) and int(match.group(2)) < runs:
            current = int(match.group(2))  # a close keeps its run: what follows joins it
    if translation[done:]:
        texts[_home(side, current, at)] += html.unescape(translation[done:])
    return texts


def _plain(pieces: list[Piece]) -> bool:
    """Whether a paragraph is one run and nothing else: read as plain text."""
    return len(pieces) == 1 and isinstance(pieces[0], str)


def _home(side: list[int], run: int, at: int) -> int:
    """The run a piece of text wrapped by `run` goes to when it stands after `at` points (`side`:
    each run's, in order): its own when on its own side, else the nearest run on side `at`, else
    (no run there) the nearest beyond it toward the run's own side."""
    if side[run] == at:
        return run
    first = bisect_left(side, at)  # the first run on side `at` or after it
    last = bisect_right(side, at) - 1  # the last run on side `at` or before it
    if side[run] > at:
        return last if last >= 0 and side[last] == at else first
    return first if first < len(side) and side[first] == at else last


def parse(data: bytes, name: str, member: str) -> etree._Element:
    """A part's XML (`member` of the file `name`), or an NMTError naming both."""
    try:
        return etree.fromstring(data, _PARSER)
    except etree.XMLSyntaxError as err:
        raise NMTError(f"{name}: {member} is not well-formed XML ({err})") from None


def serialized(root: etree._Element, original: bytes) -> bytes:
    """The part `root` was parsed from (`original`) written again: its XML declaration as it
    was (Office's double quotes and line break), the rest by lxml in UTF-8."""
    tree = root.getroottree()
    head = _DECLARATION.match(original)
    if head is None or (tree.docinfo.encoding or "").upper() not in ("UTF-8", "UTF8"):
        return etree.tostring(
            tree, xml_declaration=True, encoding="UTF-8", standalone=tree.docinfo.standalone
        )
    return head.group() + etree.tostring(tree, encoding="UTF-8")
