"""nmt-serve's batching: concurrent requests decoded together, each answered with its own, and
the Batcher that groups them (by decode setting, at most max_batch sentences) on its own.

The tiny GRU checkpoint is test_serve.py's, trained once per session.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient
from test_serve import SENTENCES, post, serve_config, tiny_checkpoint

from nmt.serving.app import load_app
from nmt.serving.batching import Batcher, QueueFull
from nmt.translation.translator import Translator


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
    """Record the number of sentences of every search the server runs (`Translator.run`), from
    now on: install it after `load_app`, whose warm-up is a search of its own."""
    sizes: list[int] = []
    real = Translator.run

    def counted(self, prepared):
        sizes.append(len(prepared.texts))
        return real(self, prepared)

    monkeypatch.setattr(Translator, "run", counted)
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
    app = load_app(serve_config(ckpt, batch_wait_ms=200, max_batch=64))
    sizes = count_decodes(monkeypatch)
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
    app = load_app(serve_config(ckpt, batch_wait_ms=200, max_batch=3))
    sizes = count_decodes(monkeypatch)
    results = asyncio.run(send_all(app, bodies))
    assert [r[0]["source"] for r in results] == SENTENCES
    assert max(sizes) <= 3 and sum(sizes) == 10 and len(sizes) >= 4  # 5 of each setting


def test_batch_wait_0_decodes_every_request_alone(ckpt, monkeypatch):
    app = load_app(serve_config(ckpt, batch_wait_ms=0))
    sizes = count_decodes(monkeypatch)
    asyncio.run(send_all(app, [{"text": s} for s in SENTENCES[:6]]))
    assert sizes == [1] * 6


def test_the_event_loop_answers_while_a_decode_runs(ckpt, monkeypatch):
    """Decoding runs in the worker thread: /health is answered in the middle of a slow decode."""
    real = Translator.run

    def slow(self, prepared):
        time.sleep(1.0)
        return real(self, prepared)

    monkeypatch.setattr(Translator, "run", slow)
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
    # a's first batch fills its 4 items with the first of [5, 6]; 6 waits for its turn, after
    # the requests that were queued when that batch was taken
    assert batches == [("a", [1, 2, 4, 5]), ("b", [3]), ("x", ["boom"]), ("a", [6]), ("c", [7])]


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


def held_run(calls: list, hold: threading.Event):
    """A run that records its batches and holds the first one until `hold` is set."""

    def run(key, items):
        calls.append((key, list(items)))
        if len(calls) == 1:
            assert hold.wait(30)
        return [f"{key}:{item}" for item in items]

    return run


async def until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.001)


@pytest.mark.parametrize("light_key", ["light", "heavy"])
def test_a_costly_request_is_decoded_in_pieces_and_a_light_one_gets_a_turn_between(light_key):
    """Six items of cost 4 with max_cost 10: pieces of two. A light request sent during the first
    piece is decoded next (alone, or with the next piece when it has the same key), not after
    the whole heavy request; each request gets exactly its own results, in order."""
    calls, hold = [], threading.Event()

    async def main():
        batcher = Batcher(held_run(calls, hold), wait_ms=1, max_batch=64, max_cost=10)
        heavy = asyncio.ensure_future(batcher.submit("heavy", list(range(6)), [4] * 6))
        await until(lambda: batcher.decodes == 1)
        light = asyncio.ensure_future(batcher.submit(light_key, ["x"], [1]))
        await until(lambda: batcher.queued == 5)  # the light one and four heavy items wait
        hold.set()
        results = await heavy, await light
        batcher.close()
        return results, batcher

    (heavy, light), batcher = asyncio.run(main())
    assert heavy == [f"heavy:{i}" for i in range(6)] and light == [f"{light_key}:x"]
    if light_key == "light":
        assert calls == [
            ("heavy", [0, 1]), ("light", ["x"]), ("heavy", [2, 3]), ("heavy", [4, 5])
        ]  # fmt: skip
    else:  # the light request leads the next batch, which the heavy one fills up to cost 10
        assert calls == [("heavy", [0, 1]), ("heavy", ["x", 2, 3]), ("heavy", [4, 5])]
    assert batcher.split == 1 and batcher.requests == 2


def test_a_full_queue_refuses_at_once_with_a_time_to_retry():
    calls, hold = [], threading.Event()

    async def main():
        batcher = Batcher(held_run(calls, hold), wait_ms=0, max_batch=8, max_queue=3)
        first = asyncio.ensure_future(batcher.submit("k", [0]))
        await until(lambda: batcher.decodes == 1)  # held in the worker: not in the queue
        queued = [asyncio.ensure_future(batcher.submit("k", i)) for i in ([1, 2], [3])]
        await asyncio.sleep(0)
        with pytest.raises(QueueFull) as full:
            await batcher.submit("k", [4])
        hold.set()
        done = await first, [await q for q in queued], await batcher.submit("k", [5])
        batcher.close()
        return full.value, done, batcher

    full, (first, queued, after), batcher = asyncio.run(main())
    assert "3 sentences wait" in str(full) and "max_queue=3" in str(full)
    assert full.retry_after == 1  # no decode had finished: no rate to estimate from
    assert first == ["k:0"] and queued == [["k:1", "k:2"], ["k:3"]] and after == ["k:5"]
    assert batcher.refused == 1 and [c[1] for c in calls] == [[0], [1, 2], [3], [5]]


def test_the_queue_counts_cost_and_no_client_fills_it_alone():
    """max_queue_cost bounds the work waiting, whoever sends it; client_share what one client
    may have waiting: a client over its share is refused while another's request of the same
    cost is queued, and the first client's next one fits once its work is done."""
    calls, hold = [], threading.Event()

    async def main():
        batcher = Batcher(held_run(calls, hold), wait_ms=0, max_batch=8, max_queue_cost=100,
                          client_share=0.5)  # fmt: skip
        first = asyncio.ensure_future(batcher.submit("k", [0], [10], client="a"))
        await until(lambda: batcher.decodes == 1)  # held in the worker: not in the queue
        mine = asyncio.ensure_future(batcher.submit("k", [1], [40], client="a"))
        await asyncio.sleep(0)
        with pytest.raises(QueueFull) as share:
            await batcher.submit("k", [2], [20], client="a")  # 40 + 20 > 50, a's share
        theirs = asyncio.ensure_future(batcher.submit("k", [3], [45], client="b"))
        await asyncio.sleep(0)
        with pytest.raises(QueueFull) as full:
            await batcher.submit("k", [4], [20], client="c")  # 85 + 20 > 100, the whole queue
        assert batcher.queued_cost() == 85 and batcher.queued_cost("a") == 40
        hold.set()
        done = await first, await mine, await theirs
        again = await batcher.submit("k", [5], [45], client="a")
        batcher.close()
        return share.value, full.value, done, again, batcher

    share, full, done, again, batcher = asyncio.run(main())
    assert "this client has work of cost 40 waiting" in str(share)
    assert "its share of the queue (0.5 x max_queue_cost = 50)" in str(share)
    assert "would go over max_queue_cost=100" in str(full)
    assert done == (["k:0"], ["k:1"], ["k:3"]) and again == ["k:5"] and batcher.refused == 2


