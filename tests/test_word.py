"""Word files (nmt/documents/word.py): every paragraph a reader sees is translated once (body,
tables, text boxes, headers, footers, footnotes, endnotes), a translated run keeps its pictures,
note references, tabs and breaks, and the members whose text did not change keep their bytes.
Documents are built with python-docx, and by editing their XML where python-docx cannot."""

import io
import re
import struct
import zipfile
import zlib

import docx
import pytest
from lxml import etree

from nmt.cli import main as cli
from nmt.config import TextFormat
from nmt.documents import word
from nmt.documents.files import open_document
from nmt.errors import NMTError

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
NS = {
    "w": W,
    "r": "http://schemas.openxmlformats.org/officeDocument/2006/relationships",
    "mc": "http://schemas.openxmlformats.org/markup-compatibility/2006",
    "wp": "http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing",
    "a": "http://schemas.openxmlformats.org/drawingml/2006/main",
    "wps": "http://schemas.microsoft.com/office/word/2010/wordprocessingShape",
    "v": "urn:schemas-microsoft-com:vml",
}
REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
KEPT = (
    "drawing",
    "footnoteReference",
    "endnoteReference",
    "tab",
    "br",
    "rPr",
    "lastRenderedPageBreak",
)


def png() -> bytes:
    """A 1x1 PNG picture."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + crc

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + pixels + chunk(b"IEND", b"")


def saved(document) -> bytes:
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {name: z.read(name) for name in z.namelist()}


def zipped(parts: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, body in parts.items():
            z.writestr(name, body)
    return out.getvalue()


def rezip(data: bytes, changed: dict[str, bytes]) -> bytes:
    """The package with `changed` members replaced or added."""
    return zipped(members(data) | changed)


def fragment(xml: str) -> list[etree._Element]:
    declared = " ".join(f'xmlns:{k}="{v}"' for k, v in NS.items())
    return list(etree.fromstring(f"<root {declared}>{xml}</root>"))


def tree(data: bytes, member: str) -> etree._Element:
    return etree.fromstring(members(data)[member])


def count(data: bytes, member: str, name: str) -> int:
    return len(tree(data, member).findall(f".//w:{name}", NS))


def texts(data: bytes, member: str) -> list[str]:
    return [t.text or "" for t in tree(data, member).iter(f"{{{W}}}t")]


def upper(text: str) -> str:
    """A fake translation: the text upper-cased, its codes and entities as they were."""
    return re.sub(r"(<[^>]*>|&\w+;)|([^<&]+)", lambda m: m.group(1) or m.group(2).upper(), text)


def translated(data: bytes, translate=upper) -> bytes:
    opened = word.read(data, "a.docx")
    return opened.write([translate(text) for text, _ in opened.segments()])


def edited(data: bytes, after: str, xml: str, inside: bool = False) -> bytes:
    """`xml` put after the run whose text is `after` (at the end of that run: `inside`)."""
    root = tree(data, "word/document.xml")
    run = next(t for t in root.iter(f"{{{W}}}t") if t.text == after).getparent()
    if inside:
        run.extend(fragment(xml))
    else:
        for element in reversed(fragment(xml)):
            run.addnext(element)
    declared = etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)
    return rezip(data, {"word/document.xml": declared})


def with_notes(data: bytes, run_text: str) -> bytes:
    """A footnote and an endnote (each after Word's separator notes), referenced from inside the
    run whose text is `run_text`."""
    notes = {}
    for kind in ("footnote", "endnote"):
        separators = "".join(
            f'<w:{kind} w:type="{t}" w:id="{k}"><w:p><w:r><w:{t}/></w:r></w:p></w:{kind}>'
            for k, t in ((-1, "separator"), (0, "continuationSeparator"))
        )
        body = f'<w:{kind} w:id="1"><w:p><w:r><w:t>Eine {kind} hier.</w:t></w:r></w:p></w:{kind}>'
        notes[f"word/{kind}s.xml"] = (
            f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:{kind}s xmlns:w="{W}">'
            f"{separators}{body}</w:{kind}s>"
        ).encode()
    rels = tree(data, "word/_rels/document.xml.rels")
    for k, kind in enumerate(("footnotes", "endnotes")):
        etree.SubElement(rels, rels[0].tag, Id=f"rIdNote{k}", Type=f"{REL}/{kind}",
                         Target=f"{kind}.xml")  # fmt: skip
    types = members(data)["[Content_Types].xml"].decode()
    for kind in ("footnotes", "endnotes"):
        mime = f"application/vnd.openxmlformats-officedocument.wordprocessingml.{kind}+xml"
        override = f'<Override PartName="/word/{kind}.xml" ContentType="{mime}"/>'
        types = types.replace("</Types>", override + "</Types>")
    data = rezip(data, {**notes, "word/_rels/document.xml.rels": etree.tostring(rels),
                        "[Content_Types].xml": types.encode()})  # fmt: skip
    refs = '<w:footnoteReference w:id="1"/><w:endnoteReference w:id="1"/>'
    return edited(data, run_text, refs, inside=True)


TEXT_BOX = (
    '<w:r><mc:AlternateContent><mc:Choice Requires="wps"><w:drawing><wp:anchor><a:graphic>'
    '<a:graphicData uri="http://schemas.microsoft.com/office/word/2010/wordprocessingShape">'
    "<wps:wsp><wps:txbx><w:txbxContent><w:p><w:r><w:t>Im Kasten</w:t></w:r></w:p>"
    "</w:txbxContent></wps:txbx></wps:wsp></a:graphicData></a:graphic></wp:anchor></w:drawing>"
    "</mc:Choice><mc:Fallback><w:pict><v:shape><v:textbox><w:txbxContent><w:p><w:r>"
    "<w:t>Im Kasten</w:t></w:r></w:p></w:txbxContent></v:textbox></v:shape></w:pict>"
    "</mc:Fallback></mc:AlternateContent></w:r>"
)


def pictured(tmp_path) -> bytes:
    """A paragraph whose first run holds text, a picture, a footnote and an endnote reference."""
    picture = tmp_path / "p.png"
    picture.write_bytes(png())
    document = docx.Document()
    paragraph = document.add_paragraph()
    paragraph.add_run("Ich sehe ").add_picture(str(picture))
    paragraph.add_run("rote").bold = True
    paragraph.add_run(" Äpfel.")
    return with_notes(saved(document), "Ich sehe ")


def test_a_translated_run_keeps_its_picture_note_references_tabs_and_breaks(tmp_path):
    data = pictured(tmp_path)
    document = docx.Document(io.BytesIO(data))
    run = document.add_paragraph().add_run("Name:\tWert")
    run.add_break()
    run.add_text("Ende")
    paragraph = document.add_paragraph()
    paragraph.add_run("Datum:")
    paragraph.add_run().add_tab()  # a tab in a run of its own parts the runs' words too
    paragraph.add_run("Montag")
    # a page began inside the run when Word last laid it out: one piece of two w:t
    then = '<w:lastRenderedPageBreak/><w:t xml:space="preserve"> und weiter</w:t>'
    data = edited(saved(document), "Montag", then, inside=True)
    opened = word.read(data, "a.docx")
    assert opened.segments()[1:3] == [
        ("<r0>Name:</r0><br/><r1>Wert</r1><br/><r2>Ende</r2>", TextFormat.xml),
        ("<r0>Datum:</r0><br/><r1>Montag und weiter</r1>", TextFormat.xml),
    ]
    out = translated(data)
    for name in KEPT:
        assert count(out, "word/document.xml", name) == count(data, "word/document.xml", name)
    assert count(out, "word/document.xml", "drawing") == 1
    assert count(out, "word/document.xml", "footnoteReference") == 1
    root = tree(out, "word/document.xml")
    first = root.find(".//w:r", NS)  # the picture and both references after the text, as before
    assert [etree.QName(c).localname for c in first] == [
        "t", "drawing", "footnoteReference", "endnoteReference"
    ]  # fmt: skip
    assert (
        first[0].text == "ICH SEHE "
        and first[0].get(f"{{{word._SPACE[1:].split('}')[0]}}}space") == "preserve"
    )
    split = root.findall(".//w:p", NS)[1].find("w:r", NS)
    assert [(etree.QName(c).localname, c.text) for c in split] == [
        ("t", "NAME:"), ("tab", None), ("t", "WERT"), ("br", None), ("t", "ENDE")
    ]  # fmt: skip
    assert texts(out, "word/document.xml")[-2:] == ["DATUM:", "MONTAG UND WEITER"]


def test_every_cell_of_a_table_with_merged_cells_and_the_header_is_translated():
    document = docx.Document()
    table = document.add_table(rows=5, cols=6)
    for r, row in enumerate(table.rows):
        for c, cell in enumerate(row.cells):
            cell.text = f"Zelle {r} {c}"
            cell.add_paragraph(f"{r * 6 + c},50")  # no letters: no segment
    table.cell(1, 1).merge(table.cell(2, 2))  # four cells' paragraphs in one
    document.sections[0].header.paragraphs[0].text = "Kopfzeile"
    data = saved(document)
    assert len(word.read(data, "a.docx").segments()) == 31
    for _ in range(3):  # the same on every run (ids of python-docx's proxies once decided it)
        out = translated(data)
        cells = [t for t in texts(out, "word/document.xml") if t and not t[0].isdigit()]
        assert sorted(cells) == sorted(f"ZELLE {r} {c}" for r in range(5) for c in range(6))
        assert texts(out, "word/header1.xml") == ["KOPFZEILE"]


def test_members_whose_text_did_not_change_keep_their_bytes():
    document = docx.Document()
    document.add_paragraph("Ein Hund bellt.")
    document.sections[0].header.paragraphs[0].text = "Kopfzeile"
    data = saved(document)
    body = members(data)["word/document.xml"].split(b"?>", 1)[1].lstrip()
    word_declaration = b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\r\n'
    data = rezip(data, {"word/document.xml": word_declaration + body})  # as Word writes it
    before = members(data)
    opened = word.read(data, "a.docx")
    same = opened.write([text for text, _ in opened.segments()])
    assert members(same) == before  # an identity translation changes no member
    out = translated(data)
    after = members(out)
    assert list(after) == list(before)
    changed = {name for name in before if after[name] != before[name]}
    assert changed == {"word/document.xml", "word/header1.xml"}
    assert after["word/document.xml"].startswith(word_declaration + b"<w:document")
    assert opened.write([upper(t) for t, _ in opened.segments()]) == out  # written twice: same


def test_a_paragraph_of_three_runs_keeps_each_runs_properties_and_its_hyperlink():
    document = docx.Document()
    paragraph = document.add_paragraph()
    paragraph.add_run("Ein ").bold = True
    paragraph.add_run("Hund").italic = True
    last = paragraph.add_run(" läuft.")
    last.font.size = docx.shared.Pt(14)
    link = (
        '<w:hyperlink w:anchor="ziel"><w:r><w:rPr><w:rStyle w:val="Hyperlink"/></w:rPr>'
        '<w:t xml:space="preserve"> zum Ziel</w:t></w:r></w:hyperlink>'
    )
    data = edited(saved(document), "Hund", link)
    opened = word.read(data, "a.docx")
    assert opened.segments() == [
        ("<r0>Ein </r0><r1>Hund</r1><r2> zum Ziel</r2><r3> läuft.</r3>", TextFormat.xml)
    ]
    out = opened.write(["<r0>A </r0><r1>dog</r1> quickly<r2> to the goal</r2><r3> runs.</r3>"])
    properties = [
        [etree.tostring(p, method="c14n") for p in tree(d, "word/document.xml").iter(f"{{{W}}}rPr")]
        for d in (data, out)
    ]
    assert properties[0] == properties[1] and len(properties[0]) == 4
    assert texts(out, "word/document.xml") == ["A ", "dog quickly", " to the goal", " runs."]
    assert tree(out, "word/document.xml").find(".//w:hyperlink", NS).get(f"{{{W}}}anchor") == "ziel"


def test_footnotes_endnotes_text_boxes_headers_and_footers_are_translated(tmp_path):
    document = docx.Document()
    document.add_paragraph("Siehe hier.")
    document.sections[0].header.paragraphs[0].text = "Kopfzeile"
    document.sections[0].footer.paragraphs[0].text = "Fußzeile"
    data = edited(saved(document), "Siehe hier.", TEXT_BOX)
    data = with_notes(data, "Siehe hier.")
    opened = word.read(data, "a.docx")
    assert opened.texts() == [
        "Siehe hier.",
        "Im Kasten",
        "Kopfzeile",
        "Fußzeile",
        "Eine footnote hier.",
        "Eine endnote hier.",
    ]  # fmt: skip  (the text box once: its fallback copy takes the same translation)
    out = translated(data)
    assert texts(out, "word/document.xml") == ["SIEHE HIER.", "IM KASTEN", "IM KASTEN"]
    assert texts(out, "word/header1.xml") == ["KOPFZEILE"]
    assert texts(out, "word/footer1.xml") == ["FUSSZEILE"]
    assert texts(out, "word/footnotes.xml") == ["EINE FOOTNOTE HIER."]
    assert texts(out, "word/endnotes.xml") == ["EINE ENDNOTE HIER."]
    assert count(out, "word/footnotes.xml", "separator") == 1


def test_a_file_that_is_no_word_document_is_refused_naming_it(tmp_path):
    def refused(data: bytes) -> None:
        with pytest.raises(NMTError, match=r"^x\.docx: not a Word document"):
            word.read(data, "x.docx")

    refused(b"Ein Hund bellt.\n")
    refused(zipped({"readme.txt": b"hello"}))
    package = "http://schemas.openxmlformats.org/package/2006/relationships"
    workbook = f'<Relationship Id="r1" Type="{REL}/officeDocument" Target="xl/workbook.xml"/>'
    rels = f'<Relationships xmlns="{package}">{workbook}</Relationships>'
    refused(zipped({"_rels/.rels": rels.encode(), "xl/workbook.xml": b"<workbook/>"}))  # .xlsx
    broken = saved(docx.Document())
    refused(rezip(broken, {"word/document.xml": b"<w:document"}))
    text = tmp_path / "x.docx"
    text.write_text("Ein Hund bellt.\n")
    with pytest.raises(NMTError, match="not a Word document"):
        open_document(text, TextFormat.auto)


@pytest.fixture(scope="module")
def ckpt(train_small):
    return train_small("gru")


def test_nmt_translate_keeps_the_picture_and_footnote_of_a_translated_run(ckpt, tmp_path):
    source = tmp_path / "x.docx"
    source.write_bytes(pictured(tmp_path))
    out = tmp_path / "y.docx"
    assert cli.translate([f"ckpt={ckpt}", f"input={source}", f"output={out}", "device=cpu"]) == 0
    data, done = source.read_bytes(), out.read_bytes()
    for name in ("drawing", "footnoteReference", "endnoteReference"):
        assert count(done, "word/document.xml", name) == count(data, "word/document.xml", name) == 1
    assert "Äpfel" not in "".join(texts(done, "word/document.xml"))
    assert texts(done, "word/footnotes.xml") != texts(data, "word/footnotes.xml")
    assert members(done)["word/media/image1.png"] == members(data)["word/media/image1.png"]
