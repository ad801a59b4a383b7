"""PowerPoint and Excel files (nmt.documents.pptx, .xlsx): every text translated, run formatting
kept, and every member holding no translated text the same bytes. The files are made with
python-pptx, openpyxl and XlsxWriter (test-only: skipped without them) and read back with them."""

from __future__ import annotations

import html
import io
import re
import zipfile

import pytest

from nmt.cli import main as cli
from nmt.config import TextFormat
from nmt.documents import pptx as powerpoint
from nmt.documents import xlsx as excel
from nmt.documents.formats import BY_EXTENSION
from nmt.documents.runs import BREAK, Point, field, marked, run_texts
from nmt.errors import NMTError

A = "http://schemas.openxmlformats.org/drawingml/2006/main"
P = "http://schemas.openxmlformats.org/presentationml/2006/main"
# a slide number placeholder as PowerPoint writes it on a slide: its field is not translated
SLIDE_NUMBER = f"""<p:sp xmlns:p="{P}" xmlns:a="{A}"><p:nvSpPr><p:cNvPr id="90" name="Nr"/>
<p:cNvSpPr/><p:nvPr><p:ph type="sldNum" sz="quarter" idx="12"/></p:nvPr></p:nvSpPr><p:spPr/>
<p:txBody><a:bodyPr/><a:p><a:r><a:t>Seite </a:t></a:r><a:fld id="{{B6F15528-21DE-4FAA-801E-634DDDAF4B2B}}" type="slidenum"><a:t>2</a:t></a:fld></a:p></p:txBody></p:sp>"""  # noqa: E501
# a field inside a text: kept, the text around it translated
FIELD = f"""<a:fld xmlns:a="{A}" id="{{B6F15528-21DE-4FAA-801E-634DDDAF4B2C}}" type="slidenum">
<a:t>7</a:t></a:fld>"""
AFTER = f"""<a:r xmlns:a="{A}"><a:t> von zehn</a:t></a:r>"""


def shout(text: str, fmt: TextFormat) -> str:
    """A fake translation: the text upper-cased, codes and entities as they were."""
    parts = re.split(r"(<[^>]*>|&\w+;)", text) if fmt == TextFormat.xml else [text]
    return "".join(p if p.startswith(("<", "&")) else p.upper() for p in parts)


def translated(opened) -> bytes:
    return opened.write([shout(text, fmt) for text, fmt in opened.segments()])


def members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {name: z.read(name) for name in z.namelist()}


def changed(old: bytes, new: bytes) -> set[str]:
    """The members whose bytes differ; both packages hold the same names in the same order."""
    before, after = members(old), members(new)
    assert list(before) == list(after)
    return {name for name in before if before[name] != after[name]}


def repacked(parts: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, content in parts.items():
            z.writestr(name, content)
    return out.getvalue()


def png() -> bytes:
    image = pytest.importorskip("PIL.Image")
    out = io.BytesIO()
    image.new("RGB", (4, 4), "red").save(out, "PNG")
    return out.getvalue()


@pytest.fixture
def deck() -> bytes:
    """Two slides (listed second-made first): a table and a picture; a title, a paragraph of
    three runs (the middle bold), one of two lines with a field, a slide number, notes."""
    pptx = pytest.importorskip("pptx")
    from lxml import etree
    from pptx.util import Inches

    prs = pptx.Presentation()
    first = prs.slides.add_slide(prs.slide_layouts[1])
    first.shapes.title.text = "Ein Hund"
    body = first.placeholders[1].text_frame
    paragraph = body.paragraphs[0]
    for text, bold in (("Ich sehe ", False), ("rote", True), (" Äpfel.", False)):
        run = paragraph.add_run()
        run.text, run.font.bold = text, bold
    lines = body.add_paragraph()
    lines.text = "Erste Zeile\vFolie "  # \v: a line break (a:br)
    lines._p.append(etree.fromstring(FIELD))
    lines._p.append(etree.fromstring(AFTER))
    first.shapes._spTree.append(etree.fromstring(SLIDE_NUMBER))
    first.notes_slide.notes_text_frame.text = "Eine Notiz für den Redner."
    second = prs.slides.add_slide(prs.slide_layouts[5])
    second.shapes.title.text = "Die Tabelle"
    table = second.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(4), Inches(1)).table
    table.cell(0, 0).text, table.cell(0, 1).text = "Preis", "42"
    table.cell(1, 0).text, table.cell(1, 1).text = "Gesamt", "3,5 %"
    second.shapes.add_picture(io.BytesIO(png()), Inches(5), Inches(2))
    slides = prs.slides._sldIdLst  # the second slide made is shown first
    made_second = slides[1]
    slides.remove(made_second)
    slides.insert(0, made_second)
    out = io.BytesIO()
    prs.save(out)
    return out.getvalue()


