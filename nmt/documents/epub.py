"""An EPUB book (.epub): the text of its content documents and its tables of contents translated,
every other byte of the package copied.

    book = read(data, "book.epub")
    book.segments()   # [("Kapitel 1", xml), ("Es war <i>einmal</i>.", xml), ("Kapitel 1", text)]
    book.write(translations)   # the package, its changed XHTML and NCX members rewritten

The book's parts are found as a reading system finds them: META-INF/container.xml names the
package document (the OPF), whose manifest and spine give the content documents in reading order.
Each XHTML content document of the spine (`application/xhtml+xml`; an SVG page or an image is
kept) is read as an HTML file read as XML (`nmt.documents.html`): its paragraphs, headings, list
items and cells are segments with their inline markup, everything else (the head's links and
styles, scripts, attributes, comments) is the same characters after. The EPUB 3 table of contents
(the navigation document, the manifest item with `properties="nav"`) is XHTML and read the same
way; the EPUB 2 one (toc.ncx) is read for the text of its entries (`navLabel/text`, in the
navMap, the pageList and navLists) and of its `docTitle`, each a plain text segment. The OPF's
`dc:title` is translated too (the title a reading system shows in its library); its other
metadata (author, publisher, subjects, description) and the manifest are not. A manifest item
the package lacks is passed over, with a warning.

Only the members holding text that changed are written anew, each the original with only its
segments' characters replaced; the `mimetype` stays the first member, stored, and every other
member (stylesheets, fonts, images, the container) is the same bytes (`nmt.documents.package`).
Not ebooklib: it writes a book anew from its own model. Measured with ebooklib 0.20 on the
untranslated EPUB 2 of the tests: every member moved under EPUB/ (the container rewritten to
match), the OPF and NCX regenerated, and each chapter's head dropped (its title, stylesheet link
and script) and its language set to "en"; the EPUB 3 one it could not write at all (a nested
navPoint without an id: TypeError).
"""

from __future__ import annotations

import html as entities
import logging
import posixpath
import re
from dataclasses import dataclass
from urllib.parse import unquote

from lxml import etree

from nmt.config import TextFormat
from nmt.documents import html
from nmt.documents.inline import SPANS, find_codes
from nmt.documents.package import Package
from nmt.documents.segments import Document, Segment
from nmt.errors import NMTError

log = logging.getLogger(__name__)

MIMETYPE = "application/epub+zip"
CONTAINER = "META-INF/container.xml"
XHTML = "application/xhtml+xml"
NCX = "application/x-dtbncx+xml"
# the elements whose text is a label, each with the elements it stands in: NCX's, the OPF's
NCX_LABELS = {"text": {"navLabel", "docTitle"}}
OPF_LABELS = {"title": {"metadata"}}
PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)
# besides tags, comments and CDATA: a doctype, a processing instruction (as html.py reads them)
_SPANS = (*SPANS, (re.compile("<![A-Za-z]"), ">"), (re.compile(r"<\?"), r"\?>"))


def read(data: bytes, name: str) -> Book:
    """The EPUB `name` holding `data` (`nmt.documents.formats`): a package with a container that
    names its OPF, whose mimetype, where it has one, is EPUB's."""
    package = Package.read(data, name)
    if package.has("mimetype"):
        mimetype = package.member("mimetype").decode("ascii", "replace").strip()
        if mimetype != MIMETYPE:
            raise NMTError(f"{name}: its mimetype is {mimetype!r}, not an EPUB's ({MIMETYPE})")
    if not package.has(CONTAINER):
        raise NMTError(f"{name}: not an EPUB (it has no {CONTAINER})")
    opf = _rootfile(package)
    members = [_member(package, path, labels) for path, labels in _read_in(package, opf)]
    members.append(_member(package, opf, OPF_LABELS))
    return Book(package, members)


@dataclass
class Member:
    """A member read as text: its segments, and whether they are labels (plain text, which
    is escaped when written) or a content document's (XHTML, read as XML)."""

    name: str
    document: Document
    labels: bool


class Book:
    """An EPUB package and the members it translates (see the module's notes)."""

    def __init__(self, package: Package, members: list[Member]) -> None:
        self.package, self.members = package, members

    def segments(self) -> list[tuple[str, TextFormat]]:
        out = []
        for member in self.members:
            for text, segment in zip(member.document.texts(), member.document.segments):
                out.append(
                    (entities.unescape(text), TextFormat.text)
                    if member.labels
                    else (text, segment.fmt)
                )
        return out

    def write(self, translations: list[str]) -> bytes:
        """The package with each segment holding its translation, only the members whose text
        changed written anew (`Opened`)."""
        count = sum(len(m.document.segments) for m in self.members)
        if len(translations) != count:
            raise ValueError(f"{len(translations)} translations of {count} segments")
        changed, done = {}, 0
        for member in self.members:
            document = member.document
            mine = translations[done : done + len(document.segments)]
            done += len(document.segments)
            if member.labels:  # a label that changed is escaped; one that did not, as it was
                sources = document.texts()
                mine = [
                    s if entities.unescape(s) == t else _escaped(t) for s, t in zip(sources, mine)
                ]
            text = document.write(mine)
            if text != document.text:
                changed[member.name] = text.encode("utf-8")
        return self.package.write(changed)


