"""LibreTranslate's API, under /libretranslate/: the shape that Mastodon, Weblate, Nextcloud,
Open WebUI, the Calibre plugin, Zotero's translators and the `libretranslatepy` and
`deep-translator` clients speak, given the base URL http://HOST:PORT/libretranslate/.

    POST /translate   q (a text or a list), source (a code or "auto"), target, format
                      (text | html), alternatives, api_key
                      -> {"translatedText": ..., "detectedLanguage": {...}, "alternatives": [...]}
    POST /detect      q -> [{"language": "de", "confidence": 97.0}]
    GET  /languages   [{"code": "de", "name": "German", "targets": ["en"]}]
    GET  /frontend/settings, GET /health, GET /spec

Parameters are read as LibreTranslate reads them: from a JSON body, a form body or the query
string. Errors are {"error": message} with LibreTranslate's statuses: 400 for a missing
parameter, an unsupported language or a request over a limit, 403 for a missing or bad key,
429 for a key over its limits, 503 (with Retry-After) when the queue is full. A request is
nmt's one `Request` over the same models, admission and text loop as nmt's own API
(`nmt.serving.models`); what LibreTranslate has and nmt does not (file translation, suggestions)
is answered 400 or absent, as docs/apis.md says.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any
from urllib.parse import parse_qsl

from starlette.datastructures import UploadFile
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from nmt.config import TextFormat, TextOptions
from nmt.documents.blocks import BlockResult
from nmt.errors import NMTError
from nmt.language_codes import name
from nmt.serving.admission import request_decode
from nmt.serving.batching import QueueFull
from nmt.serving.files import SERVED, Files
from nmt.serving.files import translate_file as translate_file_as
from nmt.serving.http import (
    BadRequest,
    body_limit,
    busy,
    client_of,
    read_body,
    read_form,
    read_object,
)
from nmt.serving.keys import ANONYMOUS, KeyRefused, Keys
from nmt.serving.models import Models, Unserved
from nmt.serving.server import Asked
from nmt.translation.request import Request, Segment
from nmt.translation.translator import Translation

PREFIX = "/libretranslate"
AUTO = "auto"
FORMATS = ("text", "html")
DOWNLOAD = "libretranslate-download"  # the route's name, for the URL a file is fetched from
KEY_STATUS = {"missing": 403, "invalid": 403, "rate": 429, "quota": 429}


def routes(models: Models, keys: Keys, files: Files) -> list[BaseRoute]:
    """The shape's routes, under PREFIX (`files`: the translated files waiting)."""

    def bound(handler):  # noqa: ANN001, ANN202 - a route's endpoint with the server's parts
        async def endpoint(request: HTTPRequest) -> Response:
            try:
                return await handler(models, keys, request)
            except BadRequest as err:  # LibreTranslate answers every refusal 400
                return error(400 if err.status in (413, 422) else err.status, str(err))

        return endpoint

    return [
        Route(f"{PREFIX}/translate", bound(translate), methods=["POST"]),
        Route(f"{PREFIX}/translate_file", bound(partial(translate_file, files)), methods=["POST"]),
        Route(
            f"{PREFIX}/download_file/{{file_id}}",
            bound(partial(download, files)),
            methods=["GET"],
            name=DOWNLOAD,
        ),  # fmt: skip
        Route(f"{PREFIX}/detect", bound(detect), methods=["POST"]),
        Route(f"{PREFIX}/languages", bound(languages), methods=["GET"]),
        Route(f"{PREFIX}/frontend/settings", bound(settings), methods=["GET"]),
        Route(f"{PREFIX}/health", bound(health), methods=["GET"]),
        Route(f"{PREFIX}/spec", bound(spec), methods=["GET"]),
    ]


def error(status: int, message: str, headers: dict | None = None) -> Response:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def refusal(err: QueueFull | NMTError, source: str, target: str) -> Response:
    """A translation refused as LibreTranslate answers it: a language asked for by name that no
    model serves is "X is not supported"; a full queue 503 with Retry-After; the rest 400."""
    if isinstance(err, QueueFull):
        return busy(err)
    if isinstance(err, Unserved) and err.language is not None and err.language in (source, target):
        return error(400, f"{err.language} is not supported")
    return error(400, str(err))


