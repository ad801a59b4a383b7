"""An OpenDocument text or presentation (.odt, .odp): its paragraphs translated, the rest of the
package copied.

    doc = read(data, "report.odt")
    doc.segments()   # [("Titel", text), ("<r0>Ein </r0><r1>Hund</r1><x2/> läuft.", xml), ...]
    doc.write(translations)   # the package, content.xml (and styles.xml) holding them

A segment is a paragraph or a heading (`text:p`, `text:h`) wherever it stands in content.xml's
body: the text, table cells, lists, frames and text boxes, a slide's `draw:text-box`, a slide's
speaker notes (`presentation:notes`), a footnote's or endnote's body (`text:note-body`: its
paragraphs are segments of their own, the citation stays where it was in its paragraph); and a
slide's header and footer text (`presentation:footer-decl`). styles.xml is read for the page
headers and footers of a text document (`style:header`, `style:footer` and their left and first
page variants) and for nothing else: a presentation's master pages hold layout placeholders
("Click to add Title") that nobody sees in a slide show. Comments (`office:annotation`) and
tracked deletions are not translated.

A paragraph that is one stretch of text (in the paragraph itself or in its one `text:span`) is
read as plain text. Any other is read as XML: each span or link (`text:span`, `text:a`) holding
text is a pair of codes `<rK>`...`</rK>` (the word alignment puts its formatting on the words its
text became, `nmt.documents.inline`), and every other element is a point `<xK/>` kept whole and
moved to where its words went: spaces (`text:s`), tabs, line breaks, frames and images, a note's
citation and body, bookmarks, fields with their values, soft page breaks. A space, tab or line
break between two words with no space beside it is read with a space after its code (the model
reads "Name Value", not "NameValue"), taken out again when written. Written back, a paragraph is
rebuilt from its translation: its text nodes hold the translated words, its elements are the same
objects (attributes, children and all) in the order the codes came back; a point the translation
lost is put at the paragraph's end, never dropped. A paragraph whose translation equals its
source is not touched, and a part none of whose paragraphs changed is not rewritten.

Read with lxml (entities not resolved, no network, libxml2's nesting limit of 256), and only the
parts holding changed paragraphs are serialised again, after their original XML declaration.
A part parsed and serialised unchanged is the same bytes (measured on the test files).

Not odfpy: loading and saving a document with it writes the package anew in its own form, where a
translated file should be the original with only its text changed. Measured with odfpy 1.4.1 on
an untranslated .odt: content.xml, styles.xml, meta.xml and the manifest rewritten (its own
declaration, every namespace it knows declared on each root), styles.xml moved before content.xml,
and a member the manifest does not list (Thumbnails/thumbnail.png) dropped.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from lxml import etree

from nmt.config import TextFormat
from nmt.documents.package import Package
from nmt.errors import NMTError

_NS = {
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "style": "urn:oasis:names:tc:opendocument:xmlns:style:1.0",
    "presentation": "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0",
}


def _tag(name: str) -> str:
    """The Clark name ("{uri}p") of a prefixed name ("text:p")."""
    prefix, local = name.split(":")
    return f"{{{_NS[prefix]}}}{local}"


def _tags(*names: str) -> frozenset[str]:
    return frozenset(_tag(n) for n in names)


MIMETYPES = (
    "application/vnd.oasis.opendocument.text",
    "application/vnd.oasis.opendocument.text-template",
    "application/vnd.oasis.opendocument.presentation",
    "application/vnd.oasis.opendocument.presentation-template",
)
PARAGRAPHS = _tags("text:p", "text:h")
RUNS = _tags("text:span", "text:a")  # inline elements whose text is translated: code pairs
SEPARATORS = _tags("text:s", "text:tab", "text:line-break")  # points that part words
NOT_TRANSLATED = _tags("office:annotation", "text:tracked-changes")  # paragraphs inside them
DECLARATIONS = _tags("presentation:header-decl", "presentation:footer-decl")  # plain text
HEADERS = _tags(
    "style:header", "style:header-left", "style:header-first",
    "style:footer", "style:footer-left", "style:footer-first",
)  # fmt: skip
_CODE = re.compile(r"<(/?)r(\d+)>|<x(\d+)/>")
# what comes before the root element: a byte-order mark, the declaration, comments, a doctype
_PROLOG = re.compile(rb"(?:\xef\xbb\xbf)?(?:\s*(?:<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^>]*>))*\s*", re.S)
_ENCODING = re.compile(rb"""^(?:\xef\xbb\xbf)?<\?xml[^>]*encoding=["']([\w.-]+)["']""")
PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)

Token = tuple[str, object]  # ("text", str), ("open" | "close" | "point", code index)


def read(data: bytes, name: str) -> OpenDocument:
    """The OpenDocument file `name` holding `data` (`nmt.documents.formats`): a package with a
    content.xml, whose mimetype, where it has one, is a text or a presentation's."""
    package = Package.read(data, name)
    if package.has("mimetype"):
        mimetype = package.member("mimetype").decode("ascii", "replace").strip()
        if mimetype not in MIMETYPES:
            raise NMTError(
                f"{name}: its mimetype is {mimetype!r}, not an OpenDocument text or "
                "presentation (.odt, .odp) nmt translates"
            )
    if not package.has("content.xml"):
        raise NMTError(f"{name}: not an OpenDocument file (it has no content.xml)")
    return OpenDocument(package)


