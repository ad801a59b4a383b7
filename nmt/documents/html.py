"""An HTML file's segments: the runs of text and inline markup between block-level tags.

    doc = read("<html><body><h1>Titel</h1><p>Ein <b>Hund</b>.</p></body></html>")
    doc.texts()   # ["Titel", "Ein <b>Hund</b>."]

A segment starts after a block-level tag (`<p>`, `<li>`, `<h1>`, `<td>`, `<div>`, ... and their
closes) and ends before the next, its outer whitespace left out; it is read as HTML
(`nmt.documents.inline`: its inline tags kept around the words they wrap). What is not a
segment is written as it was read: the tags themselves with their attributes, comments, the
doctype, and the whole content of `<script>`, `<style>`, `<pre>`, `<textarea>`, `<svg>`,
`<math>`, `<template>` and `<code>` (verbatim by nature). A segment with no letter in it (a
number alone, an entity) is not translated. Attribute values (`title=`, `alt=`) are kept, not
translated.

Tags and comments are found as in a block (`nmt.documents.inline`, in linear time), a doctype
and a processing instruction likewise: one that never ends (`<!--` without `-->`) is text. A
hand-written scan rather than `html.parser`: the writer needs each segment's exact character
offsets in the file, which the standard parser only gives as (line, column) of its events, and
HTML that is not well-formed must come out the same bytes, not repaired.
"""

from __future__ import annotations

import re

from nmt.config import TextFormat
from nmt.documents.inline import SPANS, find_codes
from nmt.documents.segments import Document, Segment

BLOCK = {
    "address", "article", "aside", "blockquote", "body", "button", "caption", "dd", "details",
    "dialog", "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2",
    "h3", "h4", "h5", "h6", "head", "header", "hgroup", "hr", "html", "label", "legend", "li",
    "main", "menu", "meta", "nav", "ol", "optgroup", "option", "p", "section", "select",
    "summary", "table", "tbody", "td", "tfoot", "th", "thead", "title", "tr", "ul", "link",
}  # fmt: skip
VERBATIM = {"script", "style", "pre", "textarea", "svg", "math", "template", "code", "noscript"}
# what a file holds besides tags, comments and text: a doctype, a processing instruction (each as
# inline.SPANS: what starts it, what ends it)
_SPANS = (*SPANS, (re.compile("<![A-Za-z]"), ">"), (re.compile(r"<\?"), r"\?>"))


def read(text: str, xml: bool = False) -> Document:
    """The file's segments (see the module's notes); `xml`: read them as XML (no void tags)."""
    fmt = TextFormat.xml if xml else TextFormat.html
    segments: list[Segment] = []
    span: list[int] = []  # the segment under way: [first, end) characters, or empty
    skip = None  # the verbatim element whose content is being passed over

    def extend(start: int, end: int) -> None:
        chunk = text[start:end]
        if not span and not chunk.strip():
            return
        lead = len(chunk) - len(chunk.lstrip()) if not span else 0
        span[:] = [span[0] if span else start + lead, end]

    def flush() -> None:
        if span:
            first, end = span[0], span[0] + len(text[span[0] : span[1]].rstrip())
            if _has_letters(text[first:end]):
                segments.append(Segment([(first, end)], fmt))
            span.clear()

    where = 0
    for start, end, tag in find_codes(text, _SPANS):
        name, closing = _tag(tag)
        if skip is not None:
            if closing and name == skip:
                skip = None
            where = end
            continue
        extend(where, start)
        where = end
        if name in VERBATIM and not closing and not text[start:end].endswith("/>"):
            flush()
            skip = name
        elif name is None or name in BLOCK:  # a boundary: a comment or a doctype too
            flush()
        else:  # an inline tag: part of the segment
            extend(start, end)
    if skip is None:
        extend(where, len(text))
    flush()
    return Document(text, segments)


def _tag(tag: re.Match | None) -> tuple[str | None, bool]:
    """(the tag's name in lower case, whether it closes); (None, False) for a comment, CDATA, a
    doctype or a processing instruction (no tag)."""
    if tag is None:
        return None, False
    return tag.group(2).lower(), bool(tag.group(1))


def _has_letters(raw: str) -> bool:
    """Whether a letter is in `raw` outside its tags and other markup."""
    done = 0
    for start, end, _ in find_codes(raw, _SPANS):
        if any(ch.isalpha() for ch in raw[done:start]):
            return True
        done = end
    return any(ch.isalpha() for ch in raw[done:])
