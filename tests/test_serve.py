"""nmt-serve: the API against Translator itself, every bad input, and the command (batching is
tests/test_serve_batching.py).

The app is driven in-process with Starlette's TestClient (raise_server_exceptions=True, so a
request that reached the catch-all 500 handler would fail the test). One tiny GRU is trained per
session, shared with test_serve_batching.py and test_serve_browser.py through `tiny_checkpoint`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import httpx
import pytest
import torch
from conftest import default_sigint
from starlette.testclient import TestClient

from nmt.cli import main as cli
from nmt.config import DecodeConfig, Strategy, TransformerConfig
from nmt.errors import NMTError
from nmt.models import build_model
from nmt.run_config import ServeRunConfig
from nmt.serving import admission
from nmt.serving.admission import check_request, request_decode
from nmt.serving.app import create_app, load_app
from nmt.serving.info import describe_model
from nmt.translation.request import Request
from nmt.translation.translator import Translator

TINY = [
    "data.tokenizer.vocab_size=400",
    "train.batch_tokens=600",
    "train.lr=0.003",
    "model=gru_bahdanau",
    "model.emb_size=64",
    "model.hidden_size=64",
    "train.max_steps=150",  # enough that different sentences get different translations
    "train.valid_every=150",
]
SENTENCES = [
    "Ich sehe einundzwanzig rote Äpfel.",
    "Er zählt zwölf Katzen.",
    "Die Kinder malen drei blaue Häuser.",
    "Wir kaufen vierzig grüne Stühle.",
    "Sie weiß, dass der Hund schläft.",
    "Ich habe zweihundert Bücher.",
    "Das Mädchen sieht fünf gelbe Vögel.",
    "Meine Schwester braucht neun Tische.",
    "Der Mann trägt sieben schwarze Hüte.",
    "Du findest achtzehn weiße Steine.",
]
BEAM = DecodeConfig(strategy=Strategy.beam, beam_size=4, n_best=1)
LIMITS = {"max_chars": 300, "max_texts": 4, "max_beam": 8}


def tiny_checkpoint(tmp_path_factory, demo_dir: Path) -> Path:
    """A tiny trained GRU + Bahdanau checkpoint, trained once per test session."""
    run = tmp_path_factory.getbasetemp() / "serve-tiny-gru"
    best = run / "checkpoints" / "best"
    if not best.exists():
        args = ["data=demo", f"data.local_dir={demo_dir}", f"run_dir={run}", *TINY]
        assert cli.train([*args, "train.overwrite=true"]) == 0
    return best


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, demo_dir) -> Path:
    return tiny_checkpoint(tmp_path_factory, demo_dir)


def serve_config(ckpt: Path, **changes) -> ServeRunConfig:
    return ServeRunConfig(ckpt=str(ckpt), decode=BEAM, device="cpu", **{**LIMITS, **changes})


@pytest.fixture(scope="module")
def client(ckpt):
    with TestClient(load_app(serve_config(ckpt)), raise_server_exceptions=True) as c:
        yield c


@pytest.fixture(scope="module")
def translator(ckpt) -> Translator:
    return Translator.from_checkpoint(ckpt, BEAM, device="cpu")


def post(client, body: dict):
    answer = client.post("/translate", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


# --- what the API answers ---------------------------------------------------------------------


def test_one_text_is_translated_as_the_translator_does(client, translator):
    got = post(client, {"text": SENTENCES[0]})
    want = translator.translate_full([SENTENCES[0]], attention=False)[0]
    [result] = got["translations"]
    assert result["source"] == SENTENCES[0]
    assert result["text"] == want.text != ""
    assert result["score"] == pytest.approx(want.score)
    assert [(h["text"], h["score"]) for h in result["nbest"]] == [
        (text, pytest.approx(score)) for text, score in want.nbest
    ]
    assert "attention" not in result
    assert got["decode"]["strategy"] == "beam" and got["decode"]["beam_size"] == 4


def test_several_texts_keep_their_order_and_blank_ones_translate_to_empty(client, translator):
    texts = [SENTENCES[1], "   ", SENTENCES[2], ""]
    got = post(client, {"texts": texts})["translations"]
    want = translator.translate_full(texts, attention=False)
    assert [r["source"] for r in got] == texts
    assert [r["text"] for r in got] == [w.text for w in want]
    assert got[1]["text"] == got[3]["text"] == "" and got[0]["text"] and got[2]["text"]


def test_nbest_lists_follow_the_requested_beam(client, ckpt):
    decode = {"strategy": "beam", "beam_size": 5, "n_best": 3, "length_penalty": "average"}
    got = post(client, {"text": SENTENCES[3], "decode": decode})
    config = DecodeConfig(strategy=Strategy.beam, beam_size=5, n_best=3, length_penalty="average")
    want = Translator.from_checkpoint(ckpt, config, "cpu").translate_full([SENTENCES[3]])[0]
    nbest = got["translations"][0]["nbest"]
    assert [h["text"] for h in nbest] == [text for text, _ in want.nbest]
    scores = [h["score"] for h in nbest]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True)
    assert got["decode"]["length_penalty"] == "average"


def test_a_request_for_greedy_gets_one_hypothesis_without_naming_n_best(client, translator):
    got = post(client, {"text": SENTENCES[4], "decode": {"strategy": "greedy"}})
    greedy = Translator(
        translator.model, translator.vocabs, translator.device, decode=DecodeConfig()
    )
    assert got["translations"][0]["text"] == greedy.translate([SENTENCES[4]])[0]
    assert got["decode"]["n_best"] == 1


def test_attention_has_a_map_per_hypothesis_shaped_by_the_pieces(client, ckpt):
    decode = {"strategy": "beam", "beam_size": 3, "n_best": 2}
    got = post(client, {"texts": [SENTENCES[5], ""], "attention": True, "decode": decode})
    result, blank = got["translations"]
    config = DecodeConfig(strategy=Strategy.beam, beam_size=3, n_best=2)
    want = Translator.from_checkpoint(ckpt, config, "cpu").translate_full([SENTENCES[5]])[0]
    attention = result["attention"]
    assert attention["src_pieces"] == want.src_pieces
    assert len(attention["hypotheses"]) == len(result["nbest"]) == 2
    for hyp, (pieces, maps) in zip(attention["hypotheses"], want.nbest_maps):
        weights = torch.tensor(hyp["weights"])  # [L][h][T][S]
        assert hyp["tgt_pieces"] == pieces
        assert weights.shape == (1, 1, len(pieces), len(want.src_pieces))
        assert torch.allclose(weights, maps.permute(1, 2, 0, 3), atol=1e-4)
        assert torch.allclose(weights.sum(-1), torch.ones(1, 1, len(pieces)), atol=1e-3)
    assert attention["hypotheses"][0]["tgt_pieces"] == want.tgt_pieces
    assert blank["attention"] is None and blank["text"] == ""


def test_attention_too_large_to_send_is_left_out_with_a_reason(client, monkeypatch):
    monkeypatch.setattr("nmt.serving.native.MAX_ATTENTION_WEIGHTS", 20)
    result = post(client, {"text": SENTENCES[0], "attention": True})["translations"][0]
    assert result["text"] and result["attention"] is None
    assert "more than the 20 this server returns" in result["attention_omitted"]


def test_a_transformer_reports_every_layer_and_head(ckpt):
    """An untrained 2-layer, 4-head Transformer on the tiny run's vocabulary: [L][h][T][S]."""
    base = Translator.from_checkpoint(ckpt, BEAM, "cpu")
    model_cfg = TransformerConfig(d_model=32, heads=4, ff_size=64, encoder_layers=2,
                                  decoder_layers=2, share_embeddings=False)  # fmt: skip
    torch.manual_seed(0)  # the GRU run's target vocabulary is pruned: two embedding tables
    model = build_model(model_cfg, len(base.vocabs.src), len(base.vocabs.tgt), False)
    translator = Translator(model, base.vocabs, base.device, decode=BEAM)
    from nmt.checkpoint import load_checkpoint

    run = dataclasses.replace(load_checkpoint(ckpt).config, model=model_cfg)
    info = describe_model(translator, run, {"step": 7})
    with TestClient(create_app(translator, serve_config(ckpt), info)) as c:
        result = post(c, {"text": SENTENCES[0], "attention": True})["translations"][0]
        got_info = c.get("/info").json()
    hyp = result["attention"]["hypotheses"][0]
    shape = torch.tensor(hyp["weights"]).shape
    assert shape == (2, 4, len(hyp["tgt_pieces"]), len(result["attention"]["src_pieces"]))
    assert got_info["family"] == "transformer"
    assert got_info["attention_maps"] == {"layers": 2, "heads": 4}
    assert got_info["step"] == 7 and got_info["validation"]["bleu"] is None


