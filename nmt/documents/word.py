"""A Word (.docx) file's segments: its paragraphs, each run's formatting kept on the words of its
translation.

    doc = WordDocument.read("report.docx")
    doc.texts()    # ["<r0>Ein </r0><r1>Hund</r1><r2> läuft.</r2>", "Titel"]
    doc.save(translations, "report.en.docx")

The paragraphs of the body, of tables (nested ones too) and of every section's headers and
footers, through python-docx. A paragraph of one run is its text; a paragraph of several runs
(bold here, a font there) is read as XML with each run a pair of codes `<rK>`...`</rK>`, so that
the word alignment puts each run's formatting on the words its text became
(`nmt.documents.inline`); a word that lands outside every pair joins the run before it. Only the
text of runs whose text changed is written: their properties, the paragraph's, styles,
numbering, images, fields, comments and every other part of the package are kept as they were.
Text inside hyperlinks, text boxes and fields is kept, not translated.
"""

from __future__ import annotations

import html
import io
import re
from dataclasses import dataclass
from pathlib import Path

import docx
import docx.opc.exceptions
from docx.text.paragraph import Paragraph

from nmt.config import TextFormat
from nmt.documents.package import Package
from nmt.errors import NMTError

_RUN_TAG = re.compile(r"<(/?)r(\d+)>")


def read(data: bytes, name: str) -> WordDocument:
    """The Word file `name` holding `data` (`nmt.documents.formats`): its package's sizes
    checked first (`Package.read`: a zip bomb is refused before python-docx expands it)."""
    Package.read(data, name)
    try:
        return WordDocument.read(io.BytesIO(data))
    except (docx.opc.exceptions.PackageNotFoundError, KeyError, ValueError) as err:
        raise NMTError(f"{name}: not a Word document ({type(err).__name__}: {err})") from None


@dataclass
class WordDocument:
    document: object  # docx.Document
    paragraphs: list[Paragraph]  # those with text to translate, in reading order

    @classmethod
    def read(cls, path: str | Path | io.BytesIO) -> WordDocument:
        document = docx.Document(path if isinstance(path, io.BytesIO) else str(path))
        seen: set[int] = set()
        found = []
        for paragraph in _paragraphs(document):
            if id(paragraph._p) in seen:  # a merged cell, a header shared by sections
                continue
            seen.add(id(paragraph._p))
            if any(ch.isalpha() for ch in paragraph.text):
                found.append(paragraph)
        return cls(document, found)

    def segments(self) -> list[tuple[str, TextFormat]]:
        """Each paragraph's text and how it is read: plain text (one run) or XML (run codes)."""
        return [_text(p) for p in self.paragraphs]

    def texts(self) -> list[str]:
        return [text for text, _ in self.segments()]

    def write(self, translations: list[str]) -> bytes:
        """The document's bytes, each paragraph's runs holding its translation (`Opened`)."""
        out = io.BytesIO()
        self.save(translations, out)
        return out.getvalue()

    def save(self, translations: list[str], path: str | Path | io.BytesIO) -> None:
        """The document with each paragraph's runs holding its translation, saved to `path`."""
        if len(translations) != len(self.paragraphs):
            raise ValueError(f"{len(translations)} translations of {len(self.paragraphs)}")
        for paragraph, translation in zip(self.paragraphs, translations):
            runs = [r for r in paragraph.runs if r.text]
            texts = _run_texts(translation, len(runs)) if len(runs) > 1 else [translation]
            for run, text in zip(runs, texts):
                if run.text != text:
                    run.text = text
        self.document.save(path if isinstance(path, io.BytesIO) else str(path))


def _paragraphs(document):
    """Every paragraph with text: the body's and its tables', then the headers' and footers'."""
    yield from _in(document)
    for section in document.sections:
        headers = (section.header, section.first_page_header, section.even_page_header)
        footers = (section.footer, section.first_page_footer, section.even_page_footer)
        for part in (*headers, *footers):
            if not part.is_linked_to_previous:
                yield from _in(part)


def _in(container):
    yield from container.paragraphs
    for table in container.tables:
        for row in table.rows:
            for cell in row.cells:
                yield from _in(cell)


def _text(paragraph: Paragraph) -> tuple[str, TextFormat]:
    runs = [r for r in paragraph.runs if r.text]
    if len(runs) <= 1:
        return (runs[0].text if runs else paragraph.text), TextFormat.text
    marked = "".join(f"<r{k}>{html.escape(r.text, quote=False)}</r{k}>" for k, r in enumerate(runs))
    return marked, TextFormat.xml


def _run_texts(translation: str, runs: int) -> list[str]:
    """Each run's text from a translation with run codes: what a pair wraps is its run's, text
    outside every pair joins the run before it (the first, before any)."""
    texts = [""] * runs
    current, done = 0, 0
    for match in _RUN_TAG.finditer(translation):
        texts[current] += html.unescape(translation[done : match.start()])
        done = match.end()
        k = int(match.group(2))
        if k < runs:
            current = k
    texts[current] += html.unescape(translation[done:])
    return texts
