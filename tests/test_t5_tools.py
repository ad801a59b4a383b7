"""Every nmt tool on a T5-family import in MADLAD-400's layout (`conftest.write_t5`, the
session's `madlad`): the target language's `<2xx>` code goes first on the source, nothing is
forced on the target, and a `src_lang` is checked and read by no one. nmt-translate (tgt_lang by
any code of a language, src_lang, src_lang=auto, int8), nmt-score, constraints, prefixes, banned
phrases, an ensemble of the import with itself, confidence, nmt-evaluate and the calibration it
fits, nmt-serve (its own API, /info and the page's menus, LibreTranslate's, DeepL's, a document)
and a vocabulary trimmed to kept text: each gives what the library's Translator gives for the
same texts."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import sacrebleu
from conftest import T5_CODES

from nmt.checkpoint import load_checkpoint
from nmt.cli import main as cli
from nmt.config import DecodeConfig, Precision, Strategy, TextFormat, TextOptions
from nmt.models.int8 import Int8Linear
from nmt.tokenizer import T5_FILES
from nmt.translation.confidence import CALIBRATION_FILE, Calibration, judge, measure
from nmt.translation.request import Request
from nmt.translation.translator import Translator

GREEDY = DecodeConfig(strategy=Strategy.greedy, max_len_a=0.0, max_len_b=40)
BEAM = DecodeConfig(strategy=Strategy.beam, beam_size=4, max_len_a=0.0, max_len_b=40)
# what the commands are given for GREEDY
GREEDY_ARGS = ["decode=greedy", "decode.max_len_a=0", "decode.max_len_b=40"]
CODES = ["de", "en", "fr"]  # the languages of T5_CODES


def sentences(demo_dir: Path, n: int, split: str = "test") -> list[str]:
    return (demo_dir / f"{split}.de").read_text("utf-8").splitlines()[:n]


def shortest(demo_dir: Path, n: int) -> list[str]:
    """The n shortest German test sentences: ones the small twin translates without running on."""
    return sorted(sentences(demo_dir, 100), key=len)[:n]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), "utf-8")
    return path


def pieces_of(ours: Path) -> list[str]:
    return json.loads((ours / T5_FILES["pieces"]).read_text("utf-8"))["pieces"]


def test_the_command_translates_into_the_language_asked(madlad, demo_dir, tmp_path, capsys):
    """nmt-translate: N lines in, N out, the Translator's; tgt_lang by any code of the language
    (`DE`, `deu` are `de`), English by default; src_lang checked and not put (`de`, and `auto`
    over lines in three languages, give the translations of no src_lang); an unknown code is
    refused by name before any work; int8 holds the model in int8 and translates as its copy."""
    _, ours = madlad
    texts = sentences(demo_dir, 6)
    lines = [*texts[:3], "", *texts[3:]]
    source = write_lines(tmp_path / "in.de", lines)
    translator = Translator.from_checkpoint(ours, GREEDY, "cpu")
    english = translator.translate(lines, tgt_lang="en")
    german = translator.translate(lines, tgt_lang="de")
    assert english[3] == "" and english != german  # the code is read

    def command(*extra: str) -> list[str]:
        out = tmp_path / "out.txt"
        args = [f"ckpt={ours}", f"input={source}", f"output={out}", "device=cpu", *GREEDY_ARGS]
        assert cli.translate([*args, *extra]) == 0
        return out.read_text("utf-8").splitlines()

    assert command("tgt_lang=en") == english and len(english) == len(lines)
    assert command() == english  # the import's default target: English
    assert command("tgt_lang=DE") == german
    assert command("tgt_lang=deu") == german
    assert command("tgt_lang=en", "src_lang=de") == english
    # src_lang=auto: each line's language found and checked (a French, an English line), and
    # no code put for it: the translations of the same lines with none
    mixed = [*texts[:2], "Je vois deux grands oiseaux rouges dans le jardin.",
             "The children are painting four red birds.", *texts[2:4]]  # fmt: skip
    source = write_lines(tmp_path / "in.de", mixed)
    assert command("tgt_lang=en", "src_lang=auto") == translator.translate(mixed, tgt_lang="en")

    args = [f"ckpt={ours}", f"input={source}", f"output={tmp_path / 'refused.txt'}", "device=cpu"]
    assert cli.translate([*args, "tgt_lang=xx"]) == 2
    err = capsys.readouterr().err
    assert "tgt_lang='xx'" in err and "de, en, fr" in err
    assert cli.translate([*args, "tgt_lang=en", "src_lang=xx"]) == 2
    assert "src_lang='xx'" in capsys.readouterr().err
    assert not (tmp_path / "refused.txt").exists()

    # int8: read from its directory, the model holds int8 weights only, and translates as the
    # int8 copy made beside the fp32 weights; the command gives its translations
    int8 = replace(GREEDY, precision=Precision.int8)
    only = Translator.from_checkpoint(ours, int8, "cpu")
    products = [m for m in only.model.modules() if isinstance(m, Int8Linear)]
    assert only.int8_only and products and all(m.weight is None for m in products)
    beside = Translator.from_checkpoint(load_checkpoint(ours), int8, "cpu")
    want = only.translate(mixed, tgt_lang="de")
    assert want == beside.translate(mixed, tgt_lang="de")
    assert command("tgt_lang=de", "decode.precision=int8") == want and len(want) == len(mixed)


def test_every_tool_takes_the_import(madlad, demo_dir, tmp_path, capsys):
    """nmt-score gives the search's own score (no code forced: every target piece is scored),
    and scores by the code of the language asked; constraints, prefixes, banned phrases; an
    ensemble of the import with itself is the import; confidence read off the search is what
    teacher forcing gives."""
    _, ours = madlad
    texts = shortest(demo_dir, 5)
    translator = Translator.from_checkpoint(ours, BEAM, "cpu")
    full = translator.translate_full(texts, attention=False, tgt_lang="en")
    plain = [t.text for t in full]
    scored = translator.score(texts, plain, tgt_lang="en")
    codes = set(T5_CODES)
    for result, score in zip(full, scored):
        assert score.score == pytest.approx(result.score, abs=1e-4)
        assert score.normalized == pytest.approx(result.nbest[0][1], abs=1e-4)
        assert score.pieces == result.tgt_pieces and not codes & set(result.tgt_pieces)
        assert result.prefix_score is None
    into_german = translator.score(texts, plain, tgt_lang="de")
    assert [s.score for s in into_german] != pytest.approx([s.score for s in scored], abs=1e-3)

    # the command: configs/score.yaml's decode, tgt_lang by any code
    src, hyp = write_lines(tmp_path / "s.de", texts), write_lines(tmp_path / "h.en", plain)
    decode = cli.compose_config("score", ["ckpt=x"]).decode
    for lang, want in (("en", scored), ("DE", into_german)):
        expected = translator.score(texts, plain, decode=decode, tgt_lang=lang)
        args = [f"ckpt={ours}", f"src={src}", f"hyp={hyp}", "device=cpu", f"tgt_lang={lang}"]
        assert cli.score(args) == 0
        rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
        assert len(rows) == len(texts)
        assert [float(r[0]) for r in rows] == pytest.approx([e.score for e in expected], abs=1e-5)
        assert [e.score for e in expected] == pytest.approx([s.score for s in want], abs=1e-4)
    assert cli.score([f"ckpt={ours}", f"src={src}", f"hyp={hyp}", "tgt_lang=xx"]) == 2
    assert "tgt_lang='xx'" in capsys.readouterr().err

    # an ensemble of the import with itself: the import's translations, into either language
    pair = Translator.from_checkpoints([ours, ours], BEAM, "cpu")
    assert pair.translate(texts, tgt_lang="en") == plain
    assert pair.translate(texts, tgt_lang="de") == translator.translate(texts, tgt_lang="de")

    # a constraint: a word of another translation, in this one
    word = next(w for t in plain[1:] for w in re.findall(r"[a-z]{4,}", t) if w not in plain[0])
    [forced] = translator.translate([texts[0]], constraints=[[word]], tgt_lang="en")
    assert word in forced
    # a banned phrase: a translation's first word, in none
    word = next(t.split()[0] for t in plain if t)
    banned = translator.translate(texts, banned=[word], tgt_lang="en")
    assert not any(re.search(rf"\b{re.escape(word)}\b", t) for t in banned) and banned != plain
    # a prefix
    [prefixed] = translator.translate_full([texts[0]], prefixes=["I see"], tgt_lang="en")
    assert prefixed.text.startswith("I see") and prefixed.prefix_score is not None

    # confidence read off the search (a row for every piece: nothing forced) = by teacher forcing
    calibration, ended = Calibration(temperature=1.3), 0
    for lang in ("en", "de"):
        request = Request(texts, BEAM, tgt_lang=lang, statistics=calibration.temperature)
        searched = translator.run(translator.prepare(request))
        taught = measure(translator, texts, [t.text for t in searched], calibration, lang)
        for t, theirs in zip(searched, taught):
            assert t.statistics.size(0) == len(t.tgt_pieces)
            mine = judge(t, calibration)
            # a translation the length limit ended has no row for the end of sentence, which
            # teacher forcing scores after it
            assert mine.pieces == pytest.approx(theirs.pieces[: len(mine.pieces)], abs=1e-5)
            if t.tgt_pieces[-1] == "</s>":
                assert mine.sentence == pytest.approx(theirs.sentence, abs=1e-5)
                ended += 1
    assert ended >= len(texts)


def test_nmt_evaluate_scores_and_calibrates_the_import(madlad, demo_dir, tmp_path, capsys):
    """nmt-evaluate data=... tgt_lang=en: the hypotheses are the Translator's, BLEU is theirs;
    with confidence=true it fits the calibration the import lacks on the valid split and stores
    it with the checkpoint, where nmt-translate confidence=true reads it."""
    _, ours = madlad
    ckpt = Path(shutil.copytree(ours, tmp_path / "ckpt"))  # the calibration is written into it
    data = tmp_path / "data"  # the demo corpus's first test and valid pairs, to keep it quick
    data.mkdir()
    for split, n in (("test", 20), ("valid", 60)):
        for lang in ("de", "en"):
            lines = (demo_dir / f"{split}.{lang}").read_text("utf-8").splitlines()[:n]
            write_lines(data / f"{split}.{lang}", lines)
    out_dir = tmp_path / "eval"
    args = [f"ckpt={ckpt}", "data=demo", f"data.local_dir={data}", "split=test", "device=cpu",
            "tgt_lang=en", "confidence=true", f"out_dir={out_dir}", *GREEDY_ARGS]  # fmt: skip
    assert not (ckpt / CALIBRATION_FILE).exists()
    assert cli.evaluate(args) == 0
    captured = capsys.readouterr()
    assert "BLEU" in captured.out and "confidence (good: sentence chrF >= 50" in captured.out
    assert "calibration: fitted on valid (60 sentences" in captured.err
    sources = (data / "test.de").read_text("utf-8").splitlines()
    references = (data / "test.en").read_text("utf-8").splitlines()
    translator = Translator.from_checkpoint(ckpt, GREEDY, "cpu")
    hypotheses = (out_dir / "test.hyp").read_text("utf-8").splitlines()
    assert hypotheses == translator.translate(sources, tgt_lang="en")
    record = json.loads((out_dir / "test.scores.json").read_text("utf-8"))
    assert record["tgt_lang"] == "en"
    bleu = sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert record["bleu"] == pytest.approx(bleu, abs=1e-6)
    # the fitted pieces' map is closer to how often pieces are right than the raw probabilities
    judged = record["confidence"]
    assert judged["token_ece"] < judged["token_ece_t1"]

    # nmt-translate confidence=true reads it: P(good) of each translation the search ended is
    # the fitted calibration's (one the length limit cut has no row for its end, which teacher
    # forcing scores: judged off the search, it is read without it)
    calibration = Calibration.load(ckpt, "greedy")
    assert calibration is not None and calibration.token_knots
    found = translator.translate_full(sources[:8], tgt_lang="en")
    ended = [i for i, t in enumerate(found) if t.tgt_pieces[-1] == "</s>"]
    assert len(ended) >= 3
    texts, hypotheses = [sources[i] for i in ended], [found[i].text for i in ended]
    want = measure(translator, texts, hypotheses, calibration, "en")
    src, out = write_lines(tmp_path / "s.de", texts), tmp_path / "out.tsv"
    args = [f"ckpt={ckpt}", f"input={src}", f"output={out}", "device=cpu", "tgt_lang=en",
            "confidence=true", *GREEDY_ARGS]  # fmt: skip
    assert cli.translate(args) == 0
    assert "uncalibrated" not in capsys.readouterr().err
    rows = [row.split("\t") for row in out.read_text("utf-8").splitlines()]
    assert [r[0] for r in rows] == hypotheses
    assert [float(r[1]) for r in rows] == pytest.approx([c.sentence for c in want], abs=2e-3)


def test_the_server_serves_the_import(madlad, demo_dir):
    """nmt-serve: /translate into the language asked, by any code, as the Translator; an unknown
    one is a 422 naming it; /info lists the codes where the page's menus read them;
    LibreTranslate's and DeepL's shapes with their own codes and detection; /score; a document
    with markup, translated sentence by sentence with its tags kept."""
    from starlette.testclient import TestClient

    from nmt.run_config import ServeRunConfig
    from nmt.serving.app import load_app

    _, ours = madlad
    texts = shortest(demo_dir, 4)
    translator = Translator.from_checkpoint(ours, BEAM, "cpu")
    english = translator.translate(texts, tgt_lang="en")
    german = translator.translate(texts, tgt_lang="de")
    assert english != german

    def said(answer) -> list[str]:  # noqa: ANN001
        assert answer.status_code == 200, answer.text
        return [t["text"] for t in answer.json()["translations"]]

    serve = ServeRunConfig(ckpt=str(ours), decode=BEAM, device="cpu")
    with TestClient(load_app(serve)) as client:
        assert said(client.post("/translate", json={"texts": texts, "tgt_lang": "en"})) == english
        assert said(client.post("/translate", json={"texts": texts})) == english  # the default
        for lang in ("de", "DE", "deu"):
            body = {"texts": texts, "tgt_lang": lang}
            assert said(client.post("/translate", json=body)) == german, lang
        for src in ("de", "fr"):  # checked, and read by no one
            body = {"texts": texts, "tgt_lang": "en", "src_lang": src}
            assert said(client.post("/translate", json=body)) == english, src
        answer = client.post("/translate", json={"texts": texts, "tgt_lang": "en",
                                                 "src_lang": "auto"})  # fmt: skip
        assert said(answer) == english and answer.json()["detected_language"]["language"] == "de"
        for key in ("tgt_lang", "src_lang"):
            refused = client.post("/translate", json={"text": texts[0], key: "xx"})
            assert refused.status_code == 422 and f"{key}='xx'" in refused.text
        body = {"texts": texts, "translations": english, "tgt_lang": "en"}
        scores = [s["score"] for s in client.post("/score", json=body).json()["scores"]]
        want = translator.score(texts, english, tgt_lang="en")
        assert scores == pytest.approx([s.score for s in want], abs=1e-4)

        # /info: the codes are the target languages and the source codes, English the default;
        # the page fills its "Into" and "From" menus with what it reads of /info
        info = client.get("/info").json()
        assert info["target_languages"] == info["source_codes"] == CODES
        assert info["languages"]["target"] == "en" and info["languages"]["source"] in CODES
        assert info["pairs"]["de"] == ["en", "fr"]
        page = client.get("/static/app.js").text  # the page's script, as the server serves it
        menus = page[page.index("function setupLanguages") : page.index("function setupPairs")]
        read = set(re.findall(r"info\.(\w+)", menus))
        assert {"target_languages", "source_codes", "languages"} <= read <= set(info)

        # LibreTranslate: source auto or a code, target a code
        for source in ("auto", "de"):
            body = {"q": texts, "source": source, "target": "en"}
            answer = client.post("/libretranslate/translate", json=body)
            assert answer.status_code == 200, answer.text
            assert answer.json()["translatedText"] == english
        assert answer.json().get("detectedLanguage") is None  # said for source auto alone
        body = {"q": texts[0], "source": "auto", "target": "de"}
        found = client.post("/libretranslate/translate", json=body).json()
        assert found["translatedText"] == german[0]
        assert found["detectedLanguage"]["language"] == "de"
        refused = client.post("/libretranslate/translate", json={**body, "target": "xx"})
        assert refused.status_code == 400 and "xx" in refused.text
        listed = client.get("/libretranslate/languages").json()
        assert {entry["code"]: entry["targets"] for entry in listed} == {
            "de": ["en", "fr"], "en": ["de", "fr"], "fr": ["de", "en"],
        }  # fmt: skip
        # DeepL: EN-US and DE; the source said or detected
        for extra in ({}, {"source_lang": "DE"}):
            answer = client.post("/v2/translate", json={"text": texts, "target_lang": "EN-US",
                                                        **extra})  # fmt: skip
            assert said(answer) == english
            assert {t["detected_source_language"] for t in answer.json()["translations"]} == {"DE"}
        assert said(client.post("/v2/translate", json={"text": texts, "target_lang": "DE"})) == (
            german
        )
        targets = client.get("/v2/languages", params={"type": "target"}).json()
        assert {"DE", "EN-US", "FR"} <= {t["language"] for t in targets}

        # a document: markup kept, each sentence translated as the Translator translates it
        html = f"<p>{texts[0]} <b>{texts[1]}</b></p>"
        for lang, want in (("en", english), ("de", german)):
            body = {"text": html, "format": "html", "tgt_lang": lang}
            [text] = said(client.post("/translate", json=body))
            assert re.findall(r"</?\w+>", text) == ["<p>", "<b>", "</b>", "</p>"]
            assert re.sub(r"</?\w+>", "", text).split() == f"{want[0]} {want[1]}".split()


def test_documents_are_translated_into_the_language_asked(madlad, demo_dir, tmp_path):
    """A Markdown file by nmt-translate, and HTML by `translate_texts` (the text loop of
    nmt-translate's lines and nmt-serve's texts): the markup kept, each sentence the Translator's
    (its code and alignment skipping the code's pieces), into the language asked."""
    from nmt.documents.texts import translate_texts

    _, ours = madlad
    texts = shortest(demo_dir, 4)
    translator = Translator.from_checkpoint(ours, GREEDY, "cpu")
    page = write_lines(tmp_path / "page.md", [f"# {texts[0]}", "", f"{texts[1]} **{texts[2]}**",
                                               "", f"- {texts[3]}"])  # fmt: skip
    html = f"<h1>{texts[0]}</h1><p>{texts[1]} <i>{texts[2]}</i> {texts[3]}</p>"
    for lang in ("en", "de"):
        want = translator.translate(texts, tgt_lang=lang)
        out = tmp_path / f"page.{lang}.md"
        args = [f"ckpt={ours}", f"input={page}", f"output={out}", "device=cpu", f"tgt_lang={lang}"]
        assert cli.translate([*args, *GREEDY_ARGS]) == 0
        assert out.read_text("utf-8") == f"# {want[0]}\n\n{want[1]} **{want[2]}**\n\n- {want[3]}\n"
        request = Request([html], GREEDY, tgt_lang=lang)
        [result] = translate_texts(translator, request, TextOptions(format=TextFormat.html))
        assert result.failure is None
        # each tag around the translation of what it held (the sentences meet at "</h1><p>")
        assert result.text == f"<h1>{want[0]}</h1><p>{want[1]} <i>{want[2]}</i> {want[3]}</p>"


def test_trimming_keeps_the_codes_and_the_translations_of_kept_text(madlad, demo_dir, tmp_path):
    """nmt-import keep_text=[FILE] on a T5: the table keeps the pieces the text needs and every
    `<2xx>` code, the languages stay, and greedy search gives the whole model's translation, into
    either language, wherever the whole model's uses kept pieces only."""
    hf_dir, ours = madlad
    src = sentences(demo_dir, 40, "valid")
    tgt = (demo_dir / "valid.en").read_text("utf-8").splitlines()[:40]
    keep = write_lines(tmp_path / "keep.txt", src + tgt)
    trimmed = tmp_path / "trimmed"
    assert cli.import_model([f"source={hf_dir}", f"out={trimmed}", f"keep_text=[{keep}]"]) == 0
    kept = pieces_of(trimmed)
    assert len(kept) < 0.8 * len(pieces_of(ours)) and set(T5_CODES) <= set(kept)
    config = load_checkpoint(trimmed).config.data
    assert config.language_codes == load_checkpoint(ours).config.data.language_codes
    assert config.code_style == load_checkpoint(ours).config.data.code_style
    whole = Translator.from_checkpoint(ours, GREEDY, "cpu")
    small = Translator.from_checkpoint(trimmed, GREEDY, "cpu")
    for lang in ("en", "de"):
        untrimmed = whole.translate_full(src, tgt_lang=lang)
        again = small.translate(src, tgt_lang=lang)
        covered = [i for i, t in enumerate(untrimmed) if set(t.tgt_pieces) <= set(kept)]
        assert len(covered) >= 30, lang
        assert [again[i] for i in covered] == [untrimmed[i].text for i in covered], lang
