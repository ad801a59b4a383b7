"""Markdown: a paragraph's inline syntax as codes (`lift_markdown`), and a file's blocks (`read`,
`write`) with everything that is not text kept byte for byte: code blocks and fences, HTML
blocks, link targets, heading, list and quote markers, table rules.

    doc = read("# Titel\\n\\nEin *Hund* läuft.\\n\\n```\\ncode\\n```\\n")
    doc.texts()   # ["Titel", "Ein *Hund* läuft."]

Inline: code spans and images are points (verbatim), a link `[text](target)` is a pair around
its text (`[` ... `](target)`), emphasis (`*`, `_`, `**`, `__`, `~~`) pairs where it opens
before a word and closes after one, autolinks (`<https://...>`) and inline HTML are codes as in
HTML (`nmt.documents.inline`). Each token is found where it may start and its end is looked up
(the next ")", the next run of as many backticks), not scanned for from every start: a paragraph
is read in linear time whatever it holds. Blocks come from markdown-it-py's parse (its line map
of each paragraph, heading, list item, quote and table), a well-kept CommonMark parser; the
inline part is read here because markdown-it-py's inline tokens carry no offsets into the
source, so they could not put the same bytes back.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator

from markdown_it import MarkdownIt

from nmt.config import TextFormat
from nmt.documents.inline import Block, Code, Marks, Opened, code_at
from nmt.documents.segments import Document, Segment

# YAML front matter: after a byte-order mark, if any; its lines may end in CRLF
_FRONT_MATTER = re.compile(
    r"\A\ufeff?---[ \t]*\r?\n.*?^(?:---|\.\.\.)[ \t]*\r?$", re.DOTALL | re.MULTILINE
)

# where an inline token may start: a run of backticks (a code span), an image, "<" (an autolink,
# a tag, a comment), a link's "[" or its "](target)", an emphasis delimiter. What follows each
# is looked up (`_token`), not scanned for by a pattern from every start: a "](" whose ")" never
# comes would be read to the text's end from each one
_START = re.compile(r"`+|!\[|<|\[|\]|\*\*|__|~~|\*|_")
_AUTOLINK = re.compile(r"<(?:https?|ftp|mailto):")


def lift_markdown(raw: str) -> Block:
    """One paragraph's inline Markdown as text and codes (see the module's notes)."""
    text, codes, at = [], [], []
    length, end = 0, 0
    opened = Opened()  # the codes not yet closed, by their delimiter (or "[")

    def add(code: Code) -> None:
        codes.append(code)
        at.append(length)

    def close(wanted: str, token: str) -> bool:
        """Close the innermost open `wanted` (its partner's code) with `token`; False if none."""
        closed = opened.close(wanted)
        if closed is None:
            return False
        k, inside = closed
        for inner in inside:  # left open inside it: points
            codes[inner] = Code(codes[inner].raw, "point")
        codes[k] = Code(codes[k].raw, "open", len(codes))
        add(Code(token, "close", k))
        return True

    for kind, start, stop in _tokens(raw):
        token = raw[start:stop]
        chunk = raw[end:start]
        before = raw[start - 1] if start else " "
        after = raw[stop] if stop < len(raw) else " "
        if kind == "delim" and not _delimits(token, before, after, opened):
            continue  # an ordinary character: stays in the text
        text.append(chunk)
        length += len(chunk)
        end = stop
        if kind in ("code", "image", "autolink", "tag"):
            add(Code(token, "point"))
        elif kind == "link_open":
            opened.push(len(codes), "[")
            add(Code(token, "open"))
        elif kind == "link_close":
            close("[", token)
        else:  # an emphasis delimiter: it closes the last one like it, or opens
            closes = not before.isspace() and token in opened
            if not (closes and close(token, token)):
                opened.push(len(codes), token)
                add(Code(token, "open"))
    text.append(raw[end:])
    for k in opened:  # never closed: the character stays as it was, a point
        codes[k] = Code(codes[k].raw, "point")
    return Block("".join(text), codes, at, markup=False, source=raw)


def _tokens(raw: str) -> Iterator[tuple[str, int, int]]:
    """Each inline token of `raw` in order, as (kind, start, end): "code" (a code span, its
    backticks and all), "image", "autolink", "tag" (a tag, a comment, a CDATA section),
    "link_open" (a "[" whose "](target)" or "][ref]" follows), "link_close" ("](target)",
    "][ref]") or "delim" (`*`, `_`, `**`, `__`, `~~`)."""
    marks, runs = Marks(raw), _Runs(raw)
    at = 0
    while (head := _START.search(raw, at)) is not None:
        start, at = head.start(), head.start() + 1
        kind, end = _token(raw, head, marks, runs)
        if end is not None:
            yield kind, start, end
            at = end
        elif kind == "code":  # no code span starts anywhere in this run of backticks
            at = head.end()


def _token(raw: str, head: re.Match, marks: Marks, runs: _Runs) -> tuple[str, int | None]:
    """The token that starts where `head` (a match of _START) does: (its kind, its end; None when
    there is none there after all)."""
    start, first = head.start(), head.group()[0]
    if first == "`":
        return "code", runs.closer(start, head.end())
    if first == "!":  # ![alt](target)
        alt = marks.next(r"\]", start + 2)
        if alt and raw.startswith("(", alt[1]):
            target = marks.next(r"\)", alt[1] + 1)
            return "image", target[1] if target else None
        return "image", None
    if first == "<":
        scheme = _AUTOLINK.match(raw, start)
        if scheme:  # <https://...>: up to the first ">" before any whitespace
            stop = marks.next(r"[>\s]", scheme.end())
            if stop and stop[0] > scheme.end() and raw[stop[0]] == ">":
                return "autolink", stop[1]
        found = code_at(raw, start, marks)
        return "tag", found[0] if found else None
    if first == "[":  # a link's text (no brackets in it), then its "(target)" or "[ref]"
        close = marks.next(r"[\[\]]", start + 1)
        if close and raw[close[0]] == "]" and close[0] - start - 1 <= 1000:
            return "link_open", start + 1 if _target(raw, close[1], marks, near=True) else None
        return "link_open", None
    if first == "]":
        return "link_close", _target(raw, start + 1, marks)
    return "delim", head.end()


def _target(raw: str, start: int, marks: Marks, near: bool = False) -> int | None:
    """The end of the link target "(...)" or reference "[...]" that starts at `start`; None if
    none does. `near`: of at most 2,000 characters inside the parentheses, 1,000 inside the
    brackets (how far a "[" looks ahead for its link's end)."""
    closer, most = {"(": (r"\)", 2000), "[": (r"\]", 1000)}.get(raw[start : start + 1], ("", 0))
    close = marks.next(closer, start + 1) if closer else None
    if close is None or (near and close[0] - start - 1 > most):
        return None
    return close[1]


class _Runs:
    """A text's runs of backticks by their length, for the run that closes a code span."""

    def __init__(self, raw: str):
        self.starts: dict[int, list[int]] = {}  # length: the starts of its runs, in order
        for run in re.finditer("`+", raw):
            self.starts.setdefault(len(run.group()), []).append(run.start())

    def closer(self, start: int, end: int) -> int | None:
        """The end of the code span whose opening run is [start, end): at the first later run of
        its length, else of the longest shorter length that has one; None if none does."""
        for length in range(end - start, 0, -1):
            starts = self.starts.get(length, ())
            k = bisect_right(starts, start)
            if k < len(starts):
                return starts[k] + length
        return None


def _delimits(token: str, before: str, after: str, opened: Opened) -> bool:
    """Whether an emphasis delimiter is one here: it opens before a word or closes after one;
    `_` not inside a word (snake_case)."""
    opens = not after.isspace() and (token[0] != "_" or not before.isalnum())
    closes = not before.isspace() and token in opened
    if token[0] == "_" and after.isalnum() and before.isalnum():
        return False
    return opens or closes


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
