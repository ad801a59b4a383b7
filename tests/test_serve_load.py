"""nmt-serve under load on loopback: many concurrent clients over real sockets (uvicorn in a
thread, as `nmt-serve` runs it), each answer checked against translating alone, the batches the
server reports, and its memory.

The clients speak HTTP/1.1 over asyncio streams (a few lines below) rather than through httpx,
whose CPU per request would slow the server it shares the process with; the tiny GRU checkpoint
is test_serve.py's.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest
import uvicorn
from test_serve import BEAM, SENTENCES, serve_config, tiny_checkpoint

from nmt.config import DecodeConfig
from nmt.run_config import ServeRunConfig
from nmt.serving.app import listen, load_app
from nmt.translation.translator import Translator

CLIENTS = 24
ROUNDS = 6  # requests per client
GREEDY = DecodeConfig()


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, demo_dir) -> Path:
    return tiny_checkpoint(tmp_path_factory, demo_dir)


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class Served:
    """The app behind uvicorn on a free loopback port, in a thread, for a `with` block."""

    def __init__(self, app) -> None:
        self.sock = listen("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]})

    def __enter__(self) -> Served:
        self.thread.start()
        while not self.server.started:
            self.thread.join(0.01)
            assert self.thread.is_alive(), "uvicorn did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


async def post(streams, path: str, body: dict) -> tuple[int, dict]:
    """One POST on a keep-alive connection: the status and the JSON answer."""
    reader, writer = streams
    data = json.dumps(body).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {len(data)}\r\n\r\n"
    writer.write(head.encode() + data)
    lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    fields = dict(line.lower().split(":", 1) for line in lines[1:] if ":" in line)
    answer = await reader.readexactly(int(fields["content-length"]))
    return int(lines[0].split()[1]), json.loads(answer)


async def clients(port: int, rounds: int) -> list[tuple[str, int, dict]]:
    """CLIENTS clients, each sending `rounds` one-sentence requests one after another."""

    async def client(k: int) -> list:
        streams = await asyncio.open_connection("127.0.0.1", port)
        answers = []
        for j in range(rounds):
            text = SENTENCES[(k + j) % len(SENTENCES)]
            answers.append((text, *await post(streams, "/translate", {"text": text})))
        streams[1].close()
        return answers

    done = await asyncio.wait_for(asyncio.gather(*(client(k) for k in range(CLIENTS))), 120)
    return [answer for answers in done for answer in answers]


def test_many_clients_get_their_own_translations_in_full_batches_in_bounded_memory(ckpt):
    app = load_app(serve_config(ckpt, batch_wait_ms=20))
    alone = Translator.from_checkpoint(ckpt, BEAM, "cpu")
    want = {s: t.text for s, t in zip(SENTENCES, alone.translate_full(SENTENCES, False))}
    with Served(app) as served:
        warm = asyncio.run(clients(served.port, 1))  # allocator pools, caches
        before, counts = rss_mb(), dict(vars(app.state.batcher))
        answers = asyncio.run(clients(served.port, ROUNDS))
        grown = rss_mb() - before
        batcher = app.state.batcher
        decodes = batcher.decodes - counts["decodes"]
        items = batcher.items - counts["items"]
    assert len(answers) == CLIENTS * ROUNDS and len(warm) == CLIENTS
    assert [status for _, status, _ in answers] == [200] * len(answers)
    for text, _, body in answers + warm:
        [got] = body["translations"]
        assert (got["source"], got["text"]) == (text, want[text])
    # every client waits for its answer before it sends again, so a batch can hold them all;
    # most do (tests/test_serve_batching.py checks the rule that makes them wait, exactly)
    assert items == CLIENTS * ROUNDS and items / decodes >= CLIENTS / 2, (items, decodes)
    assert batcher.queued == 0 and batcher.refused == 0
    assert grown < 40, f"resident memory grew {grown:.1f} MB over {len(answers)} requests"


async def health_while(port: int, path: str, body: dict) -> tuple[int, dict, float, float]:
    """POST `body` on one connection while another polls GET /health every 0.05 s: its status
    and answer, the seconds it took, and the longest /health answer meanwhile."""
    streams = await asyncio.open_connection("127.0.0.1", port)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    loop = asyncio.get_running_loop()
    start = loop.time()
    request = asyncio.create_task(post(streams, path, body))
    slowest = 0.0
    while not request.done():
        sent = loop.time()
        writer.write(b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        slowest = max(slowest, loop.time() - sent)
        await asyncio.sleep(0.05)
    status, answer = await request
    took = loop.time() - start
    for w in (streams[1], writer):
        w.close()
    return status, answer, took, slowest


@pytest.mark.parametrize(
    "text, fmt",
    [
        ("<a " * 33_333, "html"),  # a tag that never closes: every "<" starts one
        ("<b>1</b> " * 11_111, "html"),  # 33,333 codes to lift and put back
        ('<a href="' * 11_111, "html"),  # quoted attributes that never close
        ("<!--" * 25_000, "html"),  # comments that never end
        ("Ich sehe Äpfel. " * 600, "text"),  # 600 sentences: more than max_queue alone
    ],
)
def test_a_hostile_or_long_text_holds_neither_the_server_nor_itself(ckpt, text, fmt):
    """The text work of a request of max_chars (reading markup, splitting, checking, putting
    the codes back) runs in linear time and off the event loop: /health answers within
    milliseconds meanwhile, and the request is answered. A text of more sentences than
    max_queue is taken by an idle server (it was refused with 503 every time)."""
    app = load_app(ServeRunConfig(ckpt=str(ckpt), device="cpu", decode=GREEDY, max_queue=512))
    with Served(app) as served:
        status, answer, took, slowest = asyncio.run(
            health_while(served.port, "/translate", {"text": text, "format": fmt})
        )
    # answered: translated, or refused by the cost it would have (every "<!" ends a sentence)
    assert status == 200 or (status == 413 and "max_request_cost" in answer["error"]), answer
    assert slowest < 0.5, f"/health took {slowest:.2f} s during the request"
    assert took < 30, f"the request took {took:.1f} s"
    if fmt == "text":
        assert len(answer["translations"][0]["sentences"]) == 600
