"""A text file as the segments it translates and the bytes around them: what the readers of HTML,
Markdown and SubRip files (`html.py`, `markdown.py`, `srt.py`) return, and how a translated file
is written from it.

    doc = Document(text, [Segment([(10, 25)], TextFormat.html)])
    doc.texts()                       # ["<b>Hallo</b> Welt"]: each segment as its format reads it
    doc.write(["<b>Hello</b> world"])  # the file, each segment's place holding its translation

A segment is one or more spans of the file, one per line it covers (a Markdown paragraph's lines
without their "> " or list indentation, a subtitle's lines): its text is the spans joined by line
breaks (a segment of one span, an HTML paragraph, keeps its line breaks inside it). Written back
over several spans, a translation with as many lines as the segment had takes the spans one
line each; a shorter one ends where the segment's last line ended (the lines it does not fill are
removed with their prefixes); `wrap` first breaks a one-line translation into as many lines as
the source had, of even length (subtitles keep their two lines). Everything outside the spans is
written as it was read: a file whose every translation equals its source is the same bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nmt.config import TextFormat

_SPACE_OUTSIDE_TAGS = re.compile(r" (?![^<>]*>)")


@dataclass(frozen=True)
class Segment:
    spans: list[tuple[int, int]]  # (start, end) characters of the file, one per line, in order
    fmt: TextFormat  # how its text is read: text, html, xml or markdown (nmt.documents.texts)
    wrap: bool = False  # a one-line translation is broken into as many lines as the spans


@dataclass
class Document:
    text: str
    segments: list[Segment] = field(default_factory=list)

    def texts(self) -> list[str]:
        return ["\n".join(self.text[s:e] for s, e in seg.spans) for seg in self.segments]

    def write(self, translations: list[str]) -> str:
        """The file with each segment's spans holding its translation (see the module's notes)."""
        if len(translations) != len(self.segments):
            raise ValueError(f"{len(translations)} translations of {len(self.segments)} segments")
        edits: list[tuple[int, int, str]] = []
        for seg, translation in zip(self.segments, translations):
            lines = translation.split("\n") if len(seg.spans) > 1 else [translation]
            if seg.wrap and len(lines) == 1 < len(seg.spans):
                lines = wrap(translation, len(seg.spans))
            if len(lines) > len(seg.spans):  # more lines than places: the rest on the last
                lines = lines[: len(seg.spans) - 1] + [" ".join(lines[len(seg.spans) - 1 :])]
            for (start, end), line in zip(seg.spans, lines[:-1]):
                edits.append((start, end, line))
            last = len(lines) - 1
            edits.append((seg.spans[last][0], seg.spans[-1][1], lines[-1]))
        out, done = [], 0
        for start, end, line in sorted(edits):
            out += [self.text[done:start], line]
            done = end
        out.append(self.text[done:])
        return "".join(out)


def wrap(text: str, lines: int) -> list[str]:
    """`text` broken at spaces (not those inside a tag) into at most `lines` lines of about even
    length (fewer when it has fewer words); a text without spaces stays one line."""
    words = _SPACE_OUTSIDE_TAGS.split(text)  # never inside a tag: <font color="red">
    if lines <= 1 or len(words) < 2:
        return [text]
    lines = min(lines, len(words))
    out, start = [], 0
    for k in range(1, lines):
        # the break (before word b) whose line ends nearest k/lines of the text's length, leaving
        # a word for each line still to come
        goal = len(text) * k / lines
        breaks = range(start + 1, len(words) - (lines - k) + 1)
        b = min(breaks, key=lambda b: abs(len(" ".join(words[:b])) - goal))
        out.append(" ".join(words[start:b]))
        start = b
    out.append(" ".join(words[start:]))
    return out