def test_after_a_decode_the_next_batch_waits_for_the_requests_still_coming():
    """The clients of a batch come back one after another once it is decoded; a request that
    arrived during the decode waits for them (until none has come for wait_ms) instead of
    being decoded alone while they queue behind it."""
    calls, hold = [], threading.Event()

    async def main():
        batcher = Batcher(held_run(calls, hold), wait_ms=100, max_batch=64)

        async def client(k: int) -> list:
            await batcher.submit("k", [k])
            await asyncio.sleep(0.005 * k)
            return await batcher.submit("k", [k])

        clients = [asyncio.ensure_future(client(k)) for k in range(4)]
        await until(lambda: batcher.decodes == 1)
        late = asyncio.ensure_future(batcher.submit("k", ["late"]))
        await asyncio.sleep(0.15)  # its own window of wait_ms is over when the decode ends
        hold.set()
        await asyncio.gather(*clients, late)
        batcher.close()

    asyncio.run(main())
    assert [len(items) for _, items in calls] == [4, 5]


def held_translations(monkeypatch) -> tuple[list, threading.Event]:
    """Record the texts of every search the server runs (`Translator.run`); hold the first one
    until the event is set. Installed after `load_app` (its warm-up is a search)."""
    calls, hold = [], threading.Event()
    real = Translator.run

    def held(self, prepared):
        calls.append([text.segment.text for text in prepared.texts])
        if len(calls) == 1:
            assert hold.wait(30)
        return real(self, prepared)

    monkeypatch.setattr(Translator, "run", held)
    return calls, hold


