"""nmt-serve: a checkpoint behind an HTTP API and a page that shows its attention.

    POST /translate  {"text": "..."} or {"texts": [...]}, optional "decode": {...}, "attention"
    GET  /health     {"status": "ok"}
    GET  /info       the model, its languages, vocabularies, decoding defaults, step, valid BLEU
    GET  /           the page (nmt/web/: plain HTML, CSS and JS, no build step)

Every bad request is answered with a 4xx status and {"error": "..."}; see docs/serve.md for the
request and response shapes and the table of errors. Requests are decoded in batches by
`nmt.batching.Batcher`, in one worker thread, so the event loop stays responsive.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
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
from torch import Tensor

from nmt.batching import Batcher
from nmt.checkpoint import load_checkpoint, restore_model
from nmt.config import DecodeConfig, LengthPenalty, RNNConfig, Strategy, TransformerConfig
from nmt.data import clean
from nmt.device import resolve_device
from nmt.errors import NMTError
from nmt.run_config import ServeRunConfig, TrainRunConfig, flatten
from nmt.translate import Translation, Translator

WEB = Path(__file__).resolve().parent / "web"
REQUEST_KEYS = ("attention", "decode", "text", "texts")
# what a request may change; batch_size, max_len_cap and max_src_pieces are the server's limits
DECODE_KEYS = (
    "strategy", "beam_size", "n_best", "length_penalty", "alpha", "min_len_a", "min_len_b",
    "max_len_a", "max_len_b", "no_repeat_ngram", "temperature", "top_k", "top_p", "seed",
)  # fmt: skip
DECODE_CHOICES = {"strategy": Strategy, "length_penalty": LengthPenalty}
# the values a request may give: wide enough for any sensible use, narrow enough that no
# arithmetic in search overflows (beam_size and n_best: 1..max_beam, a setting of the server)
DECODE_RANGES = {
    "alpha": (0, 10),
    "min_len_a": (-1000, 1000),
    "min_len_b": (-1_000_000, 1_000_000),
    "max_len_a": (-1000, 1000),
    "max_len_b": (-1_000_000, 1_000_000),
    "no_repeat_ngram": (0, 1000),
    "temperature": (0.001, 1000),
    "top_k": (0, 2**31 - 1),
    "top_p": (0.000001, 1),
    "seed": (0, 2**31 - 1),
}
ATTENTION_DECIMALS = 4  # attention weights are rounded to this many decimals on the wire
# most attention weights returned for one text (all its hypotheses, layers and heads), about 16 MB
# of JSON: a 1,000-piece source with a long n-best list would otherwise give gigabytes
MAX_ATTENTION_WEIGHTS = 2_000_000
log = logging.getLogger("nmt.serve")


class BadRequest(Exception):
    """A request the server refuses: answered with `status` and {"error": message}."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass
class Job:
    texts: list[str]
    decode: DecodeConfig
    attention: bool


