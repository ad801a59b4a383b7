"""An XLIFF file's segments: each unit's source, its inline codes kept, written back as the
unit's target.

    opened = read(data, "app.xlf")
    opened.segments()   # [('Klicken Sie <g0>hier</g0><x1/>', TextFormat.xml), ...]
    opened.write(["Click <g0>here</g0><x1/>", ...])   # the file, each unit with its <target>

XLIFF is what localisation tools hand a translator: 1.2 (a `<trans-unit>` with a `<source>`)
and 2.x (a `<unit>` of `<segment>`s, each with a `<source>`), told apart by the root's namespace
(or, where it has none, its `version`). Each source with text is a segment. Its inline codes
(1.2: g x bx ex ph bpt ept it mrk; 2.0: pc mrk ph sc ec sm em) are tags of the segment's XML,
named by their kind and their place in the source (`<g0>`...`</g0>`, `<x1/>`): the text loop keeps
them around the words they wrapped (`nmt.documents.inline`), and each comes back as the element
it was, attributes and all; a code that holds native code rather than text (ph, bpt, ept, it, a
`mrk` marked protected or translate="no", a comment) is one point, its content never translated.

A unit or segment marked translate="no" (or inside a group or file so marked) is left alone, and
so is one whose target already holds a translation (`KEEP_TRANSLATED`): a translator's work, or
an earlier run's, is worth more than a new guess, and a half-done file is finished, not redone.
The translation goes into the `<target>` (an empty one is filled, its attributes kept; a missing
one is made after the source): 1.2 marks it state="translated" state-qualifier="mt-suggestion"
(the standard's own words for a machine's translation), 2.x marks the segment state="translated"
(its states are initial, translated, reviewed, final). Everything else (notes, alt-trans,
seg-source, skeletons, the declaration, namespaces, comments) is written as it was read, through
lxml; entities are not expanded and nothing is fetched over the network.
"""

from __future__ import annotations

import copy
import html
import re
from dataclasses import dataclass

from lxml import etree

from nmt.config import TextFormat
from nmt.errors import NMTError

# a unit whose target already holds text keeps it (see the module's notes)
KEEP_TRANSLATED = True
# the namespaces of the versions read; a root with none is told by its version attribute
NAMESPACES = {
    "urn:oasis:names:tc:xliff:document:1.2": 1,
    "urn:oasis:names:tc:xliff:document:1.1": 1,
    "urn:oasis:names:tc:xliff:document:2.0": 2,
}
# the inline codes that wrap text to translate, by version; every other element in a source is
# a point (its content, native code, kept whole)
PAIRS = {1: {"g", "mrk"}, 2: {"pc", "mrk"}}
# the codes of a segment's text: a kind's name and its index among the source's codes
_CODE = re.compile(r"<(/?)([A-Za-z]+)(\d+)(/?)>")
# the root's start tag (quoted values may hold ">") and its end tag, in the file's bytes
_ATTRIBUTES = rb"""(?:\s+[^\s=>]+\s*=\s*(?:"[^"]*"|'[^']*'))*\s*>"""
_START_TAG = re.compile(rb"<[\w:.-]+" + _ATTRIBUTES)
_ROOT_START = re.compile(rb"<(?:[\w.-]+:)?xliff" + _ATTRIBUTES)
_ROOT_END = re.compile(rb"</(?:[\w.-]+:)?xliff\s*>")
_PARSER = dict(resolve_entities=False, no_network=True, strip_cdata=False, huge_tree=False)


def read(data: bytes, name: str) -> XliffFile:
    """The XLIFF file `name` holding `data` (`nmt.documents.formats`); a file that is not XML or
    not XLIFF 1.x or 2.x is an NMTError naming it."""
    try:
        tree = etree.ElementTree(etree.fromstring(data, etree.XMLParser(**_PARSER)))
    except etree.XMLSyntaxError as err:
        raise NMTError(f"{name}: not XML ({err})") from None
    root = tree.getroot()
    qname = etree.QName(root)
    if qname.localname != "xliff":
        raise NMTError(f"{name}: not an XLIFF file (its root is <{qname.localname}>)")
    version = NAMESPACES.get(qname.namespace or "")
    if version is None and qname.namespace is None:
        version = {"1": 1, "2": 2}.get(root.get("version", "").split(".")[0])
    if version is None:
        found = qname.namespace or f"version {root.get('version')!r}"
        raise NMTError(f"{name}: XLIFF of {found}; nmt reads XLIFF 1.2 and 2.x")
    return XliffFile(data, tree, version, _units(root, version, qname.namespace))


@dataclass
class Unit:
    """One source to translate: where its target goes and the source's codes by index."""

    holder: etree._Element  # 1.2: the trans-unit; 2.x: the segment
    source: etree._Element
    text: str  # the source's text and codes, as the text loop reads it (XML)
    codes: list  # the source's inline elements, in order: code k is `<nameK>`