def test_a_one_sentence_request_is_decoded_between_the_pieces_of_a_heavy_one(ckpt, monkeypatch):
    """batch_cost=1: the heavy request (a tree, beam 8, min_len_b forcing every hypothesis to
    the length limit) goes one text per decode. The light request sent during its first piece
    is decoded second, before the heavy request's last piece; both answers are what each request
    gets alone."""
    decode = {"beam_size": 8, "n_best": 8, "min_len_b": 1_000_000}
    heavy = {"texts": SENTENCES[:4], "decode": decode, "beam_tree": True}
    light = {"text": SENTENCES[5]}
    with TestClient(load_app(serve_config(ckpt))) as c:
        alone = [post(c, body)["translations"] for body in (heavy, light)]
    app = load_app(serve_config(ckpt, batch_cost=1))
    calls, hold = held_translations(monkeypatch)
    batcher = app.state.batcher

    async def main():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://serve") as c:
            heavy_answer = asyncio.ensure_future(c.post("/translate", json=heavy))
            await until(lambda: batcher.decodes == 1)
            light_answer = asyncio.ensure_future(c.post("/translate", json=light))
            await until(lambda: batcher.queued == 4)  # three heavy texts and the light one
            hold.set()
            return [(await a).json()["translations"] for a in (heavy_answer, light_answer)]

    together = asyncio.run(main())
    assert calls == [[SENTENCES[0]], [SENTENCES[5]], *([s] for s in SENTENCES[1:4])]
    for got, want in zip(together, alone):
        assert [[h["text"] for h in t["nbest"]] for t in got] == [
            [h["text"] for h in t["nbest"]] for t in want
        ]
        assert [len(t.get("beam_tree", {})["nodes"]) for t in got if "beam_tree" in t] == [
            len(t["beam_tree"]["nodes"]) for t in want if "beam_tree" in t
        ]
    assert batcher.split == 1


def test_a_full_queue_is_answered_503_with_retry_after(ckpt, monkeypatch):
    app = load_app(serve_config(ckpt, max_queue=4, batch_wait_ms=0))
    calls, hold = held_translations(monkeypatch)
    batcher = app.state.batcher

    async def main():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://serve") as c:
            first = asyncio.ensure_future(c.post("/translate", json={"text": SENTENCES[0]}))
            await until(lambda: batcher.decodes == 1)  # in the worker, held
            queued = asyncio.ensure_future(c.post("/translate", json={"texts": SENTENCES[1:5]}))
            await until(lambda: batcher.queued == 4)
            refused = await c.post("/translate", json={"text": SENTENCES[5]})
            hold.set()
            answers = [await first, await queued]
            return refused, answers, (await c.get("/info")).json()["batching"]

    refused, answers, counts = asyncio.run(main())
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert "4 sentences wait" in refused.json()["error"]
    assert "max_queue=4" in refused.json()["error"]
    assert [a.status_code for a in answers] == [200, 200]
    assert [t["source"] for t in answers[1].json()["translations"]] == SENTENCES[1:5]
    assert counts["refused"] == 1 and counts["queued"] == 0 and len(calls) == 2


def test_an_event_loop_busy_after_a_decode_is_not_taken_for_quiet():
    """After a decode the event loop is busy writing the answers (here one client blocks it for
    0.4 s) and reads no request meanwhile; the clients' next requests come 0.1 s after that.
    The quiet time (wait_ms) counts from the end of the busy time, so they join the batch."""
    calls, hold = [], threading.Event()

    async def main():
        batcher = Batcher(held_run(calls, hold), wait_ms=200, max_batch=64)

        async def client(k: int) -> list:
            await batcher.submit("k", [k])
            if k == 0:
                time.sleep(0.4)  # writing the answers keeps the event loop busy
            await asyncio.sleep(0.1)  # the next request on its way
            return await batcher.submit("k", [k])

        clients = [asyncio.ensure_future(client(k)) for k in range(4)]
        await until(lambda: batcher.decodes == 1)
        late = asyncio.ensure_future(batcher.submit("k", ["late"]))
        await asyncio.sleep(0.3)  # its own window of wait_ms is over when the decode ends
        hold.set()
        await asyncio.gather(*clients, late)
        batcher.close()

    asyncio.run(main())
    assert [len(items) for _, items in calls] == [4, 5]
