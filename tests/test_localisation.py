"""Localisation files: XLIFF 1.2 and 2.0 (inline codes back exactly, targets and states, units
left alone) and gettext PO (msgstr lines written, plurals, fuzzy flags, placeholders, every other
byte kept), read and written with a fake translator, and one PO file through nmt-translate."""

import html
import logging
import re
import shutil
import subprocess
from pathlib import Path

import polib
import pytest
from lxml import etree

from nmt.cli import main as cli
from nmt.config import TextFormat
from nmt.documents import po, xliff
from nmt.documents.formats import format_of
from nmt.documents.protect import KINDS
from nmt.errors import NMTError

NS12 = "{urn:oasis:names:tc:xliff:document:1.2}"
NS20 = "{urn:oasis:names:tc:xliff:document:2.0}"
_TAG_OR_SPAN = re.compile(r"(<[^>]*>|" + KINDS["placeholder"] + ")")

XLIFF12 = """<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file source-language="de" target-language="en" datatype="html" original="page.html">
    <body>
      <trans-unit id="1">
        <source>Klicken Sie <g id="1" ctype="bold">hier &amp; <g id="2">dort</g></g>,<x id="3"/> \
um <ph id="4">&lt;br/&gt;</ph> weiter<bpt id="5">&lt;i&gt;</bpt>zu<ept id="5">&lt;/i&gt;</ept>.\
</source>
        <note>Ein Hinweis</note>
      </trans-unit>
      <group id="g" translate="no">
        <trans-unit id="2">
          <source>Markenname</source>
        </trans-unit>
      </group>
      <trans-unit id="3" translate="no">
        <source>Nicht hier</source>
      </trans-unit>
      <trans-unit id="4">
        <source>Schon übersetzt</source>
        <target>Already translated</target>
      </trans-unit>
      <trans-unit id="5">
        <source>Leeres Ziel</source>
        <target xml:lang="en"/>
      </trans-unit>
    </body>
  </file>
</xliff>
""".encode()

XLIFF20 = """<?xml version='1.0' encoding='utf-8'?>
<!-- by hand -->
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="de" trgLang="en">
  <file id="f1">
    <unit id="u1">
      <segment id="s1">
        <source>Der <pc id="1" dataRefStart="d1">rote</pc> Hund<ph id="2" dataRef="d3"/>.</source>
      </segment>
      <ignorable>
        <source> </source>
      </ignorable>
      <segment id="s2" state="initial">
        <source>Er <mrk id="m1" translate="no">Bello</mrk> läuft <pc id="3">schnell</pc>.</source>
      </segment>
    </unit>
    <unit id="u2" translate="no">
      <segment><source>Nein</source></segment>
    </unit>
  </file>
</xliff>
""".encode()

PO = """\
# Polish translation of the app.
msgid ""
msgstr ""
"Project-Id-Version: app 1.0\\n"
"Content-Type: text/plain; charset=UTF-8\\n"
"Plural-Forms: nplurals=3; plural=(n==1 ? 0 : n%10>=2 && n%10<=4 && (n%100<10 "
"|| n%100>=20) ? 1 : 2);\\n"

# A translator's comment
#. A comment for translators
#: app/views.py:12 app/views.py:40
#, python-format
msgctxt "menu"
msgid "Open %(name)s"
msgstr ""

#: app/views.py:50
#, c-format
msgid "Saved %s in %d seconds"
msgstr ""

#: app/models.py:3
#, c-format
msgid "%d file"
msgid_plural "%d files"
msgstr[0] ""
msgstr[1] ""

msgid "Already translated"
msgstr "Juz przetlumaczone"

msgid ""
"A long message that runs over more than one line when it is written, as "
"xgettext writes it.\\n"
msgstr ""

#~ msgid "Old"
#~ msgstr "Stary"
"""


def upper(text: str) -> str:
    """A fake translator: the text outside tags and placeholders in capitals."""
    parts = _TAG_OR_SPAN.split(text)
    return "".join(p if k % 2 else html.escape(html.unescape(p).upper(), quote=False)
                   for k, p in enumerate(parts))  # fmt: skip


def translated(opened, translate=upper) -> bytes:
    return opened.write([translate(text) for text, _ in opened.segments()])


def inner(element) -> str:
    """An element's content as XML (namespace declarations left out)."""
    text = (element.text or "") + "".join(etree.tostring(c, encoding="unicode") for c in element)
    return re.sub(r' xmlns(:\w+)?="[^"]*"', "", text)


