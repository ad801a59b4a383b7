"""A SubRip (.srt) file's segments: each subtitle's text lines, its number and timing untouched.

    doc = read("1\\n00:00:01,000 --> 00:00:02,500\\nEin Hund\\nläuft.\\n\\n")
    doc.texts()   # ["Ein Hund\\nläuft."]

A subtitle is a block of lines between blank lines: a number, a timing line (`-->`), then its
text (a cue written without the blank line before it starts at its timing line all the same).
The text is one segment read with its tags (players honour `<i>`, `<b>`, `<font color=...>`)
but no entities: `&` is a character, written back as it was (TextFormat.srt), broken into as
many lines as it had, of even length (`nmt.documents.segments.wrap`).
Line endings (LF or CRLF), a byte-order mark, the numbers, timings and positions after them, and
a block that is not a subtitle are written as read. A sentence that runs over two subtitles is
translated as two pieces, each in its own subtitle's time.

Read here rather than with pysrt or srt from the package index: both parse a subtitle into
numbers and times and write it back in their own form (a timing `0:00:01.5` or an extra blank line
comes out normalised), and this file's non-text bytes must come out as they went in.
"""

from __future__ import annotations

import re

from nmt.config import TextFormat
from nmt.documents.segments import Document, Segment

_TIMING = re.compile(r"^\s*\d+:\d+:\d+[,.]\d+\s*-->\s*\d+:\d+:\d+[,.]\d+")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\n|\r)?")


def read(text: str) -> Document:
    """The file's subtitles as segments (see the module's notes)."""
    lines = []  # (start, end of its text) of every line, its line ending left out
    for match in _LINE.finditer(text):
        if match.start() == len(text):
            break
        body = match.group().rstrip("\r\n")
        lines.append((match.start(), match.start() + len(body)))
    segments, block = [], []
    for start, end in [*lines, (len(text), len(text))]:  # a blank line after the last block
        if text[start:end].strip():
            block.append((start, end))
            continue
        for cue in _cues(text, block):
            segment = _subtitle(text, cue)
            if segment is not None:
                segments.append(segment)
        block = []
    return Document(text, segments)


def _cues(text: str, block: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """A block of lines parted where a cue starts without the blank line before it: at a timing
    line after the block's first, with its number line when it has one. Without this, the next
    cue's number and timing would be read as the text of the one before, and translated."""
    timings = [k for k, (s, e) in enumerate(block) if _TIMING.match(text[s:e])]
    starts = [0]
    for k in timings[1:]:
        numbered = k - 1 > timings[0] and text[slice(*block[k - 1])].strip().isdigit()
        starts.append(k - 1 if numbered else k)
    return [block[a:b] for a, b in zip(starts, [*starts[1:], len(block)])]


def _subtitle(text: str, block: list[tuple[int, int]]) -> Segment | None:
    """A block's text lines as a segment, when it is a subtitle (a timing line near its top)."""
    for k, (start, end) in enumerate(block[:2]):
        if _TIMING.match(text[start:end]):
            spans = block[k + 1 :]
            if spans and any(ch.isalpha() for s, e in spans for ch in text[s:e]):
                return Segment(spans, TextFormat.srt, wrap=True)
            return None
    return None