def _read_in(package: Package, opf: str) -> list[tuple[str, dict[str, set[str]] | None]]:
    """The members translated besides the OPF, each with the labels read in it (None: XHTML):
    the spine's content documents in order, the navigation document, the NCX."""
    root = _parsed(package, opf)
    items = {i.get("id"): i for i in _children(root, "manifest", "item")}
    spine = next(_children(root, "spine"), None)
    order = [items.get(ref.get("idref")) for ref in _children(root, "spine", "itemref")]
    found = [(i, None) for i in order if i is not None and i.get("media-type") == XHTML]
    found += [(i, None) for i in items.values() if "nav" in (i.get("properties") or "").split()]
    ncx = items.get(spine.get("toc")) if spine is not None else None
    if ncx is None:  # an NCX the spine does not name: by its media type
        ncx = next((i for i in items.values() if i.get("media-type") == NCX), None)
    found += [(ncx, NCX_LABELS)] if ncx is not None else []
    out, seen = [], {opf}
    for item, labels in found:
        path = _resolved(opf, item.get("href") or "")
        if path in seen:
            continue
        seen.add(path)
        if package.has(path):
            out.append((path, labels))
        else:
            log.warning(
                "%s: its manifest lists %s, which it lacks: not translated", package.name, path
            )
    return out


def _rootfile(package: Package) -> str:
    """The OPF's path, as META-INF/container.xml names it."""
    root = _parsed(package, CONTAINER)
    for rootfile in root.iter("{*}rootfile"):
        path = rootfile.get("full-path")
        if path and rootfile.get("media-type", "application/oebps-package+xml").endswith("+xml"):
            if not package.has(path):
                raise NMTError(f"{package.name}: {CONTAINER} names {path}, which it lacks")
            return path
    raise NMTError(f"{package.name}: {CONTAINER} names no package document (rootfile)")


def _parsed(package: Package, member: str) -> etree._Element:
    try:
        return etree.fromstring(package.member(member), PARSER)
    except etree.XMLSyntaxError as err:
        raise NMTError(f"{package.name}: {member} is not well-formed XML ({err})") from None


def _children(root: etree._Element, *path: str):
    """The elements at `path` of local names below the OPF's root (its namespace as it is)."""
    found = [root]
    for local in path:
        found = [
            c
            for f in found
            for c in f
            if isinstance(c.tag, str) and etree.QName(c).localname == local
        ]
    return iter(found)


def _resolved(opf: str, href: str) -> str:
    """A manifest href (relative to the OPF, percent-encoded) as a member's name."""
    path = unquote(href.split("#")[0])
    return posixpath.normpath(posixpath.join(posixpath.dirname(opf), path))


def _member(package: Package, member: str, labels: dict[str, set[str]] | None) -> Member:
    """A member read as text: its labels' (NCX, OPF) or its content's (XHTML) segments."""
    try:
        text = package.member(member).decode("utf-8")
    except UnicodeDecodeError as err:
        raise NMTError(f"{package.name}: {member} is not UTF-8 ({err})") from None
    if labels is None:
        return Member(member, html.read(text, xml=True), False)
    _parsed(package, member)  # a broken NCX or OPF is refused, not scanned
    return Member(member, Document(text, _labels(text, labels)), True)


def _labels(text: str, wanted: dict[str, set[str]]) -> list[Segment]:
    """The text of each element named in `wanted` (by local name) standing in one of the
    elements it names, as a segment: its outer whitespace left out; one holding markup (a
    comment, CDATA) or no letter left alone."""
    segments, stack, start = [], [], None
    for begin, end, tag in find_codes(text, _SPANS):
        if tag is None:
            start = None  # a comment or CDATA inside a label: it is left alone
            continue
        closing, name, _, empty = tag.groups()
        local = name.split(":")[-1]
        if closing:
            if start is not None and stack and stack[-1] == local:
                raw = text[start:begin]
                first = start + len(raw) - len(raw.lstrip())
                last = start + len(raw.rstrip())
                if "<" not in raw and any(ch.isalpha() for ch in raw):
                    segments.append(Segment([(first, last)], TextFormat.text))
            start = None
            if local in stack:
                del stack[len(stack) - 1 - stack[::-1].index(local) :]
        elif not empty:
            parent = stack[-1] if stack else None
            start = end if parent in wanted.get(local, ()) else None
            stack.append(local)
    return segments


def _escaped(text: str) -> str:
    return entities.escape(text, quote=False)