def test_a_prefix_starts_the_translation_and_is_scored(client, translator):
    [source] = SENTENCES[:1]
    got = post(client, {"text": source, "prefix": "I see eighty"})["translations"][0]
    [want] = translator.translate_full([source], False, prefixes=["I see eighty"])
    assert got["text"] == want.text and got["text"].startswith("I see eighty")
    assert got["prefix"] == {
        "pieces": want.prefix_pieces,
        "score": pytest.approx(want.prefix_score),
    }
    assert got["score"] == pytest.approx(want.score) and got["score"] <= got["prefix"]["score"]
    # one per text; a blank text stays blank, a text without a prefix reports none
    texts = [source, "", SENTENCES[1]]
    got = post(client, {"texts": texts, "prefixes": ["I see", "I", ""]})["translations"]
    assert got[0]["text"].startswith("I see") and got[1]["text"] == ""
    assert "prefix" not in got[2] and got[2]["text"] == translator.translate(texts[2:])[0]


def test_the_beam_tree_holds_the_nbest_with_their_texts(client, translator):
    body = {"text": SENTENCES[2], "beam_tree": True, "decode": {"n_best": 2}}
    result = post(client, body)["translations"][0]
    nodes = result["beam_tree"]["nodes"]
    assert set(nodes[0]) == {"id", "parent", "piece", "text", "step", "score", "state", "rank"}
    assert nodes[0]["parent"] is None and nodes[0]["state"] == "root"
    assert all(n["parent"] < n["id"] == i for i, n in enumerate(nodes[1:], 1))
    ranked = sorted((n for n in nodes if n["rank"] is not None), key=lambda n: n["rank"])
    assert [n["text"] for n in ranked] == [h["text"] for h in result["nbest"]]
    assert [n["state"] for n in ranked] == ["finished", "finished"]
    # every step keeps at most the beam's 4 hypotheses (and sets aside those that finished)
    steps = [n["step"] for n in nodes if n["state"] != "finished"]
    assert max(steps.count(t) for t in set(steps)) <= 4
    assert "beam_tree" not in post(client, {"text": SENTENCES[2]})["translations"][0]


