"""nmt-serve's batching: concurrent requests decoded together, each answered with its own, and
the Batcher that groups them (by decode setting, at most max_batch sentences) on its own.

The tiny GRU checkpoint is test_serve.py's, trained once per session.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient
from test_serve import SENTENCES, post, serve_config, tiny_checkpoint

from nmt.serving.app import load_app
from nmt.serving.batching import Batcher
from nmt.translate import Translator


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, demo_dir) -> Path:
    return tiny_checkpoint(tmp_path_factory, demo_dir)


@pytest.fixture(scope="module")
def client(ckpt):
    with TestClient(load_app(serve_config(ckpt)), raise_server_exceptions=True) as c:
        yield c


def assert_same(got, want, where="") -> None:
    """Equal JSON, numbers within 2e-4: a batch pads its sentences, which moves the last digits
    of a float (the texts, pieces and shapes must be identical)."""
    if isinstance(want, float):
        assert got == pytest.approx(want, abs=2e-4), where
    elif isinstance(want, (list, dict)):
        assert type(got) is type(want) and len(got) == len(want), where
        keys = want.keys() if isinstance(want, dict) else range(len(want))
        assert not isinstance(want, dict) or got.keys() == want.keys(), where
        for k in keys:
            assert_same(got[k], want[k], f"{where}/{k}")
    else:
        assert got == want, where


def count_decodes(monkeypatch) -> list[int]:
    """Record the number of sentences of every Translator.translate_full call."""
    sizes: list[int] = []
    real = Translator.translate_full

    def counted(self, sentences, *args, **kwargs):
        sizes.append(len(sentences))
        return real(self, sentences, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate_full", counted)
    return sizes


async def send_all(app, bodies: list[dict]) -> list[dict]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://serve") as c:
        answers = await asyncio.gather(*(c.post("/translate", json=b) for b in bodies))
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    return [a.json()["translations"] for a in answers]


def test_concurrent_requests_are_decoded_together_and_each_gets_its_own(ckpt, client, monkeypatch):
    bodies = [{"text": s, "attention": i % 2 == 0} for i, s in enumerate(SENTENCES)]
    bodies[3] = {"texts": SENTENCES[3:6]}  # one request with three texts among them
    alone = [post(client, b)["translations"] for b in bodies]  # one request at a time
    sizes = count_decodes(monkeypatch)
    app = load_app(serve_config(ckpt, batch_wait_ms=200, max_batch=64))
    together = asyncio.run(send_all(app, bodies))
    assert_same(together, alone)
    assert [[t["source"] for t in r] for r in together] == [
        b.get("texts", [b.get("text")]) for b in bodies
    ]
    assert len(sizes) < len(bodies) and sum(sizes) == 12
    assert app.state.batcher.decodes == len(sizes)


def test_batches_hold_one_decode_setting_and_at_most_max_batch_sentences(ckpt, monkeypatch):
    greedy, beam = {"strategy": "greedy"}, {"strategy": "beam", "beam_size": 3}
    bodies = [{"text": s, "decode": greedy if i % 2 else beam} for i, s in enumerate(SENTENCES)]
    sizes = count_decodes(monkeypatch)
    app = load_app(serve_config(ckpt, batch_wait_ms=200, max_batch=3))
    results = asyncio.run(send_all(app, bodies))
    assert [r[0]["source"] for r in results] == SENTENCES
    assert max(sizes) <= 3 and sum(sizes) == 10 and len(sizes) >= 4  # 5 of each setting


def test_batch_wait_0_decodes_every_request_alone(ckpt, monkeypatch):
    sizes = count_decodes(monkeypatch)
    app = load_app(serve_config(ckpt, batch_wait_ms=0))
    asyncio.run(send_all(app, [{"text": s} for s in SENTENCES[:6]]))
    assert sizes == [1] * 6


def test_the_event_loop_answers_while_a_decode_runs(ckpt, monkeypatch):
    """Decoding runs in the worker thread: /health is answered in the middle of a slow decode."""
    real = Translator.translate_full

    def slow(self, sentences, *args, **kwargs):
        time.sleep(1.0)
        return real(self, sentences, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate_full", slow)
    app = load_app(serve_config(ckpt))

    async def main():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://serve") as c:
            began = time.monotonic()
            decoding = asyncio.create_task(c.post("/translate", json={"text": SENTENCES[0]}))
            await asyncio.sleep(0.2)
            health = await c.get("/health")
            answered = time.monotonic() - began
            return health, answered, await decoding, time.monotonic() - began

    health, answered, translated, finished = asyncio.run(main())
    assert health.json() == {"status": "ok"} and translated.status_code == 200
    assert answered < 0.8 < 1.0 <= finished


def test_batcher_groups_by_key_keeps_order_and_survives_a_failure():
    batches = []

    def run(key, items):
        batches.append((key, list(items)))
        if "boom" in items:
            raise ValueError("boom")
        return [f"{key}:{item}" for item in items]

    async def main():
        batcher = Batcher(run, wait_ms=50, max_batch=4)
        jobs = [("a", [1, 2]), ("b", [3]), ("a", [4]), ("a", [5, 6]), ("x", ["boom"])]
        results = await asyncio.gather(
            *(batcher.submit(k, items) for k, items in jobs), return_exceptions=True
        )
        after = await batcher.submit("c", [7])
        batcher.close()
        return results, after

    results, after = asyncio.run(main())
    assert results[:4] == [["a:1", "a:2"], ["b:3"], ["a:4"], ["a:5", "a:6"]]
    assert isinstance(results[4], ValueError) and after == ["c:7"]
    # a's first batch holds 3 items; with [5, 6] it would hold 5: they wait for the next one
    assert batches == [("a", [1, 2, 4]), ("b", [3]), ("a", [5, 6]), ("x", ["boom"]), ("c", [7])]


def test_batcher_skips_a_request_whose_client_left():
    seen = []

    async def main():
        batcher = Batcher(lambda key, items: seen.extend(items) or list(items), 50, 8)
        gone = asyncio.ensure_future(batcher.submit("k", ["gone"]))
        await asyncio.sleep(0)
        gone.cancel()
        kept = await batcher.submit("k", ["kept"])
        batcher.close()
        return kept

    assert asyncio.run(main()) == ["kept"] and seen == ["kept"]
