"""DeepL's v2 API, at /v2/: the shape of the official `deepl` clients (Python, Node, .NET, ...)
and the tools built on them, given the server URL http://HOST:PORT.

    POST /v2/translate    text (a list), target_lang, source_lang, tag_handling, split_sentences,
                          preserve_formatting, formality, glossary_id
                          -> {"translations": [{"detected_source_language", "text",
                              "billed_characters"}]}
    GET  /v2/languages    ?type=source|target -> [{"language": "DE", "name": "German"}]
    GET  /v2/usage        {"character_count": N, "character_limit": M}
    /v2/glossaries        create (POST), list (GET), get, entries, delete (/v2/glossaries/ID)
    GET  /v2/glossary-language-pairs

The key comes in the `Authorization: DeepL-Auth-Key KEY` header (or the older `auth_key`
parameter). Errors are {"message": ...} with DeepL's statuses: 400 a bad parameter, 403 a bad
key, 404 no such glossary, 413 a request over the server's limits, 429 too many requests, 456
a key's quota spent, 503 the queue full. DeepL's codes (`DE`, `EN-US`, `PT-BR`, `ZH-HANS`) reach
the models' own through the one table (`nmt.language_codes`); a regional target (`EN-US`)
is the model's language (English) when it has no such variant. `tag_handling` html or xml is
nmt's markup path; `split_sentences=0` translates each text as one sentence; a glossary's
entries found in a text become that text's terminology constraints (the text is then searched
as one sentence of plain text). `formality` more/less is refused (no model here has a formal
register), its `prefer_` forms and `preserve_formatting`, `context`, `model_type` are accepted
and change nothing (docs/apis.md).
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import uuid
from functools import partial
from typing import Any
from urllib.parse import parse_qsl

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from nmt.config import TextFormat, TextOptions
from nmt.documents.blocks import BlockResult
from nmt.errors import NMTError
from nmt.language_codes import name, tag
from nmt.serving.batching import QueueFull
from nmt.serving.files import Files, translate_file
from nmt.serving.glossaries import Glossaries, Glossary, read_entries
from nmt.serving.http import BadRequest, body_limit, client_of, read_body, read_form, read_object
from nmt.serving.keys import KeyRefused, Keys
from nmt.serving.models import Models, Unserved
from nmt.serving.server import Asked
from nmt.translation.request import Request, Segment
from nmt.translation.translator import Translation

KEY_STATUS = {"missing": 403, "invalid": 403, "rate": 429, "quota": 456}
TAG_FORMATS = {"html": TextFormat.html, "xml": TextFormat.xml}
# DeepL's regional targets, offered for a model's language without a region
REGIONS = {"en": ("EN-GB", "EN-US"), "pt": ("PT-BR", "PT-PT")}


@dataclasses.dataclass(frozen=True)
class Kept:
    """What the shape keeps for its clients between requests."""

    glossaries: Glossaries
    files: Files


def routes(models: Models, keys: Keys, files: Files) -> list[BaseRoute]:
    """The shape's routes under /v2/ (`files`: the translated documents waiting)."""
    kept = Kept(Glossaries(), files)

    def bound(handler):  # noqa: ANN001, ANN202 - a route's endpoint with the server's parts
        async def endpoint(request: HTTPRequest) -> Response:
            try:
                if handler is upload:  # a multipart body: the file and its fields
                    form = await read_form(request, body_limit(models.cfg.max_chars))
                    params = {k: v for k, v in form.multi_items()}
                else:
                    params = await read_params(request, models.cfg.max_chars)
                account = keys.account(_key(request, params))  # DeepL checks the key first
                return await handler(models, keys, kept, account, params, request)
            except BadRequest as err:
                return message(400 if err.status == 422 else err.status, str(err))
            except KeyRefused as refused:
                return message(KEY_STATUS[refused.reason], str(refused))

        return endpoint

    get_post, ids = ["GET", "POST"], "/v2/glossaries/{glossary_id}"
    return [
        Route("/v2/translate", bound(translate), methods=["POST"]),
        Route("/v2/languages", bound(languages), methods=get_post),
        Route("/v2/usage", bound(usage), methods=get_post),
        Route("/v2/glossaries", bound(glossary_list), methods=["GET"]),
        Route("/v2/glossaries", bound(glossary_create), methods=["POST"]),
        Route(ids, bound(glossary_get), methods=["GET"]),
        Route(ids, bound(glossary_delete), methods=["DELETE"]),
        Route(f"{ids}/entries", bound(glossary_entries), methods=["GET"]),
        Route("/v2/glossary-language-pairs", bound(glossary_pairs), methods=["GET"]),
        Route("/v2/document", bound(upload), methods=["POST"]),
        Route("/v2/document/{document_id}", bound(document_status), methods=["POST"]),
        Route("/v2/document/{document_id}/result", bound(document_result), methods=["POST"]),
    ]