async def translate(models: Models, keys: Keys, request: HTTPRequest) -> Response:
    """POST /translate: q translated from source into target (see the module's notes)."""
    cfg = models.cfg
    params = await read_params(request, cfg.max_chars)
    q = params.get("q")
    for key in ("q", "source", "target"):
        if params.get(key) in (None, ""):
            return error(400, f"Invalid request: missing {key} parameter")
    many = isinstance(q, list)
    texts = q if many else [q]
    if not all(isinstance(t, str) for t in texts):
        return error(400, "Invalid request: q must be a text or a list of texts")
    if len(texts) > cfg.max_texts:
        return error(400, f"Invalid request: {len(texts)} texts, more than {cfg.max_texts}")
    chars = sum(len(t) for t in texts)
    if chars > cfg.max_chars:
        limit = cfg.max_chars
        return error(400, f"Invalid request: request ({chars}) exceeds text limit ({limit})")
    fmt = params.get("format") or "text"
    if fmt not in FORMATS:
        return error(400, f"Invalid request: format must be text or html, not {str(fmt)[:40]!r}")
    alternatives = _count(params.get("alternatives", 0))
    refused = _admit(keys, params.get("api_key"), chars)
    if refused is not None:
        return refused
    source, target = str(params["source"]), str(params["target"])
    try:
        detected = models.detect(texts) if source == AUTO else None
        src = detected.language if detected else None if source == AUTO else source
        asked = _asked(texts, src, target, fmt, alternatives, cfg)
        answers, _ = await models.translate(asked, LibreAnswer(alternatives), client_of(request))
    except (QueueFull, NMTError) as err:
        return refusal(err, source, target)
    out: dict[str, Any] = {"translatedText": [a[0] for a in answers] if many else answers[0][0]}
    if alternatives:
        out["alternatives"] = [a[1] for a in answers] if many else answers[0][1]
    if source == AUTO:
        found = _detected(detected)
        out["detectedLanguage"] = [found] * len(texts) if many else found
    return JSONResponse(out)


async def translate_file(files: Files, models: Models, keys: Keys, request: HTTPRequest):
    """POST /translate_file (a form: file, source, target, api_key): the file translated and
    kept; the answer is the URL it is fetched from."""
    form = await read_form(request, body_limit(models.cfg.max_chars))
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        return error(400, "Invalid request: missing file parameter")
    for key in ("source", "target"):
        if not form.get(key):
            return error(400, f"Invalid request: missing {key} parameter")
    data = await upload.read()
    key = form.get("api_key")
    refused = _admit(keys, key, 0)  # the key checked now, its characters once they are known
    if refused is not None:
        return refused
    source, target = str(form["source"]), str(form["target"])
    try:
        done = await translate_file_as(
            models, data, upload.filename or "file.txt", None if source == AUTO else source,
            target, client_of(request), partial(keys.admit, key if isinstance(key, str) else None),
        )  # fmt: skip
    except KeyRefused as refused:
        return error(KEY_STATUS[refused.reason], str(refused))
    except (QueueFull, NMTError) as err:
        return refusal(err, source, target)
    held = files.add(ANONYMOUS, done)
    url = str(request.url_for(DOWNLOAD, file_id=held.file_id))
    return JSONResponse({"translatedFileUrl": url})


async def download(files: Files, models: Models, keys: Keys, request: HTTPRequest) -> Response:
    """GET /download_file/ID: a translated file, by the id its URL carries."""
    held = files.get(request.path_params["file_id"])
    done = held.translated
    headers = {"Content-Disposition": f'attachment; filename="{done.name}"'}
    return Response(done.data, media_type=done.media_type, headers=headers)


def _asked(
    texts: list[str], src: str | None, tgt: str, fmt: str, alternatives: int, cfg: Any
) -> Asked:
    """The one Request of a /translate call: the server's decode settings, with a beam wide
    enough for the alternatives asked."""
    decode = cfg.decode
    if alternatives:
        wide = {"n_best": alternatives + 1, "beam_size": max(decode.beam_size, alternatives + 1)}
        decode = request_decode(decode, wide, cfg.max_beam)
    request = Request(list(texts), decode, tgt_lang=tgt, src_lang=src, noun="text")
    options = TextOptions(TextFormat(fmt), cfg.split_sentences, False, list(cfg.protect),
                          list(cfg.protect_patterns))  # fmt: skip
    return Asked(request, options)


@dataclasses.dataclass(frozen=True)
class LibreAnswer:
    """A text's answer: (its translation, its alternatives: the other distinct n-best texts)."""

    alternatives: int

    def translation(self, t: Translation, segment: Segment) -> tuple[str, list[str]]:
        others = [text for text, _ in t.nbest if text != t.text]
        return t.text, list(dict.fromkeys(others))[: self.alternatives]

    def document(self, source: str, result: BlockResult) -> tuple[str, list[str]]:
        return result.text, []  # a text of several sentences has one translation

    def memory(self, source: str, text: str) -> tuple[str, list[str]]:
        return text, []  # the memory has one translation