def test_a_tree_too_large_to_send_is_left_out_with_a_reason(client, monkeypatch):
    monkeypatch.setattr("nmt.serving.native.MAX_TREE_NODES", 3)
    result = post(client, {"text": SENTENCES[0], "beam_tree": True})["translations"][0]
    assert result["beam_tree"] is None and "more than the 3" in result["beam_tree_omitted"]


def test_a_bad_prefix_fails_its_own_request_not_the_batch_it_would_join(ckpt):
    async def both(client):
        good = client.post("/translate", json={"text": SENTENCES[0], "prefix": "I see"})
        bad = client.post("/translate", json={"text": SENTENCES[1], "prefix": "漢字"})
        return await asyncio.gather(good, bad)

    app = load_app(serve_config(ckpt, batch_wait_ms=200))
    transport = httpx.ASGITransport(app=app)

    async def run():
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await both(client)

    good, bad = asyncio.run(run())
    assert good.status_code == 200 and good.json()["translations"][0]["text"].startswith("I see")
    assert bad.status_code == 422 and "lacks" in bad.json()["error"]


def test_a_request_without_a_prefix_gets_the_decode_settings_prefix(ckpt, translator):
    """As Translator.translate_full: decode.prefix (the server's, or the request's "decode")
    unless the request gives "prefix" or "prefixes"."""
    decode = dataclasses.replace(BEAM, prefix="I see")
    with TestClient(load_app(dataclasses.replace(serve_config(ckpt), decode=decode))) as c:
        server = post(c, {"texts": SENTENCES[:2]})["translations"]
        own = post(c, {"text": SENTENCES[1], "decode": {"prefix": "I"}})
        given = post(c, {"text": SENTENCES[1], "prefix": ""})["translations"][0]
    want = translator.translate_full(SENTENCES[:2], False, decode=decode)
    assert [t["text"] for t in server] == [w.text for w in want]
    assert all(t["text"].startswith("I see") and t["prefix"]["pieces"] > 0 for t in server)
    [mine] = translator.translate_full(SENTENCES[1:2], False, prefixes=["I"])
    assert own["translations"][0]["text"] == mine.text and own["decode"]["prefix"] == "I"
    assert "prefix" not in given and given["text"] == translator.translate(SENTENCES[1:2])[0]


def test_a_request_costlier_than_max_request_cost_is_413_naming_both(ckpt, translator):
    """Cost = for each text, the beam times its length limit (twice with the tree or the
    attention maps); min_len_b adds nothing: the search never runs past the length limit."""
    texts = SENTENCES[:3]
    decode = dataclasses.replace(BEAM, beam_size=8)
    pieces = [len(translator.vocabs.src.encode([t])[0]) + 1 for t in texts]  # EOS included
    cost = sum(8 * int(1.5 * n + 10) for n in pieces)  # decode=beam's max_len_a and max_len_b
    assert cost == sum(8 * decode.max_len(n) for n in pieces)
    body = {"texts": texts, "decode": {"beam_size": 8}}
    forced = {"texts": texts, "decode": {"beam_size": 8, "min_len_b": 1_000_000}}
    with TestClient(load_app(serve_config(ckpt, max_request_cost=cost))) as c:
        assert c.post("/translate", json=body).status_code == 200
        assert c.post("/translate", json=forced).status_code == 200
        tree = c.post("/translate", json={**body, "beam_tree": True})
    with TestClient(load_app(serve_config(ckpt, max_request_cost=cost - 1))) as c:
        over = c.post("/translate", json=body)
    assert over.status_code == 413
    assert f"costs {cost}, more than max_request_cost={cost - 1}" in over.json()["error"]
    assert tree.status_code == 413 and f"costs {2 * cost}," in tree.json()["error"]


