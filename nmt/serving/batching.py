"""Request batching: concurrent requests with the same key are decoded together, one at a time.

A server receives requests on its event loop; decoding is heavy, blocking work. `Batcher` queues
each request's items (sentences) under a key (the decode settings) and a single dispatcher hands
them, grouped, to one worker thread:

- the first request to arrive opens a window of `wait_ms`; requests with the same key that arrive
  within it (up to `max_batch` items in all) join its batch, which then goes to the worker;
- while the worker decodes, new requests queue up, so under load batches fill by themselves;
- only one batch is decoded at a time (one worker thread), so the event loop stays free to accept
  requests, answer /health and serve the page;
- each request gets back exactly its own results, in the order of its items; an exception in the
  worker is raised in every request of that batch, and the batcher carries on.

`wait_ms=0` turns batching off: every request is decoded on its own (still one at a time). A
request is never split: one with more than `max_batch` items is decoded alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

# run(key, items) -> one result per item, in order; called in the worker thread
Run = Callable[[Hashable, list[Any]], Sequence[Any]]


@dataclass
class _Request:
    key: Hashable
    items: list[Any]
    future: asyncio.Future
    arrived: float = field(default_factory=time.monotonic)


class Batcher:
    def __init__(self, run: Run, wait_ms: float, max_batch: int) -> None:
        self.run = run
        self.wait = wait_ms / 1000
        self.max_batch = max_batch
        self.decodes = 0  # batches handed to `run` so far
        self.requests = 0  # requests in them
        self.items = 0  # items in them
        self._pending: list[_Request] = []
        self._dispatcher: asyncio.Task | None = None
        self._filled: asyncio.Event | None = None  # set when the oldest key has a full batch
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nmt-decode")

    async def submit(self, key: Hashable, items: list[Any]) -> list[Any]:
        """The results of `run(key, items)`, computed in a batch with other requests' items."""
        loop = asyncio.get_running_loop()
        request = _Request(key, list(items), loop.create_future())
        self._pending.append(request)
        running = self._dispatcher is not None and not self._dispatcher.done()
        if running and self._dispatcher.get_loop() is not loop:
            running = False  # an earlier event loop's (a test client's) dispatcher
        if not running:
            # requests left behind by a closed event loop can never be answered: drop them
            self._pending = [r for r in self._pending if r.future.get_loop() is loop]
            self._filled = asyncio.Event()
            self._dispatcher = loop.create_task(self._dispatch(), name="nmt-batcher")
        elif self._waiting(self._pending[0].key) >= self.max_batch:
            self._filled.set()
        return await request.future

    def close(self) -> None:
        """Stop the worker thread (a decode under way finishes; queued ones are dropped)."""
        self._worker.shutdown(wait=False, cancel_futures=True)

    def _waiting(self, key: Hashable) -> int:
        return sum(len(r.items) for r in self._pending if r.key == key and not r.future.done())

    async def _dispatch(self) -> None:
        """Decode the pending requests until none is left, then end (`submit` starts another)."""
        loop = asyncio.get_running_loop()
        while self._pending:
            first = self._pending[0]
            delay = first.arrived + self.wait - time.monotonic()
            if self.wait and delay > 0 and self._waiting(first.key) < self.max_batch:
                self._filled.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._filled.wait(), delay)
            batch = self._take()
            if not batch:
                continue
            items = [item for r in batch for item in r.items]
            self.decodes += 1
            self.requests += len(batch)
            self.items += len(items)
            try:
                results = await loop.run_in_executor(self._worker, self.run, batch[0].key, items)
                if len(results) != len(items):
                    raise RuntimeError(f"run gave {len(results)} results for {len(items)} items")
            except asyncio.CancelledError:
                for r in batch:
                    r.future.cancel()
                raise
            except Exception as err:  # noqa: BLE001 - handed to the requests of this batch
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(err)
                continue
            start = 0
            for r in batch:
                if not r.future.done():  # a client that went away leaves a cancelled future
                    r.future.set_result(list(results[start : start + len(r.items)]))
                start += len(r.items)

    def _take(self) -> list[_Request]:
        """Remove and return the next batch: the oldest request and, when batching, the later
        ones with its key, in arrival order, while the batch stays within `max_batch` items."""
        self._pending = [r for r in self._pending if not r.future.done()]  # cancelled ones
        if not self._pending:
            return []
        first = self._pending[0]
        batch, size, rest = [first], len(first.items), []
        open_ = bool(self.wait)  # closes at the first request that does not fit: FIFO per key
        for r in self._pending[1:]:
            if open_ and r.key == first.key:
                open_ = size + len(r.items) <= self.max_batch
            if open_ and r.key == first.key:
                batch.append(r)
                size += len(r.items)
            else:
                rest.append(r)
        self._pending = rest
        return batch