def message(status: int, text: str, headers: dict | None = None) -> Response:
    return JSONResponse({"message": text}, status_code=status, headers=headers)


def refusal(err: QueueFull | NMTError) -> Response:
    """A translation refused as DeepL answers it: a language no model serves, a full queue
    (503 with Retry-After), any other value nmt cannot take (400)."""
    if isinstance(err, QueueFull):
        return message(503, str(err), {"Retry-After": str(err.retry_after)})
    if isinstance(err, Unserved):
        return message(400, f"Value for 'target_lang' or 'source_lang' not supported: {err}")
    return message(400, str(err))


# --- translating -------------------------------------------------------------------------------


async def translate(
    models: Models, keys: Keys, kept: Kept, account: str, params: dict,
    request: HTTPRequest,
) -> Response:  # fmt: skip
    """POST /v2/translate (see the module's notes)."""
    cfg = models.cfg
    texts = params.get("text")
    texts = [texts] if isinstance(texts, str) else texts
    if not texts or not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        return message(400, "Value for 'text' not supported: give one or more texts")
    target = params.get("target_lang")
    if not isinstance(target, str) or not target:
        return message(400, "Value for 'target_lang' not supported: it is required")
    if len(texts) > cfg.max_texts:
        return message(413, f"{len(texts)} texts: this server takes at most {cfg.max_texts}")
    chars = sum(len(t) for t in texts)
    if chars > cfg.max_chars:
        return message(413, f"{chars} characters: this server takes at most {cfg.max_chars}")
    formality = params.get("formality", "default")
    if formality in ("more", "less"):
        why = "nmt's models have no formal register; use prefer_more or prefer_less"
        return message(400, f"'formality' is not supported for target_lang {target}: {why}")
    source = params.get("source_lang") or None
    glossary = None
    if params.get("glossary_id"):
        glossary = kept.glossaries.get(account, str(params["glossary_id"]))
        if source is None:
            return message(400, "Use of a glossary requires the source_lang parameter")
    keys.admit(account, chars)
    try:
        detected = models.detect(texts) if source is None else None
        src = detected.language if detected is not None else source
        check = (texts, src, target, params, glossary, cfg)
        # a glossary is searched for in every text: off the event loop
        asked = _asked(*check) if glossary is None else await run_in_threadpool(_asked, *check)
        answers, _ = await models.translate(asked, DeepLAnswer(), client_of(request))
    except (QueueFull, NMTError) as err:
        return refusal(err)
    said = (src or "").split("-")[0].upper()
    return JSONResponse({
        "translations": [
            {"detected_source_language": said, "text": text, "billed_characters": len(original)}
            for text, original in zip(answers, texts)
        ]
    })  # fmt: skip


def _asked(
    texts: list[str], src: str | None, target: str, params: dict, glossary: Glossary | None,
    cfg: Any,
) -> Asked:  # fmt: skip
    """The one Request of a /v2/translate call."""
    handling = params.get("tag_handling")
    if handling is not None and handling not in TAG_FORMATS:
        raise BadRequest(400, f"Value for 'tag_handling' not supported: {str(handling)[:20]}")
    split = str(params.get("split_sentences", "1"))
    if split not in ("0", "1", "nonewlines"):
        raise BadRequest(400, f"Value for 'split_sentences' not supported: {split[:20]}")
    constraints = None
    if glossary is not None:
        if handling is not None:
            raise BadRequest(400, "a glossary with tag_handling: nmt meets a glossary's terms in "
                             "plain text only")  # fmt: skip
        constraints = [glossary.terms_in(text) for text in texts]
    request = Request(list(texts), cfg.decode, tgt_lang=target, src_lang=src,
                      constraints=constraints, noun="text")  # fmt: skip
    if constraints is not None:
        return Asked(request)  # each text one sentence of plain text, with its terms
    fmt = TAG_FORMATS.get(handling, TextFormat.text)
    options = TextOptions(fmt, split != "0", False, list(cfg.protect), list(cfg.protect_patterns))
    return Asked(request, options)


