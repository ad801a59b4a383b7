"""nmt-serve's "tgt_lang": a model trained with target tags (tests/test_corpora.py's toy
one-to-many model) behind the API. Each endpoint answers what the Translator gives with the same
tgt_lang; requests into different languages never share a decode; an unknown or missing language
is a 422 with the Translator's message before any decode; /info lists the languages; a model
without tags works as before, with or without its one language named; the page's "Into" menu
(headless Chromium, marked browser) sends the language with every request."""

from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from test_corpora import AA, BB, TAGGED, corpora_override, train_args, word_share, write_toy
from test_serve import BEAM, post, serve_config
from test_serve_browser import CHROMIUM, api, browser_page, score_api, serving

from nmt.cli import main as cli
from nmt.serving.admission import check_request, text_cost
from nmt.serving.app import load_app
from nmt.serving.server import batch_key
from nmt.translation.inputs import read_sources
from nmt.translation.request import Request
from nmt.translation.translator import Translator

# sources of the toy's language "xx"; each goes word for word into "aa" or "bb"
SOURCES = ["ka lo mi", "nu pe ra si", "tu ka"]
LANGS = ("aa", "bb")


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    return write_toy(tmp_path_factory.mktemp("toy"))


def trained(toy: Path, run: Path, steps: int, *extra: str) -> Path:
    limits = [f"train.max_steps={steps}", f"train.valid_every={steps}"]
    assert cli.train(train_args(toy, run, *extra, *limits)) == 0
    return run / "checkpoints" / "best"


@pytest.fixture(scope="module")
def tagged(toy, tmp_path_factory) -> Path:
    """Two target languages, aa and bb, each asked for by its tag (about 3 s on 2 cores)."""
    return trained(toy, tmp_path_factory.mktemp("tagged"), 150, TAGGED)


@pytest.fixture(scope="module")
def plain(toy, tmp_path_factory) -> Path:
    """xx -> aa without corpora: no tags, one target language."""
    return trained(toy, tmp_path_factory.mktemp("plain"), 40)


@pytest.fixture(scope="module")
def client(tagged):
    with TestClient(load_app(serve_config(tagged)), raise_server_exceptions=True) as c:
        yield c


@pytest.fixture(scope="module")
def translator(tagged) -> Translator:
    return Translator.from_checkpoint(tagged, BEAM, device="cpu")


