"""Document files: which format a file is, its segments, and the file written from their
translations. nmt-translate's file job (`nmt.cli.translate`) translates the segments in resumable
chunks as it translates lines.

    doc = open_document(Path("page.html"), TextFormat.auto)   # None: a file of lines
    done = translate_segments(translator, doc.segments(), Request([], decode), options)
    doc.write(done, Path("page.en.html"))

Each format is read and written by its module, found in the one table of formats
(`nmt.documents.formats`) by the file's extension or as `format=` says. A segment is a
paragraph, a heading, a list item, a cell, a subtitle: split into sentences, its inline markup
and protected spans kept (`nmt.documents.blocks`). What is not a segment is the same bytes after.
A segment the search finds no translation for keeps its source text, with a warning naming it: a
document keeps its shape. With a translation memory (tm=FILE), a segment without inline markup
whose text the memory holds is written as the memory has it (escaped as its format needs); a
segment with inline tags goes to the model, since the memory's text has lost its tags
(`nmt.data.tmx`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from nmt.config import TextFormat, TextOptions
from nmt.documents.formats import FileFormat, format_of, sniff
from nmt.documents.inline import apply_inserts
from nmt.documents.job import translate_blocks
from nmt.documents.texts import read_block
from nmt.errors import NMTError
from nmt.translation.memory import TranslationMemory
from nmt.translation.request import Request
from nmt.translation.translator import Translator

log = logging.getLogger(__name__)


class DocumentFile:
    """A document file read: its segments (text, how each is read) and how it is written."""

    def __init__(self, path: Path, fileformat: FileFormat):
        self.path, self.format = path, fileformat
        self.opened = fileformat.open(path.read_bytes(), str(path))

    def segments(self) -> list[tuple[str, TextFormat]]:
        return self.opened.segments()

    def write(self, translations: list[str], path: Path) -> None:
        """The translated document to `path`, which appears whole or not at all."""
        data = self.opened.write(translations)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)


def open_document(path: Path, option: TextFormat) -> DocumentFile | None:
    """The document `path` is (`nmt.documents.formats.format_of`: by `option`, format=, or by
    its extension), or None for a file of lines, whose bytes are checked to be text first
    (`sniff`: a zip or a PDF under another name is refused, never read as lines)."""
    found = format_of(path, option)
    if found is None:
        if path.is_file():
            sniff(path)
        return None
    if not path.is_file():
        raise NMTError(f"input={path}: no such file")
    return DocumentFile(path, found)


def translate_segments(
    translator: Translator,
    segments: list[tuple[str, TextFormat]],
    request: Request,
    options: TextOptions,
    memory: TranslationMemory | None = None,
) -> list[str]:
    """Each segment (text, format) translated with `request`'s settings, target language and
    numbering (its texts are not read: the segments are); a segment the search found no
    translation for keeps its source, with a warning naming it. A segment `memory` holds is
    blanked for the search (no cost, the others' numbers kept) and written from the memory."""
    found = remembered(segments, memory) if memory is not None else {}
    blocks = [read_block("" if i in found else s[0], s[1], options) for i, s in enumerate(segments)]
    results = translate_blocks(translator, blocks, request, options)
    out = []
    for n, (result, block) in enumerate(zip(results, blocks), request.first_line):
        if result.failure is not None:
            log.warning("%s %d keeps its source text: %s", request.noun, n, result.failure)
        out.append(result.text if result.failure is None else block.render())
    for i, written in found.items():
        out[i] = written
    return out


def remembered(segments: list[tuple[str, TextFormat]], memory: TranslationMemory) -> dict[int, str]:
    """Index -> the memory's translation as the file writes it, for each segment without inline
    markup (protected spans aside: a number is text to a memory) whose text the memory holds."""
    bare = TextOptions(protect=[])
    found = {}
    for i, (text, fmt) in enumerate(segments):
        block = read_block(text, fmt, bare)
        target = None if block.codes else memory.lookup(block.text)
        if target is not None:
            found[i] = apply_inserts(target, [], block.markup)
    return found