# --- reading a request -----------------------------------------------------------------------


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it exceeds `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"request body of {declared} bytes is over the limit of {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_request(body: bytes, cfg: ServeRunConfig) -> Job:
    """Check a /translate body against the contract; each problem is one BadRequest."""
    try:
        data = json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise BadRequest(400, f"invalid JSON: {err}") from None
    if not isinstance(data, dict):
        raise BadRequest(422, 'the body must be a JSON object, e.g. {"text": "Guten Tag."}')
    _check_keys(data, REQUEST_KEYS, "")
    if ("text" in data) == ("texts" in data):
        raise BadRequest(422, 'give "text" (a string) or "texts" (a list of strings), not both')
    if "text" in data:
        if not isinstance(data["text"], str):
            raise BadRequest(422, f'"text" must be a string, not {_kind(data["text"])}')
        texts = [data["text"]]
    else:
        texts = data["texts"]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise BadRequest(422, '"texts" must be a list of strings')
        if len(texts) > cfg.max_texts:
            raise BadRequest(413, f"{len(texts)} texts: this server takes at most {cfg.max_texts}")
    chars = sum(len(t) for t in texts)
    if chars > cfg.max_chars:
        raise BadRequest(413, f"{chars} characters: this server takes at most {cfg.max_chars}")
    if not any(clean(t) for t in texts):
        raise BadRequest(422, "nothing to translate: the text is empty or blank")
    attention = data.get("attention", False)
    if not isinstance(attention, bool):
        raise BadRequest(422, f'"attention" must be true or false, not {_kind(attention)}')
    return Job(texts, request_decode(cfg.decode, data.get("decode", {}), cfg.max_beam), attention)


def request_decode(defaults: DecodeConfig, given: object, max_beam: int) -> DecodeConfig:
    """The server's decoding defaults with a request's "decode" object applied and validated."""
    if not isinstance(given, dict):
        raise BadRequest(422, f'"decode" must be an object, not {_kind(given)}')
    _check_keys(given, DECODE_KEYS, "decode.")
    ranges = {**DECODE_RANGES, "beam_size": (1, max_beam), "n_best": (1, max_beam)}
    changes = {}
    for key, value in given.items():
        if key in DECODE_CHOICES:
            choices = [c.value for c in DECODE_CHOICES[key]]
            if value not in choices:
                raise BadRequest(422, f"decode.{key}={value!r}: expected one of {choices}")
            value = DECODE_CHOICES[key](value)
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadRequest(422, f"decode.{key} must be a number, not {_kind(value)}")
        elif isinstance(getattr(defaults, key), int) and not isinstance(value, int):
            raise BadRequest(422, f"decode.{key} must be an integer, not {value!r}")
        elif not ranges[key][0] <= value <= ranges[key][1]:  # false for NaN too
            low, high = ranges[key]
            raise BadRequest(422, f"decode.{key}={value!r} is out of range: {low} to {high}")
        changes[key] = value
    strategy = changes.get("strategy", defaults.strategy)
    if "n_best" not in changes:  # the default n-best follows a strategy or beam the request sets
        if strategy == Strategy.greedy:
            changes["n_best"] = 1
        elif strategy == Strategy.beam:
            changes["n_best"] = min(defaults.n_best, changes.get("beam_size", defaults.beam_size))
    try:
        return dataclasses.replace(defaults, **changes)
    except NMTError as err:
        raise BadRequest(422, str(err)) from None


def _check_keys(data: dict, valid: tuple[str, ...], prefix: str) -> None:
    unknown = ", ".join(prefix + k for k in sorted(set(data) - set(valid)))
    if unknown:
        raise BadRequest(422, f"unknown key(s) {unknown}; valid: {', '.join(valid)}")


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )


# --- answering ---------------------------------------------------------------------------------


def _number(x: float) -> float | None:
    return x if math.isfinite(x) else None  # JSON has no -inf


def _weights(maps: Tensor) -> list:
    """Maps (T, L, h, S) as nested lists [L][h][T][S], rounded to ATTENTION_DECIMALS."""
    scale = 10.0**ATTENTION_DECIMALS
    return (maps.permute(1, 2, 0, 3).double() * scale).round().div(scale).tolist()


def translation_json(t: Translation, attention: bool) -> dict:
    """One translation as the API returns it (see docs/serve.md)."""
    out = {
        "source": t.source,
        "text": t.text,
        "score": _number(t.score),
        "nbest": [{"text": text, "score": _number(score)} for text, score in t.nbest],
    }
    if attention:
        maps = [m for _, m in t.nbest_maps]
        weights = sum(m.numel() for m in maps if m is not None)
        if not t.src_pieces or any(m is None for m in maps):
            out["attention"] = None  # a blank text, or a model without attention
        elif weights > MAX_ATTENTION_WEIGHTS:
            out["attention"] = None
            out["attention_omitted"] = (
                f"{weights} attention weights, more than the {MAX_ATTENTION_WEIGHTS} this server "
                "returns for one text"
            )
        else:
            out["attention"] = {
                "src_pieces": t.src_pieces,
                "hypotheses": [
                    {"tgt_pieces": pieces, "weights": _weights(m)} for pieces, m in t.nbest_maps
                ],
            }
    return out


def describe_model(translator: Translator, run: TrainRunConfig, payload: dict) -> dict:
    """What GET /info reports: the checkpoint's model, data, vocabularies and validation."""
    model = run.model
    if isinstance(model, TransformerConfig):
        arch = {"scorer": "scaled_dot", "heads": model.heads, "d_model": model.d_model}
        maps = (model.decoder_layers, model.heads)
    else:
        assert isinstance(model, RNNConfig)
        arch = {
            "scorer": model.attention.value,
            "decoder": model.decoder.value,
            "cell": model.cell.value,
            "hidden_size": model.hidden_size,
            "bidirectional": model.bidirectional,
        }
        heads = model.heads if model.attention.value == "multihead" else 1
        maps = None if model.attention.value == "none" else (1, heads)
    metrics = payload.get("metrics") or {}
    return {
        "family": model.arch,
        **arch,
        "encoder_layers": model.encoder_layers,
        "decoder_layers": model.decoder_layers,
        "attention_maps": None if maps is None else {"layers": maps[0], "heads": maps[1]},
        "parameters": sum(p.numel() for p in translator.model.parameters()),
        "languages": {"source": run.data.src_lang, "target": run.data.tgt_lang},
        "data": run.data.name,
        "vocabulary": {
            "source": len(translator.vocabs.src),
            "target": len(translator.vocabs.tgt),
            "joint": translator.vocabs.joint,
        },
        "decode": flatten(translator.decode),
        "step": payload.get("step"),
        "validation": {
            "bleu": _number(metrics["bleu"]) if "bleu" in metrics else None,
            "loss": _number(metrics["loss"]) if "loss" in metrics else None,
            "decode": run.decode.describe() if "bleu" in metrics else None,
        },
        "device": str(translator.device),
    }


def decode_batch(translator: Translator, key: object, items: list[tuple]) -> list[dict]:
    """The batcher's work, in its worker thread: items are (text, decode, attention) of requests
    with the same decode settings; one decode for all of them."""
    decode = items[0][1]
    attention = any(want for _, _, want in items)
    worker = Translator(
        translator.model, translator.vocabs, decode, translator.device, translator.lexicon
    )
    results = worker.translate_full([text for text, _, _ in items], attention)
    return [translation_json(t, want) for t, (_, _, want) in zip(results, items)]


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
        try:
            results = await batcher.submit(key, [(t, job.decode, job.attention) for t in job.texts])
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
    device = resolve_device(cfg.device)
    model = restore_model(ckpt, device)
    translator = Translator(model, ckpt.vocabs, cfg.decode, device, ckpt.lexicon)
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

    logging.basicConfig(level=logging.INFO, format="nmt-serve: %(message)s")
    app = load_app(cfg)
    sock = listen(cfg.host, cfg.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"nmt-serve: listening on http://{shown}:{port}/ (Ctrl-C stops)", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
