"""nmt-serve: a checkpoint behind an HTTP API and a page that shows its attention.

    POST /translate  {"text": "..."} or {"texts": [...]}, optional "decode": {...}, "attention",
                     "prefix" (or "prefixes"), "beam_tree"
    GET  /health     {"status": "ok"}
    GET  /info       the model, its languages, vocabularies, decoding defaults, step, valid BLEU
    GET  /           the page (nmt/serving/web/: plain HTML, CSS and JS, no build step)

Every bad request is answered with a 4xx status and {"error": "..."}; see docs/serve.md for the
request and response shapes and the table of errors, and `nmt/serving/protocol.py` for the code
that reads and writes them. Requests are decoded in batches by
`nmt.serving.batching.Batcher`, in one worker thread, so the event loop stays responsive.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from nmt.checkpoint import load_checkpoint
from nmt.config import DecodeConfig, Strategy
from nmt.errors import NMTError
from nmt.run_config import ServeRunConfig, flatten
from nmt.serving.batching import Batcher
from nmt.serving.protocol import (
    BadRequest,
    describe_model,
    parse_request,
    read_body,
    translation_json,
)
from nmt.translate import Translator

WEB = Path(__file__).resolve().parent / "web"
log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Item:
    """One text of a request, as the batcher queues it."""

    text: str
    decode: DecodeConfig
    attention: bool
    prefix: str = ""
    tree: bool = False


def decode_batch(translator: Translator, key: object, items: list[Item]) -> list[dict]:
    """The batcher's work, in its worker thread: the items of requests with the same decode
    settings; one decode for all of them, with those settings."""
    results = translator.translate_full(
        [item.text for item in items],
        any(item.attention for item in items),
        decode=items[0].decode,
        prefixes=[item.prefix for item in items],
        tree=any(item.tree for item in items),
    )
    return [translation_json(t, item.attention, item.tree) for t, item in zip(results, items)]


def batch_key(decode: DecodeConfig, job_id: int) -> tuple:
    """Requests with equal keys are decoded together. Sampling draws depend on the batch, so a
    sampling request is never mixed with others: then `seed` gives the same draws every time."""
    settings = tuple(sorted(flatten(decode).items()))
    return (settings, job_id if decode.strategy == Strategy.sample else None)


def create_app(translator: Translator, cfg: ServeRunConfig, info: dict) -> Starlette:
    """The ASGI app; `info` is what GET /info answers (see `describe_model`)."""

    def run(key: object, items: list[tuple]) -> list[dict]:
        return decode_batch(translator, key, items)

    batcher = Batcher(run, cfg.batch_wait_ms, cfg.max_batch)
    counter = iter(range(1, sys.maxsize))
    # a text of max_chars characters, each escaped as \\uXXXX in the worst case, and some room
    body_limit = 6 * cfg.max_chars + 65536
    limits = {k: getattr(cfg, k) for k in ("max_chars", "max_texts", "max_beam", "max_batch")}
    info = {**info, "limits": {**limits, "batch_wait_ms": cfg.batch_wait_ms}}

    async def translate(request: Request) -> Response:
        job = parse_request(await read_body(request, body_limit), cfg)
        key = batch_key(job.decode, next(counter))
        prefixes = job.prefixes or [""] * len(job.texts)
        try:
            # a prefix the model cannot take fails this request here, not the batch it would join
            translator.check_prefixes(job.texts, prefixes, job.decode)
            items = [
                Item(text, job.decode, job.attention, prefix, job.tree)
                for text, prefix in zip(job.texts, prefixes)
            ]
            results = await batcher.submit(key, items)
        except NMTError as err:
            raise BadRequest(422, str(err)) from None
        return JSONResponse({"translations": results, "decode": flatten(job.decode)})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def model_info(request: Request) -> Response:
        counts = {k: getattr(batcher, k) for k in ("decodes", "requests", "items")}
        return JSONResponse({**info, "batching": counts})

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
        404: f"no such path: {path} (the API: POST /translate, GET /health, GET /info, GET /)",
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
    ckpt = load_checkpoint(cfg.ckpt)
    translator = Translator.from_checkpoint(ckpt, cfg.decode, cfg.device)
    return create_app(translator, cfg, describe_model(translator, ckpt.config, ckpt.payload))


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


def serve_main(cfg: ServeRunConfig) -> None:
    import uvicorn

    app = load_app(cfg)
    sock = listen(cfg.host, cfg.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"nmt-serve: listening on http://{shown}:{port}/ (Ctrl-C stops)", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
