"""Translation memories: a TMX or TSV read by language (nmt.data.tmx, nmt.translation.memory),
nmt-translate tm=FILE (memory lines verbatim, the others the same bytes as without), and
nmt-train data.format=tmx."""

from __future__ import annotations

import logging
from pathlib import Path
from xml.sax.saxutils import escape

import pytest

from nmt.cli import main as cli
from nmt.config import DataConfig, DataFormat, Split
from nmt.data.splits import read_split
from nmt.errors import NMTError
from nmt.translation.memory import TranslationMemory

TMX = """<?xml version="1.0" encoding="UTF-8"?>
<tmx version="1.4">
<header srclang="de-DE" datatype="plaintext" segtype="sentence" adminlang="en-US"
        o-tmf="test" creationtool="test" creationtoolversion="1"/>
<body>
  <tu>
    <tuv xml:lang="de-DE"><seg>Ich sehe  <bpt i="1">&lt;b&gt;</bpt>rote<ept i="1">&lt;/b&gt;</ept>
      Äpfel.</seg></tuv>
    <tuv xml:lang="en-GB"><seg>I see <hi>red</hi> apples.<ph x="2">&lt;br/&gt;</ph></seg></tuv>
  </tu>
  <tu><tuv xml:lang="de-DE"><seg>Nur eine Sprache.</seg></tuv></tu>
  <tu>
    <tuv xml:lang="fr-FR"><seg>Je vois des pommes.</seg></tuv>
    <tuv xml:lang="en-GB"><seg>Only French and English.</seg></tuv>
  </tu>
  <tu>
    <tuv lang="DE"><seg>Ich sehe rote Äpfel.</seg></tuv>
    <tuv xml:lang="en-US"><seg>A later translation.</seg></tuv>
  </tu>
  <tu>
    <tuv xml:lang="en-GB"><seg>We buy books.</seg></tuv>
    <tuv xml:lang="de-AT"><seg>Wir kaufen Bücher &amp; Hefte.</seg></tuv>
  </tu>
</body>
</tmx>
"""


def write_tmx(path: Path, pairs: list[tuple[str, str]], src: str = "de-DE", tgt: str = "en-GB"):
    units = "".join(
        f'<tu><tuv xml:lang="{src}"><seg>{escape(s)}</seg></tuv>'
        f'<tuv xml:lang="{tgt}"><seg>{escape(t)}</seg></tuv></tu>\n'
        for s, t in pairs
    )
    path.write_text(
        f'<?xml version="1.0" encoding="UTF-8"?>\n<tmx version="1.4"><header/><body>\n{units}'
        "</body></tmx>\n",
        encoding="utf-8",
    )
    return path


def test_a_tmx_is_read_by_language_without_inline_codes_first_unit_winning(tmp_path, caplog):
    path = tmp_path / "company.tmx"
    path.write_text(TMX, encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="nmt.translation.memory"):
        memory = TranslationMemory.read(path, "de", "en")
    # de-DE and de-AT are the model's de, en-GB and en-US its en; variants in either order;
    # bpt/ept/ph dropped with their codes, hi kept as its words; the second "Ich sehe rote
    # Äpfel." (lang="DE", TMX 1.1's attribute) is a duplicate: the first unit's stays
    assert memory.entries == {
        "Ich sehe rote Äpfel.": "I see red apples.",
        "Wir kaufen Bücher & Hefte.": "We buy books.",
    }
    assert "2 entries from 5 units (1 duplicate sources, 1 with another translation" in caplog.text
    assert "2 units lacking de or en skipped" in caplog.text
    # whitespace only: runs, line breaks, tabs, no-break spaces and outer space; nothing else
    assert memory.lookup("  Ich sehe\trote\u00a0\nÄpfel. ") == "I see red apples."
    assert memory.lookup("ich sehe rote Äpfel.") is None
    assert memory.lookup("Ich sehe rote Äpfel") is None
    assert memory.lookup("") is None
    # the same memory in the model's other spellings of the languages
    assert len(TranslationMemory.read(path, "deu_Latn", "eng_Latn")) == 2


def test_a_tsv_memory_and_its_refusals(tmp_path):
    tsv = tmp_path / "memory.tsv"
    tsv.write_text("\ufeffEin Hund.\tA dog.\n\nZwei  Hunde.\tTwo dogs.\n", encoding="utf-8")
    memory = TranslationMemory.read(tsv, "de", "en")
    assert memory.lookup("Zwei Hunde.") == "Two dogs." and memory.lookup("Ein Hund.") == "A dog."
    tsv.write_text("Ein Hund.\tA dog.\nkein Tab\n", encoding="utf-8")
    with pytest.raises(NMTError, match="line 2 is not source<TAB>target"):
        TranslationMemory.read(tsv, "de", "en")
    with pytest.raises(NMTError, match="no such file"):
        TranslationMemory.read(tmp_path / "nope.tmx", "de", "en")
    other = write_tmx(tmp_path / "fr.tmx", [("Bonjour.", "Hola.")], "fr-FR", "es-ES")
    with pytest.raises(NMTError, match=r"no unit with both de and en .*fr-FR, es-ES"):
        TranslationMemory.read(other, "de", "en")
    broken = tmp_path / "broken.tmx"
    broken.write_text("<tmx><body><tu></body>", encoding="utf-8")
    with pytest.raises(NMTError, match="broken.tmx: not a TMX file"):
        TranslationMemory.read(broken, "de", "en")


