"""Request batching: concurrent requests with the same key are decoded together, one decode at a
time, and a heavy request is decoded in pieces so that it cannot hold the others for long.

A server receives requests on its event loop; decoding is heavy, blocking work. `Batcher` queues
each request's items (sentences, each with a cost) under a key (the decode settings), and a
single dispatcher hands them, grouped, to one worker thread:

- a batch is the first waiting request and the later ones with its key. It goes to the worker
  when it is full, or when the event loop has been quiet for `wait_ms` (free, and no request
  with its key arrived; the worker free as long), or at the latest MAX_WAITS x `wait_ms` after
  the worker became free.
  Waiting after a decode matters under load: while the worker decoded, the event loop had little
  of the GIL and requests still sit unread in its sockets, and the clients just answered send
  their next ones. Decoding at once would leave all of them to the next batch, and batches would
  stay small;
- a batch holds at most `max_batch` items and `max_cost` of cost (its first item always fits). A
  request with more is split: its first items go into this batch, the rest wait their turn;
- requests take turns: the requests of a batch leave the queue, and one with items left joins it
  again at the back once the batch is decoded, behind the requests that arrived meanwhile. A
  one-sentence request sent during a heavy request waits for the piece under way, not for the
  whole heavy request;
- only one batch is decoded at a time (one worker thread), so the event loop stays free to accept
  requests, answer /health and serve the page;
- each request gets back exactly its own results, in the order of its items, when its last
  piece is decoded; an exception in the worker is raised in every request of that batch, and the
  batcher carries on;
- at most `max_queue` items, and `max_queue_cost` of cost, wait to be decoded, and one client
  (its connection's address) has at most `client_share` of that cost waiting, so that no client
  can fill the queue ahead of the others alone: a request that would go over is refused at once
  with `QueueFull`, which says when to try again (the waiting items at the decoding rate so far).
  A request of more items than `max_queue` alone (a long text split into its sentences) is
  taken when no item waits, and holds the queue until it has drained below `max_queue`.

`wait_ms=0` turns batching off: every decode holds one request's items (a heavy one still in
pieces, still taking turns).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

# the most a batch waits for more requests, in batch waits (see `Batcher._gather`)
MAX_WAITS = 10
# run(key, items) -> one result per item, in order; called in the worker thread
Run = Callable[[Hashable, list[Any]], Sequence[Any]]


class QueueFull(Exception):
    """The queue has no room for a request: try again in `retry_after` seconds."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(f"{message}; try again in {retry_after} s")
        self.retry_after = retry_after


@dataclass(eq=False)
class _Request:
    key: Hashable
    items: list[Any]
    costs: list[float]
    future: asyncio.Future
    client: Hashable = None  # who sent it (its connection's address), for `client_share`
    taken: int = 0  # items handed to decodes so far (a request in the queue waits from here)
    results: list[Any] = field(default_factory=list)
    arrived: float = field(default_factory=time.monotonic)

    @property
    def left(self) -> int:
        return 0 if self.future.done() else len(self.items) - self.taken

    @property
    def cost_left(self) -> float:
        return 0.0 if self.future.done() else sum(self.costs[self.taken :])


# one piece of a batch: a request and the slice of its items that this decode holds
_Piece = tuple[_Request, int, int]