def test_xliff_12_units_get_targets_with_their_codes_back_and_the_rest_unchanged():
    opened = xliff.read(XLIFF12, "page.xlf")
    texts = [t for t, _ in opened.segments()]
    assert {f for _, f in opened.segments()} == {TextFormat.xml}
    # translate="no" (on the unit or its group) and a translated unit are not segments
    assert texts == [
        "Klicken Sie <g0>hier &amp; <g1>dort</g1></g0>,<x2/> um <ph3/> weiter<bpt4/>zu<ept5/>.",
        "Leeres Ziel",
    ]
    out = translated(opened)
    root = etree.fromstring(out)
    units = {u.get("id"): u for u in root.iter(f"{NS12}trans-unit")}
    target = units["1"].find(f"{NS12}target")
    assert target.get("state") == "translated" and target.get("state-qualifier") == "mt-suggestion"
    # the codes are the source's, native code and attributes and all; only the text changed
    assert inner(target) == (
        'KLICKEN SIE <g id="1" ctype="bold">HIER &amp; <g id="2">DORT</g></g>,<x id="3"/> UM '
        '<ph id="4">&lt;br/&gt;</ph> WEITER<bpt id="5">&lt;i&gt;</bpt>ZU<ept id="5">&lt;/i&gt;'
        "</ept>."
    )
    assert [u.find(f"{NS12}target") for u in (units["2"], units["3"])] == [None, None]
    assert units["4"].find(f"{NS12}target").text == "Already translated"
    empty = units["5"].find(f"{NS12}target")
    assert empty.text == "LEERES ZIEL" and empty.get("{http://www.w3.org/XML/1998/namespace}lang")
    # everything but the targets is the bytes read: the declaration, the root's attribute order
    # (lxml writes xmlns first), the note, the indentation
    lines = out.decode().split("\n")
    new = [k for k, line in enumerate(lines) if "<target state=" in line]
    assert len(new) == 1 and lines[new[0]].startswith("        <target")
    kept = [line for k, line in enumerate(lines) if k not in new]
    kept = [
        line.replace(
            '<target xml:lang="en" state="translated" state-qualifier="mt-suggestion"'
            ">LEERES ZIEL</target>",
            '<target xml:lang="en"/>',
        )
        for line in kept
    ]
    assert "\n".join(kept).encode() == XLIFF12


def test_xliff_12_codes_come_back_byte_for_byte_from_an_unchanged_translation():
    opened = xliff.read(XLIFF12, "page.xlf")
    root = etree.fromstring(translated(opened, lambda text: text))
    unit = next(root.iter(f"{NS12}trans-unit"))
    assert inner(unit.find(f"{NS12}target")) == inner(unit.find(f"{NS12}source"))


def test_xliff_20_segments_of_a_unit_are_translated_and_marked_on_the_segment():
    opened = xliff.read(XLIFF20, "app.xliff")
    assert [t for t, _ in opened.segments()] == [
        "Der <pc0>rote</pc0> Hund<ph1/>.",
        "Er <mrk0/> läuft <pc1>schnell</pc1>.",  # translate="no": a point, Bello untouched
    ]
    out = translated(opened)
    root = etree.fromstring(out)
    segments = list(root.iter(f"{NS20}segment"))
    assert [s.get("state") for s in segments] == ["translated", "translated", None]
    for segment in segments[:2]:
        source, target = segment.find(f"{NS20}source"), segment.find(f"{NS20}target")
        assert segment.index(target) == segment.index(source) + 1
        assert inner(target) == upper(inner(source)).replace("BELLO", "Bello")
    assert 'Bello</mrk> LÄUFT <pc id="3">SCHNELL</pc>' in out.decode()
    assert root.find(f".//{NS20}ignorable/{NS20}target") is None
    head = b"<?xml version='1.0' encoding='utf-8'?>\n<!-- by hand -->\n<xliff xmlns="
    assert out.startswith(head) and out.endswith(b"</xliff>\n")


def test_an_xliff_file_with_nothing_to_translate_is_written_as_read():
    done = XLIFF20.replace(b'<unit id="u1">', b'<unit id="u1" translate="no">')
    opened = xliff.read(done, "done.xlf")
    assert opened.segments() == [] and opened.write([]) == done
    bare = b'<xliff version="1.2"><file><body><trans-unit id="1"><source>Hallo</source>' \
           b"</trans-unit></body></file></xliff>"  # fmt: skip
    out = translated(xliff.read(bare, "bare.xlf"))  # 1.2 without its namespace: by version
    assert b"<source>Hallo</source><target state=" in out and b">HALLO</target>" in out


