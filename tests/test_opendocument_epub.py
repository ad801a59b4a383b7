"""OpenDocument (.odt, .odp) and EPUB files: their text translated, everything else kept.

The files are written member by member here, as LibreOffice and e-book tools write them (the
mimetype first and stored), with what a real one holds: spans, notes, frames, tables, breaks,
speaker notes, an EPUB 3 navigation document and an EPUB 2 toc.ncx.
"""

from __future__ import annotations

import io
import re
import zipfile

import pytest
from lxml import etree

from nmt.cli import main as cli
from nmt.config import TextFormat
from nmt.documents import epub, html, opendocument
from nmt.documents.formats import BY_EXTENSION
from nmt.errors import NMTError

NS = {
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
    "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
    "draw": "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0",
    "presentation": "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0",
    "style": "urn:oasis:names:tc:opendocument:xmlns:style:1.0",
    "svg": "urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0",
    "xlink": "http://www.w3.org/1999/xlink",
    "dc": "http://purl.org/dc/elements/1.1/",
    "ncx": "http://www.daisy.org/z3986/2005/ncx/",
    "xhtml": "http://www.w3.org/1999/xhtml",
}
DECLARE = " ".join(f'xmlns:{k}="{v}"' for k, v in NS.items() if k not in ("ncx", "xhtml"))
HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n'
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4  # an image's bytes: copied, never read

ODT_CONTENT = f"""{HEAD}<office:document-content {DECLARE} office:version="1.3"><office:automatic-styles><style:style style:name="T1" style:family="text"/></office:automatic-styles><office:body><office:text>
<text:h text:style-name="Heading_1" text:outline-level="1">Ein Bericht</text:h>
<text:p text:style-name="P1">Der <text:span text:style-name="T1">rote</text:span> Hund läuft.<text:note text:id="ftn1" text:note-class="footnote"><text:note-citation>1</text:note-citation><text:note-body><text:p text:style-name="Footnote">Eine kleine Anmerkung.</text:p></text:note-body></text:note> Er <text:s text:c="2"/>bellt.</text:p>
<text:p text:style-name="P1">Zeile eins<text:line-break/>Zeile zwei<text:tab/>mit Tabulator</text:p>
<text:p text:style-name="P1"><text:bookmark text:name="hier"/>Ein Bild: <draw:frame draw:name="Bild1" text:anchor-type="as-char" svg:width="1cm" svg:height="1cm"><draw:image xlink:href="Pictures/bild.png" xlink:type="simple"/></draw:frame> und ein <text:a xlink:href="https://example.org/">Verweis</text:a>.</text:p>
<text:p text:style-name="P1"><text:span text:style-name="T1">Nur ein Lauf</text:span></text:p>
<text:p text:style-name="P1">Seite <text:page-number>3</text:page-number> von vielen<office:annotation><dc:creator>Anna</dc:creator><text:p>ein kommentar bleibt</text:p></office:annotation></text:p>
<table:table table:name="Tabelle1"><table:table-column table:number-columns-repeated="2"/><table:table-row><table:table-cell office:value-type="string"><text:p>Name</text:p></table:table-cell><table:table-cell office:value-type="float" office:value="42"><text:p>42</text:p></table:table-cell></table:table-row><table:table-row><table:table-cell><text:p>Farbe &amp; Form</text:p></table:table-cell><table:table-cell><text:p/></table:table-cell></table:table-row></table:table>
<text:list><text:list-item><text:p>Ein Punkt der Liste</text:p></text:list-item></text:list>
</office:text></office:body></office:document-content>
"""  # noqa: E501
ODT_STYLES = f"""{HEAD}<office:document-styles {DECLARE} office:version="1.3"><office:styles/><office:master-styles><style:master-page style:name="Standard"><style:header><text:p>Kopfzeile des Berichts</text:p></style:header><style:footer><text:p>Fußzeile <text:span>mit</text:span> Seite</text:p></style:footer></style:master-page></office:master-styles></office:document-styles>
"""  # noqa: E501
ODP_CONTENT = f"""{HEAD}<office:document-content {DECLARE} office:version="1.3"><office:body><office:presentation>
<presentation:footer-decl presentation:name="ftr1">Unsere Firma</presentation:footer-decl>
<draw:page draw:name="Folie1" presentation:use-footer-name="ftr1"><draw:frame presentation:class="title"><draw:text-box><text:p>Der Titel der Folie</text:p></draw:text-box></draw:frame><draw:frame presentation:class="outline"><draw:text-box><text:list><text:list-item><text:p>Erster <text:span text:style-name="T1">wichtiger</text:span> Punkt</text:p></text:list-item></text:list></draw:text-box></draw:frame><draw:frame><draw:image xlink:href="Pictures/bild.png"/></draw:frame>
<presentation:notes><draw:page-thumbnail draw:page-number="1"/><draw:frame presentation:class="notes"><draw:text-box><text:p>Hier spricht der Redner langsam.</text:p></draw:text-box></draw:frame></presentation:notes></draw:page>
</office:presentation></office:body></office:document-content>
"""  # noqa: E501
ODP_STYLES = f"""{HEAD}<office:document-styles {DECLARE}><office:master-styles><style:master-page style:name="Default"><draw:frame presentation:class="title"><draw:text-box><text:p>Klicken um Titel einzugeben</text:p></draw:text-box></draw:frame></style:master-page></office:master-styles></office:document-styles>
"""  # noqa: E501
ODF_MANIFEST = f"""{HEAD}<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.3"><manifest:file-entry manifest:full-path="/" manifest:media-type="{{mime}}"/><manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/><manifest:file-entry manifest:full-path="styles.xml" manifest:media-type="text/xml"/><manifest:file-entry manifest:full-path="meta.xml" manifest:media-type="text/xml"/><manifest:file-entry manifest:full-path="Pictures/bild.png" manifest:media-type="image/png"/></manifest:manifest>
"""  # noqa: E501
META = f"""{HEAD}<office:document-meta {DECLARE} xmlns:meta="urn:oasis:names:tc:opendocument:xmlns:meta:1.0"><office:meta><meta:generator>LibreOffice/7.6</meta:generator><dc:title>Ein Bericht</dc:title></office:meta></office:document-meta>
"""  # noqa: E501
MIME = {
    "odt": "application/vnd.oasis.opendocument.text",
    "odp": "application/vnd.oasis.opendocument.presentation",
}