class DeepLAnswer:
    """A text's answer is its translation's text."""

    def translation(self, t: Translation, segment: Segment) -> str:
        return t.text

    def document(self, source: str, result: BlockResult) -> str:
        return result.text

    def memory(self, source: str, text: str) -> str:
        return text


# --- languages and usage -----------------------------------------------------------------------


async def languages(
    models: Models, keys: Keys, kept: Kept, account: str, params: dict,
    request: HTTPRequest,
) -> Response:  # fmt: skip
    """GET /v2/languages?type=source|target: the languages by DeepL's codes."""
    kind = params.get("type", "source")
    if kind not in ("source", "target"):
        return message(400, "Value for 'type' not supported: source or target")
    if kind == "source":
        return JSONResponse([{"language": deepl_code(t), "name": name(t)}
                             for t in models.source_tags()])  # fmt: skip
    out = []
    for t in models.target_tags():
        for code in REGIONS.get(t, ()) or (deepl_code(t),):
            out.append({"language": code, "name": name(tag(code)), "supports_formality": False})
    return JSONResponse(out)


def deepl_code(language: str) -> str:
    """A tag as DeepL writes it: `de` -> DE, `zh-Hans` -> ZH-HANS."""
    return language.upper()


async def usage(
    models: Models, keys: Keys, kept: Kept, account: str, params: dict,
    request: HTTPRequest,
) -> Response:  # fmt: skip
    """GET /v2/usage: the key's characters this period, and its quota (without one, the most a
    period could hold, as DeepL reports an unlimited plan)."""
    used, quota = keys.usage(account)
    return JSONResponse({"character_count": used, "character_limit": quota or 10**12})


# --- glossaries --------------------------------------------------------------------------------


async def glossary_create(
    models: Models, keys: Keys, kept: Kept, account: str, params: dict,
    request: HTTPRequest,
) -> Response:  # fmt: skip
    """POST /v2/glossaries: name, source_lang, target_lang, entries (TSV or CSV)."""
    for field in ("name", "source_lang", "target_lang", "entries"):
        if not isinstance(params.get(field), str) or not params[field]:
            return message(400, f"Missing or invalid argument: {field}")
    source, target = tag(params["source_lang"]), tag(params["target_lang"])
    models.route(source, target)  # a pair the server does not translate is refused here
    entries = read_entries(params["entries"], params.get("entries_format", "tsv"))
    created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
    glossary = Glossary(str(uuid.uuid4()), params["name"], source.split("-")[0],
                        target.split("-")[0], entries, created.replace("+00:00", "Z"))  # fmt: skip
    kept.glossaries.add(account, glossary)
    return JSONResponse(glossary.info(), status_code=201)


async def glossary_list(
    models: Models, keys: Keys, kept: Kept, account: str, params: dict,
    request: HTTPRequest,
) -> Response:  # fmt: skip
    return JSONResponse({"glossaries": [g.info() for g in kept.glossaries.all(account)]})


async def glossary_get(
    models: Models, keys: Keys, kept: Kept, account: str, params: dict,
    request: HTTPRequest,
) -> Response:  # fmt: skip
    return JSONResponse(kept.glossaries.get(account, request.path_params["glossary_id"]).info())


async def glossary_entries(
    models: Models, keys: Keys, kept: Kept, account: str, params: dict,
    request: HTTPRequest,
) -> Response:  # fmt: skip
    glossary = kept.glossaries.get(account, request.path_params["glossary_id"])
    tsv = "".join(f"{term}\t{translation}\n" for term, translation in glossary.entries.items())
    return Response(tsv, media_type="text/tab-separated-values")