def test_health_and_info(client, ckpt):
    assert client.get("/health").json() == {"status": "ok"}
    info = client.get("/info").json()
    assert info["family"] == "rnn" and info["cell"] == "gru"
    assert info["scorer"] == "additive" and info["decoder"] == "bahdanau"
    assert info["encoder_layers"] == info["decoder_layers"] == 1
    assert info["attention_maps"] == {"layers": 1, "heads": 1}
    assert info["languages"] == {"source": "de", "target": "en"}
    # the target side is pruned to the pieces of the English training text
    assert info["vocabulary"] == {"source": 400, "target": 84, "joint": False}
    assert info["decode"]["strategy"] == "beam" and info["decode"]["beam_size"] == 4
    assert info["step"] == 150
    metrics = [json.loads(line) for line in (ckpt.parents[1] / "metrics.jsonl").open()]
    valid = [m for m in metrics if m["split"] == "valid"][-1]
    assert info["validation"]["bleu"] == pytest.approx(valid["bleu"])
    assert info["validation"]["decode"] == "greedy"
    assert info["limits"]["max_beam"] == 8
    assert set(info["batching"]) == {"decodes", "requests", "items", "split", "refused", "queued"}
    assert info["limits"]["max_request_cost"] == 100_000 and info["limits"]["max_queue"] == 512


def test_the_page_and_its_files_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for name, kind in [("app.js", "javascript"), ("style.css", "text/css")]:
        assert page.text.count(f"/static/{name}") == 1
        answer = client.get(f"/static/{name}")
        assert answer.status_code == 200 and kind in answer.headers["content-type"]


# --- bad input: a 4xx JSON error, and the server goes on ----------------------------------------