class Batcher:
    def __init__(
        self,
        run: Run,
        wait_ms: float,
        max_batch: int,
        max_cost: float = math.inf,
        max_queue: int | None = None,
        max_queue_cost: float = math.inf,
        client_share: float = 1.0,
    ) -> None:
        self.run = run
        self.wait = wait_ms / 1000
        self.max_batch = max_batch
        self.max_cost = max_cost
        self.max_queue = max_queue
        self.max_queue_cost = max_queue_cost
        self.client_share = client_share
        self.decodes = 0  # batches handed to `run` so far
        self.requests = 0  # requests in them (counted at their first piece)
        self.items = 0  # items in them
        self.split = 0  # requests decoded in more than one piece
        self.refused = 0  # requests refused with QueueFull
        self._busy_s = 0.0  # seconds spent in `run`: with `items`, the rate behind Retry-After
        self._pending: list[_Request] = []
        self._decoding: list[_Piece] = []  # the batch in the worker
        self._dispatcher: asyncio.Task | None = None
        self._filled: asyncio.Event | None = None  # set when the oldest key has a full batch
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nmt-decode")

    @property
    def queued(self) -> int:
        """Items waiting for a decode (those of the batch under way not counted)."""
        return sum(r.left for r in self._waiting())

    def counts(self) -> dict[str, int]:
        """What the batcher has done so far, and how many items wait (for /info)."""
        names = ("decodes", "requests", "items", "split", "refused", "queued")
        return {name: getattr(self, name) for name in names}

    def queued_cost(self, client: Hashable = None) -> float:
        """The cost of the items waiting for a decode: every client's, or one `client`'s."""
        return sum(r.cost_left for r in self._waiting() if client is None or r.client == client)

    def _waiting(self) -> list[_Request]:
        """The requests with items waiting (a request of the batch under way may have more)."""
        return [*self._pending, *(r for r, _, _ in self._decoding if r not in self._pending)]

    async def submit(
        self,
        key: Hashable,
        items: list[Any],
        costs: Sequence[float] | None = None,
        client: Hashable = None,
    ) -> list[Any]:
        """The results of `run(key, items)`, computed in batches with other requests' items.
        `costs` (one per item, default 1) decide how many items share a decode (`max_cost`) and
        how much of the queue they take; `client` (who sent them) what share of it. Raises
        QueueFull at once when the queue has no room for the items."""
        loop = asyncio.get_running_loop()
        costs = [1.0] * len(items) if costs is None else list(costs)
        if len(costs) != len(items):
            raise ValueError(f"{len(costs)} costs for {len(items)} items")
        running = self._dispatcher is not None and not self._dispatcher.done()
        if running and self._dispatcher.get_loop() is not loop:
            running = False  # an earlier event loop's (a test client's) dispatcher
        if not running:
            # requests left behind by a closed event loop can never be answered: drop them
            self._pending = [r for r in self._pending if r.future.get_loop() is loop]
            self._decoding = []
        self._check_room(len(items), sum(costs), client)
        request = _Request(key, list(items), costs, loop.create_future(), client)
        self._pending.append(request)
        if not running:
            self._filled = asyncio.Event()
            self._dispatcher = loop.create_task(self._dispatch(), name="nmt-batcher")
        elif key == self._pending[0].key and self._full(key):
            self._filled.set()
        return await request.future

    def _check_room(self, count: int, cost: float, client: Hashable) -> None:
        """Raise QueueFull when `count` items of `cost` would go over max_queue, max_queue_cost
        or this client's share of it."""
        queued, waiting = self.queued, self.queued_cost()
        mine, share = self.queued_cost(client), self.client_share * self.max_queue_cost
        # a request of more items than the queue holds (a long text, split into its sentences)
        # is taken when nothing waits, and then fills the queue: decoded in turns, as a costly
        # request is, it is never refused by an idle server
        places = count if self.max_queue is None else min(count, self.max_queue)
        if self.max_queue is not None and queued + places > self.max_queue:
            alone = " (more than the queue holds: it is taken when nothing waits)"
            why = (
                f"the server is busy: {queued} sentences wait to be translated, and {count} more"
                f"{alone if count > self.max_queue else ''} would go over "
                f"max_queue={self.max_queue}"
            )
        elif waiting + cost > self.max_queue_cost:
            why = (
                f"the server is busy: work of cost {waiting:.0f} waits, and this request's "
                f"{cost:.0f} would go over max_queue_cost={self.max_queue_cost:.0f}"
            )
        elif client is not None and mine + cost > share:
            why = (
                f"this client has work of cost {mine:.0f} waiting, and this request's {cost:.0f} "
                f"would go over its share of the queue ({self.client_share:g} x "
                f"max_queue_cost = {share:.0f}): wait for its answers before sending more"
            )
        else:
            return
        self.refused += 1
        raise QueueFull(why, self._retry_after(queued))

    def close(self) -> None:
        """Stop the worker thread (a decode under way finishes; queued ones are dropped)."""
        self._worker.shutdown(wait=False, cancel_futures=True)

    def _retry_after(self, queued: int) -> int:
        """Seconds until the queue has drained at the decoding rate so far (1 to 60)."""
        rate = self.items / self._busy_s if self._busy_s > 0 else 0.0
        return 1 if rate <= 0 else max(1, min(60, math.ceil(queued / rate)))

    def _full(self, key: Hashable) -> bool:
        """Whether the requests waiting with `key` fill a batch."""
        size = cost = 0.0
        for r in self._pending:
            if r.key == key and r.left:
                size += r.left
                cost += sum(r.costs[r.taken :])
                if size >= self.max_batch or cost >= self.max_cost:
                    return True
        return False

    async def _dispatch(self) -> None:
        """Decode the pending requests until none is left, then end (`submit` starts another)."""
        loop = asyncio.get_running_loop()
        while self._pending:
            await self._gather()
            batch = self._take()
            if not batch:
                continue
            items = [item for r, start, stop in batch for item in r.items[start:stop]]
            self.decodes += 1
            self.requests += sum(start == 0 for _, start, _ in batch)
            self.split += sum(start == 0 and stop < len(r.items) for r, start, stop in batch)
            self.items += len(items)
            self._decoding = batch
            began = time.monotonic()
            try:
                results = await loop.run_in_executor(self._worker, self.run, batch[0][0].key, items)
                if len(results) != len(items):
                    raise RuntimeError(f"run gave {len(results)} results for {len(items)} items")
            except asyncio.CancelledError:
                for r, _, _ in batch:
                    r.future.cancel()
                raise
            except Exception as err:  # noqa: BLE001 - handed to the requests of this batch
                for r, _, _ in batch:
                    if not r.future.done():
                        r.future.set_exception(err)
                continue
            finally:
                self._busy_s += time.monotonic() - began
                self._decoding = []
            done = 0
            for r, start, stop in batch:
                r.results.extend(results[done : done + stop - start])
                done += stop - start
                if r.future.done():  # a client that went away leaves a cancelled future
                    continue
                if len(r.results) == len(r.items):
                    r.future.set_result(r.results)
                else:  # its next turn comes after the requests that arrived during this one
                    self._pending.append(r)

    async def _gather(self) -> None:
        """Wait until the batch of the first request's key is full, or the event loop has been
        quiet for `wait` (free, and no request with that key arrived), or the worker has been
        free for MAX_WAITS x `wait`.

        Quiet means free too: right after a decode the loop is busy writing the answers and then
        reading the clients' next requests, and no request arrives while it writes. So the wait
        goes in steps of a quarter of `wait`, and a step that ends late (the loop was busy)
        starts the quiet time again."""
        if not self.wait:
            return
        step = self.wait / 4
        idle = quiet = time.monotonic()
        while self._pending:
            key = self._pending[0].key
            now = time.monotonic()
            quiet = max([quiet, *(r.arrived for r in self._pending if r.key == key)])
            if now - quiet >= self.wait or now - idle >= MAX_WAITS * self.wait or self._full(key):
                return
            self._filled.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._filled.wait(), step)
            if time.monotonic() - now > 2 * step:
                quiet = time.monotonic()

    def _take(self) -> list[_Piece]:
        """Remove and return the next batch: items of the first request in the queue and, when
        batching, of the later ones with its key, in queue order, while the batch stays within
        `max_batch` items and `max_cost`. The first request that does not fit whole gives the
        items that fit and closes the batch (first come, first served within a key)."""
        self._pending = [r for r in self._pending if r.left]  # cancelled ones
        if not self._pending:
            return []
        key = self._pending[0].key
        batch: list[_Piece] = []
        rest: list[_Request] = []
        size, cost, closed = 0, 0.0, False
        for r in self._pending:
            if closed or r.key != key or (batch and not self.wait):
                rest.append(r)
                continue
            stop = r.taken
            while stop < len(r.items) and size < self.max_batch:
                if size and cost + r.costs[stop] > self.max_cost:
                    break
                size, cost, stop = size + 1, cost + r.costs[stop], stop + 1
            if stop > r.taken:
                batch.append((r, r.taken, stop))
                r.taken = stop
            else:
                rest.append(r)
            closed = stop < len(r.items)
        self._pending = rest
        return batch