def package(members: list[tuple[str, bytes | str]]) -> bytes:
    """A zip of `members` in order, as office suites write them: the mimetype stored, the rest
    deflated."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in members:
            stored = name == "mimetype" or name.endswith(".png")
            z.writestr(name, data, zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED)
    return out.getvalue()


def odf(kind: str) -> bytes:
    content, styles = (ODT_CONTENT, ODT_STYLES) if kind == "odt" else (ODP_CONTENT, ODP_STYLES)
    return package([
        ("mimetype", MIME[kind]), ("content.xml", content), ("styles.xml", styles),
        ("meta.xml", META), ("Pictures/bild.png", PNG), ("Thumbnails/thumbnail.png", PNG),
        ("META-INF/manifest.xml", ODF_MANIFEST.replace("{mime}", MIME[kind])),
    ])  # fmt: skip


CONTAINER = f"""{HEAD}<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>
"""  # noqa: E501
CHAPTER = """{head}<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops" xml:lang="de">
<head><title>Kapitel {n}</title><link rel="stylesheet" type="text/css" href="../Styles/style.css"/>
<script type="text/javascript">var note = "nicht übersetzen";</script></head>
<body>
  <h1 id="k{n}">Kapitel {n}</h1>
  <p class="first">Es war <i>einmal</i> ein Hund &amp; eine Katze.<br/>Sie lebten im Wald.</p>
  <div class="figure"><img src="../Images/bild.png" alt="ein Bild"/></div>
  <p>Der Hund sagte: <a href="ch2.xhtml#k2" epub:type="noteref">weiter</a>.</p>
  <pre>Code bleibt so</pre>
  <table><tr><td>Zelle eins</td><td>42</td></tr></table>