LINES = [
    "Ich sehe einundzwanzig rote Äpfel.",
    "Wir kaufen zwölf kleine Bücher.",
    "Sie sagt, dass mein Vater neunundneunzig alte Häuser verkauft.",
    "",
    "Er weiß, dass die Kinder siebentausendeins grüne Vögel malen.",
    "Wir  kaufen zwölf kleine Bücher. ",
]
REMEMBERED = {1, 5}  # the lines the memory holds (line 6 with other whitespace)
APPROVED = "We buy twelve small books (approved)."


@pytest.fixture(scope="module")
def ckpt(train_small):
    return train_small("gru")


@pytest.fixture
def memory_files(tmp_path):
    src = tmp_path / "in.de"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    tm = write_tmx(tmp_path / "tm.tmx", [("Wir kaufen zwölf kleine Bücher.", APPROVED)])
    return src, tm


def translate(ckpt: Path, src: Path, out: Path, *more: str) -> list[str]:
    args = [f"ckpt={ckpt}", f"input={src}", f"output={out}", "device=cpu", "progress=false"]
    assert cli.translate([*args, *more]) == 0
    return out.read_text(encoding="utf-8").split("\n")[:-1]


def test_memory_lines_come_back_verbatim_and_the_others_as_without_tm(ckpt, memory_files):
    src, tm = memory_files
    plain = translate(ckpt, src, src.with_name("plain.en"))
    found = translate(ckpt, src, src.with_name("tm.en"), f"tm={tm}")
    assert len(found) == len(LINES)
    for i, (without, with_tm) in enumerate(zip(plain, found)):
        assert with_tm == (APPROVED if i in REMEMBERED else without), i
    assert plain[1] != APPROVED  # the model's own translation differs: the memory decided


def test_the_confidence_column_marks_memory_lines_and_review_skips_them(ckpt, memory_files):
    src, tm = memory_files
    review = src.with_name("review.tsv")
    plain = translate(ckpt, src, src.with_name("plain.en"), "confidence=true")
    found = translate(
        ckpt, src, src.with_name("tm.en"), "confidence=true", f"tm={tm}", f"review={review}"
    )
    for i, (without, with_tm) in enumerate(zip(plain, found)):
        if i in REMEMBERED:
            ones = " ".join(["1.00"] * len(APPROVED.split()))
            assert with_tm == f"{APPROVED}\t1.000\tmemory\t{ones}"
        else:
            assert with_tm == without, i
    listed = [int(row.split("\t")[0]) for row in review.read_text(encoding="utf-8").splitlines()]
    assert not {i + 1 for i in REMEMBERED} & set(listed)


def test_a_memory_that_cannot_serve_is_refused_before_any_work(
    ckpt, memory_files, capsys, monkeypatch
):
    src, _ = memory_files
    out = src.with_name("out.en")

    def no_model(*args, **kwargs):
        raise AssertionError("the checkpoint was read")

    with monkeypatch.context() as m:  # a missing file: before the checkpoint is read
        m.setattr("nmt.cli.translate.Translator.from_command", no_model)
        args = [f"ckpt={ckpt}", f"input={src}", f"output={out}", "device=cpu"]
        assert cli.translate([*args, f"tm={src.with_name('nope.tmx')}"]) == 2
        assert "nope.tmx: no such file" in capsys.readouterr().err
        # a combination the memory cannot honour: refused with the config
        assert cli.translate([*args, f"tm={src}", "nbest_tsv=true"]) == 2
        assert "with nbest_tsv=true" in capsys.readouterr().err
    # languages the model does not translate: after the model (its languages), before any line
    other = write_tmx(src.with_name("fr.tmx"), [("Bonjour.", "Hola.")], "fr-FR", "es-ES")
    args = [f"ckpt={ckpt}", f"input={src}", f"output={out}", "device=cpu", f"tm={other}"]
    assert cli.translate(args) == 2
    assert "no unit with both de and en" in capsys.readouterr().err
    assert not out.exists() and not list(src.parent.glob("out.en.*"))


def test_an_html_segment_in_memory_is_written_escaped_and_a_tagged_one_translated(ckpt, tmp_path):
    page = tmp_path / "page.html"
    page.write_text(
        "<html><body>\n<p>Wir kaufen Bücher &amp; Hefte.</p>\n"
        "<p>Wir kaufen <b>Bücher</b> &amp; Hefte.</p>\n</body></html>\n",
        encoding="utf-8",
    )
    tm = write_tmx(tmp_path / "tm.tmx", [("Wir kaufen Bücher & Hefte.", "Books & <pads>.")])
    out = tmp_path / "page.en.html"
    args = [f"ckpt={ckpt}", f"input={page}", f"output={out}", "device=cpu", f"tm={tm}"]
    assert cli.translate(args) == 0
    done = out.read_text(encoding="utf-8")
    assert "<p>Books &amp; &lt;pads&gt;.</p>" in done
    assert done.count("Books &amp;") == 1  # the segment with a tag went to the model