def test_a_deck_is_read_in_slide_order_with_notes_tables_breaks_and_fields(deck):
    assert powerpoint.read(deck, "deck.pptx").segments() == [
        ("Die Tabelle", TextFormat.text),
        ("Preis", TextFormat.text),
        ("Gesamt", TextFormat.text),  # "42" and "3,5 %" hold no word
        ("Ein Hund", TextFormat.text),
        ("<r0>Ich sehe </r0><r1>rote</r1><r2> Äpfel.</r2>", TextFormat.xml),
        ('<r0>Erste Zeile</r0><br/><r1>Folie </r1><x id="0"/><r2> von zehn</r2>', TextFormat.xml),
        # the slide number placeholder ("Seite 2") is not read
        ("Eine Notiz für den Redner.", TextFormat.text),
    ]


def test_a_translated_deck_changes_only_its_text(deck):
    pptx = pytest.importorskip("pptx")
    out = translated(powerpoint.read(deck, "deck.pptx"))
    assert changed(deck, out) == {
        "ppt/slides/slide1.xml",
        "ppt/slides/slide2.xml",
        "ppt/notesSlides/notesSlide1.xml",
    }  # layouts, masters, the picture, the theme, presentation.xml: the same bytes
    table_slide, first = pptx.Presentation(io.BytesIO(out)).slides
    assert first.shapes.title.text == "EIN HUND"
    runs = first.placeholders[1].text_frame.paragraphs[0].runs
    assert [r.text for r in runs] == ["ICH SEHE ", "ROTE", " ÄPFEL."]
    assert [r.font.bold for r in runs] == [False, True, False]
    # the line break and the field are where they were, the field's text kept
    assert first.placeholders[1].text_frame.paragraphs[1].text == "ERSTE ZEILE\vFOLIE 7 VON ZEHN"
    number = [s for s in first.shapes if s.shape_id == 90][0]
    assert number.text_frame.text == "Seite 2"
    assert first.notes_slide.notes_text_frame.text == "EINE NOTIZ FÜR DEN REDNER."
    table = [s for s in table_slide.shapes if s.has_table][0].table
    assert [[c.text for c in row.cells] for row in table.rows] == [
        ["PREIS", "42"],
        ["GESAMT", "3,5 %"],
    ]
    pictures = [s for s in table_slide.shapes if s.shape_type == 13]  # MSO_SHAPE_TYPE.PICTURE
    assert len(pictures) == 1 and pictures[0].image.blob == png()


def test_a_deck_translated_as_itself_is_the_same_members():
    """Parts as Office writes them (a character reference, single quotes), which lxml would
    write otherwise, are not written when their text stays."""
    pptx = pytest.importorskip("pptx")
    prs = pptx.Presentation()
    prs.slides.add_slide(prs.slide_layouts[0]).shapes.title.text = "Ein Hund & rote Äpfel"
    out = io.BytesIO()
    prs.save(out)
    parts = members(out.getvalue())
    slide = parts["ppt/slides/slide1.xml"].decode()
    slide = slide.replace("Äpfel", "&#196;pfel").replace('id="1" name=""', "id='1' name=''")
    parts["ppt/slides/slide1.xml"] = slide.encode()
    data = repacked(parts)
    deck = powerpoint.read(data, "deck.pptx")
    assert deck.segments() == [("Ein Hund & rote Äpfel", TextFormat.text)]
    assert changed(data, deck.write(["Ein Hund & rote Äpfel"])) == set()
    assert changed(data, deck.write(["A dog & red apples"])) == {"ppt/slides/slide1.xml"}


def test_a_changed_part_differs_only_where_its_text_changed(deck):
    """Its XML declaration and every element but the runs' text come out as they went in."""
    out = translated(powerpoint.read(deck, "deck.pptx"))
    before = members(deck)["ppt/notesSlides/notesSlide1.xml"].decode()
    after = members(out)["ppt/notesSlides/notesSlide1.xml"].decode()
    assert after == before.replace("Eine Notiz für den Redner.", "EINE NOTIZ FÜR DEN REDNER.")


