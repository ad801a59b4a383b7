"""The server: one translator behind a batcher, and what every API shape asks of it.

    server = Server(translator, cfg)
    answers = await server.translate(asked, answer, client)    # one JSON answer per text
    scores = await server.score(pairs, write, client)           # one JSON answer per pair

A shape (`nmt.serving.native`, `nmt.serving.score`) reads its request into an `Asked` (one
`nmt.translation.request.Request`, how its texts are read, whether it wants confidences) and
says how it writes an answer (`Answer`); nothing here knows which shape asked. Requests are
admitted (`nmt.serving.admission`: checked, their cost bounded), queued and searched in batches
with other requests' texts (`nmt.serving.batching`, one worker thread), and a text that is more
than one sentence of plain text is translated by the text loop of `nmt.documents.job`, driven
here without blocking: each round's searches go through the batcher together, and the job's own
steps (reading the texts, checking the sentences, putting the blocks back) run on the event loop
only for a light request, else in a thread, so the loop goes on answering (/health, the page)
whatever a request holds.

A translation's JSON is written by its shape's `Answer` in the worker, beside its search (a tree
or attention maps can make megabytes, which would hold the event loop while written); a text
translated by the loop is written in a thread once its blocks are put back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Protocol

from starlette.concurrency import run_in_threadpool

from nmt.config import Strategy, TextOptions
from nmt.documents.blocks import BlockResult
from nmt.documents.job import TextJob
from nmt.documents.texts import text_job
from nmt.run_config import ServeRunConfig
from nmt.serving.admission import (
    LIGHT_CHARS,
    check_request,
    light,
    map_size,
    score_costs,
    target_tag,
)
from nmt.serving.batching import Batcher
from nmt.serving.http import BadRequest
from nmt.translation.confidence import (
    SEARCH_KINDS,
    Calibration,
    for_checkpoint,
    judge_all,
    search_kind,
)
from nmt.translation.request import Prepared, PreparedText, Request, Segment
from nmt.translation.scoring import Scored
from nmt.translation.translator import Translation, Translator

log = logging.getLogger(__name__)

SCORE = "score"  # the batch key of /score pairs starts with it


@dataclasses.dataclass(frozen=True)
class Asked:
    """A translation request as a shape read it: the one Request, how its texts are read
    (`options`: format, sentence splitting, alignments, protected spans; None: each text one
    sentence of plain text, as a request with prefixes or constraints is), and whether each
    translation carries its confidence (`nmt.translation.confidence`)."""

    request: Request
    options: TextOptions | None = None
    confidence: bool = False


class Answer(Protocol):
    """How a shape writes one text's answer (nmt's own: its JSON, as bytes): a text searched as
    it came (one sentence, its segment: prefix and constraints), or a text translated as its
    sentences (its source and its block's result). Whatever it returns is that text's result
    of `Server.translate`."""

    def translation(self, t: Translation, segment: Segment) -> Any: ...

    def document(self, source: str, result: BlockResult) -> Any: ...

    def memory(self, source: str, text: str) -> Any:
        """A text a translation memory holds (`tm=`), answered as the memory has it."""
        ...


@dataclasses.dataclass(frozen=True)
class ScoreJob:
    """A /score request: one translation per text; `tgt_lang` the translations' language (a
    model with target tags), `src_lang` the texts' (a model with language codes)."""

    texts: list[str]
    translations: list[str]
    tgt_lang: str | None = None
    src_lang: str | None = None


@dataclasses.dataclass(frozen=True)
class Item:
    """One text of a request, as the batcher queues it: in ids, checked (`check_request`)."""

    text: PreparedText
    request: Prepared  # its request: the settings and banned ids it shares with its batch
    # its answer's writer (its shape's `Answer.translation`); None: the Translation itself,
    # a sentence of a text job
    write: Callable[[Translation, Segment], Any] | None = None
    confidence: bool = False  # with its confidence, set on its Translation
    langs: tuple[str | None, str | None] = (None, None)  # its request's tgt_lang and src_lang


@dataclasses.dataclass(frozen=True)
class ScoreItem:
    """One (text, translation) pair of a /score request, as the batcher queues it."""

    text: str
    translation: str
    write: Callable[[Scored], bytes]
    langs: tuple[str | None, str | None] = (None, None)  # as Item's