</body>
</html>
"""
NAV = f"""{HEAD}<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">
<head><title>Inhalt</title></head>
<body><nav epub:type="toc" id="toc"><h1>Inhalt</h1><ol>
<li><a href="Text/ch1.xhtml">Kapitel eins</a></li>
<li><a href="Text/ch2.xhtml">Kapitel zwei</a></li>
</ol></nav></body></html>
"""
NCX = f"""{HEAD}<!DOCTYPE ncx PUBLIC "-//NISO//DTD ncx 2005-1//EN" "http://www.daisy.org/z3986/2005/ncx-2005-1.dtd">
<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1">
  <head><meta name="dtb:uid" content="urn:uuid:1234"/></head>
  <docTitle><text>Ein Buch</text></docTitle>
  <docAuthor><text>Anna Autorin</text></docAuthor>
  <navMap>
    <navPoint id="n1" playOrder="1"><navLabel><text>Kapitel eins</text></navLabel><content src="Text/ch1.xhtml"/>
      <navPoint id="n1a" playOrder="2"><navLabel><text>Der Wald &amp; das Meer</text></navLabel><content src="Text/ch1.xhtml#k1"/></navPoint>
    </navPoint>
    <navPoint id="n2" playOrder="3"><navLabel><text>Kapitel zwei</text></navLabel><content src="Text/ch2.xhtml"/></navPoint>
  </navMap>
</ncx>
"""  # noqa: E501
OPF = """{head}<package xmlns="http://www.idpf.org/2007/opf" version="{version}" unique-identifier="uid">
  <metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
    <dc:identifier id="uid">urn:uuid:1234</dc:identifier>
    <dc:title>Ein Buch</dc:title>
    <dc:creator>Anna Autorin</dc:creator>
    <dc:language>de</dc:language>
    <meta property="dcterms:modified">2024-01-01T00:00:00Z</meta>
  </metadata>
  <manifest>
    {nav}<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>
    <item id="ch1" href="Text/ch1.xhtml" media-type="application/xhtml+xml"/>
    <item id="ch2" href="Text/ch2.xhtml" media-type="application/xhtml+xml"/>
    <item id="css" href="Styles/style.css" media-type="text/css"/>
    <item id="img" href="Images/bild.png" media-type="image/png"/>
  </manifest>
  <spine toc="ncx"><itemref idref="ch1"/><itemref idref="ch2"/></spine>