class XliffFile:
    """An XLIFF file read (`Opened`): its units to translate, written back as targets."""

    def __init__(self, data: bytes, tree: etree._ElementTree, version: int, units: list[Unit]):
        self.data, self.tree, self.version, self.units = data, tree, version, units

    def segments(self) -> list[tuple[str, TextFormat]]:
        return [(unit.text, TextFormat.xml) for unit in self.units]

    def write(self, translations: list[str]) -> bytes:
        """The file with each unit's target holding its translation (see the module's notes)."""
        if len(translations) != len(self.units):
            raise ValueError(f"{len(translations)} translations of {len(self.units)} units")
        for unit, translation in zip(self.units, translations):
            target = _target(unit)
            _fill(target, unit, _ends_kept(unit.text, translation))
            if self.version == 1:
                target.set("state", "translated")
                target.set("state-qualifier", "mt-suggestion")
            else:
                unit.holder.set("state", "translated")
        return self._serialized()

    def _serialized(self) -> bytes:
        """The file's bytes with its root element written by lxml in the place of the root read:
        the declaration, doctype, comments and whitespace around the root, and the root's own
        start tag (lxml puts namespace declarations first), are the bytes read. A file whose
        root is not found in its bytes (UTF-16) is written whole by lxml."""
        encoding = self.tree.docinfo.encoding or "UTF-8"
        start, ends = _ROOT_START.search(self.data), list(_ROOT_END.finditer(self.data))
        if start is None or not ends:
            return etree.tostring(self.tree, encoding=encoding, xml_declaration=True)
        root = etree.tostring(self.tree.getroot(), encoding=encoding, xml_declaration=False)
        head = _START_TAG.match(root)
        return self.data[: start.end()] + root[head.end() :] + self.data[ends[-1].end() :]


def _units(root: etree._Element, version: int, namespace: str | None) -> list[Unit]:
    """The sources to translate, in document order (see the module's notes)."""
    ns = f"{{{namespace}}}" if namespace else ""
    holders = root.iter(f"{ns}trans-unit") if version == 1 else root.iter(f"{ns}segment")
    units = []
    for holder in holders:
        if any(e.get("translate") == "no" for e in (holder, *holder.iterancestors())):
            continue
        source, target = holder.find(f"{ns}source"), holder.find(f"{ns}target")
        if source is None:
            continue
        if KEEP_TRANSLATED and target is not None and _has_text(target):
            continue
        codes: list = []
        text = _marked(source, codes, version)
        if "".join(_CODE.split(text)[::5]).strip():  # text outside the codes
            units.append(Unit(holder, source, text, codes))
    return units


def _has_text(element: etree._Element) -> bool:
    return bool("".join(element.itertext()).strip()) or len(element) > 0


def _marked(element: etree._Element, codes: list, version: int) -> str:
    """`element`'s content as XML text: its text escaped, each inline element a code named by
    its kind and index (a pair around its content's codes, or a point), appended to `codes`."""
    out = [_escape(element.text)]
    for child in element:
        k = len(codes)
        codes.append(child)
        name = _name(child)
        if name in PAIRS[version] and not _protected(child):
            out.append(f"<{name}{k}>{_marked(child, codes, version)}</{name}{k}>")
        else:
            out.append(f"<{name}{k}/>")
        out.append(_escape(child.tail))
    return "".join(out)


def _name(element: etree._Element) -> str:
    """A code's name: its element's, or x for a comment or an element of another vocabulary."""
    if not isinstance(element.tag, str):
        return "x"
    local = etree.QName(element).localname
    return local if local.isalpha() else "x"


def _protected(element: etree._Element) -> bool:
    """A marker whose content is not to be translated (1.2 mtype="protected", 2.x
    translate="no")."""
    return element.get("mtype") == "protected" or element.get("translate") == "no"


def _escape(text: str | None) -> str:
    return html.escape(text or "", quote=False)


def _ends_kept(source: str, translation: str) -> str:
    """The translation with the source's leading and trailing whitespace (a pretty-printed
    source's line breaks and indentation)."""
    stripped = source.strip()
    if not stripped:
        return translation
    start = source.index(stripped[0])
    return source[:start] + translation.strip() + source[start + len(stripped) :]


def _target(unit: Unit) -> etree._Element:
    """The unit's target, emptied (its attributes kept), or a new one after the source (1.2:
    after seg-source), indented as the source is."""
    namespace = etree.QName(unit.source).namespace
    tag = etree.QName(namespace, "target").text
    target = unit.holder.find(tag)
    if target is not None:
        attributes = dict(target.attrib)
        target.clear(keep_tail=True)  # clears the attributes too
        target.attrib.update(attributes)
        return target
    after = unit.holder.find(etree.QName(namespace, "seg-source").text)
    after = unit.source if after is None else after
    last = after.getnext() is None
    target = etree.SubElement(unit.holder, tag)
    unit.holder.insert(unit.holder.index(after) + 1, target)  # moved to just after it
    target.tail = after.tail
    if last and unit.holder.text is not None and not unit.holder.text.strip():
        after.tail = unit.holder.text  # the children's indentation, not the closing tag's
    return target


def _fill(target: etree._Element, unit: Unit, translation: str) -> None:
    """`target` holding the translation's text, each code back as the source's element: a pair
    as its element (attributes kept) around what the translation put inside it, a point as a
    copy of its element, content and all."""
    stack, done = [(target, -1)], 0  # the elements open, each with its code's index
    for match in _CODE.finditer(translation):
        _append_text(stack[-1][0], html.unescape(translation[done : match.start()]))
        done = match.end()
        closing, k, point = match.group(1), int(match.group(3)), match.group(4)
        if k >= len(unit.codes):  # not a code of this source: the text loop never makes one
            continue
        code = unit.codes[k]
        if point:
            copied = copy.deepcopy(code)
            copied.tail = None
            stack[-1][0].append(copied)
        elif closing:
            if stack[-1][1] == k:
                stack.pop()
        else:
            stack.append((etree.SubElement(stack[-1][0], code.tag, dict(code.attrib)), k))
    _append_text(stack[-1][0], html.unescape(translation[done:]))


def _append_text(parent: etree._Element, text: str) -> None:
    """`text` after what `parent` holds: its text, or its last child's tail."""
    if not text:
        return
    if len(parent):
        parent[-1].tail = (parent[-1].tail or "") + text
    else:
        parent.text = (parent.text or "") + text
