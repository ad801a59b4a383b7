"""A Word (.docx) file's segments: every paragraph the reader sees, each run's formatting kept on
the words of its translation, and every other byte of the package kept as it was.

    doc = read(data, "report.docx")
    doc.texts()    # ["<r0>Ein </r0><r1>Hund</r1><r2> läuft.</r2>", "Titel", "Fußnote"]
    data = doc.write(translations)

The parts read are those Word shows text from: the main document (body, tables nested or not,
text boxes) and, found through its relationships as Word finds them (a part's name is a habit,
not a rule: some producers write `document2.xml`), its headers, footers, footnotes, endnotes and
comments. Each part's tree is walked once and each `w:p` with letters is one segment, a text box's
paragraphs after the paragraph that holds it. A text box is written twice by Word (for today's
readers and, in `mc:Fallback`, for old ones): a fallback paragraph with the same text as its
box's takes the same translation instead of a second segment.

A paragraph's text is its pieces: the `w:t` elements one run holds with nothing between them
(runs inside hyperlinks, fields' results, content controls and insertions included: the reader
sees them; a field's code, `w:instrText`, and deleted text, `w:delText`, are no `w:t`). A
paragraph of one piece is its text; one of several is read as XML with each piece a pair of
codes `<rK>`...`</rK>`, so that the word alignment puts each run's formatting on the words its
text became (`nmt.documents.inline`); a word that lands outside every pair joins the piece
before it. A tab or a break between two pieces (`Name:<tab/>Wert`, in one run or across runs) is
a `<br/>` point: the model reads a word break there, and the tab stays between the pieces'
translations.

Only `w:t` elements change: a piece's translation goes into its first `w:t` (`xml:space` set
when its spaces would be lost), the piece's other `w:t` are removed, and every other child of a
run (properties, pictures, tabs, breaks, note references, fields, symbols) stays where it is.
Only the parts whose text changed are serialised again, after their own XML declaration;
every other member of the package is copied as its bytes (`nmt.documents.package`). Text in
charts, SmartArt and WordArt (DrawingML's `a:t`) and in equations is kept, not translated.

Read with lxml rather than python-docx: python-docx sees no footnotes, endnotes or text boxes,
sets a run's text by deleting the run's pictures, tabs and note references, and saving
serialises every part of the package again.
"""

from __future__ import annotations

import html
import io
import posixpath
import re
import zipfile
from dataclasses import dataclass, field
from urllib.parse import unquote

from lxml import etree

from nmt.config import TextFormat
from nmt.documents.package import Package
from nmt.errors import NMTError

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"
RELATIONSHIPS = "http://schemas.openxmlformats.org/package/2006/relationships"
_P, _R, _T = f"{{{W}}}p", f"{{{W}}}r", f"{{{W}}}t"
_ALTERNATIVES, _CHOICE = f"{{{MC}}}AlternateContent", f"{{{MC}}}Choice"
_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
# run children that part two pieces as a space would: the model reads a word break there
_BREAKS = {f"{{{W}}}{name}" for name in ("tab", "br", "cr", "ptab")}
# run children that neither hold text nor part it
_QUIET = {f"{{{W}}}rPr", f"{{{W}}}lastRenderedPageBreak"}
# the main document's parts whose paragraphs are read, by the last word of the relationship's
# type (the same in Transitional and Strict packages), in reading order
_TEXT_PARTS = ("header", "footer", "footnotes", "endnotes", "comments")
_CODE = re.compile(r"<(/?)r(\d+)>|<br/>")
# characters XML 1.0 cannot hold: lxml refuses them, so a translation that has one loses it
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_DECLARATION = re.compile(rb"(?:\xef\xbb\xbf)?<\?xml[^>]*\?>\s*")

Piece = list[etree._Element]  # the w:t elements of one run with nothing between them


def read(data: bytes, name: str) -> WordDocument:
    """The Word file `name` holding `data` (`nmt.documents.formats`): its package's sizes checked
    first (`Package.read`: a zip bomb is refused before anything is expanded)."""
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise NMTError(f"{name}: not a Word document (not a zip package)")
    return WordDocument(Package.read(data, name))