</package>
"""  # noqa: E501
NAV_ITEM = (
    '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>\n    '
)


def book(version: int) -> bytes:
    """An EPUB 3 (with a navigation document and, for older readers, a toc.ncx) or an EPUB 2
    (toc.ncx only)."""
    opf = OPF.format(head=HEAD, version=f"{version}.0", nav=NAV_ITEM if version == 3 else "")
    members = [
        ("mimetype", "application/epub+zip"), ("META-INF/container.xml", CONTAINER),
        ("OEBPS/content.opf", opf), ("OEBPS/toc.ncx", NCX),
        ("OEBPS/Text/ch1.xhtml", CHAPTER.format(head=HEAD, n=1)),
        ("OEBPS/Text/ch2.xhtml", CHAPTER.format(head=HEAD, n=2)),
        ("OEBPS/Styles/style.css", "p { text-indent: 1em; }\n"),
        ("OEBPS/Images/bild.png", PNG),
    ]  # fmt: skip
    if version == 3:
        members.insert(3, ("OEBPS/nav.xhtml", NAV))
    return package(members)


_OUTSIDE = re.compile(r"(<[^>]*>|&#?\w+;)")


def upper(text: str) -> str:
    """A fake translation: the text upper-cased, its tags, codes and entities as they were."""
    return "".join(p if _OUTSIDE.fullmatch(p) else p.upper() for p in _OUTSIDE.split(text))


def translated(opened) -> bytes:
    return opened.write([upper(text) for text, _ in opened.segments()])


def members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {i.filename: z.read(i) for i in z.infolist()}


def assert_copied(before: bytes, after: bytes, rewritten: set[str]) -> None:
    """The same members in the same order, the mimetype first and stored, every member but
    `rewritten` the same bytes (and those changed)."""
    with zipfile.ZipFile(io.BytesIO(before)) as a, zipfile.ZipFile(io.BytesIO(after)) as b:
        assert [i.filename for i in a.infolist()] == [i.filename for i in b.infolist()]
        assert b.infolist()[0].filename == "mimetype"
        assert b.infolist()[0].compress_type == zipfile.ZIP_STORED
        for old, new in zip(a.infolist(), b.infolist()):
            assert old.compress_type == new.compress_type
            same = a.read(old) == b.read(new)
            assert same == (old.filename not in rewritten), old.filename


def count(root: etree._Element, *tags: str) -> dict[str, int]:
    return {t: len(root.findall(f".//{t}", NS)) for t in tags}


ODF_ELEMENTS = (
    "text:p", "text:h", "text:span", "text:a", "text:note", "text:note-citation", "text:s",
    "text:tab", "text:line-break", "text:bookmark", "text:page-number", "draw:frame",
    "draw:image", "table:table", "table:table-cell", "office:annotation", "text:list-item",
    "presentation:notes", "draw:text-box",
)  # fmt: skip


def lower_left(root: etree._Element) -> list[str]:
    """The texts of paragraphs (and slide footers) that still hold a lower-case letter, outside
    comments and fields."""
    found = []
    for el in root.iter(
        f"{{{NS['text']}}}p", f"{{{NS['text']}}}h", f"{{{NS['presentation']}}}footer-decl"
    ):
        if any(a.tag == f"{{{NS['office']}}}annotation" for a in el.iterancestors()):
            continue
        own = [el.text, *(c.tail for c in el)]
        own += [
            t
            for span in el.iter(f"{{{NS['text']}}}span", f"{{{NS['text']}}}a")
            for t in span.itertext()
        ]
        if any(ch.islower() for t in own if t for ch in t):
            found.append("".join(el.itertext()))
    return found


@pytest.mark.parametrize("kind", ["odt", "odp"])
def test_an_opendocument_file_has_its_text_translated_and_the_rest_kept(kind):
    data = odf(kind)
    doc = opendocument.read(data, f"a.{kind}")
    out = translated(doc)
    rewritten = {"content.xml", "styles.xml"} if kind == "odt" else {"content.xml"}
    assert_copied(data, out, rewritten)  # an .odp's master-page placeholders are not read
    old, new = members(data), members(out)
    for part in ("content.xml", "styles.xml"):
        before, after = etree.fromstring(old[part]), etree.fromstring(new[part])
        assert count(after, *ODF_ELEMENTS) == count(before, *ODF_ELEMENTS)
        assert new[part].startswith(HEAD.encode())  # the original declaration, as it was
        if part in rewritten:
            assert lower_left(after) == []
    content = etree.fromstring(new["content.xml"])
    if kind == "odt":
        comment = content.find(".//office:annotation/text:p", NS)
        assert comment.text == "ein kommentar bleibt"
        note = content.find(".//text:note", NS)
        assert note.getparent().text.startswith("DER ")  # the citation in its paragraph
        assert note.find("text:note-body/text:p", NS).text == "EINE KLEINE ANMERKUNG."
        assert note.tail == " ER "  # the spaces after it, then text:s, as they were
        assert content.find(".//text:page-number", NS).text == "3"
        cells = [
            c.findtext("text:p", namespaces=NS) for c in content.iterfind(".//table:table-cell", NS)
        ]
        assert cells == ["NAME", "42", "FARBE & FORM", ""]
        assert etree.fromstring(new["styles.xml"]).find(".//style:header/text:p", NS).text == (
            "KOPFZEILE DES BERICHTS"
        )
    else:
        notes = content.find(".//presentation:notes//text:p", NS)
        assert notes.text == "HIER SPRICHT DER REDNER LANGSAM."
        assert content.find(".//presentation:footer-decl", NS).text == "UNSERE FIRMA"


def test_an_opendocument_paragraph_reads_runs_as_codes_and_elements_as_points():
    doc = opendocument.read(odf("odt"), "a.odt")
    texts = dict(enumerate(doc.segments()))
    assert texts[0] == ("Ein Bericht", TextFormat.text)
    assert texts[1] == ("Der <r0>rote</r0> Hund läuft.<x1/> Er <x2/>bellt.", TextFormat.xml)
    assert texts[2] == ("Eine kleine Anmerkung.", TextFormat.text)  # the note's own paragraph
    # a break or a tab between two words is read with a space after it: two words, not one
    assert texts[3] == ("Zeile eins<x0/> Zeile zwei<x1/> mit Tabulator", TextFormat.xml)
    assert texts[4][0] == "<x0/>Ein Bild: <x1/> und ein <r2>Verweis</r2>."
    assert texts[5] == ("Nur ein Lauf", TextFormat.text)  # one span alone: its text
    assert texts[6] == ("Seite <x0/> von vielen<x1/>", TextFormat.xml)
    assert [t for t, _ in doc.segments()][7:] == [
        "Name", "Farbe & Form", "Ein Punkt der Liste",  # "42" has no letter
        "Kopfzeile des Berichts", "Fußzeile <r0>mit</r0> Seite",
    ]  # fmt: skip


def test_an_opendocument_translation_moves_runs_and_points_with_their_words():
    doc = opendocument.read(odf("odt"), "a.odt")
    texts = [t for t, _ in doc.segments()]
    done = list(texts)
    done[1] = "The dog<x1/> is <r0>red</r0>. He barks.<x2/>"  # runs reordered
    done[3] = "LINE ONE <x0/> LINE TWO<x1/> WITH TAB"  # the read space taken out again
    done[4] = "A picture: and a <r2>link</r2>."  # the bookmark and the frame lost: kept at the end
    out = members(doc.write(done))["content.xml"]
    paragraphs = etree.fromstring(out).findall(".//office:text/text:p", NS)
    first = paragraphs[0]
    assert first.text == "The dog" and first[0].tag.endswith("note") and first[0].tail == " is "
    assert first[1].tag.endswith("span") and first[1].text == "red"
    assert first[1].get(f"{{{NS['text']}}}style-name") == "T1"
    assert first[1].tail == ". He barks." and first[2].tag.endswith("}s") and first[2].tail is None
    second = paragraphs[1]
    assert [second.text, second[0].tail, second[1].tail] == ["LINE ONE", "LINE TWO", "WITH TAB"]
    third = paragraphs[2]
    assert [c.tag.split("}")[1] for c in third] == ["a", "bookmark", "frame"]
    assert third.find("text:a", NS).get(f"{{{NS['xlink']}}}href") == "https://example.org/"
    # a paragraph whose translation is its source is not touched: the others' bytes as they were
    assert b'<text:p text:style-name="P1"><text:span text:style-name="T1">Nur ein Lauf' in out


def test_an_opendocument_file_translated_as_itself_is_the_same_bytes():
    data = odf("odt")
    doc = opendocument.read(data, "a.odt")
    assert members(doc.write([t for t, _ in doc.segments()])) == members(data)


def test_odfpy_opens_the_translated_files():
    load = pytest.importorskip("odf.opendocument").load
    teletype = pytest.importorskip("odf.teletype")
    from odf import text as odftext

    for kind in ("odt", "odp"):
        out = translated(opendocument.read(odf(kind), f"a.{kind}"))
        document = load(io.BytesIO(out))
        paragraphs = [teletype.extractText(p) for p in document.getElementsByType(odftext.P)]
        assert (
            "ZEILE EINS\nZEILE ZWEI\tMIT TABULATOR" if kind == "odt" else "DER TITEL DER FOLIE"
        ) in paragraphs


@pytest.mark.parametrize(
    ("members_", "message"),
    [
        ([("mimetype", MIME["odt"]), ("styles.xml", ODT_STYLES)], "no content.xml"),
        ([("mimetype", "application/vnd.oasis.opendocument.spreadsheet"),
          ("content.xml", ODT_CONTENT)], "not an OpenDocument text or presentation"),
        ([("mimetype", MIME["odt"]), ("content.xml", "<office:document-content")],
         "content.xml is not well-formed XML"),
    ],
)  # fmt: skip
def test_a_file_that_is_no_opendocument_text_is_refused_by_name(members_, message):
    with pytest.raises(NMTError, match=f"bad.odt: .*{message}"):
        opendocument.read(package(members_), "bad.odt")
    with pytest.raises(NMTError, match="bad.odt: not a zip"):
        opendocument.read(b"<html></html>", "bad.odt")


def outside(text: str) -> list[str]:
    """What lies between an XHTML file's segments: its bytes that are not text."""
    doc = html.read(text, xml=True)
    ends = [0] + [s.spans[-1][1] for s in doc.segments]
    starts = [s.spans[0][0] for s in doc.segments] + [len(text)]
    return [text[e:s] for e, s in zip(ends, starts)]


