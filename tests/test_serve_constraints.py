"""nmt-serve's "constraints": the API against the Translator's constraints=, where each is met,
bad requests as 4xx that fail no batch, and the search tree's constraint progress."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from test_serve import BEAM, post, serve_config, tiny_checkpoint

import nmt.translation.request
from nmt.serving.app import load_app
from nmt.translation.translator import Translator

TEXTS = ["Er zählt zwölf Katzen.", "Die Kinder malen drei blaue Häuser."]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, demo_dir) -> Path:
    return tiny_checkpoint(tmp_path_factory, demo_dir)


@pytest.fixture(scope="module")
def client(ckpt):
    with TestClient(load_app(serve_config(ckpt)), raise_server_exceptions=True) as c:
        yield c


@pytest.fixture(scope="module")
def translator(ckpt) -> Translator:
    return Translator.from_checkpoint(ckpt, BEAM, device="cpu")


def test_constraints_for_every_text_or_one_list_each_match_the_translator(client, translator):
    for given, per_text in (
        (["birds"], [["birds"], ["birds"]]),
        ([["birds", "old"], []], [["birds", "old"], []]),
    ):
        answer = post(client, {"texts": TEXTS, "constraints": given})["translations"]
        expected = translator.translate_full(TEXTS, False, constraints=per_text)
        assert [t["text"] for t in answer] == [t.text for t in expected]
        for t, phrases in zip(answer, per_text):
            if not phrases:
                assert "constraints" not in t
                continue
            assert [c["phrase"] for c in t["constraints"]] == phrases
            for c in t["constraints"]:
                start, end = c["chars"]
                assert t["text"][start:end] == c["phrase"], (t["text"], c)


def test_a_request_is_tokenized_and_its_phrases_spelled_once(client, monkeypatch):
    """One request with a prefix, constraints and banned phrases: its sources, prefixes and
    constraints are tokenized once and its banned phrases spelled once, on the way in; the queue
    holds ids, and the search reads them."""
    calls = {"read_sources": 0, "prefix_ids": 0, "banned_forms": 0, "constraint_ids": 0}
    for name in calls:
        real = getattr(nmt.translation.request, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(nmt.translation.request, name, counted)
    body = {"texts": TEXTS, "prefixes": ["He", ""], "constraints": [["cats"], ["blue", "old"]],
            "banned": ["houses", "red"]}  # fmt: skip
    assert post(client, body)["translations"]
    assert calls == {"read_sources": 1, "prefix_ids": 1, "banned_forms": 1, "constraint_ids": 3}


def test_constrained_and_free_requests_share_a_batch_and_each_gets_its_own(ckpt, translator):
    """Two requests queued together, one with constraints and one without: the free one gets
    exactly what an unconstrained search gives (its batch neighbour's constraints do not leak)."""
    with TestClient(load_app(serve_config(ckpt, batch_wait_ms=200.0))) as c:
        got = {}

        def send(name, body):
            got[name] = c.post("/translate", json=body).json()

        bound = {"text": TEXTS[0], "constraints": ["chairs"]}
        threads = [
            threading.Thread(target=send, args=("bound", bound)),
            threading.Thread(target=send, args=("free", {"text": TEXTS[1]})),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert got["free"]["translations"][0]["text"] == translator.translate([TEXTS[1]])[0]
    assert "chairs" in got["bound"]["translations"][0]["text"]


def test_the_tree_records_each_nodes_constraint_progress(client):
    tree = post(client, {"text": TEXTS[0], "constraints": ["birds"], "beam_tree": True})
    tree = tree["translations"][0]["beam_tree"]
    total = tree["constraint_pieces"]
    assert total >= 1
    assert all(0 <= n["met"] <= total for n in tree["nodes"])
    assert all(n["met"] == total for n in tree["nodes"] if n["state"] == "finished")
    free = post(client, {"text": TEXTS[0], "beam_tree": True})["translations"][0]["beam_tree"]
    assert "constraint_pieces" not in free and all("met" not in n for n in free["nodes"])


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"text": TEXTS[0], "constraints": "birds"}, 422, '"constraints" must be a list'),
        ({"text": TEXTS[0], "constraints": [1]}, 422, '"constraints" must be a list'),
        ({"texts": TEXTS, "constraints": [["birds"]]}, 422, '1 "constraints" lists for 2'),
        ({"text": TEXTS[0], "constraints": ["x"] * 17}, 413, "at most 16"),
        ({"text": TEXTS[0], "constraints": [" "]}, 422, "text 1: the constraint ' ' is blank"),
        ({"text": TEXTS[0], "constraints": ["old birds"], "banned": ["birds"]}, 422, "banned"),
        (
            {"text": TEXTS[0], "constraints": ["birds"], "decode": {"strategy": "greedy"}},
            422,
            "constraints need decode=beam",
        ),
    ],
)
def test_bad_constraints_are_a_clear_4xx_and_the_server_goes_on(client, body, status, words):
    answer = client.post("/translate", json=body)
    assert answer.status_code == status, answer.text
    assert words in answer.json()["error"], answer.json()
    assert post(client, {"text": TEXTS[0]})["translations"][0]["text"]