@pytest.mark.parametrize(
    "data, message",
    [
        (b"Hallo Welt", "not XML"),
        (b"<html><body>Hallo</body></html>", "not an XLIFF file (its root is <html>)"),
        (b'<xliff version="3.0"><file/></xliff>', "nmt reads XLIFF 1.2 and 2.x"),
        (b'<xliff xmlns="urn:example"><file/></xliff>', "nmt reads XLIFF 1.2 and 2.x"),
    ],
)
def test_a_file_that_is_not_xliff_is_refused(data, message):
    with pytest.raises(NMTError, match=re.escape(message)):
        xliff.read(data, "bad.xlf")


def test_the_formats_table_names_xliff_and_po():
    for name, module in [("a.xlf", xliff), ("a.xliff", xliff), ("a.po", po), ("a.pot", po)]:
        found = format_of(Path(name), TextFormat.auto)
        assert found is not None and found.module == module.__name__ and found.binary
    assert isinstance(format_of(Path("a.po"), TextFormat.auto).open(PO.encode(), "a.po"), po.PoFile)


def test_po_entries_get_their_msgstr_and_every_other_line_is_kept(monkeypatch):
    opened = po.read(PO.encode(), "messages.po")
    texts = [t for t, _ in opened.segments()]
    long = "A long message that runs over more than one line when it is written, as xgettext " \
           "writes it.\n"  # fmt: skip
    # the header, a translated entry and an obsolete one are not segments; a plural is two
    assert texts == ["Open %(name)s", "Saved %s in %d seconds", "%d file", "%d files", long]
    out = translated(opened).decode()
    catalog = polib.pofile(out)
    entries = {e.msgid: e for e in catalog}
    assert entries["Open %(name)s"].msgstr == "OPEN %(name)s"  # placeholders kept
    assert entries["Open %(name)s"].msgctxt == "menu"
    assert entries["Open %(name)s"].occurrences == [("app/views.py", "12"), ("app/views.py", "40")]
    assert entries["Open %(name)s"].flags == ["fuzzy", "python-format"]  # MARK_FUZZY
    assert entries["Saved %s in %d seconds"].msgstr == "SAVED %s IN %d SECONDS"
    # nplurals=3: msgstr[0] from the msgid, [1] and [2] from the msgid_plural
    assert entries["%d file"].msgstr_plural == {0: "%d FILE", 1: "%d FILES", 2: "%d FILES"}
    assert entries["Already translated"].msgstr == "Juz przetlumaczone"
    assert "fuzzy" not in entries["Already translated"].flags
    assert entries[long].msgstr == long.upper()  # its line break at the end kept
    assert [e.msgid for e in catalog.obsolete_entries()] == ["Old"]
    # only msgstr and flags lines differ from the file read
    old, new = PO.split("\n"), out.split("\n")
    assert [line for line in new if line not in old and not line.startswith(("msgstr", '"', "#,"))
            ] == []  # fmt: skip
    assert [line for line in old if line not in new and not line.startswith(("msgstr", "#,"))
            ] == []  # fmt: skip
    assert '"A LONG MESSAGE THAT RUNS OVER MORE THAN ONE LINE WHEN IT IS WRITTEN, AS "\n' \
           '"XGETTEXT WRITES IT.\\n"' in out  # wrapped at 79 columns, as msgcat does  # fmt: skip
    # without MARK_FUZZY, no entry is marked
    monkeypatch.setattr(po, "MARK_FUZZY", False)
    assert "fuzzy" not in translated(po.read(PO.encode(), "messages.po")).decode()


@pytest.mark.skipif(shutil.which("msgfmt") is None, reason="gettext's msgfmt is not installed")
def test_a_translated_po_file_passes_msgfmt_check_and_msgcat_wraps_it_the_same(tmp_path):
    path = tmp_path / "pl.po"
    path.write_bytes(translated(po.read(PO.encode(), "messages.po")))
    check = subprocess.run(["msgfmt", "-c", "-o", "/dev/null", str(path)], capture_output=True)
    assert check.returncode == 0, check.stderr.decode()
    again = subprocess.run(["msgcat", str(path)], capture_output=True, check=True).stdout
    assert again == path.read_bytes()


