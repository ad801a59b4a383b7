"""The file formats nmt translates: one table from extension to format, and what a format is.

    found = format_of(Path("deck.pptx"), TextFormat.auto)   # FileFormat("PowerPoint", ...), or None
    opened = found.open(data)          # its segments (text, how each is read) ...
    opened.write(translations)         # ... and the file's bytes with their translations

A format is a module with `read(data: bytes, name: str) -> Opened` (named in the table, imported
when a file of it is opened: a command that reads lines never loads python-pptx); `Opened` gives
the segments, each a text and how it is read (`TextFormat`: text, html, xml with inline codes,
markdown — the text loop's), and writes the file from one translation a segment. Adding a format
is a module and a line here.

A file no format claims is a file of lines (`big.de`, `notes.txt`, no extension), as nmt has
always read them, unless its bytes are not text (`sniff`): a zip, a PDF, an image, a NUL byte,
bytes that are not UTF-8 are refused before any work, naming the formats nmt reads; they are
never translated as lines.
"""

from __future__ import annotations

import codecs
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nmt.config import TextFormat
from nmt.documents.segments import Document
from nmt.errors import NMTError


class Opened(Protocol):
    """A file read by its format."""

    def segments(self) -> list[tuple[str, TextFormat]]:
        """Each segment's text and how it is read (text, html, xml, markdown)."""
        ...

    def write(self, translations: list[str]) -> bytes:
        """The file with each segment holding its translation (one per segment, in order)."""
        ...


@dataclass(frozen=True)
class FileFormat:
    name: str  # in messages: "Word"
    extensions: tuple[str, ...]
    module: str  # its reader: `read(data: bytes, name: str) -> Opened`
    binary: bool  # a package of bytes (zip), not text
    option: TextFormat | None = None  # the format= value that names it, where there is one

    def open(self, data: bytes, name: str) -> Opened:
        """The file `name` holding `data`, read; a file that is not what its format says is an
        NMTError naming it."""
        reader = importlib.import_module(self.module).read
        if self.binary:
            return reader(data, name)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise NMTError(f"{name}: not UTF-8 text ({err})") from None
        return TextFile(reader(text))


class TextFile:
    """A text format's file (`nmt.documents.segments.Document`) as `Opened`."""

    def __init__(self, document: Document) -> None:
        self.document = document

    def segments(self) -> list[tuple[str, TextFormat]]:
        return [(t, s.fmt) for t, s in zip(self.document.texts(), self.document.segments)]

    def write(self, translations: list[str]) -> bytes:
        return self.document.write(translations).encode("utf-8")


FORMATS = (
    FileFormat("HTML", (".html", ".htm", ".xhtml"), "nmt.documents.html", False, TextFormat.html),
    FileFormat(
        "Markdown", (".md", ".markdown"), "nmt.documents.markdown", False, TextFormat.markdown
    ),  # fmt: skip
    FileFormat("SubRip", (".srt",), "nmt.documents.srt", False, TextFormat.srt),
    FileFormat("Word", (".docx",), "nmt.documents.word", True, TextFormat.docx),
    FileFormat("OpenDocument", (".odt", ".odp"), "nmt.documents.opendocument", True),
    FileFormat("EPUB", (".epub",), "nmt.documents.epub", True),
    FileFormat("PowerPoint", (".pptx",), "nmt.documents.pptx", True),
    FileFormat("Excel", (".xlsx",), "nmt.documents.xlsx", True),
    FileFormat("XLIFF", (".xlf", ".xliff"), "nmt.documents.xliff", True),
    FileFormat("gettext PO", (".po", ".pot"), "nmt.documents.po", True),
)
BY_EXTENSION = {ext: f for f in FORMATS for ext in f.extensions}
# what a file's first bytes say it is, for the refusal of a file of lines that is none
MAGIC = {
    b"PK\x03\x04": "a zip archive", b"PK\x05\x06": "a zip archive", b"%PDF": "a PDF",
    b"\x89PNG": "a PNG image", b"\xff\xd8\xff": "a JPEG image", b"GIF8": "a GIF image",
    b"\x1f\x8b": "a gzip archive", b"BZh": "a bzip2 archive", b"\xfd7zXZ": "an xz archive",
    b"7z\xbc\xaf": "a 7-Zip archive", b"\xd0\xcf\x11\xe0": "an old Office file (.doc, .xls)",
    b"Rar!": "a RAR archive", b"\x7fELF": "a program",
}  # fmt: skip
SNIFF_BYTES = 1 << 20  # read in pieces this big to check a file of lines is UTF-8 text


def format_of(path: Path, option: TextFormat) -> FileFormat | None:
    """The format of `path` as `option` (format=) says, or by its extension with auto; None: a
    file of lines (format=text, or a name no format claims, each line read as `option`)."""
    if option == TextFormat.text:
        return None
    named = next((f for f in FORMATS if f.option == option), None)
    if named is not None and named.option in (TextFormat.srt, TextFormat.docx):
        return named  # formats of files only, whatever the file's name
    found = BY_EXTENSION.get(path.suffix.lower())
    if found is None or option in (TextFormat.auto, TextFormat.xml) or named is None:
        return found
    return named  # format=markdown on page.html: its text read as Markdown


def listed() -> str:
    """The formats nmt reads, for messages: "HTML (.html .htm .xhtml), ..."."""
    return ", ".join(f"{f.name} ({' '.join(f.extensions)})" for f in FORMATS)


def sniff(path: Path) -> None:
    """Refuse, before any work, a file read as lines whose bytes are not text (see the module's
    notes); a file of text passes, read once in pieces."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    with open(path, "rb") as f:
        first = f.read(SNIFF_BYTES)
        kind = next((k for magic, k in MAGIC.items() if first.startswith(magic)), None)
        piece, offset = first, 0
        while piece and kind is None:
            if b"\x00" in piece:
                kind = "binary (it holds NUL bytes)"
                break
            try:
                decoder.decode(piece)
            except UnicodeDecodeError as err:
                kind = f"not UTF-8 text (byte {offset + err.start:,})"
                break
            offset += len(piece)
            piece = f.read(SNIFF_BYTES)
        if kind is None:
            try:
                decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                kind = "not UTF-8 text (it ends inside a character)"
    if kind is not None:
        raise NMTError(
            f"input={path} is {kind}: nmt translates files of lines (UTF-8 text) and documents "
            f"by their extension: {listed()}"
        )