@dataclasses.dataclass(frozen=True)
class Failed:
    """A text the search found no translation for (`Translation.failure`): its request alone is
    answered 422, naming it by its own number."""

    reason: str


def decode_batch(
    translator: Translator, items: list[Item], calibrations: dict[str, Calibration] | None = None
) -> list[Any]:
    """The batcher's work, in its worker thread: the texts of requests with the same key
    (`batch_key`: the same settings, banned phrases and what they return; each text carries its
    own prefix, constraints and target tag), searched together. Each result is its answer's
    JSON (its `write`), or its Translation (no `write`: a sentence of a text job), or `Failed`
    for a text the search found none for: the search of the others does not depend on it, and
    a writer that fails fails its own request alone (the exception is its result). Items that
    ask for their confidence have it measured here, in one pass over the batch, with the
    calibration for its kind of search (`calibrations`, by `search_kind`)."""
    first = items[0].request
    # a batch's items ask alike for confidence (batch_key): read off the search's own steps
    calibration = None if calibrations is None else calibrations[search_kind(first.settings)]
    judging = items[0].confidence and calibration is not None
    batch = dataclasses.replace(
        first, texts=[item.text for item in items], noun="text",
        statistics=calibration.temperature if judging else None,
    )  # fmt: skip
    results = translator.run(batch)
    if judging:
        for langs in {item.langs for item in items}:  # one pass per pair of languages
            mine = [t for t, item in zip(results, items) if item.langs == langs]
            done = [t for t in mine if t.failure is None]
            for t, c in zip(done, judge_all(translator, done, calibration, *langs)):
                t.confidence = c
    return [_answer(t, item) for t, item in zip(results, items)]


def _answer(t: Translation, item: Item) -> Any:
    if item.write is None:
        return t
    if t.failure is not None:
        return Failed(t.failure)
    try:
        return item.write(t, item.text.segment)
    except Exception as err:  # noqa: BLE001 - a bug in one writer is its own request's 500
        return err


def score_batch(translator: Translator, items: list[ScoreItem]) -> list[bytes]:
    """The batcher's work for /score, in its worker thread: one teacher-forced pass per batch,
    every pair with the same ids before its source (`score_key`)."""
    texts, translations = [i.text for i in items], [i.translation for i in items]
    tgt_lang, src_lang = items[0].langs
    scored = translator.score(texts, translations, tgt_lang=tgt_lang, src_lang=src_lang)
    return [item.write(s) for item, s in zip(items, scored)]


def batch_key(prepared: Prepared, job_id: int, confidence: bool = False) -> tuple:
    """Requests with equal keys are decoded together: those with the same settings and banned
    phrases (`Prepared.key`), whatever their texts, prefixes, constraints and target languages
    (each rides in its own text's ids), and that ask for the same extras (attention maps, search
    trees, confidence: a request that asks for none never pays for another's). Sampling draws
    depend on the batch, so a sampling request is never mixed with others: then `seed` gives the
    same draws every time."""
    sample = prepared.settings.strategy == Strategy.sample
    return prepared.key, prepared.attention, prepared.tree, confidence, job_id if sample else None


def score_key(tag: tuple[int, ...]) -> tuple:
    """Every /score pair is scored with the server's settings: pairs share a batch when their
    sources take the same ids before them (`target_tag`: the target tag, the source's code)."""
    return SCORE, tag