@pytest.fixture
def shared_book() -> bytes:
    """A workbook as Excel writes it (shared strings, a formula's cached result): a text used
    twice, a number, a formula, a boolean, a rich-text cell, a text of no word, a second sheet;
    and a shared string only a formula's cached value uses."""
    xlsxwriter = pytest.importorskip("xlsxwriter")
    out = io.BytesIO()
    book = xlsxwriter.Workbook(out)
    sheet = book.add_worksheet("Preise")
    bold = book.add_format({"bold": True})
    sheet.write("A1", "Hallo Welt")
    sheet.write("A2", 42)
    sheet.write_formula("A3", '=A1&"!"', None, "Hallo Welt!")
    sheet.write("A4", True)
    sheet.write_rich_string("B1", "Ich sehe ", bold, "rote", " Äpfel.")
    sheet.write("B2", "Hallo Welt")
    sheet.write("B3", "12 %")
    sheet.write("C1", "Nur eine Formel")  # made a formula's cached value below
    book.add_worksheet("Leer").write("A1", 3.5)
    book.close()
    data = members(out.getvalue())
    sheet_xml = data["xl/worksheets/sheet1.xml"].decode()
    cell = re.search(r'<c r="C1" t="s"><v>(\d+)</v></c>', sheet_xml)
    formula = f'<c r="C1" t="s"><f>"Nur eine "&amp;"Formel"</f><v>{cell.group(1)}</v></c>'
    data["xl/worksheets/sheet1.xml"] = sheet_xml.replace(cell.group(), formula).encode()
    return repacked(data)


def test_a_workbook_translates_the_shared_strings_its_text_cells_use(shared_book):
    openpyxl = pytest.importorskip("openpyxl")
    book = excel.read(shared_book, "book.xlsx")
    assert book.segments() == [
        ("Hallo Welt", TextFormat.text),  # once, for both cells
        ("<r0>Ich sehe </r0><r1>rote</r1><r2> Äpfel.</r2>", TextFormat.xml),
    ]  # "12 %": no word; "Nur eine Formel": only a formula's cached value
    out = translated(book)
    assert changed(shared_book, out) == {"xl/sharedStrings.xml"}  # styles, sheets, workbook kept
    values = openpyxl.load_workbook(io.BytesIO(out), rich_text=True)
    assert values.sheetnames == ["Preise", "Leer"]
    sheet = values["Preise"]
    assert [sheet[c].value for c in ("A1", "A2", "A3", "A4", "B2", "B3")] == [
        "HALLO WELT", 42, '=A1&"!"', True, "HALLO WELT", "12 %"
    ]  # fmt: skip
    rich = sheet["B1"].value
    assert [str(block) for block in rich] == ["ICH SEHE ", "ROTE", " ÄPFEL."]
    assert rich[1].font.b and not getattr(rich[0], "font", None)
    cached = openpyxl.load_workbook(io.BytesIO(out), data_only=True)["Preise"]
    assert cached["A3"].value == "Hallo Welt!" and cached["C1"].value == "Nur eine Formel"
    assert values["Leer"]["A1"].value == 3.5


def test_an_outer_space_of_a_translated_string_is_kept_by_excel():
    """SpreadsheetML drops a t's outer spaces without xml:space="preserve"."""
    openpyxl = pytest.importorskip("openpyxl")
    book = openpyxl.Workbook()
    book.active["A1"] = "Hallo"
    data = io.BytesIO()
    book.save(data)
    read = excel.read(data.getvalue(), "book.xlsx")
    out = read.write(["Hello "])
    assert 'xml:space="preserve">Hello </t>' in members(out)["xl/worksheets/sheet1.xml"].decode()


def test_a_workbook_of_inline_strings_changes_only_the_sheets_that_hold_them():
    openpyxl = pytest.importorskip("openpyxl")
    from openpyxl.cell.rich_text import CellRichText, TextBlock
    from openpyxl.cell.text import InlineFont

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Texte"
    sheet["A1"], sheet["A2"], sheet["A3"] = "Guten Tag", 7, "=A2*6"
    sheet["B1"] = CellRichText(["Nur ", TextBlock(InlineFont(b=True), "heute"), " billig."])
    numbers = book.create_sheet("Zahlen")
    numbers["A1"], numbers["A2"] = 1.25, "=SUM(A1:A1)"
    data = io.BytesIO()
    book.save(data)
    data = data.getvalue()
    read = excel.read(data, "book.xlsx")
    assert [text for text, _ in read.segments()] == [
        "Guten Tag",
        "<r0>Nur </r0><r1>heute</r1><r2> billig.</r2>",
    ]
    out = translated(read)
    assert changed(data, out) == {"xl/worksheets/sheet1.xml"}
    again = openpyxl.load_workbook(io.BytesIO(out), rich_text=True)
    texts, numbers = again["Texte"], again["Zahlen"]
    assert [texts["A1"].value, texts["A2"].value, texts["A3"].value] == ["GUTEN TAG", 7, "=A2*6"]
    assert [str(b) for b in texts["B1"].value] == ["NUR ", "HEUTE", " BILLIG."]
    assert texts["B1"].value[1].font.b
    assert [numbers["A1"].value, numbers["A2"].value] == [1.25, "=SUM(A1:A1)"]