async def glossary_delete(
    models: Models, keys: Keys, kept: Kept, account: str, params: dict,
    request: HTTPRequest,
) -> Response:  # fmt: skip
    kept.glossaries.remove(account, request.path_params["glossary_id"])
    return Response(status_code=204)


async def glossary_pairs(
    models: Models, keys: Keys, kept: Kept, account: str, params: dict,
    request: HTTPRequest,
) -> Response:  # fmt: skip
    pairs = [{"source_lang": s, "target_lang": t}
             for s, targets in models.languages().items() for t in targets]  # fmt: skip
    return JSONResponse({"supported_languages": pairs})


# --- documents -----------------------------------------------------------------------------------


async def upload(
    models: Models, keys: Keys, kept: Kept, account: str, params: dict, request: HTTPRequest
) -> Response:
    """POST /v2/document (a form: file, target_lang, source_lang): the document translated
    (before the answer: its status is then done at once) and kept for its owner."""
    document = params.get("file")
    if not isinstance(document, UploadFile):
        return message(400, "Missing or invalid argument: file")
    target = params.get("target_lang")
    if not isinstance(target, str) or not target:
        return message(400, "Value for 'target_lang' not supported: it is required")
    data = await document.read()
    source = params.get("source_lang") or None
    try:
        done = await translate_file(
            models, data, document.filename or "document.txt", source, target,
            client_of(request), partial(keys.admit, account),
        )  # fmt: skip
    except (QueueFull, NMTError) as err:
        return refusal(err)
    held = kept.files.add(account, done)
    return JSONResponse({"document_id": held.file_id, "document_key": held.key})


async def document_status(
    models: Models, keys: Keys, kept: Kept, account: str, params: dict, request: HTTPRequest
) -> Response:
    """POST /v2/document/ID (document_key): done, with the characters it was billed."""
    held = kept.files.get(request.path_params["document_id"], account, _document_key(params))
    return JSONResponse({"document_id": held.file_id, "status": "done",
                         "billed_characters": held.translated.characters})  # fmt: skip


async def document_result(
    models: Models, keys: Keys, kept: Kept, account: str, params: dict, request: HTTPRequest
) -> Response:
    """POST /v2/document/ID/result (document_key): the translated document."""
    held = kept.files.get(request.path_params["document_id"], account, _document_key(params))
    done = held.translated
    headers = {"Content-Disposition": f'attachment; filename="{done.name}"'}
    return Response(done.data, media_type=done.media_type, headers=headers)


def _document_key(params: dict) -> str:
    key = params.get("document_key")
    if not isinstance(key, str) or not key:
        raise BadRequest(400, "Missing or invalid argument: document_key")
    return key


# --- reading a request -------------------------------------------------------------------------


async def read_params(request: HTTPRequest, max_chars: int) -> dict[str, Any]:
    """A request's parameters: the query string, then a JSON or form body over it (a form's
    repeated `text` is the list of texts, as DeepL reads it)."""
    params: dict[str, Any] = dict(request.query_params)
    texts = request.query_params.getlist("text")
    body = await read_body(request, body_limit(max_chars))
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if body and kind == "application/json":
        params.update(read_object(body, '{"text": ["Guten Tag."], "target_lang": "EN-US"}'))
        return params
    if body:
        if kind not in ("application/x-www-form-urlencoded", ""):
            raise BadRequest(400, f"a body of {kind[:60]}: send JSON or a form")
        try:
            pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True)
        except UnicodeDecodeError:
            raise BadRequest(400, "the form is not UTF-8") from None
        params.update(pairs)
        texts += [value for field, value in pairs if field == "text"]
    if texts:
        params["text"] = texts
    return params


AUTH = re.compile(r"DeepL-Auth-Key\s+(\S+)\s*", re.IGNORECASE)


def _key(request: HTTPRequest, params: dict) -> str | None:
    """The request's key: the Authorization header's, or the older auth_key parameter."""
    found = AUTH.fullmatch(request.headers.get("authorization", ""))
    if found:
        return found.group(1)
    given = params.get("auth_key")
    return given if isinstance(given, str) and given else None