@pytest.mark.parametrize("version", [3, 2])
def test_an_epub_has_its_chapters_and_tables_of_contents_translated_and_the_rest_kept(version):
    data = book(version)
    opened = epub.read(data, "book.epub")
    out = translated(opened)
    rewritten = {
        "OEBPS/Text/ch1.xhtml",
        "OEBPS/Text/ch2.xhtml",
        "OEBPS/toc.ncx",
        "OEBPS/content.opf",
    }
    rewritten |= {"OEBPS/nav.xhtml"} if version == 3 else set()
    assert_copied(data, out, rewritten)
    old, new = members(data), members(out)
    for name in rewritten:
        etree.fromstring(new[name])  # well-formed
        assert new[name].startswith(HEAD.encode())
    for name in ("OEBPS/Text/ch1.xhtml", "OEBPS/Text/ch2.xhtml", "OEBPS/nav.xhtml"):
        if name not in new:
            continue
        before, after = old[name].decode(), new[name].decode()
        assert outside(after) == outside(before)  # every byte not a segment's, as it was
        root = etree.fromstring(new[name])
        body = root.find("xhtml:body", NS)
        for el in body.iter():
            if el.tag != f"{{{NS['xhtml']}}}pre":
                assert not any(ch.islower() for ch in (el.text or "") + (el.tail or "")), el.tag
        if "Text/" in name:
            assert root.findtext(".//xhtml:pre", namespaces=NS) == "Code bleibt so"
            assert root.find(".//xhtml:img", NS).get("alt") == "ein Bild"  # attributes kept
            assert 'var note = "nicht übersetzen";' in after
    chapter = new["OEBPS/Text/ch1.xhtml"].decode()
    assert "ES WAR <i>EINMAL</i> EIN HUND &amp; EINE KATZE.<br/>SIE LEBTEN IM WALD." in chapter
    ncx = new["OEBPS/toc.ncx"].decode()
    labels = etree.fromstring(new["OEBPS/toc.ncx"]).findall(".//ncx:navLabel/ncx:text", NS)
    assert [t.text for t in labels] == ["KAPITEL EINS", "DER WALD & DAS MEER", "KAPITEL ZWEI"]
    assert "<docTitle><text>EIN BUCH</text></docTitle>" in ncx
    assert "<docAuthor><text>Anna Autorin</text></docAuthor>" in ncx  # a name: kept
    assert ncx.replace("KAPITEL EINS", "Kapitel eins") != NCX  # it changed ...
    assert len(ncx) == len(NCX) and ncx.splitlines()[:2] == NCX.splitlines()[:2]  # ... in place
    opf = new["OEBPS/content.opf"].decode()
    assert "<dc:title>EIN BUCH</dc:title>" in opf and "<dc:creator>Anna Autorin</dc:creator>" in opf
    assert opf.replace("EIN BUCH", "Ein Buch") == old["OEBPS/content.opf"].decode()


