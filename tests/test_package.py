"""Zip-based documents read within budgets and written back member by member
(nmt/documents/package.py): a zip bomb refused before anything expands, members that were not
changed the same bytes, order, names and compression."""

from __future__ import annotations

import io
import time
import tracemalloc
import zipfile

import pytest

from nmt.config import TextFormat
from nmt.documents import package
from nmt.documents.files import open_document
from nmt.documents.package import Package
from nmt.errors import NMTError


def zipped(members: list[tuple[str, bytes, int]]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data, kind in members:
            z.writestr(zipfile.ZipInfo(name, (2020, 1, 2, 3, 4, 6)), data, compress_type=kind)
    return out.getvalue()


def test_a_zip_bomb_is_refused_before_anything_expands(tmp_path):
    bomb = zipped([("word/document.xml", b"\0" * (64 << 20), zipfile.ZIP_DEFLATED)])
    assert len(bomb) < 200_000  # 64 MB of zeros deflate to about 64 KB
    tracemalloc.start()
    began = time.perf_counter()
    with pytest.raises(NMTError, match=r"word/document.xml expands [\d,]+ times"):
        Package.read(bomb, "bomb.docx")
    took = time.perf_counter() - began
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert took < 1.0 and peak < 8 << 20  # refused from the stated sizes: nothing expanded
    path = tmp_path / "bomb.docx"
    path.write_bytes(bomb)
    with pytest.raises(NMTError, match="bomb.docx: member word/document.xml expands"):
        open_document(path, TextFormat.auto)


def test_members_beyond_the_budgets_are_refused_by_name(monkeypatch):
    data = zipped([("a.bin", bytes(range(256)) * 4000, zipfile.ZIP_STORED)] * 1
                  + [("b.xml", b"<x/>" * 300_000, zipfile.ZIP_STORED)])  # fmt: skip
    monkeypatch.setattr(package, "MAX_TOTAL", 1_000_000)
    with pytest.raises(NMTError, match="expand to 2,224,000 bytes, more than the 1,000,000"):
        Package.read(data, "big.odt")
    monkeypatch.setattr(package, "MAX_TOTAL", 10_000_000)
    monkeypatch.setattr(package, "MAX_PART", 1_000_000)
    read = Package.read(data, "big.odt")
    with pytest.raises(NMTError, match="b.xml expands to 1,200,000 bytes, more than the"):
        read.member("b.xml")
    with pytest.raises(NMTError, match="not a zip package"):
        Package.read(b"PK\x03\x04 but not a zip", "fake.docx")


def test_members_not_changed_keep_their_bytes_order_and_compression():
    members = [
        ("mimetype", b"application/epub+zip", zipfile.ZIP_STORED),
        ("OEBPS/chapter.xhtml", b"<p>Ein Hund.</p>" * 50, zipfile.ZIP_DEFLATED),
        ("OEBPS/cover.png", bytes(range(256)) * 40, zipfile.ZIP_STORED),
        ("META-INF/container.xml", b"<container/>", zipfile.ZIP_DEFLATED),
    ]
    read = Package.read(zipped(members), "book.epub")
    out = zipfile.ZipFile(io.BytesIO(read.write({"OEBPS/chapter.xhtml": b"<p>A dog.</p>"})))
    infos = out.infolist()
    assert [i.filename for i in infos] == [m[0] for m in members]
    assert [i.compress_type for i in infos] == [m[2] for m in members]
    assert [i.date_time for i in infos] == [(2020, 1, 2, 3, 4, 6)] * 4
    for name, data, _ in members:
        expected = b"<p>A dog.</p>" if name == "OEBPS/chapter.xhtml" else data
        assert out.read(name) == expected
    assert read.write({}) and zipfile.ZipFile(io.BytesIO(read.write({}))).read("mimetype") == (
        b"application/epub+zip"
    )
    with pytest.raises(ValueError, match="no such members"):
        read.write({"nothing.xml": b""})