LONG = "Ich sehe einundzwanzig rote Äpfel. " * 9  # 315 characters, over max_chars=300
BAD = [
    # (id, body as bytes or a JSON-able value, status, words the message must contain)
    ("invalid-json", b'{"text": "Hallo"', 400, "invalid JSON"),
    ("invalid-utf8", b'{"text": "\xff\xfe"}', 400, "invalid JSON"),
    ("nan", b'{"text": "a", "decode": {"alpha": NaN}}', 400, "NaN"),
    ("deep-nesting", b"[" * 20_000 + b"]" * 20_000, 400, "invalid JSON"),
    ("not-an-object", ["Hallo"], 422, "JSON object"),
    ("text-not-a-string", {"text": 3}, 422, '"text" must be a string'),
    ("texts-not-a-list", {"texts": "Hallo"}, 422, '"texts" must be a list of strings'),
    ("texts-with-a-number", {"texts": ["Hallo", 2]}, 422, "list of strings"),
    ("no-text", {"decode": {}}, 422, '"text"'),
    ("text-and-texts", {"text": "a", "texts": ["b"]}, 422, "not both"),
    ("empty-text", {"text": ""}, 422, "nothing to translate"),
    ("blank-text", {"text": " \t\n "}, 422, "nothing to translate"),
    ("no-texts", {"texts": []}, 422, "nothing to translate"),
    ("only-blank-texts", {"texts": ["", "  "]}, 422, "nothing to translate"),
    (
        "unknown-key",
        {"text": "a", "beam": 5},
        422,
        "unknown key(s) beam; valid: alignments, attention,",
    ),
    ("unknown-decode-key", {"text": "a", "decode": {"beams": 5}}, 422, "decode.beams; valid"),
    ("decode-not-an-object", {"text": "a", "decode": "beam"}, 422, '"decode" must be an object'),
    ("attention-not-a-bool", {"text": "a", "attention": "yes"}, 422, '"attention" must be true'),
    ("bad-strategy", {"text": "a", "decode": {"strategy": "best"}}, 422, "expected one of"),
    ("bad-penalty", {"text": "a", "decode": {"length_penalty": 1}}, 422, "expected one of"),
    ("beam-size-0", {"text": "a", "decode": {"beam_size": 0}}, 422, "beam_size=0"),
    ("beam-size-string", {"text": "a", "decode": {"beam_size": "5"}}, 422, "must be a number"),
    ("beam-size-float", {"text": "a", "decode": {"beam_size": 2.5}}, 422, "must be an integer"),
    ("beam-size-bool", {"text": "a", "decode": {"beam_size": True}}, 422, "must be a number"),
    ("beam-over-limit", {"text": "a", "decode": {"beam_size": 9}}, 422, "range: 1 to 8"),
    ("n-best-over-beam", {"text": "a", "decode": {"beam_size": 2, "n_best": 3}}, 422, "exceeds"),
    ("n-best-greedy", {"text": "a", "decode": {"strategy": "greedy", "n_best": 2}}, 422, "n_best"),
    ("alpha-overflows", b'{"text": "a", "decode": {"alpha": 1e999}}', 422, "out of range"),
    ("alpha-huge", {"text": "a", "decode": {"alpha": 11}}, 422, "out of range: 0 to 10"),
    ("top-p-0", {"text": "a", "decode": {"top_p": 0}}, 422, "out of range"),
    ("temperature-0", {"text": "a", "decode": {"temperature": 0}}, 422, "out of range"),
    ("seed-huge", {"text": "a", "decode": {"seed": 2**70}}, 422, "out of range"),
    ("too-long", {"text": LONG}, 413, "at most 300"),
    ("too-long-together", {"texts": [LONG[:200], LONG[:200]]}, 413, "at most 300"),
    ("too-many-texts", {"texts": ["a"] * 5}, 413, "at most 4"),
    ("huge-body", b'{"text": "' + b"a" * 70_000 + b'"}', 413, "over the limit"),
    ("prefix-not-a-string", {"text": "a", "prefix": 3}, 422, '"prefix" must be a string'),
    ("prefix-and-prefixes", {"text": "a", "prefix": "", "prefixes": [""]}, 422, "not both"),
    ("prefixes-not-a-list", {"texts": ["a"], "prefixes": "x"}, 422, "list of strings"),
    ("prefixes-miscounted", {"texts": ["a", "b"], "prefixes": ["x"]}, 422, "one per text"),
    ("prefix-unwritable", {"texts": ["Hallo", "Hallo"], "prefixes": ["", "漢字"]}, 422, "text 2:"),
    ("prefix-too-long", {"text": "Hallo", "prefix": "I see " * 20}, 422, "at most"),
    ("prefix-too-long-chars", {"text": "Hallo", "prefix": LONG}, 413, "at most 300"),
    ("beam-tree-not-a-bool", {"text": "a", "beam_tree": 1}, 422, '"beam_tree" must be true'),
    ("decode-prefix-not-a-string", {"text": "a", "decode": {"prefix": 1}}, 422, "be a string"),
    ("decode-prefix-too-long", {"text": "a", "decode": {"prefix": LONG}}, 413, "at most 300"),
]