def test_an_epub_reads_its_spine_in_order_and_labels_as_plain_text():
    segments = epub.read(book(3), "book.epub").segments()
    texts = [t for t, _ in segments]
    assert texts[:2] == ["Kapitel 1", "Kapitel 1"]  # ch1's title, then its heading
    assert "Es war <i>einmal</i> ein Hund &amp; eine Katze.<br/>Sie lebten im Wald." in texts
    assert texts.index("Kapitel 2") < texts.index("Kapitel eins")  # spine, then the nav
    assert ("Der Wald & das Meer", TextFormat.text) in segments  # an NCX label, unescaped
    assert segments[-1] == ("Ein Buch", TextFormat.text)  # the OPF's dc:title
    assert "Code bleibt so" not in texts and "42" not in texts


def test_an_epub_translated_as_itself_is_the_same_bytes():
    data = book(3)
    opened = epub.read(data, "book.epub")
    assert members(opened.write([t for t, _ in opened.segments()])) == members(data)


def test_ebooklib_opens_the_translated_books(tmp_path):
    ebooklib = pytest.importorskip("ebooklib")
    from ebooklib import epub as ebook

    for version in (3, 2):
        path = tmp_path / f"book{version}.epub"
        path.write_bytes(translated(epub.read(book(version), "book.epub")))
        opened = ebook.read_epub(str(path), {"ignore_ncx": version == 3})
        assert opened.get_metadata("DC", "title")[0][0] == "EIN BUCH"
        chapters = list(opened.get_items_of_type(ebooklib.ITEM_DOCUMENT))
        assert any(b"KAPITEL 1" in c.get_content() for c in chapters)


