"""nmt-serve: a checkpoint behind an HTTP API and a page that shows its attention.

    POST /translate  {"text": "..."} or {"texts": [...]}, optional "decode": {...}, "attention",
                     "prefix" (or "prefixes"), "beam_tree", "banned", "constraints", "tgt_lang"
    POST /score      {"text": ..., "translation": ...} or {"texts": [...], "translations": [...]}:
                     what the model thinks of given translations (nmt/serving/score.py); "tgt_lang"
    GET  /health     {"status": "ok"}
    GET  /info       the model, its languages (and the "tgt_lang" values it takes), vocabularies,
                     decoding defaults, step, valid BLEU; for an ensemble, its members and whose
                     attention the answers carry
    GET  /           the page (nmt/serving/web/: plain HTML, CSS and JS, no build step)

Every bad request is answered with a 4xx status and {"error": "..."}; see docs/serve.md for the
request and response shapes and the table of errors, and `nmt/serving/protocol.py` for the code
that reads and writes them. Requests are decoded in batches by `nmt.serving.batching.Batcher`, in
one worker thread, so the event loop stays responsive: the worker also writes each translation's
JSON, so a large answer (attention maps, search trees) does not hold the event loop either. A
request's cost (texts x hypotheses x length limit) is bounded (413 above `max_request_cost`); a
costly one is decoded in pieces of at most `batch_cost`, taking turns with the other requests;
when `max_queue` sentences wait, a request is refused with 503 and a Retry-After header.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import logging
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from nmt.checkpoint import Checkpoint, load_checkpoint
from nmt.config import Strategy
from nmt.documents.alignment import reading_of
from nmt.documents.blocks import Plan, finish_blocks, plan_blocks, recovery_cuts, spread
from nmt.documents.recovery import ROUNDS
from nmt.documents.texts import read_block
from nmt.errors import NMTError
from nmt.run_config import ServeRunConfig, flatten
from nmt.serving.batching import Batcher, QueueFull
from nmt.serving.protocol import (
    Asked,
    BadRequest,
    check_request,
    describe_model,
    document_json,
    light,
    map_size,
    parse_request,
    read_body,
    target_tag,
    translation_json,
)
from nmt.serving.score import parse_score_request, score_costs, scored_json
from nmt.translation.confidence import (
    SEARCH_KINDS,
    Calibration,
    Confidence,
    for_checkpoint,
    judge_all,
    search_kind,
)
from nmt.translation.request import Prepared, PreparedText
from nmt.translation.request import Request as TranslateRequest
from nmt.translation.translator import Translation, Translator

WEB = Path(__file__).resolve().parent / "web"
log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Item:
    """One text of a request, as the batcher queues it: in ids, checked (`check_request`)."""

    text: PreparedText
    request: Prepared  # its request: the settings and banned ids it shares with its batch
    raw: bool = False  # answered as its Translation (a sentence of a text put back together)
    confidence: bool = False  # with its confidence (nmt.translation.confidence)
    tgt_lang: str | None = None  # its request's target language (a model with target tags)
    src_lang: str | None = None  # its request's source language (a model with language codes)


@dataclasses.dataclass(frozen=True)
class Failed:
    """A text the search found no translation for (`Translation.failure`): its request alone is
    answered 422, naming it by its own number."""

    reason: str


def decode_batch(
    translator: Translator, items: list[Item], calibrations: dict[str, Calibration] | None = None
) -> list[bytes | tuple | Failed]:
    """The batcher's work, in its worker thread: the texts of requests with the same key
    (`batch_key`: the same settings, banned phrases and what they return; each text carries its
    own prefix, constraints and target tag), searched together. Each result is its translation's
    JSON, written here rather than on the event loop (a tree or attention maps can make
    megabytes, which would hold every other request while they are written), or `Failed` for a
    text with none: the search of the others does not depend on it. A `raw` item's result is its
    (Translation, Confidence or None): a sentence of a text split into sentences or carrying
    markup, put together by the request's handler (`text_results`). Items that ask for their
    confidence have it measured here, in one pass over the batch, with the calibration for its
    kind of search (`calibrations`, by `search_kind`)."""
    first = items[0].request
    # a batch's items ask alike for confidence (batch_key): read off the search's own steps
    calibration = None if calibrations is None else calibrations[search_kind(first.settings)]
    judging = items[0].confidence and calibration is not None
    batch = Prepared(
        [item.text for item in items], first.settings, first.banned, attention=first.attention,
        tree=first.tree, noun="text", statistics=calibration.temperature if judging else None,
    )  # fmt: skip
    results = translator.run(batch)
    judged: list[Confidence | None] = [None] * len(items)
    if judging:
        # a blank text's: one pass per pair of languages
        for langs in {(item.tgt_lang, item.src_lang) for item in items}:
            done = [i for i, t in enumerate(results) if t.failure is None
                    and (items[i].tgt_lang, items[i].src_lang) == langs]  # fmt: skip
            found = judge_all(translator, [results[i] for i in done], calibration, *langs)
            for i, c in zip(done, found):
                judged[i] = c
    out: list[bytes | Translation | Failed | tuple] = []
    for t, item, c in zip(results, items, judged):
        if t.failure is not None:
            out.append(Failed(t.failure))
        elif item.raw:
            out.append((t, c))
        else:
            constraints = list(item.text.segment.constraints)
            json_ = translation_json(t, item.request.attention, item.request.tree, constraints, c)
            out.append(_json(json_))
    return out


@dataclasses.dataclass(frozen=True)
class ScoreItem:
    """One (text, translation) pair of a /score request, as the batcher queues it."""

    text: str
    translation: str
    tgt_lang: str | None = None  # the language of the translation
    src_lang: str | None = None  # the text's (a model with language codes)


SCORE = "score"


def score_key(tag: tuple[int, ...]) -> tuple:
    """Every /score pair is scored with the server's settings: pairs share a batch when their
    sources take the same ids before them (`target_tag`: the target tag, the source's code)."""
    return SCORE, tag


def score_batch(translator: Translator, items: list[ScoreItem]) -> list[bytes]:
    """The batcher's work for /score, in its worker thread: one teacher-forced pass per batch,
    every pair with the same ids before its source (`score_key`)."""
    texts, translations = [i.text for i in items], [i.translation for i in items]
    first = items[0]
    scored = translator.score(texts, translations, tgt_lang=first.tgt_lang,
                              src_lang=first.src_lang)  # fmt: skip
    return [_json(scored_json(s)) for s in scored]


def _json(content: object) -> bytes:
    """As Starlette's JSONResponse writes JSON."""
    text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode("utf-8")


@dataclasses.dataclass(frozen=True)
class TextPlan:
    """A request's texts as blocks of sentences (`nmt.documents.blocks.Plan`) and the request
    of those sentences that is searched."""

    blocks: Plan
    request: TranslateRequest

    def cut(self, cuts: dict[int, int]) -> TextPlan:
        """The plan with its sentences cut as `Plan.cut`, the request of its sentences with it."""
        blocks = self.blocks.cut(cuts)
        return TextPlan(blocks, dataclasses.replace(self.request, texts=blocks.sentences))

    def text_of(self, sentence: int) -> int:
        """The index of the text (from 0) a sentence of the searched request belongs to."""
        count = 0
        for i, split in enumerate(self.blocks.splits):
            count += len(split.sentences)
            if sentence < count:
                return i
        return len(self.blocks.splits) - 1


def plan_texts(translator: Translator, asked: Asked) -> TextPlan | None:
    """The sentences to search for a request whose texts are read as its options say (a format,
    sentence splitting, alignments, protected spans; `nmt.documents`); None when each text is one
    sentence of plain text with nothing to put back, or the request is one of prefixes or
    constraints: then it is searched as it came, and answered as it always was."""
    if asked.options is None:
        return None
    options, call = asked.options, asked.request
    blocks = [read_block(text.strip(), options.format, options) for text in call.texts]
    language = call.src_lang or translator.source_language  # the sentences' rules
    plan = plan_blocks(blocks, language, options, translator.sentence_starts,
                       translator.sentence_edges)  # fmt: skip
    if plan.simple():
        return None
    # an alignment, and a check for skipped sentences, are read off the maps
    edges, parts = translator.sentence_edges, enumerate(plan.splits)
    checked = any(plan.mapped(i, s, edges) for i, split in parts for s in split.sentences)
    attention = call.attention or checked
    return TextPlan(plan, dataclasses.replace(call, texts=plan.sentences, attention=attention))


def text_results(
    translator: Translator, asked: Asked, plan: TextPlan, found: list[tuple]
) -> list[bytes]:
    """Each text's answer put together from its sentences' translations and confidences
    (`document_json`)."""
    skip = len(translator.tags.ids(asked.request.tgt_lang))
    results = finish_blocks(plan.blocks, [t for t, _ in found], skip, reading_of(translator))
    judged = iter(c for _, c in found)
    call, out = asked.request, []
    for text, r in zip(call.texts, results):
        mine = [next(judged) for _ in r.sentences]
        confidences = mine if asked.confidence else None
        out.append(_json(document_json(text, r, asked.options.alignments, call.attention,
                                       call.tree, confidences)))  # fmt: skip
    return out


def batch_key(prepared: Prepared, job_id: int, confidence: bool = False) -> tuple:
    """Requests with equal keys are decoded together: those with the same settings and banned
    phrases (`Prepared.key`), whatever their texts, prefixes, constraints and target languages
    (each rides in its own text's ids), and that ask for the same extras (attention maps, search
    trees, confidence: a request that asks for none never pays for another's). Sampling draws
    depend on the batch, so a sampling request is never mixed with others: then `seed` gives the
    same draws every time."""
    sample = prepared.settings.strategy == Strategy.sample
    return prepared.key, prepared.attention, prepared.tree, confidence, job_id if sample else None


def create_app(translator: Translator, cfg: ServeRunConfig, info: dict) -> Starlette:
    """The ASGI app; `info` is what GET /info answers (see `describe_model`)."""

    def run(key: object, items: list) -> list[bytes]:
        if key[0] == SCORE:
            return score_batch(translator, items)
        return decode_batch(translator, items, calibrations)

    batcher = Batcher(
        run, cfg.batch_wait_ms, cfg.max_batch, cfg.batch_cost, cfg.max_queue, cfg.max_queue_cost,
        cfg.client_share,
    )  # fmt: skip
    counter = iter(range(1, sys.maxsize))
    # a text of max_chars characters, each escaped as \\uXXXX in the worst case, and some room
    body_limit = 6 * cfg.max_chars + 65536
    names = ("max_chars", "max_texts", "max_beam", "max_request_cost", "max_batch", "batch_cost")
    queue = ("max_queue", "max_queue_cost", "client_share", "batch_wait_ms")
    limits = {k: getattr(cfg, k) for k in (*names, *queue)}
    info = {**info, "limits": limits}
    maps = map_size(translator)  # what a request's attention maps cost grows with
    # the checkpoint's calibration for each kind of search a request may ask for
    calibrations = {kind: for_checkpoint(cfg.ckpts[0], kind) for kind in SEARCH_KINDS}

    async def search(
        call: TranslateRequest, raw: bool, asked: Asked, request: Request
    ) -> tuple[Prepared, list]:
        """`call`'s texts checked and searched in a batch: the prepared request and each text's
        result (`decode_batch`'s; `raw`: the sentences of texts, put together after)."""
        # tokenizing and checking take up to a second for the largest request the limits allow
        # (every spelling of 64 long banned phrases): off the event loop, which goes on answering.
        # A light request is checked on it: the hand-over to a thread would cost more than its
        # check. A prefix the model cannot take, or a request over max_request_cost, fails here:
        # a bad request never fails the batch it would have joined
        check = (translator, call, cfg.max_request_cost, maps)
        if light(call):
            prepared, costs = check_request(*check)
        else:
            prepared, costs = await run_in_threadpool(check_request, *check)
        items = [
            Item(text, prepared, raw, asked.confidence, call.tgt_lang, call.src_lang)
            for text in prepared.texts
        ]
        key = batch_key(prepared, next(counter), asked.confidence)
        return prepared, await batcher.submit(key, items, costs, client_of(request))

    async def recover(
        plan: TextPlan, results: list, asked: Asked, request: Request
    ) -> tuple[TextPlan, list]:
        """The plan and its sentences' results with each sentence whose translation skipped part
        of it cut in two, the parts searched (`nmt.documents.recovery`), as nmt-translate does
        (`translate_blocks`): what a text gets depends on that text alone."""
        skip = len(translator.tags.ids(asked.request.tgt_lang))
        reading, fresh = reading_of(translator), set(range(len(results)))
        # reading every sentence's edges (and a candidate's attention) is linear in the text but
        # can take tens of milliseconds for the largest request: off the event loop, as checking
        offload = not light(plan.request)
        for _ in range(ROUNDS):
            found = [r[0] if isinstance(r, tuple) else None for r in results]
            check = (plan.blocks, found, skip, reading, translator.sentence_edges, fresh)
            if offload:
                cuts = await run_in_threadpool(recovery_cuts, *check)
            else:
                cuts = recovery_cuts(*check)
            if not cuts:
                break
            plan, results = plan.cut(cuts), spread(results, cuts)
            fresh = {i for i, r in enumerate(results) if r is None}
            texts = [plan.request.texts[i] for i in sorted(fresh)]
            call = dataclasses.replace(plan.request, texts=texts)
            _, more = await search(call, True, asked, request)
            for i, r in zip(sorted(fresh), more):
                results[i] = r
        return plan, results

    async def translate(request: Request) -> Response:
        asked = parse_request(await read_body(request, body_limit), cfg)
        # a text split into sentences or carrying markup or protected spans: its sentences are
        # searched (as the texts of the request) and put back together after; a request of
        # sentences of plain text is searched as it is
        plan = plan_texts(translator, asked)
        call = asked.request if plan is None else plan.request
        try:
            prepared, results = await search(call, plan is not None, asked, request)
            if plan is not None:
                plan, results = await recover(plan, results, asked, request)
        except QueueFull as full:
            headers = {"Retry-After": str(full.retry_after)}
            return JSONResponse({"error": str(full)}, status_code=503, headers=headers)
        except NMTError as err:
            raise BadRequest(422, str(err)) from None
        for i, result in enumerate(results):
            if isinstance(result, Failed):  # this request's own text, by its own number
                n = i if plan is None else plan.text_of(i)
                raise BadRequest(422, f"text {prepared.first_line + n}: {result.reason}")
        if plan is not None:
            results = await run_in_threadpool(text_results, translator, asked, plan, results)
        settings = {**flatten(call.decode), "banned": call.banned_phrases}  # as searched
        body = b'{"translations":[' + b",".join(results) + b'],"decode":'
        return Response(body + _json(settings) + b"}", media_type="application/json")

    async def score(request: Request) -> Response:
        job = parse_score_request(await read_body(request, body_limit), cfg)
        costs = score_costs(translator, job, cfg.max_request_cost)
        items = [ScoreItem(t, u, job.tgt_lang, job.src_lang)
                 for t, u in zip(job.texts, job.translations)]  # fmt: skip
        key = score_key(target_tag(translator, job.tgt_lang, job.src_lang))
        try:
            results = await batcher.submit(key, items, costs, client_of(request))
        except QueueFull as full:
            headers = {"Retry-After": str(full.retry_after)}
            return JSONResponse({"error": str(full)}, status_code=503, headers=headers)
        except NMTError as err:
            raise BadRequest(422, str(err)) from None
        return Response(b'{"scores":[' + b",".join(results) + b"]}", media_type="application/json")

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def model_info(request: Request) -> Response:
        counts = ("decodes", "requests", "items", "split", "refused", "queued")
        return JSONResponse({**info, "batching": {k: getattr(batcher, k) for k in counts}})

    async def page(request: Request) -> Response:
        return FileResponse(WEB / "index.html", headers=PAGE_HEADERS)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        batcher.close()

    app = Starlette(
        routes=[
            Route("/", page, methods=["GET"]),
            Route("/translate", translate, methods=["POST"]),
            Route("/score", score, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
            Route("/info", model_info, methods=["GET"]),
            Mount("/static", StaticFiles(directory=WEB), name="static"),
        ],
        exception_handlers={
            BadRequest: _bad_request,
            HTTPException: _http_error,
            Exception: _server_error,
        },
        lifespan=lifespan,
    )
    app.state.batcher = batcher
    return app


def client_of(request: Request) -> str | None:
    """Who sent a request, for the queue's client_share: the address its connection comes from
    (behind a proxy, the proxy's: every client shares it)."""
    return request.client.host if request.client is not None else None


# the page loads only its own files: no inline script, nothing from elsewhere
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


async def _bad_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BadRequest)
    return JSONResponse({"error": str(exc)}, status_code=exc.status)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    path, allowed = request.url.path, (exc.headers or {}).get("Allow", "")
    allowed = ", ".join(sorted(allowed.split(", ")))  # Starlette keeps them in a set
    message = {
        404: (
            f"no such path: {path} (the API: POST /translate, POST /score, GET /health, "
            "GET /info, GET /)"
        ),
        405: f"{request.method} is not allowed on {path}; allowed: {allowed}",
    }.get(exc.status_code, exc.detail)
    return JSONResponse({"error": message}, status_code=exc.status_code, headers=exc.headers)


async def _server_error(request: Request, exc: Exception) -> Response:
    """Anything unexpected: logged with its traceback, answered as JSON; the server carries on."""
    log.error("error in %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse({"error": f"internal error: {type(exc).__name__}"}, status_code=500)


# --- the command -----------------------------------------------------------------------------


def load_app(cfg: ServeRunConfig) -> Starlette:
    """Load the checkpoint once and build the app around it."""
    ckpts = [load_checkpoint(path) for path in cfg.ckpts]
    translator = Translator.from_command(cfg, cfg.decode, cfg.device, ckpts)
    translator.warm_up()  # the first request is answered as fast as the next ones
    # an ensemble is described by its first member (data, languages, step), with every member's
    # path under "ensemble" and the attention it shows
    info = describe_model(translator, ckpts[0].config, ckpts[0].payload)
    if len(ckpts) > 1:
        info["ensemble"] = [str(c.path) for c in ckpts]
        info.update(ensemble_attention(translator, ckpts, cfg.attention_member))
    return create_app(translator, cfg, info)


def ensemble_attention(translator: Translator, ckpts: list[Checkpoint], shown: str | int) -> dict:
    """What /info says of the attention an ensemble's answers carry (`ensemble_attention`, see
    nmt/models/ensemble.py): "ensemble_attention" {"shown": "mean" or the member's index from 0,
    "members": K, and for the mean "averaged": the members with attention, the ones it averages},
    and "attention_maps" for those maps rather than the first member's: the mean is one map (each
    member's layers and heads are averaged first), a member's are its own layers and heads."""
    maps = [describe_model(translator, c.config, c.payload)["attention_maps"] for c in ckpts]
    if shown == "mean":
        averaged = sum(m is not None for m in maps)
        one = {"layers": 1, "heads": 1} if averaged else None
        return {
            "ensemble_attention": {"shown": "mean", "members": len(ckpts), "averaged": averaged},
            "attention_maps": one,
        }
    index = int(shown) % len(ckpts)  # ensemble_attention=-1: the last member
    return {
        "ensemble_attention": {"shown": index, "members": len(ckpts)},
        "attention_maps": maps[index],
    }


def listen(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: any free port), so the real address is known before serving."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise NMTError(f"cannot listen on {host}:{port}: {err.strerror or err}") from err
    sock.listen(2048)
    return sock


def decode_threads(cfg: ServeRunConfig) -> int:
    """Torch threads for decoding on a CPU: `cfg.threads`, or one fewer than the cores. The event
    loop (HTTP parsing, JSON) runs beside the decode; with every core decoding, the two take turns
    for the cores and for the GIL (on 2 cores, docs/serve.md: 447.8 sentences/s with one
    decoding thread against 320.6 with two)."""
    return cfg.threads or max(1, (os.cpu_count() or 2) - 1)


def serve_main(cfg: ServeRunConfig) -> None:
    import torch
    import uvicorn

    torch.set_num_threads(decode_threads(cfg))
    # the event loop shares the GIL with the decode worker and the threads that check heavy
    # requests (spelling banned phrases is Python): a switch every millisecond rather than
    # Python's 5 lets it answer (/health, the page) within milliseconds meanwhile
    sys.setswitchinterval(0.001)
    app = load_app(cfg)
    # what is loaded lives as long as the server: out of the collector's way. A full collection
    # otherwise walks it, ~80 ms holding the GIL with a model and its libraries loaded, whenever
    # a request allocates much (spelling 64 long banned phrases: /health waited that long)
    gc.freeze()
    sock = listen(cfg.host, cfg.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"nmt-serve: listening on http://{shown}:{port}/ (Ctrl-C stops)", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
