"""An Excel (.xlsx) file's segments: the text of its cells, a rich-text cell's formatting kept on
the words of its translation.

    book = read(data, "prices.xlsx")
    book.segments()   # [("Preis", text), ("<r0>Nur </r0><r1>heute</r1>", xml), ...]
    book.write(translations)   # the file's bytes, only the shared strings (and sheets of inline
                               # strings) rewritten

A text cell (t="s") holds the index of a shared string (xl/sharedStrings.xml, one si each, a plain
t or rich-text runs r); a shared string is a segment when a text cell of some sheet uses it and it
holds a letter, translated once for every cell that uses it, in the file's order. Then each
sheet's inline strings (t="inlineStr", as openpyxl writes every string). A string of several
runs is read with run codes (`nmt.documents.runs`); its phonetic runs (rPh) are kept. Numbers,
booleans, dates, errors, formulas and their cached results (a formula's text result is a t="str"
cell, never translated), sheet names and every part but the strings come out as the same bytes.
A shared string no text cell uses is kept (one only a formula's cached value points at); one that
a text cell and a formula's cached value both use is translated, and the cached value shows the
translation until Excel recalculates.

The parts are found by their content types ([Content_Types].xml), the sheets scanned for the
strings they use without being held in memory whole. Not translated: sheet names, comments and
notes, headers and footers, charts, text boxes and shapes, data validation messages, defined
names, pivot tables' caches.

Read with lxml and Package rather than openpyxl: openpyxl writes every part anew when it saves
(opened and saved with no change, a workbook of shared strings loses xl/sharedStrings.xml, its
strings turned into inline strings in each sheet, xl/styles.xml rewritten, a formula's cached
value dropped: 8 of 10 members change, 1 is gone), and a member holding no translated text must
come out as it went in (`nmt.documents.package`).
"""

from __future__ import annotations

import io

from lxml import etree

from nmt.config import TextFormat
from nmt.documents.package import Package
from nmt.documents.runs import Paragraph, parse, serialized
from nmt.errors import NMTError

S = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
TYPES = "{http://schemas.openxmlformats.org/package/2006/content-types}"
WORKBOOK = "xl/workbook.xml"
WORKSHEET_TYPE = "spreadsheetml.worksheet+xml"
STRINGS_TYPE = "spreadsheetml.sharedStrings+xml"


def read(data: bytes, name: str) -> Workbook:
    """The Excel file `name` holding `data` (`nmt.documents.formats`): its package within
    budgets (`Package.read`), its strings read (see the module's notes)."""
    package = Package.read(data, name)
    if not package.has(WORKBOOK):
        raise NMTError(f"{name}: not an Excel workbook (it has no {WORKBOOK})")
    return Workbook(package)


class Workbook:
    """An Excel file's strings with text, shared ones first, then each sheet's inline ones
    (`Opened`)."""

    def __init__(self, package: Package) -> None:
        self.package = package
        sheets, strings = _parts(package)
        used: set[int] = set()
        inline = []
        for sheet in sheets:
            if _scan(package, sheet, used):
                inline.append(sheet)
        self.originals = {p: package.member(p) for p in ([strings] if strings else []) + inline}
        self.roots = {p: parse(data, package.name, p) for p, data in self.originals.items()}
        found = []
        if strings:
            items = self.roots[strings].findall(f"{S}si")
            found += [_string(strings, items[k]) for k in sorted(used) if k < len(items)]
        for sheet in inline:
            for cell in self.roots[sheet].iter(f"{S}c"):
                if cell.get("t") == "inlineStr" and cell.find(f"{S}f") is None:
                    found += [_string(sheet, s) for s in cell.iterfind(f"{S}is")]
        self.strings = [s for s in found if s.has_words()]

    def segments(self) -> list[tuple[str, TextFormat]]:
        """Each string's text and how it is read: plain text (one run) or XML (run codes)."""
        return [string.segment() for string in self.strings]

    def write(self, translations: list[str]) -> bytes:
        """The file with each string's runs holding its translation; only the shared strings
        and the sheets whose inline strings changed are written anew."""
        if len(translations) != len(self.strings):
            raise ValueError(f"{len(translations)} translations of {len(self.strings)}")
        changed = set()
        for string, translation in zip(self.strings, translations):
            if string.write(translation, preserve=True):
                changed.add(string.part)
        return self.package.write(
            {part: serialized(self.roots[part], self.originals[part]) for part in changed}
        )


def _parts(package: Package) -> tuple[list[str], str | None]:
    """The worksheets, in the order the content types list them, and the shared strings part
    (None: the workbook has none)."""
    types = "[Content_Types].xml"
    if not package.has(types):
        raise NMTError(f"{package.name}: not an Excel workbook (it has no {types})")
    sheets, strings = [], None
    for override in parse(package.member(types), package.name, types).iterfind(f"{TYPES}Override"):
        member = override.get("PartName", "").lstrip("/")
        kind = override.get("ContentType", "")
        if not package.has(member):
            continue
        if kind.endswith(WORKSHEET_TYPE):
            sheets.append(member)
        elif kind.endswith(STRINGS_TYPE):
            strings = member
    return sheets, strings


def _scan(package: Package, sheet: str, used: set[int]) -> bool:
    """Add to `used` the shared strings a sheet's text cells use (a formula's cell is none);
    True when the sheet holds an inline string. Read cell by cell, each dropped once read."""
    inline = False
    cells = etree.iterparse(
        io.BytesIO(package.member(sheet)),
        events=("end",),
        tag=(f"{S}c", f"{S}row"),
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
    )
    try:
        for _, element in cells:
            if element.tag == f"{S}c" and element.find(f"{S}f") is None:
                kind, value = element.get("t"), element.findtext(f"{S}v")
                if kind == "s" and value is not None and value.strip().isdigit():
                    used.add(int(value))
                inline = inline or kind == "inlineStr"
            if element.tag == f"{S}row":
                element.clear()
                while element.getprevious() is not None:  # the rows read before it
                    del element.getparent()[0]
    except etree.XMLSyntaxError as err:
        raise NMTError(f"{package.name}: {sheet} is not well-formed XML ({err})") from None
    return inline


def _string(part: str, item: etree._Element) -> Paragraph:
    """A shared string (si) or an inline string (is) as runs: its t, or each run's t."""
    texts = [t for t in (item.find(f"{S}t"), *item.findall(f"{S}r/{S}t")) if t is not None]
    texts = [t for t in texts if t.text]
    return Paragraph(part, texts, [t.text for t in texts])