@dataclass
class Paragraph:
    """A segment: a paragraph's text as read, and the elements its codes stand for."""

    element: etree._Element  # the paragraph (or, read as plain text, what holds its text)
    source: str
    fmt: TextFormat
    codes: list[etree._Element] = field(default_factory=list)  # code K's element
    pairs: set[int] = field(default_factory=set)  # the codes read as pairs (runs of text)
    glued: set[int] = field(default_factory=set)  # separators read with a space after them
    lead: str = ""  # a plain text's outer whitespace, kept
    trail: str = ""


@dataclass
class Part:
    member: str  # content.xml, styles.xml
    raw: bytes
    root: etree._Element
    paragraphs: list[Paragraph]


class OpenDocument:
    """An OpenDocument package and the paragraphs it translates (see the module's notes)."""

    def __init__(self, package: Package) -> None:
        self.package = package
        self.read = self.parts()  # a broken part is refused now, before any translation

    def parts(self) -> list[Part]:
        """content.xml's and styles.xml's paragraphs, parsed anew (a write starts from the
        original each time)."""
        parts = [_part(self.package, "content.xml", _body_paragraphs)]
        if self.package.has("styles.xml"):
            parts.append(_part(self.package, "styles.xml", _header_paragraphs))
        return parts

    def segments(self) -> list[tuple[str, TextFormat]]:
        return [(p.source, p.fmt) for part in self.read for p in part.paragraphs]

    def write(self, translations: list[str]) -> bytes:
        """The package with each paragraph holding its translation, the parts none of whose
        paragraphs changed copied as they were (`Opened`)."""
        parts = self.parts()
        count = sum(len(part.paragraphs) for part in parts)
        if len(translations) != count:
            raise ValueError(f"{len(translations)} translations of {count} segments")
        done, changed = iter(translations), {}
        for part in parts:
            written = [_write(p, next(done)) for p in part.paragraphs]
            if any(written):
                changed[part.member] = _serialised(part.raw, part.root)
        return self.package.write(changed)


def _part(package: Package, member: str, find) -> Part:
    raw = package.member(member)
    try:
        root = etree.fromstring(raw, PARSER)
    except etree.XMLSyntaxError as err:
        raise NMTError(f"{package.name}: {member} is not well-formed XML ({err})") from None
    found = (_paragraph(element) for element in find(root))
    return Part(member, raw, root, [p for p in found if p is not None])


def _body_paragraphs(root: etree._Element):
    """content.xml's paragraphs and slide header/footer texts, in document order."""
    for body in root.iterchildren(_tag("office:body")):
        for element in body.iter(*PARAGRAPHS, *DECLARATIONS):
            if not any(a.tag in NOT_TRANSLATED for a in element.iterancestors()):
                yield element


def _header_paragraphs(root: etree._Element):
    """styles.xml's page header and footer paragraphs."""
    for header in root.iter(*HEADERS):
        for element in header.iter(*PARAGRAPHS):
            if not any(a.tag in NOT_TRANSLATED for a in element.iterancestors()):
                yield element


def _paragraph(element: etree._Element) -> Paragraph | None:
    """A paragraph as a segment, or None when it holds no letter."""
    codes: list[etree._Element] = []
    tokens = _tokens_of(element, codes)
    if not any(kind == "text" and any(ch.isalpha() for ch in v) for kind, v in tokens):
        return None
    holder = _plain_holder(element, codes)
    if holder is not None:
        text = holder.text or ""
        source = _collapsed(text.strip())
        lead, trail = text[: len(text) - len(text.lstrip())], text[len(text.rstrip()) :]
        return Paragraph(holder, source, TextFormat.text, lead=lead, trail=trail)
    out, glued = [], set()
    for i, (kind, value) in enumerate(tokens):
        if kind == "text":
            out.append(html.escape(_collapsed(value), quote=False))
        elif kind == "point":
            out.append(f"<x{value}/>")
            if codes[value].tag in SEPARATORS and _is_glued(tokens, i):
                out.append(" ")
                glued.add(value)
        else:
            out.append(f"<{'/' if kind == 'close' else ''}r{value}>")
    pairs = {k for kind, k in tokens if kind == "open"}
    return Paragraph(element, "".join(out).strip(), TextFormat.xml, codes, pairs, glued)


def _tokens_of(element: etree._Element, codes: list[etree._Element]) -> list[Token]:
    """`element`'s content in order: its text, its runs as pairs, every other element a point;
    each code's element appended to `codes`."""
    tokens: list[Token] = [("text", element.text)] if element.text else []
    for child in element:
        k = len(codes)
        codes.append(child)
        if child.tag in RUNS and _has_text(child):
            tokens += [("open", k), *_tokens_of(child, codes), ("close", k)]
        else:
            tokens.append(("point", k))
        if child.tail:
            tokens.append(("text", child.tail))
    return tokens