@pytest.mark.parametrize(
    ("members_", "message"),
    [
        ([("mimetype", "application/epub+zip")], "no META-INF/container.xml"),
        ([("mimetype", MIME["odt"]), ("META-INF/container.xml", CONTAINER)], "mimetype is"),
        ([("mimetype", "application/epub+zip"), ("META-INF/container.xml", CONTAINER)],
         "names OEBPS/content.opf, which it lacks"),
        ([("META-INF/container.xml", "<container><rootfiles/></container>")],
         "names no package document"),
    ],
)  # fmt: skip
def test_a_file_that_is_no_epub_is_refused_by_name(members_, message):
    with pytest.raises(NMTError, match=f"bad.epub: .*{message}"):
        epub.read(package(members_), "bad.epub")


def test_the_formats_are_found_by_their_extensions():
    assert (
        BY_EXTENSION[".odt"].module == BY_EXTENSION[".odp"].module == "nmt.documents.opendocument"
    )
    assert BY_EXTENSION[".epub"].open(book(2), "b.epub").segments()


@pytest.fixture(scope="module")
def ckpt(train_small):
    return train_small("gru")


def test_nmt_translate_translates_a_book_and_an_opendocument_file(ckpt, tmp_path):
    source = tmp_path / "book.epub"
    source.write_bytes(book(3))
    text = tmp_path / "a.odt"
    text.write_bytes(odf("odt"))
    for path in (source, text):
        out = path.with_name(f"{path.stem}.en{path.suffix}")
        assert cli.translate([f"ckpt={ckpt}", f"input={path}", f"output={out}", "device=cpu"]) == 0
    done = members((tmp_path / "book.en.epub").read_bytes())
    assert list(done)[0] == "mimetype" and done["OEBPS/Images/bild.png"] == PNG
    assert done["OEBPS/Text/ch1.xhtml"] != members(book(3))["OEBPS/Text/ch1.xhtml"]
    assert "Es war" not in done["OEBPS/Text/ch1.xhtml"].decode()
    content = members((tmp_path / "a.en.odt").read_bytes())["content.xml"]
    root = etree.fromstring(content)
    assert count(root, *ODF_ELEMENTS) == count(
        etree.fromstring(ODT_CONTENT.encode()), *ODF_ELEMENTS
    )
    assert b">Ein Bericht</text:h>" not in content