def test_files_that_are_not_such_packages_are_refused_by_name(deck, shared_book):
    with pytest.raises(NMTError, match=r"deck\.pptx: not a zip package"):
        powerpoint.read(b"Ein Hund\n", "deck.pptx")
    with pytest.raises(NMTError, match=r"book\.pptx: not a PowerPoint file .*ppt/presentation"):
        powerpoint.read(shared_book, "book.pptx")
    with pytest.raises(NMTError, match=r"deck\.xlsx: not an Excel workbook .*xl/workbook\.xml"):
        excel.read(deck, "deck.xlsx")
    broken = members(deck)
    broken["ppt/slides/slide1.xml"] = b"<p:sld"
    with pytest.raises(NMTError, match=r"d\.pptx: ppt/slides/slide1\.xml is not well-formed"):
        powerpoint.read(repacked(broken), "d.pptx")


def test_both_formats_are_found_by_their_extension():
    assert BY_EXTENSION[".pptx"].module == "nmt.documents.pptx"
    assert BY_EXTENSION[".xlsx"].module == "nmt.documents.xlsx"


PIECES = ["Erste ", "Zeile", Point(BREAK), "Zweite Zeile"]


@pytest.mark.parametrize(
    ("translation", "runs"),
    [
        ("<r0>First </r0><r1>line</r1><br/><r2>Two</r2>", ["First ", "line", "Two"]),
        # a piece outside every pair joins the run before it
        ("<r0>First</r0> <r1>line</r1> here<br/><r2>Two</r2>", ["First ", "line here", "Two"]),
        # words on the wrong side of the break join the run nearest theirs on the right side
        ("<r0>First </r0><r2>second</r2><br/><r1>line</r1>", ["First ", "second", "line"]),
        ("<r0>A &amp; B</r0><r1>&lt;c&gt;</r1><br/>", ["A & B", "<c>", ""]),
    ],
)
def test_run_codes_give_each_run_its_words(translation, runs):
    assert marked(PIECES)[1] == TextFormat.xml
    assert run_texts(translation, PIECES) == runs


def test_one_run_is_plain_text_and_a_run_beyond_every_point_gets_the_words():
    assert marked(["Tom & Jerry"]) == ("Tom & Jerry", TextFormat.text)
    assert run_texts("Tom & Jerry", ["Tom & Jerry"]) == ["Tom & Jerry"]
    assert run_texts('slides <x id="0"/>', ["Folien ", field(0)]) == ["slides "]
    # two breaks with no run between them: the words there go toward their own run
    pieces = ["a", Point(BREAK), Point(BREAK), "b"]
    assert run_texts("<r0>a</r0><br/><r1>c</r1><br/><r1>b</r1>", pieces) == ["a", "cb"]
    assert run_texts("<r0>a</r0><br/><r0>c</r0><br/><r1>b</r1>", pieces) == ["ac", "b"]


@pytest.fixture(scope="module")
def ckpt(train_small):
    return train_small("gru")


def test_nmt_translate_writes_a_deck_and_a_workbook_that_open(request, deck, shared_book, tmp_path):
    pptx = pytest.importorskip("pptx")
    openpyxl = pytest.importorskip("openpyxl")
    ckpt = request.getfixturevalue("ckpt")  # trained only when the files can be read back
    src, book = tmp_path / "deck.pptx", tmp_path / "book.xlsx"
    src.write_bytes(deck)
    book.write_bytes(shared_book)
    for path in (src, book):
        out = path.with_name(f"en{path.suffix}")
        assert cli.translate([f"ckpt={ckpt}", f"input={path}", f"output={out}", "device=cpu"]) == 0
    done = pptx.Presentation(str(tmp_path / "en.pptx"))
    first = done.slides[1]
    assert first.shapes.title.text != "Ein Hund"
    runs = first.placeholders[1].text_frame.paragraphs[0].runs
    assert len(runs) == 3 and runs[1].font.bold
    assert "Äpfel" not in "".join(r.text for r in runs)
    assert changed(deck, (tmp_path / "en.pptx").read_bytes()) <= {
        "ppt/slides/slide1.xml",
        "ppt/slides/slide2.xml",
        "ppt/notesSlides/notesSlide1.xml",
    }
    sheet = openpyxl.load_workbook(str(tmp_path / "en.xlsx"))["Preise"]
    assert sheet["A1"].value != "Hallo Welt" and sheet["A1"].value == sheet["B2"].value
    assert [sheet["A2"].value, sheet["A3"].value, sheet["A4"].value] == [42, '=A1&"!"', True]
    assert changed(shared_book, (tmp_path / "en.xlsx").read_bytes()) == {"xl/sharedStrings.xml"}


def test_html_escaping_of_run_codes_round_trips():
    pieces = ["Tom & ", "<Jerry>"]
    text, fmt = marked(pieces)
    assert fmt == TextFormat.xml and html.unescape(re.sub(r"</?r\d>", "", text)) == "Tom & <Jerry>"
    assert run_texts(text, pieces) == pieces