class Server:
    """A translator behind a batcher (see the module's notes). `cfg`: the limits and the
    batching settings; `ckpt`: the checkpoint whose confidence calibrations serve `confidence`
    (None: cfg's first)."""

    def __init__(self, translator: Translator, cfg: ServeRunConfig, ckpt: str | None = None):
        self.translator = translator
        self.cfg = cfg
        self.batcher = Batcher(
            self._run, cfg.batch_wait_ms, cfg.max_batch, cfg.batch_cost, cfg.max_queue,
            cfg.max_queue_cost, cfg.client_share,
        )  # fmt: skip
        self.maps = map_size(translator)  # what a request's attention maps cost grows with
        # the checkpoint's calibration for each kind of search a request may ask for
        ckpt = ckpt or cfg.ckpts[0]
        self.calibrations = {kind: for_checkpoint(ckpt, kind) for kind in SEARCH_KINDS}
        self._ids = itertools.count(1)  # a request's own batch key, where it must be alone

    def _run(self, key: Hashable, items: list) -> list:
        if isinstance(key, tuple) and key[0] == SCORE:
            return score_batch(self.translator, items)
        return decode_batch(self.translator, items, self.calibrations)

    def close(self) -> None:
        self.batcher.close()

    async def translate(self, asked: Asked, answer: Answer, client: Hashable = None) -> list:
        """Each text of the request translated and written by `answer`, in order. A text that
        is one sentence of plain text (all of them, for a request with prefixes or constraints)
        is searched as it came; the others go through the text loop (`TextJob`). A text the
        search finds no translation for is a 422 naming it; a request over a limit is refused
        by admission (`BadRequest`) or by the queue (`QueueFull`)."""
        request = asked.request
        job = None
        if asked.options is not None:
            job = await self._off_loop(request, text_job, self.translator, request, asked.options)
        if job is None or job.simple:
            found = await self.search(request, asked.confidence, client, answer.translation)
            for i, result in enumerate(found):
                if isinstance(result, Failed):  # this request's own text, by its own number
                    raise BadRequest(422, f"text {request.first_line + i}: {result.reason}")
            return found
        # a round's searches (with and without maps) at once; planning a round reads every
        # sentence (25,000 of them in 100 KB of "<!--"): off the loop, as taking its results
        while requests := await self._off_loop(request, job.next):
            found = await _together([self.search(r, asked.confidence, client) for r in requests])
            await self._off_loop(request, job.take, found)
        return await run_in_threadpool(_write_documents, job, request, answer)

    async def search(
        self,
        request: Request,
        confidence: bool,
        client: Hashable = None,
        write: Callable[[Translation, Segment], Any] | None = None,
    ) -> list:
        """`request`'s texts checked and searched in a batch: each text's result
        (`decode_batch`'s: its answer written by `write`, or its Translation without one)."""
        # tokenizing and checking take up to a second for the largest request the limits allow
        # (every spelling of 64 long banned phrases): off the event loop, which goes on
        # answering. A prefix the model cannot take, or a request over max_request_cost, fails
        # here: a bad request never fails the batch it would have joined
        check = (self.translator, request, self.cfg.max_request_cost, self.maps)
        prepared, costs = await self._off_loop(request, check_request, *check)
        langs = (request.tgt_lang, request.src_lang)
        items = [Item(text, prepared, write, confidence, langs) for text in prepared.texts]
        key = batch_key(prepared, next(self._ids), confidence)
        found = await self.batcher.submit(key, items, costs, client)
        for result in found:
            if isinstance(result, Exception):
                raise result
        return found

    async def score(
        self, job: ScoreJob, write: Callable[[Scored], bytes], client: Hashable = None
    ) -> list[bytes]:
        """Each pair's score written by `write`, in order (`Translator.score`, in batches)."""
        langs = (job.tgt_lang, job.src_lang)
        check = (self.translator, job.translations, langs, self.cfg.max_request_cost)
        if sum(map(len, job.translations)) <= LIGHT_CHARS:  # tokenized quicker than handed over
            costs = score_costs(*check)
        else:
            costs = await run_in_threadpool(score_costs, *check)
        items = [ScoreItem(t, u, write, langs) for t, u in zip(job.texts, job.translations)]
        key = score_key(target_tag(self.translator, *langs))
        return await self.batcher.submit(key, items, costs, client)

    async def _off_loop(self, request: Request, work: Callable, *args: Any) -> Any:
        """`work(*args)` on the event loop for a light request (`light`: the hand-over to a
        thread would cost more than the work), else in a thread."""
        if light(request):
            return work(*args)
        return await run_in_threadpool(work, *args)


async def _together(searches: list[Coroutine]) -> list:
    """The results of `searches`, run concurrently; when one fails (the queue is full), the
    others are cancelled, so no search goes on for a request already answered."""
    tasks = [asyncio.ensure_future(s) for s in searches]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        raise


def _write_documents(job: TextJob, request: Request, answer: Answer) -> list:
    """Each text's answer from its block's result; a block the search found no translation
    for is a 422 naming its text."""
    results = job.results()
    for i, result in enumerate(results):
        if result.failure is not None:
            raise BadRequest(422, f"text {request.first_line + i}: {result.failure}")
    return [answer.document(text, r) for text, r in zip(request.texts, results)]