async def detect(models: Models, keys: Keys, request: HTTPRequest) -> Response:
    """POST /detect: q's language, with the confidence (0-100) LibreTranslate reports."""
    params = await read_params(request, models.cfg.max_chars)
    q = params.get("q")
    if q in (None, "") or not isinstance(q, str):
        return error(400, "Invalid request: missing q parameter")
    refused = _admit(keys, params.get("api_key"), len(q))
    if refused is not None:
        return refused
    try:
        found = models.detect([q])
    except Unserved as err:  # LibreTranslate names the language all the same
        return JSONResponse([{"confidence": 0.0, "language": err.language}])
    return JSONResponse([_detected(found)] if found else [])


def _detected(guess: Any) -> dict:
    if guess is None:
        return {"confidence": 0.0, "language": None}
    return {"confidence": round(100 * guess.confidence, 1), "language": guess.language}


async def languages(models: Models, keys: Keys, request: HTTPRequest) -> Response:
    """GET /languages: each source language, its name and the targets it reaches."""
    reach = models.languages()
    every = list(dict.fromkeys([*reach, *models.target_tags()]))
    return JSONResponse(
        [{"code": code, "name": name(code), "targets": reach.get(code, [])} for code in every]
    )


async def settings(models: Models, keys: Keys, request: HTTPRequest) -> Response:
    """GET /frontend/settings: what LibreTranslate's page and some clients read first."""
    sources, targets = list(models.languages()), models.target_tags()
    return JSONResponse({
        "charLimit": models.cfg.max_chars,
        "frontendTimeout": 500,
        "apiKeys": keys.required,
        "keyRequired": keys.required,
        "suggestions": False,
        "filesTranslation": True,
        "supportedFilesFormat": list(SERVED),
        "language": {
            "source": {"code": AUTO, "name": "Auto Detect"},
            "target": {"code": targets[0], "name": name(targets[0])} if targets else None,
        },
        "sources": sources,
    })  # fmt: skip


async def health(models: Models, keys: Keys, request: HTTPRequest) -> Response:
    return JSONResponse({"status": "ok"})


async def spec(models: Models, keys: Keys, request: HTTPRequest) -> Response:
    """GET /spec: the paths this shape answers, as a small OpenAPI document."""
    paths = {
        f"{PREFIX}/translate": {"post": {"summary": "Translate text"}},
        f"{PREFIX}/detect": {"post": {"summary": "Detect the language of a text"}},
        f"{PREFIX}/languages": {"get": {"summary": "Languages and their targets"}},
        f"{PREFIX}/frontend/settings": {"get": {"summary": "Settings for a front end"}},
    }
    return JSONResponse({"openapi": "3.0.0", "info": {"title": "nmt", "version": "1"},
                         "paths": paths})  # fmt: skip


async def read_params(request: HTTPRequest, max_chars: int) -> dict[str, Any]:
    """The request's parameters as LibreTranslate reads them: the query string, then a JSON or
    form body over it."""
    params: dict[str, Any] = dict(request.query_params)
    body = await read_body(request, body_limit(max_chars))
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if not body:
        return params
    if kind == "application/json":
        params.update(read_object(body, '{"q": "Guten Tag.", "source": "de", "target": "en"}'))
    elif kind in ("application/x-www-form-urlencoded", ""):
        try:
            params.update(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
        except UnicodeDecodeError:
            raise BadRequest(400, "Invalid request: the form is not UTF-8") from None
    else:
        raise BadRequest(400, f"Invalid request: a body of {kind} (send JSON or a form)")
    return params


def _count(value: Any) -> int:
    try:
        count = int(value)
    except (TypeError, ValueError):
        raise BadRequest(400, "Invalid request: alternatives must be a number") from None
    if not 0 <= count <= 15:
        raise BadRequest(400, "Invalid request: alternatives must be in 0..15")
    return count


def _admit(keys: Keys, key: Any, chars: int) -> Response | None:
    """None when `key` may make this request, else the refusal as LibreTranslate answers it."""
    try:
        keys.admit(key if isinstance(key, str) else None, chars)
    except KeyRefused as refused:
        message = {"missing": "Invalid API key", "invalid": "Invalid API key"}.get(
            refused.reason, str(refused)
        )
        return error(KEY_STATUS[refused.reason], message)
    return None