def score(client, body: dict) -> list[dict]:
    answer = client.post("/score", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()["scores"]


def test_info_lists_the_target_languages(client, plain):
    assert client.get("/info").json()["target_languages"] == ["aa", "bb"]
    with TestClient(load_app(serve_config(plain))) as c:
        info = c.get("/info").json()
    assert info["target_languages"] == ["aa"]  # no tags: its data.tgt_lang alone
    assert info["languages"] == {"source": "xx", "target": "aa"}
    assert info["source_languages"] == ["xx"]
    assert info["source_codes"] == []  # it reads no language code: a request names none


def test_src_lang_of_a_model_that_reads_no_code_names_its_source_or_is_refused(client):
    """The APIs send the source language with every request: a model that reads no code takes
    its own (it chose the model) and refuses another, naming what it reads."""
    body = {"text": "a b", "tgt_lang": "aa"}
    alone = client.post("/translate", json=body).json()["translations"]
    same = client.post("/translate", json={**body, "src_lang": "xx"})
    assert same.status_code == 200 and same.json()["translations"] == alone
    answer = client.post("/translate", json={**body, "src_lang": "yy"})
    assert answer.status_code == 422
    assert (
        "yy is not a source language of this server: it translates from xx"
        in (answer.json()["error"])
    )


def test_info_lists_every_source_of_a_many_to_one_model(toy, tmp_path):
    many = corpora_override({"src_lang": "aa"}, {"src_lang": "bb"})
    ckpt = trained(toy, tmp_path, 4, many, "data.src_lang=aa", "data.tgt_lang=xx")
    with TestClient(load_app(serve_config(ckpt))) as c:
        info = c.get("/info").json()
    assert info["source_languages"] == ["aa", "bb"] and info["target_languages"] == ["xx"]


def test_each_language_is_translated_and_scored_as_the_translator_does(client, translator):
    texts = {}
    for lang in LANGS:
        got = post(client, {"texts": SOURCES, "tgt_lang": lang})["translations"]
        want = translator.translate_full(SOURCES, False, tgt_lang=lang)
        assert [t["text"] for t in got] == [t.text for t in want]
        assert [t["score"] for t in got] == pytest.approx([t.score for t in want], abs=1e-4)
        texts[lang] = [t["text"] for t in got]
        scored = score(client, {"texts": SOURCES, "translations": texts[lang], "tgt_lang": lang})
        expected = translator.score(SOURCES, texts[lang], tgt_lang=lang)
        assert [s["score"] for s in scored] == pytest.approx([s.score for s in expected], abs=1e-4)
    # the language really is the tag's: the toy's two dictionaries share no word
    assert word_share(texts["aa"], AA) > 0.9 and word_share(texts["bb"], BB) > 0.9
    # a translation scores better in its own language than as the other one
    for lang, other in (("aa", "bb"), ("bb", "aa")):
        own = score(client, {"texts": SOURCES, "translations": texts[lang], "tgt_lang": lang})
        wrong = score(client, {"texts": SOURCES, "translations": texts[lang], "tgt_lang": other})
        assert all(a["score"] > b["score"] for a, b in zip(own, wrong))


def test_what_if_tree_and_constraints_follow_tgt_lang(client, translator):
    """The page's other requests (a forced prefix, the search tree, must-include phrases) go
    through the same tag: each equals the Translator's with tgt_lang=bb."""
    source = SOURCES[1]  # nu pe ra si -> hund sonne mond baum
    body = {
        "text": source, "tgt_lang": "bb", "prefix": "hund", "beam_tree": True,
        "constraints": ["baum"],
    }  # fmt: skip
    [got] = post(client, body)["translations"]
    [want] = translator.translate_full(
        [source], False, prefixes=["hund"], tree=True, constraints=[["baum"]], tgt_lang="bb"
    )
    assert got["text"] == want.text and got["text"].startswith("hund") and "baum" in got["text"]
    assert got["prefix"]["score"] == pytest.approx(want.prefix_score, abs=1e-4)
    assert [n["piece"] for n in got["beam_tree"]["nodes"]] == [n.piece for n in want.tree.nodes]
    assert got["constraints"][0]["phrase"] == "baum"


def test_a_batch_mixing_languages_gives_each_its_own(tagged, translator):
    """Requests into aa and bb queued together, and /score pairs of both: each gets what it
    gets alone. Translations into both languages share a decode (each source carries its own
    tag); /score pairs into one language share theirs."""
    alone = {lang: translator.translate(SOURCES, tgt_lang=lang) for lang in LANGS}
    prepared = {lang: translator.prepare(Request(SOURCES, BEAM, tgt_lang=lang)) for lang in LANGS}
    assert batch_key(prepared["aa"], 1) == batch_key(prepared["bb"], 2)
    assert prepared["aa"].texts[0].src != prepared["bb"].texts[0].src  # the tags differ
    app = load_app(serve_config(tagged, batch_wait_ms=300.0))
    with TestClient(app) as c:
        got: dict[str, object] = {}

        def send(name, path, body):
            got[name] = c.post(path, json=body).json()

        jobs = [(f"{lang}{i}", "/translate", {"texts": SOURCES, "tgt_lang": lang})
                for lang in LANGS for i in range(2)]  # fmt: skip
        jobs += [
            (f"score-{lang}", "/score",
             {"texts": SOURCES, "translations": alone["aa"], "tgt_lang": lang})
            for lang in LANGS
        ]  # fmt: skip
        threads = [threading.Thread(target=send, args=job) for job in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        decodes = app.state.batcher.decodes
    for lang in LANGS:
        for i in range(2):
            assert [t["text"] for t in got[f"{lang}{i}"]["translations"]] == alone[lang]
        want = translator.score(SOURCES, alone["aa"], tgt_lang=lang)
        scores = [s["score"] for s in got[f"score-{lang}"]["scores"]]
        assert scores == pytest.approx([s.score for s in want], abs=1e-4)
    # one decode of translations, one of scores per language, unless a request came late
    assert 3 <= decodes < 5


def test_the_cost_check_reads_each_source_with_its_tag(translator):
    """As the search does: the tag is one more source piece, which moves the length limit."""
    ids = read_sources(translator.vocabs.src, SOURCES, BEAM.max_src_pieces, warn=False).ids
    _, costs = check_request(translator, Request(SOURCES, BEAM, tgt_lang="bb"), 10**9, 0)
    assert costs == [text_cost(BEAM, len(i) + 1, False) for i in ids]
    assert costs != [text_cost(BEAM, len(i), False) for i in ids]


@pytest.mark.parametrize("path", ["/translate", "/score"])
@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"tgt_lang": "cs"}, "tgt_lang='cs': this model translates into aa, bb"),
        ({}, "this model translates into aa, bb: say which with tgt_lang (one of aa, bb)"),
        ({"tgt_lang": 2}, '"tgt_lang" must be a string, not a number'),
    ],
)
def test_an_unknown_or_missing_language_is_a_422_before_any_decode(client, path, given, words):
    bodies = [{"text": SOURCES[0], "translation": "red blue", **given}]
    if path == "/translate":  # alone, and with everything else the page may send
        extras = {"prefix": "red", "constraints": ["blue"], "beam_tree": True}
        bodies = [{"text": SOURCES[0], **given}, {"text": SOURCES[0], **extras, **given}]
    before = client.app.state.batcher.decodes
    for body in bodies:
        answer = client.post(path, json=body)
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"] == words
    assert client.app.state.batcher.decodes == before
    assert post(client, {"text": SOURCES[0], "tgt_lang": "aa"})["translations"][0]["text"]


