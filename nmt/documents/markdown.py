"""Markdown: a paragraph's inline syntax as codes (`lift_markdown`), and a file's blocks (`read`,
`write`) with everything that is not text kept byte for byte: code blocks and fences, HTML
blocks, link targets, heading, list and quote markers, table rules.

    doc = read("# Titel\\n\\nEin *Hund* läuft.\\n\\n```\\ncode\\n```\\n")
    doc.texts()   # ["Titel", "Ein *Hund* läuft."]

Inline: code spans and images are points (verbatim), a link `[text](target)` is a pair around
its text (`[` ... `](target)`), emphasis (`*`, `_`, `**`, `__`, `~~`) pairs where it opens
before a word and closes after one, autolinks (`<https://...>`) and inline HTML are codes as in
HTML (`nmt.documents.inline`). Blocks come from markdown-it-py's parse (its line map of each
paragraph, heading, list item, quote and table), a well-kept CommonMark parser; the inline part
is read here because markdown-it-py's inline tokens carry no offsets into the source, so they
could not put the same bytes back.
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

from nmt.config import TextFormat
from nmt.documents.inline import TAG, Block, Code
from nmt.documents.segments import Document, Segment

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n.*?^(?:---|\.\.\.)[ \t]*$", re.DOTALL | re.MULTILINE)

_INLINE = re.compile(
    r"(?P<code>(`+)(?:.+?)(?<!`)\2(?!`))"
    r"|(?P<image>!\[[^\]]*\]\([^)]*\))"
    r"|(?P<autolink><(?:https?|ftp|mailto):[^>\s]+>)"
    r"|(?P<link_open>\[)(?=[^\[\]]{0,1000}\](?:\([^)]{0,2000}\)|\[[^\]]{0,1000}\]))"
    r"|(?P<link_close>\](?:\([^)]*\)|\[[^\]]*\]))"
    r"|(?P<tag>" + TAG.pattern + r")"
    r"|(?P<delim>\*\*|__|~~|\*|_)",
    re.DOTALL,
)


def lift_markdown(raw: str) -> Block:
    """One paragraph's inline Markdown as text and codes (see the module's notes)."""
    text, codes, at = [], [], []
    length, end = 0, 0
    opened: list[tuple[int, str]] = []  # (code index, delimiter or "[") not yet closed

    def add(code: Code) -> None:
        codes.append(code)
        at.append(length)

    for match in _INLINE.finditer(raw):
        kind = _kind(match)
        token = match.group()
        chunk = raw[end : match.start()]
        before = raw[match.start() - 1] if match.start() else " "
        after = raw[match.end()] if match.end() < len(raw) else " "
        if kind == "delim" and not _delimits(token, before, after, opened):
            continue  # an ordinary character: stays in the text
        text.append(chunk)
        length += len(chunk)
        end = match.end()
        if kind in ("code", "image", "autolink", "tag"):
            add(Code(token, "point"))
        elif kind == "link_open":
            opened.append((len(codes), "["))
            add(Code(token, "open"))
        elif kind == "link_close":
            _close(codes, at, opened, "[", token, add)
        else:  # an emphasis delimiter: it closes the last one like it, or opens
            closes = not before.isspace() and any(d == token for _, d in opened)
            if not (closes and _close(codes, at, opened, token, token, add)):
                opened.append((len(codes), token))
                add(Code(token, "open"))
    text.append(raw[end:])
    for k, _ in opened:  # never closed: the character stays as it was, a point
        codes[k] = Code(codes[k].raw, "point")
    return Block("".join(text), codes, at, markup=False, source=raw)


_KINDS = ("code", "image", "autolink", "link_open", "link_close", "tag", "delim")


def _kind(match: re.Match) -> str:
    for name in _KINDS:
        if match.group(name) is not None:
            return name
    return "tag"


def _delimits(token: str, before: str, after: str, opened: list[tuple[int, str]]) -> bool:
    """Whether an emphasis delimiter is one here: it opens before a word or closes after one;
    `_` not inside a word (snake_case)."""
    opens = not after.isspace() and (token[0] != "_" or not before.isalnum())
    closes = not before.isspace() and any(d == token for _, d in opened)
    if token[0] == "_" and after.isalnum() and before.isalnum():
        return False
    return opens or closes


def _close(codes: list[Code], at: list[int], opened: list, wanted: str, token: str, add) -> bool:
    """Close the innermost open `wanted` (its partner's code) with `token`; False if none."""
    for i in range(len(opened) - 1, -1, -1):
        k, delimiter = opened[i]
        if delimiter == wanted:
            for inner, _ in opened[i + 1 :]:  # left open inside it: points
                codes[inner] = Code(codes[inner].raw, "point")
            del opened[i:]
            codes[k] = Code(codes[k].raw, "open", len(codes))
            add(Code(token, "close", k))
            return True
    return False


def read(text: str) -> Document:
    """A Markdown file's segments: the inline content of each paragraph, heading, list item,
    quote and table cell, one span per line (without the line's "> ", list marker or
    indentation). Code blocks, fences, HTML blocks, link reference definitions, rules and a YAML
    front matter are not segments: they are written as read."""
    parser = MarkdownIt("commonmark").enable("table")
    front = _FRONT_MATTER.match(text)
    skip_lines = text[: front.end()].count("\n") + 1 if front else 0
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    cursor = [0] * (len(lines) + 1)  # per line: where the next cell's text may start
    segments = []
    for token in parser.parse(text):
        if token.type != "inline" or token.map is None or token.map[0] < skip_lines:
            continue
        spans = _spans(token.content.split("\n"), token.map[0], lines, starts, cursor)
        if spans and any(ch.isalpha() for ch in token.content):
            segments.append(Segment(spans, TextFormat.markdown))
    return Document(text, segments)


def _spans(content: list[str], first: int, lines: list[str], starts: list[int], cursor: list[int]):
    """Where each line of an inline token's content is in the file; None when one cannot be
    found as it is (a tab expanded by the parser): the segment is then left as it was."""
    spans = []
    for k, part in enumerate(content):
        n = first + k
        if n >= len(lines):
            return None
        at = lines[n].find(part, cursor[n]) if part else -1
        if at < 0:
            return None
        cursor[n] = at + len(part)
        spans.append((starts[n] + at, starts[n] + at + len(part)))
    return spans
