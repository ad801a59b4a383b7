"""Document files: which format a file is, its segments, and the file written from their
translations. nmt-translate's file job (`nmt.cli.translate`) translates the segments in resumable
chunks as it translates lines.

    doc = open_document(Path("page.html"), TextFormat.auto)   # None: a file of lines
    done = translate_segments(translator, doc.segments(), Request([], decode), options)
    doc.write(done, Path("page.en.html"))

HTML (.html .htm .xhtml), Markdown (.md .markdown), SubRip (.srt) and Word (.docx) by their
extension, or as `format=` says. A segment is a paragraph, a heading, a list item, a cell, a
subtitle: split into sentences, its inline markup and protected spans kept (`nmt.documents
.blocks`). What is not a segment is the same bytes after (for a .docx, the same XML in every
part: the package is written again by python-docx). A segment the search finds no translation
for keeps its source text, with a warning naming it: a document keeps its shape.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from nmt.config import TextFormat, TextOptions
from nmt.documents import html, markdown, srt
from nmt.documents.job import translate_blocks
from nmt.documents.segments import Document
from nmt.documents.texts import read_block
from nmt.documents.word import WordDocument
from nmt.errors import NMTError
from nmt.translation.request import Request
from nmt.translation.translator import Translator

log = logging.getLogger(__name__)

BY_EXTENSION = {
    ".html": TextFormat.html, ".htm": TextFormat.html, ".xhtml": TextFormat.html,
    ".md": TextFormat.markdown, ".markdown": TextFormat.markdown,
    ".srt": TextFormat.srt, ".docx": TextFormat.docx,
}  # fmt: skip
FILE_FORMATS = (TextFormat.html, TextFormat.markdown, TextFormat.srt, TextFormat.docx)


class DocumentFile:
    """A document file read: its segments (text, how it is read) and how it is written."""

    def __init__(self, path: Path, fmt: TextFormat):
        self.path, self.fmt = path, fmt
        if fmt == TextFormat.docx:
            self.word = WordDocument.read(path)
            return
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise NMTError(f"input={path}: not UTF-8 text ({err})") from None
        readers = {TextFormat.html: html.read, TextFormat.markdown: markdown.read,
                   TextFormat.srt: srt.read}  # fmt: skip
        self.text: Document = readers[fmt](text)

    def segments(self) -> list[tuple[str, TextFormat]]:
        if self.fmt == TextFormat.docx:
            return self.word.segments()
        return [(t, s.fmt) for t, s in zip(self.text.texts(), self.text.segments)]

    def write(self, translations: list[str], path: Path) -> None:
        """The translated document to `path`, which appears whole or not at all."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        if self.fmt == TextFormat.docx:
            self.word.save(translations, tmp)
        else:
            tmp.write_bytes(self.text.write(translations).encode("utf-8"))
        os.replace(tmp, path)


def open_document(path: Path, fmt: TextFormat) -> DocumentFile | None:
    """The document `path` is, or None for a file of lines. A file is a document by its
    extension (.html, .md, .srt, .docx: read as `fmt` says, or as the extension says with
    auto), or when `fmt` is srt or docx, formats of files only; a file of any other name, or
    any file with format=text, is lines, each read as `fmt` (format=html: HTML a line)."""
    by_name = BY_EXTENSION.get(path.suffix.lower())
    if fmt == TextFormat.text or (by_name is None and fmt not in (TextFormat.srt, TextFormat.docx)):
        return None
    if fmt in (TextFormat.auto, TextFormat.xml):
        fmt = by_name
    if not path.is_file():
        raise NMTError(f"input={path}: no such file")
    return DocumentFile(path, fmt)


def translate_segments(
    translator: Translator,
    segments: list[tuple[str, TextFormat]],
    request: Request,
    options: TextOptions,
) -> list[str]:
    """Each segment (text, format) translated with `request`'s settings, target language and
    numbering (its texts are not read: the segments are); a segment the search found no
    translation for keeps its source, with a warning naming it."""
    blocks = [read_block(text, fmt, options) for text, fmt in segments]
    results = translate_blocks(translator, blocks, request, options)
    out = []
    for n, (result, block) in enumerate(zip(results, blocks), request.first_line):
        if result.failure is not None:
            log.warning("%s %d keeps its source text: %s", request.noun, n, result.failure)
        out.append(result.text if result.failure is None else block.render())
    return out