@dataclass
class _Paragraph:
    """A `w:p`'s pieces in order, None where a tab or a break parts two of them."""

    parts: list[Piece | None] = field(default_factory=list)
    twin: _Paragraph | None = None  # a text box's fallback copy: it takes the box's translation
    segment: int | None = None  # its translation's index; None: nothing to translate

    def add_run(self, run: etree._Element) -> None:
        joined = False  # whether the next w:t joins the piece before it
        for child in run:
            if child.tag == _T:
                if joined:
                    self.parts[-1].append(child)
                else:
                    self.parts.append([child])
                joined = True
            elif child.tag not in _QUIET:
                joined = False
                if child.tag in _BREAKS:
                    self.parts.append(None)

    def pieces(self) -> list[Piece]:
        return [p for p in self.parts if p is not None and _text(p)]

    def marked(self) -> tuple[str, TextFormat]:
        """Its text as the text loop reads it: one piece as text, several as XML with codes."""
        pieces = self.pieces()
        if len(pieces) == 1:
            return _text(pieces[0]), TextFormat.text
        out, k, parted = [], 0, False
        for part in self.parts:
            if part is None or not _text(part):
                parted = parted or part is None
                continue
            if parted and k:
                out.append("<br/>")
            out.append(f"<r{k}>{html.escape(_text(part), quote=False)}</r{k}>")
            k, parted = k + 1, False
        return "".join(out), TextFormat.xml

    def has_letters(self) -> bool:
        return any(ch.isalpha() for piece in self.pieces() for ch in _text(piece))


@dataclass
class _Part:
    name: str
    data: bytes
    root: etree._Element
    paragraphs: list[_Paragraph]


class WordDocument:
    """A Word package's paragraphs as segments (`nmt.documents.formats.Opened`)."""

    def __init__(self, package: Package) -> None:
        self.package = package
        self.names = _text_parts(package)
        self._segments = [p.marked() for part in self._parts() for p in _translated(part)]

    def segments(self) -> list[tuple[str, TextFormat]]:
        """Each paragraph's text and how it is read: plain text (one piece) or XML (run codes)."""
        return list(self._segments)

    def texts(self) -> list[str]:
        return [text for text, _ in self._segments]

    def write(self, translations: list[str]) -> bytes:
        """The package with each paragraph's pieces holding its translation; the parts are read
        again, so that writing twice writes each from the same source."""
        if len(translations) != len(self._segments):
            raise ValueError(f"{len(translations)} translations of {len(self._segments)}")
        changed = {}
        for part in self._parts():
            edited = False
            for paragraph in part.paragraphs:
                if paragraph.segment is None:
                    continue
                pieces = paragraph.pieces()
                translation = translations[paragraph.segment]
                texts = _run_texts(translation, len(pieces)) if len(pieces) > 1 else [translation]
                for piece, text in zip(pieces, texts):
                    edited = _put(piece, text) or edited
            if edited:
                changed[part.name] = _serialised(part.root, part.data)
        return self.package.write(changed)

    def _parts(self) -> list[_Part]:
        """Each text part parsed and walked, its paragraphs numbered by segment in order."""
        parts, count = [], 0
        for name in self.names:
            data = self.package.member(name)
            root = _parse(data, self.package.name, name)
            if not parts and root.tag != f"{{{W}}}document":  # a workbook named .docx
                raise NMTError(f"{self.package.name}: not a Word document ({name}: {root.tag})")
            paragraphs = _paragraphs(root)
            for paragraph in paragraphs:
                if paragraph.twin is not None:
                    paragraph.segment = paragraph.twin.segment
                elif paragraph.has_letters():
                    paragraph.segment, count = count, count + 1
            parts.append(_Part(name, data, root, paragraphs))
        return parts


def _translated(part: _Part) -> list[_Paragraph]:
    """A part's paragraphs that are segments of their own (a fallback twin is none)."""
    return [p for p in part.paragraphs if p.segment is not None and p.twin is None]


def _text(piece: Piece) -> str:
    return "".join(t.text or "" for t in piece)