@pytest.mark.parametrize(("body", "status", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_gets_a_clear_4xx_and_the_server_goes_on(client, body, status, words):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    answer = client.post("/translate", content=content)
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert words in answer.json()["error"]
    assert post(client, {"text": SENTENCES[0]})["translations"][0]["text"]


@pytest.mark.parametrize(
    ("method", "path", "status", "words"),
    [
        ("GET", "/translate", 405, "GET is not allowed on /translate; allowed: POST"),
        ("PUT", "/translate", 405, "allowed: POST"),
        ("POST", "/health", 405, "POST is not allowed on /health; allowed: GET, HEAD"),
        ("DELETE", "/info", 405, "DELETE is not allowed on /info"),
        ("GET", "/nowhere", 404, "no such path: /nowhere"),
        ("GET", "/static/missing.js", 404, "no such path"),
    ],
)
def test_wrong_method_or_path_is_json(client, method, path, status, words):
    answer = client.request(method, path)
    assert answer.status_code == status
    assert words in answer.json()["error"]
    assert client.get("/health").status_code == 200


def test_an_unexpected_failure_is_a_json_500_and_the_server_goes_on(ckpt, monkeypatch):
    app = load_app(serve_config(ckpt))
    calls = []

    def broken(self, prepared):
        calls.append(prepared)
        raise RuntimeError("the decoder fell over")

    with TestClient(app, raise_server_exceptions=False) as c:
        with monkeypatch.context() as patch:
            patch.setattr(Translator, "run", broken)
            answer = c.post("/translate", json={"text": SENTENCES[0]})
        assert answer.status_code == 500 and calls
        assert answer.json() == {"error": "internal error: RuntimeError"}
        assert c.get("/health").json() == {"status": "ok"}
        assert c.post("/translate", json={"text": SENTENCES[0]}).status_code == 200


def test_one_translator_serves_every_request_whatever_its_settings(ckpt, monkeypatch):
    """The server builds its Translator once; each request's settings go to the call."""
    built = []
    real_init = Translator.__init__

    def counted(self, *args, **kwargs):
        built.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(Translator, "__init__", counted)
    app = load_app(serve_config(ckpt))
    assert len(built) == 1
    with TestClient(app) as c:
        for decode in ({"strategy": "greedy"}, {"beam_size": 3, "n_best": 2}, {}):
            answer = c.post("/translate", json={"text": SENTENCES[0], "decode": decode})
            assert answer.status_code == 200
        greedy, beam, default = (
            post(c, {"text": SENTENCES[1], "decode": d})["translations"][0]
            for d in ({"strategy": "greedy"}, {"beam_size": 3, "n_best": 2}, {})
        )
    assert len(built) == 1
    assert len(greedy["nbest"]) == 1 and len(beam["nbest"]) == 2
    expected = built[0].translate([SENTENCES[1]], decode=DecodeConfig())[0]
    assert greedy["text"] == expected


def test_request_decode_defaults_follow_the_strategy():
    defaults = DecodeConfig(strategy=Strategy.beam, beam_size=5, n_best=3)
    assert request_decode(defaults, {"strategy": "greedy"}, 16).n_best == 1
    assert request_decode(defaults, {"beam_size": 2}, 16).n_best == 2
    assert request_decode(defaults, {}, 16) == defaults
    assert request_decode(defaults, {"alpha": 1}, 16).alpha == 1.0


# --- the command ------------------------------------------------------------------------------


def test_bad_settings_fail_before_loading_anything(capsys, tmp_path):
    assert cli.serve([f"ckpt={tmp_path}", "port=70000"]) == 2
    assert "port=70000" in capsys.readouterr().err
    assert cli.serve([f"ckpt={tmp_path}/none"]) == 2
    assert "checkpoint not found" in capsys.readouterr().err
    with pytest.raises(NMTError):
        ServeRunConfig(ckpt="x", max_beam=0)


def test_nmt_serve_prints_its_real_port_and_stops_on_ctrl_c(ckpt):
    command = [sys.executable, "-c", "from nmt.cli.main import main_serve; main_serve()"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    server = subprocess.Popen(
        [*command, f"ckpt={ckpt}", "port=0", "device=cpu"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=default_sigint,  # the test sends it Ctrl-C
    )
    try:
        line = server.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert url and int(url.group(1)) > 0, line + server.stderr.read()
        with urllib.request.urlopen(url.group(0) + "health", timeout=30) as answer:
            assert json.load(answer) == {"status": "ok"}
        request = urllib.request.Request(
            url.group(0) + "translate", data=json.dumps({"text": SENTENCES[0]}).encode()
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert json.load(answer)["translations"][0]["text"]
        server.send_signal(signal.SIGINT)  # Ctrl-C: uvicorn shuts down, then it is an interrupt
        began = time.monotonic()
        assert server.wait(timeout=30) == 130
        assert time.monotonic() - began < 10
        assert "nmt-serve: interrupted" in server.stderr.read()
    finally:
        server.kill()
        server.wait()
        server.stdout.close()
        server.stderr.close()


def test_an_ensemble_is_served_as_one_model(ckpt):
    """nmt-serve ckpt=[a,a]: the ensemble translates as the model alone (a mixture of a
    distribution with itself), and /info names its members."""
    texts = ["Ich sehe einundzwanzig rote Äpfel.", "Er zählt zwölf Katzen."]
    answers = []
    pair = dataclasses.replace(serve_config(ckpt), ckpt=[str(ckpt), str(ckpt)])
    for config in (serve_config(ckpt), pair):
        with TestClient(load_app(config)) as c:
            answers.append(post(c, {"texts": texts})["translations"])
            info = c.get("/info").json()
    assert [a["text"] for a in answers[1]] == [a["text"] for a in answers[0]]
    assert info["ensemble"] == [str(ckpt), str(ckpt)]


def test_banned_phrases_of_a_request_never_appear_and_bad_ones_are_422(client, translator):
    """ "banned": the phrases are kept out of that request's translations (as the Translator's
    banned=... does), a blank phrase or a non-list is a 422, and requests without it are
    unchanged."""
    texts = ["Ich sehe einundzwanzig rote Äpfel.", "Er zählt zwölf Katzen."]
    plain = [t["text"] for t in post(client, {"texts": texts})["translations"]]
    word = max(" ".join(plain).split(), key=len).strip(".,")
    got = [t["text"] for t in post(client, {"texts": texts, "banned": [word]})["translations"]]
    assert got == translator.translate(texts, banned=[word])
    assert all(word not in t.split() and word + "." not in t.split() for t in got)
    assert [t["text"] for t in post(client, {"texts": texts})["translations"]] == plain
    for bad in ([" "], "word", [1]):
        answer = client.post("/translate", json={"text": texts[0], "banned": bad})
        assert answer.status_code == 422 and "banned" in answer.json()["error"], answer.json()


def test_banned_and_constraint_characters_count_toward_max_chars(client):
    """max_chars=300 here: a short text with 400 characters of banned phrases, or of
    constraints, is over it, where the text alone is not."""
    text = "Ein Hund."
    assert post(client, {"text": text, "banned": ["dog " * 5]})["translations"]
    for extra in ({"banned": ["dog " * 100]}, {"constraints": ["dog " * 100]},
                  {"banned": ["a"] * 64, "constraints": ["dog " * 70]}):  # fmt: skip
        answer = client.post("/translate", json={"text": text, **extra})
        assert answer.status_code == 413, answer.text
        assert "characters: this server takes at most 300" in answer.json()["error"]


def test_the_cost_counts_what_banned_phrases_and_constraints_add_to_each_step(ckpt):
    """A request that fits max_request_cost plain is refused with a 413 once its banned phrases
    add their work to every step (scripts/bench_request_cost.py measures what they add), and a
    text's constraints add to its own cost."""
    texts = ["Ich sehe einundzwanzig rote Äpfel.", "Er zählt zwölf Katzen."]
    translator = Translator.from_checkpoint(ckpt, BEAM, device="cpu")
    plain, plain_costs = check_request(translator, Request(texts, BEAM), 10**9, 0)
    banned = [
        "the " * 3 + w for w in ["apples", "cats", "red", "see", "counts", "twelve", "six", "eight"]
    ]
    _, banned_costs = check_request(translator, Request(texts, BEAM, banned=banned), 10**9, 0)
    assert all(b > p for b, p in zip(banned_costs, plain_costs))
    _, constrained = check_request(translator, Request(texts, BEAM, constraints=[["cats"], []]),
                                   10**9, 0)  # fmt: skip
    assert constrained[0] > plain_costs[0] and constrained[1] == plain_costs[1]
    limit = sum(plain_costs)
    with TestClient(load_app(serve_config(ckpt, max_chars=10**5, max_request_cost=limit))) as c:
        assert post(c, {"texts": texts})["translations"]
        answer = c.post("/translate", json={"texts": texts, "banned": banned})
        assert answer.status_code == 413, answer.text
        assert "what its constraints and banned phrases add to each step" in answer.json()["error"]


def test_health_is_answered_while_a_request_is_checked(ckpt, monkeypatch):
    """Tokenizing and checking a request with phrases to spell or much text (up to a second for
    the largest banned lists the limits allow) runs off the event loop: /health answers at once
    while a check takes 1.5 s. A light request is checked on the loop (a thread would cost more
    than its check)."""
    texts = [SENTENCES[0], "a" * admission.LIGHT_CHARS]
    assert admission.light(Request(texts[:1], BEAM))
    assert not admission.light(Request(texts[:1], BEAM, banned=["dog"]))
    assert not admission.light(Request(texts[:1], BEAM, constraints=[["dog"]]))
    assert not admission.light(Request(texts, BEAM))
    real = Translator.prepare

    def slow(self, request, warn=True):
        time.sleep(1.5)
        return real(self, request, warn)

    monkeypatch.setattr(Translator, "prepare", slow)
    app = load_app(serve_config(ckpt))

    async def main():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://serve") as c:
            start = time.perf_counter()
            body = {"text": SENTENCES[0], "banned": ["houses"]}
            heavy = asyncio.create_task(c.post("/translate", json=body))
            await asyncio.sleep(0.2)  # the check is under way (a loop it held wakes up late)
            health = await c.get("/health")
            waited = time.perf_counter() - start
            assert not heavy.done()
            return health.status_code, waited, (await heavy).status_code

    status, waited, heavy_status = asyncio.run(main())
    assert (status, heavy_status) == (200, 200)
    assert waited < 0.7  # 0.2 s of sleep; a check on the event loop would hold it 1.5 s


def test_score_answers_what_the_translator_scores(client, translator):
    """POST /score gives each pair the Translator's score (its total, the length-normalised
    score, and every piece's log-probability); the score of the server's own translation is the
    score its search reported; bad pairs are 4xx."""
    texts = ["Ich sehe einundzwanzig rote Äpfel.", "Er zählt zwölf Katzen."]
    best = [t for t in post(client, {"texts": texts})["translations"]]
    hyps = [t["text"] for t in best]
    answer = client.post("/score", json={"texts": texts, "translations": hyps})
    assert answer.status_code == 200, answer.json()
    got = answer.json()["scores"]
    expected = translator.score(texts, hyps)
    assert [g["pieces"] for g in got] == [e.pieces for e in expected]
    for g, e, b in zip(got, expected, best):
        assert g["score"] == pytest.approx(e.score, abs=1e-4)
        assert g["piece_scores"] == pytest.approx(e.piece_scores, abs=1e-4)
        assert g["score"] == pytest.approx(b["score"], abs=1e-3)  # what the search reported
    one = client.post("/score", json={"text": texts[0], "translation": hyps[0]}).json()
    assert one["scores"][0]["score"] == pytest.approx(got[0]["score"], abs=1e-5)
    for bad in (
        {"texts": texts, "translations": hyps[:1]},
        {"text": texts[0]},
        {"text": texts[0], "translation": 3},
        {"text": texts[0], "translation": "x", "oops": 1},
    ):
        assert client.post("/score", json=bad).status_code == 422, bad


def test_info_says_whose_attention_an_ensemble_shows(ckpt):
    """nmt-serve ckpt=[a,a] ensemble_attention=...: /info names the choice and describes the maps
    the answers carry (one averaged map, or the chosen member's own), and the maps a /translate
    answer carries have that shape (the mean of a model with itself is its own map)."""
    text = SENTENCES[0]
    alone = Translator.from_checkpoint(ckpt, BEAM, "cpu").translate_full([text], True)[0]
    want = alone.nbest_maps[0][1].permute(1, 2, 0, 3)  # (L, h, T, S) as the API nests them
    for shown, expected in [
        ("mean", {"shown": "mean", "members": 2, "averaged": 2}),
        ("1", {"shown": 1, "members": 2}),
        ("-2", {"shown": 0, "members": 2}),  # a negative index counts from the last member
    ]:
        config = dataclasses.replace(
            serve_config(ckpt), ckpt=[str(ckpt), str(ckpt)], ensemble_attention=shown
        )
        with TestClient(load_app(config)) as c:
            info = c.get("/info").json()
            got = post(c, {"text": text, "attention": True})["translations"][0]["attention"]
        assert info["ensemble_attention"] == expected, shown
        assert info["attention_maps"] == {"layers": 1, "heads": 1}
        weights = torch.tensor(got["hypotheses"][0]["weights"])
        assert weights.shape == (1, 1, *want.shape[2:])
        assert torch.allclose(weights, want.float(), atol=2e-4), shown


def test_info_describes_the_chosen_members_maps_not_the_first_ones(ckpt):
    """A GRU (1 map), a Transformer (2 layers x 4 heads) and a GRU without attention: /info's
    attention_maps follow ensemble_attention; the mean averages the members that have maps."""
    from nmt.checkpoint import load_checkpoint
    from nmt.config import AttentionType
    from nmt.serving.info import ensemble_attention

    gru = load_checkpoint(ckpt)
    model_cfg = TransformerConfig(d_model=32, heads=4, ff_size=64, encoder_layers=2,
                                  decoder_layers=2, share_embeddings=False)  # fmt: skip
    transformer = dataclasses.replace(gru, config=dataclasses.replace(gru.config, model=model_cfg))
    plain = dataclasses.replace(gru.config.model, attention=AttentionType.none)
    blind = dataclasses.replace(gru, config=dataclasses.replace(gru.config, model=plain))
    translator = Translator.from_checkpoint(gru, BEAM, "cpu")
    members = [gru, transformer, blind]
    mean = ensemble_attention(translator, members, "mean")
    assert mean["ensemble_attention"] == {"shown": "mean", "members": 3, "averaged": 2}
    assert mean["attention_maps"] == {"layers": 1, "heads": 1}
    second = ensemble_attention(translator, members, 1)
    assert second["ensemble_attention"] == {"shown": 1, "members": 3}
    assert second["attention_maps"] == {"layers": 2, "heads": 4}
    assert ensemble_attention(translator, members, -1)["attention_maps"] is None
    assert ensemble_attention(translator, [gru, blind], 0)["attention_maps"] == {
        "layers": 1,
        "heads": 1,
    }
    assert ensemble_attention(translator, [blind, blind], "mean")["attention_maps"] is None


def test_the_score_box_script_is_served_and_loaded_by_the_page(client):
    page = client.get("/")
    assert page.text.count('src="/static/score.js"') == 1
    answer = client.get("/static/score.js")
    assert answer.status_code == 200 and "javascript" in answer.headers["content-type"]
    assert "/score" in answer.text