def _has_text(run: etree._Element) -> bool:
    """Whether a run holds text other than whitespace (in itself, its runs, after its points)."""
    if run.text and run.text.strip():
        return True
    return any((c.tag in RUNS and _has_text(c)) or (c.tail or "").strip() for c in run)


def _plain_holder(element: etree._Element, codes: list[etree._Element]) -> etree._Element | None:
    """What holds a paragraph's one stretch of text (itself, or its one span of text alone), or
    None when the paragraph is more than that."""
    if not codes:
        return element
    run = codes[0]
    alone = len(codes) == 1 and not (element.text or "").strip() and not (run.tail or "").strip()
    return run if alone and run.tag in RUNS and len(run) == 0 else None


def _is_glued(tokens: list[Token], i: int) -> bool:
    """Whether the point tokens[i] stands between two characters other than spaces (past the
    opens and closes beside it)."""
    before, after = _beside(tokens, i, -1), _beside(tokens, i, 1)
    if before is None or after is None or "point" in (tokens[before][0], tokens[after][0]):
        return False
    return bool(tokens[before][1][-1:].strip()) and bool(tokens[after][1][:1].strip())


def _beside(tokens: list[Token], i: int, step: int) -> int | None:
    """The index of the token next to tokens[i] in direction `step`, past opens and closes."""
    j = i + step
    while 0 <= j < len(tokens) and tokens[j][0] in ("open", "close"):
        j += step
    return j if 0 <= j < len(tokens) else None


def _collapsed(text: str) -> str:
    """Whitespace as OpenDocument reads it: any run of it one space (spaces beyond the first are
    `text:s`)."""
    return re.sub(r"\s+", " ", text)


def _write(paragraph: Paragraph, translation: str) -> bool:
    """The paragraph holding `translation`; False when that is its source (left untouched)."""
    if translation == paragraph.source:
        return False
    if paragraph.fmt == TextFormat.text:
        paragraph.element.text = paragraph.lead + translation + paragraph.trail
        return True
    tokens = _translated_tokens(paragraph, translation)
    element, codes = paragraph.element, paragraph.codes
    for holder in (element, *(codes[k] for k in paragraph.pairs)):
        holder.text = None
        for child in list(holder):  # all codes: put back where the tokens say
            holder.remove(child)
    stack, placed = [element], set()
    for kind, k in tokens:
        if kind == "text":
            _append_text(stack[-1], k)
        elif kind == "close":
            if codes[k] in stack[1:]:
                while stack.pop() is not codes[k]:
                    pass
        elif k not in placed:
            placed.add(k)
            codes[k].tail = None
            stack[-1].append(codes[k])
            if kind == "open":
                stack.append(codes[k])
    for k, code in enumerate(codes):  # a point the translation lost: kept, at the end
        if k not in placed and k not in paragraph.pairs:
            code.tail = None
            element.append(code)
    return True


def _translated_tokens(paragraph: Paragraph, translation: str) -> list[Token]:
    """A translation's text and codes; codes it does not know, or of the wrong kind, dropped;
    the space read after a glued separator taken out on both its sides."""
    tokens: list[Token] = []
    done = 0
    for match in _CODE.finditer(translation):
        tokens.append(("text", html.unescape(translation[done : match.start()])))
        done = match.end()
        k = int(match.group(2) or match.group(3))
        pair = match.group(2) is not None
        if k < len(paragraph.codes) and pair == (k in paragraph.pairs):
            tokens.append(("point", k) if not pair else ("close" if match.group(1) else "open", k))
    tokens.append(("text", html.unescape(translation[done:])))
    for i, (kind, k) in enumerate(tokens):
        if kind == "point" and k in paragraph.glued:
            _strip_beside(tokens, i)
    return [t for t in tokens if t[0] != "text" or t[1]]


def _strip_beside(tokens: list[Token], i: int) -> None:
    """The whitespace next to tokens[i] on both sides (past opens and closes) taken out."""
    for step, strip in ((-1, str.rstrip), (1, str.lstrip)):
        j = _beside(tokens, i, step)
        if j is not None and tokens[j][0] == "text":
            tokens[j] = ("text", strip(tokens[j][1]))


def _append_text(parent: etree._Element, text: str) -> None:
    """`text` after whatever `parent` holds so far (its text, or its last child's tail)."""
    if len(parent):
        parent[-1].tail = (parent[-1].tail or "") + text
    else:
        parent.text = (parent.text or "") + text


def _serialised(raw: bytes, root: etree._Element) -> bytes:
    """A part's new bytes: its original declaration (and comments, doctype) before the root
    serialised, its original trailing whitespace after."""
    prolog = _PROLOG.match(raw).group()
    declared = _ENCODING.match(raw)
    encoding = declared.group(1).decode("ascii") if declared else "UTF-8"
    body = etree.tostring(root, encoding=encoding, xml_declaration=False)
    return prolog + body + raw[len(raw.rstrip()) :]
