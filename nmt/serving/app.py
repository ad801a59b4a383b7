"""nmt-serve: a checkpoint behind an HTTP API and a page that shows its attention.

    POST /translate  {"text": "..."} or {"texts": [...]} and options: nmt's own JSON
                     (nmt/serving/native.py)
    POST /score      {"text": ..., "translation": ...} or {"texts": [...], "translations": [...]}:
                     what the model thinks of given translations (nmt/serving/score.py)
    GET  /health     {"status": "ok"}
    GET  /info       the model, its languages, vocabularies, decoding defaults, limits
                     (nmt/serving/info.py)
    GET  /           the page (nmt/serving/web/: plain HTML, CSS and JS, no build step)

This module is the route table, the error handlers, the app's life and the command. Every bad
request is answered with a 4xx status and {"error": "..."} (docs/serve.md has the request and
response shapes and the table of errors). Each API shape is a module that reads its JSON into
one request and writes its answers; `nmt.serving.server.Server` admits, queues and translates
them, with no event-loop time spent on heavy work.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import socket
import sys
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from nmt.checkpoint import Checkpoint, load_checkpoint
from nmt.errors import NMTError
from nmt.run_config import ServeRunConfig
from nmt.serving import deepl, libretranslate, native, origins, score
from nmt.serving.files import Files
from nmt.serving.http import BadRequest
from nmt.serving.info import describe, limits, served
from nmt.serving.keys import Keys
from nmt.serving.models import Model, Models
from nmt.serving.server import Server
from nmt.translation.translator import Translator
from nmt.translation.warm_up import warm_up

WEB = Path(__file__).resolve().parent / "web"
log = logging.getLogger(__name__)
# the routes GET / and the 404 message name
API = "POST /translate, POST /score, GET /health, GET /info, GET /"


def create_app(
    translator: Translator, cfg: ServeRunConfig, info: dict, keys: Keys | None = None
) -> Starlette:
    """The ASGI app of one model already loaded (`cfg.ckpt`'s); `info` is what GET /info says
    of it (`nmt.serving.info.describe`)."""
    model = Model.read(cfg.ckpts)
    models = Models([model], partial(load_server, cfg), cfg)
    models.add_loaded(model, Server(translator, cfg))
    return build_app(models, cfg, info, keys or Keys.read(cfg.api_keys, cfg.key_period_days))


def build_app(models: Models, cfg: ServeRunConfig, info: dict, keys: Keys) -> Starlette:
    """The ASGI app of `models` (the first loaded), answering the keys of `keys`."""
    info = {**info, "limits": limits(cfg), **served(models, keys)}
    files = Files()  # documents translated through an API shape, until fetched

    async def model_info(request: Request) -> Response:
        return JSONResponse({**info, "batching": models.loaded[0].batcher.counts()})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        models.close()

    app = Starlette(
        routes=[
            Route("/", page, methods=["GET"]),
            Route("/translate", partial(native.translate, models, keys), methods=["POST"]),
            Route("/score", partial(score.score, models, keys), methods=["POST"]),
            Route("/health", health, methods=["GET"]),
            Route("/info", model_info, methods=["GET"]),
            *libretranslate.routes(models, keys, files),
            *deepl.routes(models, keys, files),
            Mount("/static", StaticFiles(directory=WEB), name="static"),
        ],
        exception_handlers={
            BadRequest: _bad_request,
            HTTPException: _http_error,
            Exception: _server_error,
        },
        middleware=origins.middleware(cfg.cors_origins),
        lifespan=lifespan,
    )
    app.state.models, app.state.batcher = models, models.loaded[0].batcher
    return app


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def page(request: Request) -> Response:
    return FileResponse(WEB / "index.html", headers=PAGE_HEADERS)


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
        404: f"no such path: {path} (the API: {API})",
        405: f"{request.method} is not allowed on {path}; allowed: {allowed}",
    }.get(exc.status_code, exc.detail)
    return JSONResponse({"error": message}, status_code=exc.status_code, headers=exc.headers)


async def _server_error(request: Request, exc: Exception) -> Response:
    """Anything unexpected: logged with its traceback, answered as JSON; the server carries on."""
    log.error("error in %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse({"error": f"internal error: {type(exc).__name__}"}, status_code=500)


# --- the command -----------------------------------------------------------------------------


def load_app(cfg: ServeRunConfig) -> Starlette:
    """Read every model's languages, load the first `max_loaded` models, and build the app
    around them: a broken checkpoint or keys file fails here, before the server listens."""
    keys = Keys.read(cfg.api_keys, cfg.key_period_days)
    given = ([cfg.ckpts] if cfg.ckpt is not None else []) + [[path] for path in cfg.models]
    models = Models([Model.read(ckpts) for ckpts in given], partial(load_server, cfg), cfg)
    server, ckpts = _load(cfg, models.models[0])
    models.add_loaded(models.models[0], server)
    for model in models.models[1 : cfg.max_loaded]:
        models.add_loaded(model, load_server(cfg, model))
    return build_app(models, cfg, describe(server.translator, ckpts, cfg), keys)


def load_server(cfg: ServeRunConfig, model: Model) -> Server:
    """`model` loaded and warmed up behind a server of its own."""
    return _load(cfg, model)[0]


def _load(cfg: ServeRunConfig, model: Model) -> tuple[Server, list[Checkpoint]]:
    """The model of `ckpt=` is read with its ensemble settings and src_lang; each of
    `models=` alone, with its defaults."""
    ckpts = [load_checkpoint(path) for path in model.ckpts]
    if cfg.ckpt is not None and list(model.ckpts) == cfg.ckpts:
        translator = Translator.from_command(cfg, cfg.decode, cfg.device, ckpts)
    else:
        translator = Translator.from_checkpoints(ckpts, cfg.decode, cfg.device)
    warm_up(translator)  # the first request is answered as fast as the next ones
    return Server(translator, cfg, model.ckpts[0]), ckpts


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