def test_a_po_translation_that_lost_a_placeholder_is_marked_fuzzy_and_warned(monkeypatch, caplog):
    monkeypatch.setattr(po, "MARK_FUZZY", False)
    opened = po.read(PO.encode(), "messages.po")
    with caplog.at_level(logging.WARNING, logger="nmt.documents.po"):
        out = translated(opened, lambda text: upper(text).replace("%d", "")).decode()
    entries = {e.msgid: e for e in polib.pofile(out)}
    assert entries["Saved %s in %d seconds"].flags == ["fuzzy", "c-format"]
    assert entries["%d file"].flags == ["fuzzy", "c-format"]
    assert entries["Open %(name)s"].flags == ["python-format"]  # kept its %(name)s
    assert "lost %d: marked fuzzy" in caplog.text and "Saved %s" in caplog.text


def test_a_po_file_with_nothing_to_translate_is_written_as_read_in_its_charset():
    done = PO.replace('msgstr ""\n\n#', 'msgstr "x"\n\n#').replace('msgstr[0] ""', 'msgstr[0] "x"')
    done = done.replace('msgstr ""\n\n#~', 'msgstr "x"\n\n#~')
    opened = po.read(done.encode(), "done.po")
    assert opened.segments() == [] and opened.write([]) == done.encode()
    latin = PO.replace("charset=UTF-8", "charset=ISO-8859-15").replace("Juz", "Já")
    latin = latin.encode("latin-1")
    out = translated(po.read(latin, "latin.po"))
    assert b"J\xe1 przetlumaczone" in out and b"charset=ISO-8859-15" in out
    # a template's CHARSET becomes UTF-8, as does a charset that cannot hold a translation
    template = PO.replace("charset=UTF-8", "charset=CHARSET").encode()
    out = po.read(template, "messages.pot").write(["Öffnen %(name)s", "", "", "", ""])
    assert b"charset=UTF-8" in out and "Öffnen".encode() in out
    out = po.read(latin, "latin.po").write(["Открыть %(name)s", "", "", "", ""])
    assert b"charset=UTF-8" in out and "Открыть".encode() in out


@pytest.mark.parametrize(
    "data, message",
    [
        (b"Hallo Welt\n", "not a gettext PO file (Syntax error in po file (line 1))"),
        (b'msgid "a"\nmsgstr "b"\nWelt\n', "(line 3)"),
        (b'msgid ""\nmsgstr "Content-Type: text/plain; charset=KLINGON\\n"\n', "'KLINGON'"),
        (b'msgid "\xff"\nmsgstr ""\n', "not utf-8 text"),
    ],
)
def test_a_file_that_is_not_po_is_refused(data, message):
    with pytest.raises(NMTError, match=re.escape(message)):
        po.read(data, "bad.po")


@pytest.fixture(scope="module")
def ckpt(train_small):
    return train_small("gru")


def test_nmt_translate_fills_a_po_file_and_an_xliff_file(ckpt, tmp_path):
    messages = tmp_path / "messages.po"
    messages.write_text(
        'msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n\n'
        '#, python-format\nmsgid "Ich sehe %(count)s rote Äpfel."\nmsgstr ""\n\n'
        'msgid "Wir kaufen kleine Bücher."\nmsgstr ""\n',
        encoding="utf-8",
    )
    out = tmp_path / "messages.fr.po"
    assert cli.translate([f"ckpt={ckpt}", f"input={messages}", f"output={out}", "device=cpu"]) == 0
    entries = polib.pofile(out.read_text(encoding="utf-8"))
    assert [e.msgid for e in entries] == [e.msgid for e in polib.pofile(str(messages))]
    assert all(e.msgstr and "fuzzy" in e.flags for e in entries)
    assert "%(count)s" in entries[0].msgstr and "Äpfel" not in entries[0].msgstr
    page = tmp_path / "page.xlf"
    page.write_bytes(XLIFF12)
    out = tmp_path / "page.en.xlf"
    assert cli.translate([f"ckpt={ckpt}", f"input={page}", f"output={out}", "device=cpu"]) == 0
    unit = next(etree.fromstring(out.read_bytes()).iter(f"{NS12}trans-unit"))
    # every code back once, content and attributes as they were (the model may move them)
    assert sorted(codes(unit.find(f"{NS12}target")), key=repr) == sorted(
        codes(unit.find(f"{NS12}source")), key=repr
    )


def codes(element) -> list:
    """An element's inline codes in order: each pair's name and attributes, each point whole."""
    return [(c.tag, dict(c.attrib), None if c.tag == f"{NS12}g" else c.text)
            for c in element.iter() if c is not element]  # fmt: skip
