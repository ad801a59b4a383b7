"""A PowerPoint (.pptx) file's segments: the paragraphs of its slides and of their notes, each
run's formatting kept on the words of its translation.

    deck = read(data, "deck.pptx")
    deck.segments()   # [("Ein Hund", text), ("<r0>Ich sehe </r0><r1>rote</r1>...", xml), ...]
    deck.write(translations)   # the file's bytes, only the slides and notes with text rewritten

The slides in the order the presentation lists them (ppt/presentation.xml's slide list, through
its relationships: a file's number says when the slide was made, not where it is), each followed
by its notes slide. A paragraph (a:p) of every text frame, group, table cell and placeholder is a
segment when its runs hold a letter; a paragraph of several runs is read with run codes
(`nmt.documents.runs`), its line breaks (a:br) and fields (a:fld) as points kept in place. The
slide number and date placeholders are skipped; a field's text (a slide number in a text box) is
kept. Only the text of runs changes: properties, positions, pictures, media, animations, the
layouts and masters, and every part holding no translated text come out as the same bytes.

Not translated: text in charts, SmartArt, embedded objects, comments, the alternative text of
pictures, and the layouts' and masters' prompt text.

Read with lxml and Package rather than python-pptx: python-pptx writes every XML part it loaded
when it saves (opened and saved with no change, 29 of the 36 members of its own default.pptx,
saved by PowerPoint, come out as other bytes), and a member holding no translated text must come
out as it went in (`nmt.documents.package`).
"""

from __future__ import annotations

import posixpath

from lxml import etree

from nmt.config import TextFormat
from nmt.documents.package import Package
from nmt.documents.runs import BREAK, Paragraph, Piece, Point, field, parse, serialized
from nmt.errors import NMTError

A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
RELS = "{http://schemas.openxmlformats.org/package/2006/relationships}"
PRESENTATION = "ppt/presentation.xml"
SKIPPED = {"sldNum", "dt"}  # placeholders whose text is a field PowerPoint fills in
KEPT = {f"{A}pPr", f"{A}endParaRPr"}  # a paragraph's children that are neither runs nor points


def read(data: bytes, name: str) -> Presentation:
    """The PowerPoint file `name` holding `data` (`nmt.documents.formats`): its package within
    budgets (`Package.read`), its slides and notes read (see the module's notes)."""
    package = Package.read(data, name)
    if not package.has(PRESENTATION):
        raise NMTError(f"{name}: not a PowerPoint file (it has no {PRESENTATION})")
    return Presentation(package, _parts(package))


class Presentation:
    """A PowerPoint file's paragraphs with text, in reading order (`Opened`)."""

    def __init__(self, package: Package, parts: list[str]) -> None:
        self.package = package
        self.originals = {part: package.member(part) for part in parts}
        self.roots = {p: parse(data, package.name, p) for p, data in self.originals.items()}
        self.paragraphs = [
            paragraph
            for part, root in self.roots.items()
            for paragraph in _paragraphs(part, root)
            if paragraph.has_words()
        ]

    def segments(self) -> list[tuple[str, TextFormat]]:
        """Each paragraph's text and how it is read: plain text (one run) or XML (run codes)."""
        return [paragraph.segment() for paragraph in self.paragraphs]

    def write(self, translations: list[str]) -> bytes:
        """The file with each paragraph's runs holding its translation; only the parts whose
        text changed are written anew."""
        if len(translations) != len(self.paragraphs):
            raise ValueError(f"{len(translations)} translations of {len(self.paragraphs)}")
        changed = set()
        for paragraph, translation in zip(self.paragraphs, translations):
            if paragraph.write(translation):
                changed.add(paragraph.part)
        return self.package.write(
            {part: serialized(self.roots[part], self.originals[part]) for part in changed}
        )


def _parts(package: Package) -> list[str]:
    """The slides in the presentation's order, each followed by its notes slide."""
    root = parse(package.member(PRESENTATION), package.name, PRESENTATION)
    targets = _relationships(package, PRESENTATION)
    parts = []
    for slide_id in root.iterfind(f"{P}sldIdLst/{P}sldId"):
        slide = targets.get(slide_id.get(f"{R}id", ""))
        if slide is None or slide[0] != "slide" or not package.has(slide[1]):
            continue  # a list that names a missing slide: PowerPoint would repair it
        parts.append(slide[1])
        related = _relationships(package, slide[1]).values()
        notes = [member for kind, member in related if kind == "notesSlide"]
        parts += [member for member in notes[:1] if package.has(member)]
    return list(dict.fromkeys(parts))


def _relationships(package: Package, part: str) -> dict[str, tuple[str, str]]:
    """A part's relationships inside the package: id -> (type's last word, member name)."""
    folder, file = posixpath.split(part)
    rels = posixpath.join(folder, "_rels", f"{file}.rels")
    if not package.has(rels):
        return {}
    found = {}
    for rel in parse(package.member(rels), package.name, rels).iterfind(f"{RELS}Relationship"):
        target = rel.get("Target", "")
        if rel.get("TargetMode") == "External" or not target:
            continue
        member = target[1:] if target.startswith("/") else posixpath.join(folder, target)
        kind = rel.get("Type", "").rsplit("/", 1)[-1]
        found[rel.get("Id", "")] = (kind, posixpath.normpath(member))
    return found


def _paragraphs(part: str, root: etree._Element):
    """Each paragraph of a slide or notes slide, in document order, but those of the slide
    number and date placeholders."""
    for p in root.iter(f"{A}p"):
        shape = next(p.iterancestors(f"{P}sp"), None)
        kind = shape.find(f"{P}nvSpPr/{P}nvPr/{P}ph") if shape is not None else None
        if kind is not None and kind.get("type") in SKIPPED:
            continue
        texts, pieces, fields = [], [], 0
        for child in p:
            if child.tag == f"{A}r":
                text = child.find(f"{A}t")
                if text is not None and text.text:
                    texts.append(text)
                    pieces.append(text.text)
            elif child.tag == f"{A}br":
                pieces.append(Point(BREAK))
            elif isinstance(child.tag, str) and child.tag not in KEPT:  # a field, an equation
                pieces.append(field(fields))
                fields += 1
        if texts:
            yield Paragraph(part, texts, _trimmed(pieces))


def _trimmed(pieces: list[Piece]) -> list[Piece]:
    """`pieces` without the points before its first run and after its last: nothing can be
    placed beyond them, so the translator need not see them."""
    runs = [k for k, piece in enumerate(pieces) if isinstance(piece, str)]
    return pieces[runs[0] : runs[-1] + 1]
