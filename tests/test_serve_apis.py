"""nmt-serve in the APIs other apps speak: LibreTranslate's and DeepL's, called by their real
clients from the package index (libretranslatepy, deep-translator, deepl), unchanged, over real
sockets; LibreTranslate's own test assertions; several models routed by pair (a pivot through
English, models loaded on first use within max_loaded); keys in every shape; cross-origin pages.

Every translation an API shape answers is compared with nmt's own /translate of the same text by
the same server: the shapes change the words of a request, never its translation.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import deepl
import pytest
from deep_translator import LibreTranslator
from libretranslatepy import LibreTranslateAPI
from omegaconf import OmegaConf
from test_serve import BEAM, TINY, tiny_checkpoint
from test_serve_load import Served

from nmt.cli import main as cli
from nmt.run_config import ServeRunConfig
from nmt.serving.app import load_app

TEXT = "Ich sehe Äpfel."
LIMITS = {"max_chars": 2000, "max_texts": 8, "max_beam": 8}


@pytest.fixture(scope="module")
def de_en(tmp_path_factory, demo_dir) -> Path:
    return tiny_checkpoint(tmp_path_factory, demo_dir)


def reversed_checkpoint(tmp_path_factory, demo_dir) -> Path:
    """A tiny en->de GRU on the demo corpus, trained once per session."""
    run = tmp_path_factory.getbasetemp() / "serve-tiny-gru-en-de"
    best = run / "checkpoints" / "best"
    if not best.exists():
        args = ["data=demo", f"data.local_dir={demo_dir}", f"run_dir={run}", *TINY]
        reverse = ["data.src_lang=en", "data.tgt_lang=de", "train.max_steps=80"]
        assert cli.train([*args, *reverse, "train.overwrite=true"]) == 0
    return best


@pytest.fixture(scope="module")
def en_de(tmp_path_factory, demo_dir) -> Path:
    return reversed_checkpoint(tmp_path_factory, demo_dir)


@pytest.fixture(scope="module")
def en_fr(en_de, tmp_path_factory) -> Path:
    """The en->de model under another name for its target ("fr"): a third pair, for routes."""
    copy = tmp_path_factory.mktemp("en-fr") / "best"
    copy.mkdir()
    for f in en_de.iterdir():
        if f.is_file():
            (copy / f.name).write_bytes(f.read_bytes())
    config = OmegaConf.load(copy / "config.yaml")
    config.data.tgt_lang = "fr"
    OmegaConf.save(config, copy / "config.yaml")
    return copy


def serve(models: list[Path], **changes) -> Served:
    cfg = ServeRunConfig(models=[str(m) for m in models], decode=BEAM, device="cpu",
                         **{**LIMITS, **changes})  # fmt: skip
    return Served(load_app(cfg))


@pytest.fixture(scope="module")
def server(de_en, en_de, en_fr):
    with serve([de_en, en_de, en_fr]) as served:
        served.url = f"http://127.0.0.1:{served.port}"
        yield served


def call(url: str, body: dict | None = None, method: str = "POST", headers: dict | None = None,
         data: bytes | None = None) -> tuple[int, object]:  # fmt: skip
    """One request: its status and its JSON (or text)."""
    if body is not None:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **(headers or {})}
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            status, raw = answer.status, answer.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


def native(server, text: str, tgt: str, src: str | None = None) -> str:
    body = {"text": text, "tgt_lang": tgt, **({"src_lang": src} if src else {})}
    status, answer = call(f"{server.url}/translate", body)
    assert status == 200, answer
    return answer["translations"][0]["text"]


# --- the clients, unchanged --------------------------------------------------------------------


def test_libretranslatepy_translates_lists_and_detects(server):
    api = LibreTranslateAPI(f"{server.url}/libretranslate/")
    assert api.translate(TEXT, "auto", "en") == native(server, TEXT, "en")
    assert api.translate("I see apples.", "en", "de") == native(server, "I see apples.", "de")
    listed = {entry["code"]: entry for entry in api.languages()}
    assert listed["de"]["name"] == "German"
    assert set(listed["de"]["targets"]) == {"en", "fr"}  # fr through English
    assert listed["en"]["targets"] == ["de", "fr"]
    found = api.detect("Ich sehe drei rote Äpfel und zwei Hunde.")
    assert found[0]["language"] == "de" and 50 < found[0]["confidence"] <= 100


def test_deep_translator_translates(server):
    client = LibreTranslator(source="de", target="en", api_key="x",
                             custom_url=f"{server.url}/libretranslate/")  # fmt: skip
    assert client.translate(TEXT) == native(server, TEXT, "en")


def test_the_deepl_client_translates_lists_languages_and_counts(server):
    expected = [native(server, TEXT, "en"), native(server, "Er zählt zwölf Katzen.", "en")]
    client = deepl.Translator("any-key", server_url=server.url)
    before = client.get_usage().character.count  # without keys, one account: every request's
    result = client.translate_text(TEXT, target_lang="EN-US")
    assert result.text == expected[0]
    assert result.detected_source_lang == "DE"
    assert result.billed_characters == len(TEXT)
    both = client.translate_text(
        ["Er zählt zwölf Katzen.", TEXT], source_lang="DE", target_lang="EN-GB"
    )
    assert [r.text for r in both] == expected[::-1]
    usage = client.get_usage().character
    assert usage.count - before == 2 * len(TEXT) + len("Er zählt zwölf Katzen.")
    assert {lang.code for lang in client.get_source_languages()} == {"DE", "EN"}
    targets = {lang.code for lang in client.get_target_languages()}
    assert {"DE", "EN-GB", "EN-US", "FR"} <= targets


def test_a_deepl_glossary_becomes_constraints(server):
    client = deepl.Translator("glossary-key", server_url=server.url)
    glossary = client.create_glossary("fruit", "DE", "EN", {"Äpfel": "pears"})
    assert glossary.entry_count == 1 and glossary.source_lang == "DE"
    assert [g.glossary_id for g in client.list_glossaries()] == [glossary.glossary_id]
    assert client.get_glossary_entries(glossary) == {"Äpfel": "pears"}
    plain = client.translate_text(TEXT, source_lang="DE", target_lang="EN-US").text
    forced = client.translate_text(TEXT, source_lang="DE", target_lang="EN-US",
                                   glossary=glossary).text  # fmt: skip
    assert "pears" not in plain and "pears" in forced
    client.delete_glossary(glossary)
    with pytest.raises(deepl.GlossaryNotFoundException):
        client.get_glossary(glossary.glossary_id)


def test_deepl_refuses_what_nmt_cannot_honour(server):
    client = deepl.Translator("x", server_url=server.url)
    with pytest.raises(deepl.DeepLException, match="formality"):
        client.translate_text(TEXT, target_lang="EN-US", formality="more")
    same = client.translate_text(TEXT, target_lang="EN-US", formality="prefer_more")
    assert same.text == native(server, TEXT, "en")
    with pytest.raises(deepl.DeepLException, match="not supported"):
        client.translate_text(TEXT, source_lang="DE", target_lang="JA")


# --- LibreTranslate's own test assertions (libretranslate/tests/test_api), over HTTP ----------


def form(url: str, fields: dict | None = None, method: str = "POST") -> tuple[int, object]:
    data = urllib.parse.urlencode(fields).encode() if fields is not None else None
    kind = {"Content-Type": "application/x-www-form-urlencoded"}
    return call(url, data=data, method=method, headers=kind)


def test_libretranslate_conformance(server):
    base = f"{server.url}/libretranslate"
    status, answer = form(f"{base}/translate", {"q": "Hello", "source": "en", "target": "de",
                                                "format": "text"})  # fmt: skip
    assert status == 200 and "translatedText" in answer
    status, answer = call(f"{base}/translate", {"q": ["Hello", "World"], "source": "en",
                                                "target": "de", "format": "text"})  # fmt: skip
    assert status == 200 and isinstance(answer["translatedText"], list)
    assert len(answer["translatedText"]) == 2
    status, answer = form(f"{base}/translate", {"q": "Hello", "source": "en", "target": "zz",
                                                "format": "text"})  # fmt: skip
    assert (status, answer) == (400, {"error": "zz is not supported"})
    status, answer = form(f"{base}/translate", {"source": "en", "target": "de", "format": "text"})
    assert (status, answer) == (400, {"error": "Invalid request: missing q parameter"})
    status, answer = form(f"{base}/detect", {"q": "Hello"})
    assert status == 200 and "confidence" in answer[0] and "language" in answer[0]
    status, answer = form(f"{base}/detect")
    assert status == 400 and "error" in answer
    assert call(f"{base}/detect", method="GET")[0] == 405
    status, answer = call(f"{base}/languages", method="GET")
    assert status == 200 and "code" in answer[0] and "name" in answer[0]
    assert call(f"{base}/languages", method="POST")[0] == 405
    assert call(f"{base}/frontend/settings", method="GET")[0] == 200
    assert call(f"{base}/health", method="GET") == (200, {"status": "ok"})
    assert call(f"{base}/health", method="POST")[0] == 405
    assert call(f"{base}/spec", method="GET")[0] == 200
    assert call(f"{base}/spec", method="POST")[0] == 405


def test_libretranslate_reads_the_query_string_html_and_alternatives(server):
    base = f"{server.url}/libretranslate"
    query = urllib.parse.urlencode({"q": TEXT, "source": "de", "target": "en"})
    status, answer = call(f"{base}/translate?{query}", method="POST")
    assert status == 200 and answer["translatedText"] == native(server, TEXT, "en")
    status, answer = call(f"{base}/translate", {"q": f"<p>{TEXT}</p>", "source": "de",
                                                "target": "en", "format": "html"})  # fmt: skip
    assert answer["translatedText"] == f"<p>{native(server, TEXT, 'en')}</p>"
    status, answer = call(f"{base}/translate", {"q": TEXT, "source": "de", "target": "en",
                                                "alternatives": 2})  # fmt: skip
    assert status == 200 and answer["translatedText"] == native(server, TEXT, "en")
    assert len(answer["alternatives"]) == 2 and answer["translatedText"] not in answer[
        "alternatives"]  # fmt: skip


def test_a_text_in_a_language_no_model_reads_is_refused_by_name(server):
    french = "Le chien court dans le parc avec une balle rouge."
    status, answer = call(f"{server.url}/libretranslate/translate",
                          {"q": french, "source": "auto", "target": "en"})  # fmt: skip
    assert status == 400 and "French (fr" in answer["error"] and "from de, en" in answer["error"]


# --- routes -------------------------------------------------------------------------------------


def test_a_pair_no_model_serves_is_chained_through_english(server):
    status, answer = call(f"{server.url}/translate",
                          {"text": TEXT, "src_lang": "de", "tgt_lang": "fr"})  # fmt: skip
    assert status == 200 and answer["pivot"] == "en"
    english = native(server, TEXT, "en")
    assert answer["translations"][0]["text"] == native(server, english, "fr")
    status, answer = call(f"{server.url}/translate", {"text": TEXT, "src_lang": "auto",
                                                      "tgt_lang": "en"})  # fmt: skip
    assert answer["detected_language"]["language"] == "de"


def test_models_load_on_first_use_within_max_loaded(de_en, en_de, en_fr):
    with serve([de_en, en_de, en_fr], max_loaded=1) as served:
        served.url = f"http://127.0.0.1:{served.port}"
        models = served.server.config.app.state.models
        assert [s.translator is not None for s in models.loaded] == [True]
        first = [native(served, TEXT, "en"), native(served, "I see apples.", "de")]
        again = [native(served, TEXT, "en"), native(served, "I see apples.", "de")]
        assert first == again and len(models.loaded) == 1


# --- keys and origins ---------------------------------------------------------------------------


def test_keys_are_needed_in_every_shape(de_en, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("good-key\nsmall-key characters=20\nslow-key requests=1\n")
    with serve([de_en], api_keys=str(keys)) as served:
        url = f"http://127.0.0.1:{served.port}"
        lt = f"{url}/libretranslate/translate"
        body = {"q": TEXT, "source": "de", "target": "en"}
        assert call(lt, body)[0] == 403
        assert call(lt, {**body, "api_key": "bad"}) == (403, {"error": "Invalid API key"})
        assert call(lt, {**body, "api_key": "good-key"})[0] == 200
        assert call(f"{url}/translate", {"text": TEXT})[0] == 403
        bearer = {"Authorization": "Bearer good-key"}
        assert call(f"{url}/translate", {"text": TEXT}, headers=bearer)[0] == 200
        with pytest.raises(deepl.AuthorizationException):
            deepl.Translator("bad", server_url=url).translate_text(TEXT, target_lang="EN-US")
        small = deepl.Translator("small-key", server_url=url)
        small.translate_text(TEXT, target_lang="EN-US")
        with pytest.raises(deepl.QuotaExceededException):
            small.translate_text(TEXT, target_lang="EN-US")
        usage = small.get_usage().character
        assert (usage.count, usage.limit) == (len(TEXT), 20)
        assert call(lt, {**body, "api_key": "slow-key"})[0] == 200
        assert call(lt, {**body, "api_key": "slow-key"})[0] == 429


def test_a_page_elsewhere_makes_no_work(de_en):
    with serve([de_en], cors_origins=["https://allowed.example"]) as served:
        url = f"http://127.0.0.1:{served.port}"
        batcher = served.server.config.app.state.batcher
        before = batcher.decodes
        sneaky = {"Content-Type": "text/plain", "Origin": "https://elsewhere.example"}
        data = json.dumps({"text": TEXT}).encode()
        status, answer = call(f"{url}/translate", data=data, headers=sneaky)
        assert status == 403 and "elsewhere.example" in answer["error"]
        kind = {"Content-Type": "application/x-www-form-urlencoded", **sneaky}
        query = urllib.parse.urlencode({"q": TEXT, "source": "de", "target": "en"}).encode()
        assert call(f"{url}/libretranslate/translate", data=query, headers=kind)[0] == 403
        assert batcher.decodes == before
        allowed = {"Origin": "https://allowed.example", "Access-Control-Request-Method": "POST",
                   "Access-Control-Request-Headers": "content-type"}  # fmt: skip
        request = urllib.request.Request(f"{url}/translate", method="OPTIONS", headers=allowed)
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.headers["access-control-allow-origin"] == "https://allowed.example"
        own = {"Origin": f"http://127.0.0.1:{served.port}"}
        assert call(f"{url}/translate", {"text": TEXT}, headers=own)[0] == 200
        friend = {"Origin": "https://allowed.example"}
        assert call(f"{url}/translate", {"text": TEXT}, headers=friend)[0] == 200


# --- files --------------------------------------------------------------------------------------


def test_libretranslate_translates_a_file_and_serves_it(server):
    import requests

    page = f"<html><body><h1>{TEXT}</h1>\n<p>Er zählt zwölf Katzen.</p></body></html>\n"
    answer = requests.post(
        f"{server.url}/libretranslate/translate_file",
        data={"source": "de", "target": "en"},
        files={"file": ("page.html", page.encode())},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    url = answer.json()["translatedFileUrl"]
    assert url.startswith(f"{server.url}/libretranslate/download_file/")
    got = requests.get(url, timeout=60)
    assert got.headers["content-disposition"] == 'attachment; filename="page.en.html"'
    heading, paragraph = native(server, TEXT, "en"), native(server, "Er zählt zwölf Katzen.", "en")
    assert got.text == f"<html><body><h1>{heading}</h1>\n<p>{paragraph}</p></body></html>\n"
    for name, data, said in [
        ("book.pdf", b"%PDF-1.7", ".docx"),  # no format: the formats named
        ("book.epub", b"PK\x03\x04", "not a zip package"),  # its format's own refusal
    ]:
        refused = requests.post(
            f"{server.url}/libretranslate/translate_file", data={"source": "de", "target": "en"},
            files={"file": (name, data)}, timeout=60,
        )  # fmt: skip
        assert refused.status_code == 400 and said in refused.json()["error"]


def test_the_deepl_client_translates_a_document(server, tmp_path):
    source, out = tmp_path / "lines.txt", tmp_path / "lines.en.txt"
    source.write_text(f"{TEXT}\n\nEr zählt zwölf Katzen.\n", encoding="utf-8")
    client = deepl.Translator("any-key", server_url=server.url)
    status = client.translate_document_from_filepath(source, out, target_lang="EN-US")
    assert status.done and status.billed_characters == len(TEXT) + len("Er zählt zwölf Katzen.")
    expected = [native(server, TEXT, "en"), "", native(server, "Er zählt zwölf Katzen.", "en")]
    assert out.read_text(encoding="utf-8") == "\n".join(expected) + "\n"


def test_settings_of_the_apis_are_checked_before_any_work(de_en, tmp_path, capsys):
    assert cli.serve([f"ckpt={de_en}", "src_lang=auto"]) == 2
    assert 'per request ("src_lang": "auto"' in capsys.readouterr().err
    assert cli.serve([f"ckpt={de_en}", "cors_origins=[app.example/x]"]) == 2
    assert "is not an origin such as https://app.example" in capsys.readouterr().err
    bad = tmp_path / "keys.txt"
    bad.write_text("k1 characters=lots\n")
    assert cli.serve([f"ckpt={de_en}", f"api_keys={bad}"]) == 2
    assert f"{bad}:1: 'characters=lots'" in capsys.readouterr().err
    assert cli.serve(["models=[]"]) == 2
    assert "give the model to serve" in capsys.readouterr().err


def test_office_files_and_localisation_files_go_through_the_deepl_document_api(server, tmp_path):
    docx = pytest.importorskip("docx")
    source, out = tmp_path / "report.docx", tmp_path / "report.en.docx"
    document = docx.Document()
    document.add_paragraph(TEXT)
    document.add_paragraph("Er zählt zwölf Katzen.")
    document.save(source)
    client = deepl.Translator("any-key", server_url=server.url)
    status = client.translate_document_from_filepath(source, out, source_lang="DE",
                                                     target_lang="EN-US")  # fmt: skip
    assert status.done
    got = [p.text for p in docx.Document(out).paragraphs]
    assert got == [native(server, TEXT, "en"), native(server, "Er zählt zwölf Katzen.", "en")]


def test_a_translation_memory_answers_the_texts_it_holds_in_every_shape(server, de_en, tmp_path):
    memory = tmp_path / "memory.tmx"
    memory.write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n<tmx version="1.4"><header srclang="de-DE"/>'
        '<body><tu><tuv xml:lang="de-DE"><seg>Ich  sehe Äpfel.</seg></tuv>'
        '<tuv xml:lang="en-GB"><seg>I see apples (approved).</seg></tuv></tu></body></tmx>\n',
        encoding="utf-8",
    )
    other = "Er zählt zwölf Katzen."
    alone = native(server, other, "en")  # the same model, without a memory
    with serve([de_en], tm=str(memory)) as served:
        url = f"http://127.0.0.1:{served.port}"
        status, answer = call(f"{url}/translate", {"texts": [TEXT, other]})
        first, second = answer["translations"]
        assert first == {"source": TEXT, "text": "I see apples (approved).", "score": None,
                         "nbest": [{"text": "I see apples (approved).", "score": None}],
                         "from_memory": True}  # fmt: skip
        assert second["text"] == alone and "from_memory" not in second
        lt = {"q": [other, TEXT], "source": "de", "target": "en"}
        assert call(f"{url}/libretranslate/translate", lt)[1]["translatedText"] == [
            alone, "I see apples (approved).",
        ]  # fmt: skip
        client = deepl.Translator("x", server_url=url)
        assert client.translate_text(TEXT, target_lang="EN-US").text == "I see apples (approved)."
        tagged = call(f"{url}/translate", {"text": f"<b>{TEXT}</b>", "format": "html"})[1]
        assert "from_memory" not in tagged["translations"][0]  # markup: searched
