"""Batch-mates are strangers: a request whose text the search cannot translate fails alone,
numbered in its own request, while the requests searched with it get the bytes they get alone; a
request's extras (attention maps) and warnings are its own."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient
from test_serve import BEAM, LIMITS, tiny_checkpoint
from test_serve_batching import assert_same

from nmt.run_config import ServeRunConfig
from nmt.serving.admission import MAP_WEIGHTS_PER_STEP, map_size, text_cost
from nmt.serving.app import load_app
from nmt.translation.request import Request
from nmt.translation.translator import Translator

PLAIN = ["Er zählt zwölf Katzen.", "Die Kinder malen drei blaue Häuser.", "Zwei Hunde."]
# both need "hundred thousand": under no_repeat_ngram=2 its second occurrence is blocked, and the
# two cannot share one (each wants another word before it); only the search finds that out
UNMEETABLE = ["seven hundred thousand", "two hundred thousand"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, demo_dir) -> Path:
    return tiny_checkpoint(tmp_path_factory, demo_dir)


def config(ckpt, decode=BEAM, **changes) -> ServeRunConfig:
    return ServeRunConfig(ckpt=str(ckpt), decode=decode, device="cpu", **{**LIMITS, **changes})


def no_repeat(ckpt, **changes) -> ServeRunConfig:
    return config(ckpt, replace(BEAM, no_repeat_ngram=2), **changes)


async def race(app, bodies: list[dict]) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://serve") as c:
        return await asyncio.gather(*(c.post("/translate", json=b) for b in bodies))


def test_a_request_that_cannot_be_translated_fails_alone_and_its_batch_mates_get_their_bytes(
    ckpt,
):
    """30 plain requests racing 30 whose second text the search cannot translate, on a server
    with no_repeat_ngram=2: every plain one is answered 200 with what it gets alone (the same
    texts, pieces and n-best lists; scores to float rounding, as any batch-mate moves them: the
    matrix products' kernels sum in another order for another row count), every bad one 422
    naming its own text 2, and they were searched together."""
    plain = [{"text": PLAIN[i % 3]} for i in range(30)]
    bad = [{"texts": [PLAIN[i % 3], "Sieben."], "constraints": [[], UNMEETABLE]} for i in range(30)]
    with TestClient(load_app(no_repeat(ckpt))) as c:
        alone = {s: c.post("/translate", json={"text": s}).json() for s in PLAIN}
        one_bad = c.post("/translate", json=bad[0])
    assert one_bad.status_code == 422
    assert one_bad.json()["error"].startswith("text 2: no translation could meet its constraints")
    app = load_app(no_repeat(ckpt, batch_wait_ms=200, max_batch=64))
    bodies = [b for pair in zip(plain, bad) for b in pair]
    answers = asyncio.run(race(app, bodies))
    for body, answer in zip(bodies, answers):
        if "text" in body:
            assert answer.status_code == 200
            assert_same(answer.json(), alone[body["text"]])
        else:
            assert answer.status_code == 422, answer.text
            assert answer.json()["error"].startswith("text 2: no translation could meet")
    assert app.state.batcher.decodes < len(bodies) / 4  # they did share batches


def test_a_constraint_no_repeat_ngram_forbids_is_refused_before_the_search(ckpt):
    with TestClient(load_app(no_repeat(ckpt))) as c:
        answer = c.post("/translate", json={"texts": PLAIN[:2], "constraints": [[], ["two two"]]})
    assert answer.status_code == 422
    assert answer.json()["error"].startswith("text 2: the constraint 'two two' has 'two'")
    assert "decode.no_repeat_ngram=2 blocks" in answer.json()["error"]


def test_attention_is_searched_for_the_requests_that_ask_and_warnings_are_their_own(
    ckpt, monkeypatch
):
    """Requests with and without attention never share a search (one without pays for no maps);
    a source cut to max_src_pieces is said in that text's own answer."""
    searched = []
    real = Translator.run

    def run(self, prepared):
        searched.append((prepared.attention, {t.segment.text for t in prepared.texts}))
        return real(self, prepared)

    monkeypatch.setattr(Translator, "run", run)
    app = load_app(config(ckpt, replace(BEAM, max_src_pieces=10), batch_wait_ms=200))
    long = "Die Kinder malen drei blaue Häuser und zwölf Katzen."
    bodies = [{"text": PLAIN[0], "attention": True}, {"texts": [long, "Zwei."]}] * 3
    searched.clear()  # the warm-up's
    answers = asyncio.run(race(app, bodies))
    assert all(a.status_code == 200 for a in answers)
    assert {attention for attention, _ in searched} == {True, False}
    assert all(attention == (texts == {PLAIN[0]}) for attention, texts in searched), searched
    for body, answer in zip(bodies, answers):
        translations = answer.json()["translations"]
        if body.get("attention"):
            assert translations[0]["attention"] is not None
        else:
            assert all("attention" not in t for t in translations)
            assert translations[0]["warnings"][0].endswith(
                "more than decode.max_src_pieces=10 pieces: only the first 9 pieces are translated"
            )
            assert "warnings" not in translations[1]


def test_the_cost_of_attention_maps_grows_with_layers_heads_and_source(ckpt):
    """A text's cost with its maps returned: its plain cost and, per hypothesis step, the maps'
    weights (layers x heads x source pieces) over MAP_WEIGHTS_PER_STEP; a request of long texts
    with maps is refused by its cost, the same without maps is not."""
    translator = Translator.from_checkpoint(ckpt, BEAM, device="cpu")
    maps = map_size(translator)
    assert maps == 1  # a Bahdanau decoder: one layer, one head
    plain = text_cost(BEAM, 100, False)
    with_maps = text_cost(BEAM, 100, False, maps=8 * 6)
    steps = BEAM.beam_size * BEAM.max_len(100)
    assert with_maps - plain == pytest.approx(steps * 48 * 100 / MAP_WEIGHTS_PER_STEP, abs=1)
    assert text_cost(BEAM, 200, False, maps=48) > 2 * with_maps - plain  # source and length
    long = " ".join(PLAIN * 4)
    src = len(translator.prepare(Request([long], BEAM)).texts[0].src)
    without, with_maps = text_cost(BEAM, src, False), text_cost(BEAM, src, False, maps=maps)
    assert with_maps > without
    with TestClient(load_app(config(ckpt, max_request_cost=without, max_chars=10_000))) as c:
        whole = {"text": long, "split_sentences": False}  # one text, as its cost was computed
        assert c.post("/translate", json=whole).status_code == 200
        refused = c.post("/translate", json={**whole, "attention": True})
    assert refused.status_code == 413 and "with attention" in refused.json()["error"]