def demo_as_tmx(demo_dir: Path, out: Path, counts: dict[str, int]) -> Path:
    """The demo corpus's first lines of each split as {split}.tmx, de-DE and en-GB."""
    out.mkdir()
    for split, n in counts.items():
        de = (demo_dir / f"{split}.de").read_text(encoding="utf-8").splitlines()[:n]
        en = (demo_dir / f"{split}.en").read_text(encoding="utf-8").splitlines()[:n]
        write_tmx(out / f"{split}.tmx", list(zip(de, en)))
    return out


def test_a_tmx_split_reads_as_the_same_pairs_and_trains(demo_dir, tmp_path):
    data = demo_as_tmx(demo_dir, tmp_path / "tmx", {"train": 400, "valid": 20, "test": 20})
    cfg = DataConfig(name="tm", src_lang="de", tgt_lang="en", local_dir=str(data))
    tmx = read_split(DataConfig(**{**vars(cfg), "format": DataFormat.tmx}), Split.valid)
    text = read_split(DataConfig(**{**vars(cfg), "local_dir": str(demo_dir)}), Split.valid)
    assert tmx.src == text.src[:20] and tmx.tgt == text.tgt[:20]
    assert read_split(cfg, Split.valid).src == tmx.src  # format=auto finds valid.tmx
    run = tmp_path / "run"
    args = ["data=demo", f"data.local_dir={data}", "data.format=tmx", f"run_dir={run}"]
    args += ["data.tokenizer.vocab_size=400", "train.batch_tokens=400", "train.calibrate=false"]
    args += ["model=gru_bahdanau", "model.emb_size=16", "model.hidden_size=16"]
    assert cli.train([*args, "train.max_steps=4", "train.valid_every=4"]) == 0
    assert (run / "checkpoints" / "best" / "ckpt.pt").is_file()


XLIFF_12 = """<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
 <file source-language="en-US" target-language="de-DE" datatype="plaintext" original="a">
  <body>
   <trans-unit id="1"><source>Click <g id="1">here</g>.<x id="2"/></source>
    <target>Klicken Sie <g id="1">hier</g>.<x id="2"/></target></trans-unit>
   <trans-unit id="2"><source>Not yet</source><target></target></trans-unit>
   <trans-unit id="3"><source>A <ph id="3">&lt;br/&gt;</ph>dog</source>
    <target>Ein <ph id="3">&lt;br/&gt;</ph>Hund</target></trans-unit>
  </body>
 </file>
 <file source-language="fr-FR" target-language="de-DE" datatype="plaintext" original="b">
  <body><trans-unit id="4"><source>Un chat</source><target>Eine Katze</target></trans-unit></body>
 </file>
</xliff>
"""
XLIFF_20 = """<?xml version="1.0" encoding="UTF-8"?>
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="de" trgLang="en">
 <file id="f"><unit id="u">
  <segment><source>Ein <pc id="1">Hund</pc> läuft.</source>
   <target>A <pc id="1">dog</pc> runs.</target></segment>
  <segment><source>Er bellt.<ph id="2"/></source><target>It barks.<ph id="2"/></target></segment>
 </unit></file>
</xliff>
"""


def test_a_translated_xliff_file_is_a_corpus_either_way_round(tmp_path):
    from nmt.data.tmx import Tally, xliff_pairs

    one = tmp_path / "train.xliff"
    one.write_text(XLIFF_12, encoding="utf-8")
    tally = Tally()
    # the file translates en -> de; asked for de -> en, each pair comes the other way round
    assert list(xliff_pairs(one, "de", "en", tally)) == [
        ("Klicken Sie hier.", "Click here."), ("Ein Hund", "A dog"),
    ]  # fmt: skip
    assert (tally.units, tally.pairs, tally.skipped) == (4, 2, 2)  # untranslated; fr -> de
    two = tmp_path / "valid.xliff"
    two.write_text(XLIFF_20, encoding="utf-8")
    assert list(xliff_pairs(two, "de", "en")) == [
        ("Ein Hund läuft.", "A dog runs."), ("Er bellt.", "It barks."),
    ]  # fmt: skip
    (tmp_path / "test.xliff").write_text(XLIFF_20, encoding="utf-8")
    cfg = DataConfig(name="x", src_lang="de", tgt_lang="en", local_dir=str(tmp_path))
    assert read_split(cfg, Split.valid).tgt == ["A dog runs.", "It barks."]  # format=auto
    broken = tmp_path / "broken.xliff"
    broken.write_text("<xliff><file", encoding="utf-8")
    with pytest.raises(NMTError, match="not an XLIFF file"):
        list(xliff_pairs(broken, "de", "en"))