def test_a_model_without_tags_takes_its_own_language_or_none(plain):
    translator = Translator.from_checkpoint(plain, BEAM, device="cpu")
    assert translator.tags.languages == ["aa"]
    want = translator.translate_full(SOURCES, False)
    with TestClient(load_app(serve_config(plain))) as c:
        for given in ({}, {"tgt_lang": "aa"}):
            got = post(c, {"texts": SOURCES, **given})["translations"]
            assert [t["text"] for t in got] == [t.text for t in want]
            assert [t["score"] for t in got] == pytest.approx([t.score for t in want], abs=1e-4)
            scored = c.post("/score", json={"texts": SOURCES, "translations": AA[:3], **given})
            expected = translator.score(SOURCES, AA[:3])
            assert [s["score"] for s in scored.json()["scores"]] == pytest.approx(
                [s.score for s in expected], abs=1e-4
            )
        answer = c.post("/translate", json={"text": SOURCES[0], "tgt_lang": "bb"})
        assert answer.status_code == 422
        assert answer.json()["error"] == "tgt_lang='bb': this model translates into aa"
    # asking for its one language by name or not decodes the same: they share batches
    keys = [batch_key(translator.prepare(Request(SOURCES, BEAM, tgt_lang=lang)), 1)
            for lang in (None, "aa")]  # fmt: skip
    assert keys[0] == keys[1]


# --- the page's "Into" menu (headless Chromium, as tests/test_serve_browser.py) ---------------


@pytest.mark.browser
@pytest.mark.skipif(
    importlib.util.find_spec("playwright") is None, reason="playwright is not installed"
)
@pytest.mark.skipif(not Path(CHROMIUM).is_file(), reason=f"no {CHROMIUM}")
def test_the_page_s_menu_sends_tgt_lang_with_every_request(tagged, plain, tmp_path):
    """A model with two target languages: the menu offers both, and every request the page
    sends (translate as you type, the score box, a tree's "what if") carries the chosen one; the
    answers shown are the API's for that language. A model with one: no menu, no tgt_lang."""
    from playwright.sync_api import expect

    source = SOURCES[1]
    with serving(tagged, tmp_path / "tagged.log") as url:
        into = {lang: api(url, {"text": source, "tgt_lang": lang}) for lang in LANGS}
        with browser_page(url, 900) as (page, errors):
            sent: list[tuple[str, dict]] = []
            page.on("request", lambda r: r.method == "POST" and sent.append(
                (r.url.rsplit("/", 1)[1], json.loads(r.post_data))))  # fmt: skip
            expect(page.locator("#model")).to_contain_text("xx → aa, bb")
            menu = page.locator("#tgt-lang")
            expect(menu).to_be_visible()
            assert [o.get_attribute("value") for o in menu.locator("option").all()] == ["aa", "bb"]
            expect(menu).to_have_value("aa")  # the run's data.tgt_lang
            page.locator("#source").fill(source)
            expect(page.locator("#target")).to_have_text(into["aa"]["text"], timeout=20_000)
            menu.select_option("bb")
            expect(page.locator("#target")).to_have_text(into["bb"]["text"], timeout=20_000)
            expect(page.locator("#target-label")).to_have_text("bb")
            # the score box follows the translation; its score is the API's in bb
            page.locator("#score-button").click()
            want = score_api(url, {"text": source, "translation": into["bb"]["text"],
                                   "tgt_lang": "bb"})[1]["scores"][0]  # fmt: skip
            expect(page.locator("#score-total")).to_have_text(f"{want['score']:.3f}")
            # "what if": a forced start is translated on in bb
            forced = api(url, {"text": source, "tgt_lang": "bb", "prefix": "hund"})
            target = page.locator("#target")
            target.click()
            page.keyboard.press("Control+A")
            page.keyboard.type("hund", delay=10)
            expect(target).to_have_text(forced["text"], timeout=20_000)
            assert {path for path, _ in sent} == {"translate", "score"}
            assert all(body.get("tgt_lang") == "bb" for _, body in sent[1:]), sent
            assert sent[0][1]["tgt_lang"] == "aa"
            assert not errors
    with serving(plain, tmp_path / "plain.log") as url:
        want = api(url, {"text": source})
        with browser_page(url, 900) as (page, errors):
            sent = []
            page.on("request", lambda r: r.method == "POST" and sent.append(r.post_data))
            page.locator("#source").fill(source)
            expect(page.locator("#target")).to_have_text(want["text"], timeout=20_000)
            expect(page.locator("#tgt-lang-control")).to_be_hidden()
            assert sent and all("tgt_lang" not in json.loads(body) for body in sent)
            assert not errors