def _paragraphs(root: etree._Element) -> list[_Paragraph]:
    """Every `w:p` under `root` in document order, each element visited once: a paragraph's runs
    are those whose nearest `w:p` it is (a text box's paragraphs are paragraphs of their own)."""
    found: list[_Paragraph] = []

    def visit(element: etree._Element, paragraph: _Paragraph | None) -> None:
        for child in element:
            if child.tag == _P:
                inner = _Paragraph()
                found.append(inner)
                visit(child, inner)
            elif child.tag == _ALTERNATIVES:
                alternatives(child, paragraph)
            else:
                if child.tag == _R and paragraph is not None:
                    paragraph.add_run(child)
                visit(child, paragraph)

    def alternatives(element: etree._Element, paragraph: _Paragraph | None) -> None:
        # Word shows the first choice; a fallback's runs are kept as they are, and its
        # paragraphs, where they read as the choice's, take the choice's translations
        choice = element.find(_CHOICE)
        start = len(found)
        if choice is not None:
            visit(choice, paragraph)
        middle = len(found)
        for child in element:
            if child is not choice:
                visit(child, None)
        chosen, fallback = found[start:middle], found[middle:]
        same = len(chosen) == len(fallback) and all(
            a.marked() == b.marked() for a, b in zip(chosen, fallback)
        )
        if choice is not None and same:
            for a, b in zip(chosen, fallback):
                b.twin = a

    visit(root, None)
    return found


def _run_texts(translation: str, runs: int) -> list[str]:
    """Each piece's text from a translation with run codes: what a pair wraps is its piece's,
    text outside every pair joins the piece before it (the first, before any); a `<br/>` point
    is dropped (its tab or break stays in the document)."""
    texts = [""] * runs
    current, done = 0, 0
    for match in _CODE.finditer(translation):
        texts[current] += html.unescape(translation[done : match.start()])
        done = match.end()
        if match.group(2) is not None and int(match.group(2)) < runs:
            current = int(match.group(2))
    texts[current] += html.unescape(translation[done:])
    return texts


def _put(piece: Piece, text: str) -> bool:
    """The piece's text set to `text` in its first `w:t`, its other `w:t` removed; whether the
    text changed (a piece already so is left untouched)."""
    text = _NOT_XML.sub("", text)
    if _text(piece) == text:
        return False
    first, *rest = piece
    first.text = text
    if text != text.strip() or "  " in text:  # Word drops such spaces without it
        first.set(_SPACE, "preserve")
    for t in rest:
        t.getparent().remove(t)
    return True


def _text_parts(package: Package) -> list[str]:
    """The members whose paragraphs are read: the main document, then its text parts."""
    main = [m for m, kind in _related(package, "") if kind == "officeDocument"]
    if not main or not package.has(main[0]):
        raise NMTError(f"{package.name}: not a Word document (it has no main document part)")
    related = _related(package, main[0])
    names = [main[0]]
    for kind in _TEXT_PARTS:
        for member, found in related:
            if found == kind and member not in names and package.has(member):
                names.append(member)
    return names


def _related(package: Package, source: str) -> list[tuple[str, str]]:
    """The members the part `source` ("": the package) relates to, each with the last word of
    its relationship's type ("header"), in the order its relationships list them."""
    folder = posixpath.dirname(source)
    rels = posixpath.join(folder, "_rels", posixpath.basename(source) + ".rels")
    if not package.has(rels):
        return []
    found = []
    for rel in _parse(package.member(rels), package.name, rels).iter(f"{{{RELATIONSHIPS}}}*"):
        target = unquote(rel.get("Target", ""))
        if not target or rel.get("TargetMode") == "External":
            continue
        member = target[1:] if target.startswith("/") else posixpath.join(folder, target)
        found.append((posixpath.normpath(member), rel.get("Type", "").rsplit("/", 1)[-1]))
    return found


def _parse(data: bytes, name: str, member: str) -> etree._Element:
    # no entity is expanded and nothing is fetched (the package comes from anyone); a parser
    # of its own per call, as lxml's parsers are not to be shared between threads
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    try:
        return etree.fromstring(data, parser)
    except etree.XMLSyntaxError as err:
        raise NMTError(f"{name}: not a Word document ({member} is not XML: {err})") from None


def _serialised(root: etree._Element, data: bytes) -> bytes:
    """The part's tree as bytes after the part's own XML declaration (Word's is
    `<?xml version="1.0" encoding="UTF-8" standalone="yes"?>`, which lxml would write with other
    quotes); a part in another encoding gets lxml's declaration of that encoding."""
    tree = root.getroottree()
    declared = _DECLARATION.match(data)
    encoding = tree.docinfo.encoding or "UTF-8"
    if declared is None or encoding.upper().replace("-", "") != "UTF8":
        return etree.tostring(tree, xml_declaration=True, encoding=encoding, standalone=True)
    return declared.group() + etree.tostring(tree, encoding="UTF-8", xml_declaration=False)
