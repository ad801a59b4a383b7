"""HTTP for every API shape: reading a body within its limit, a JSON object out of it, refusals
(`BadRequest`: a status and a message), JSON written as bytes, who sent a request.

Each shape (`nmt.serving.native`, `nmt.serving.score`) reads its own keys with these and maps
refusals to its own statuses; the server below never sees HTTP.
"""

from __future__ import annotations

import json
import math

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from nmt.serving.batching import QueueFull
from nmt.serving.keys import KeyRefused, Keys


class BadRequest(Exception):
    """A request the server refuses: answered with `status` and {"error": message} (nmt's own
    statuses: 400 unreadable, 413 over a limit, 422 a value the server cannot take)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def body_limit(max_chars: int) -> int:
    """The most bytes a body may have: a text of max_chars characters, each escaped as
    \\uXXXX in the worst case, and some room."""
    return 6 * max_chars + 65536


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


def read_object(body: bytes, example: str) -> dict:
    """The JSON object a body holds: 400 for JSON that does not parse (or NaN, Infinity), 422
    for JSON that is not an object (`example` shows one)."""
    try:
        data = json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise BadRequest(400, f"invalid JSON: {err}") from None
    if not isinstance(data, dict):
        raise BadRequest(422, f"the body must be a JSON object, e.g. {example}")
    return data


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def check_keys(data: dict, valid: tuple[str, ...], prefix: str = "") -> None:
    """422 naming every key of `data` that is not one of `valid`, and the valid ones."""
    unknown = ", ".join(prefix + k for k in sorted(set(data) - set(valid)))
    if unknown:
        raise BadRequest(422, f"unknown key(s) {unknown}; valid: {', '.join(valid)}")


def kind(value: object) -> str:
    """What a JSON value is, for messages: "a string", "a list", "null", ..."""
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )


def read_flag(data: dict, key: str, default: bool = False) -> bool:
    """`data[key]` when it is true or false, `default` when it is missing; else a 422."""
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise BadRequest(422, f'"{key}" must be true or false, not {kind(value)}')
    return value


def read_string(data: dict, key: str) -> str | None:
    """`data[key]` when it is a string, None when it is missing; else a 422."""
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise BadRequest(422, f'"{key}" must be a string, not {kind(value)}')
    return value


def number(x: float) -> float | None:
    """A float as JSON can hold it: -inf and NaN (a piece outside the shortlist) are null."""
    return x if math.isfinite(x) else None


def json_bytes(content: object) -> bytes:
    """`content` as JSON, as Starlette's JSONResponse writes it (UTF-8, no NaN)."""
    text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode("utf-8")


def busy(full: QueueFull) -> Response:
    """503 with Retry-After: the queue had no room for the request (`QueueFull`)."""
    headers = {"Retry-After": str(full.retry_after)}
    return JSONResponse({"error": str(full)}, status_code=503, headers=headers)


def client_of(request: Request) -> str | None:
    """Who sent a request, for the queue's client_share: the address its connection comes from
    (behind a proxy, the proxy's: every client shares it)."""
    return request.client.host if request.client is not None else None


def bearer_key(request: Request) -> str | None:
    """The API key of a request to nmt's own API: its `Authorization: Bearer KEY` header."""
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    return (key.strip() or None) if scheme.lower() == "bearer" else None


def admit(keys: Keys, key: str | None, chars: int) -> None:
    """A request of `chars` characters counted against `key`; one its key does not allow is a
    `BadRequest`: 403 (no key, a bad one) or 429 (over the key's limits)."""
    try:
        keys.admit(key, chars)
    except KeyRefused as refused:
        status = 403 if refused.reason in ("missing", "invalid") else 429
        raise BadRequest(status, str(refused)) from None


async def read_form(request: Request, limit: int) -> FormData:
    """A multipart/form-data or urlencoded body (an uploaded file and its fields), read within
    `limit` bytes first (Starlette's parser alone would read any size), at most one file."""
    body = await read_body(request, limit)
    sent = False

    async def replay() -> dict:  # the body already read, handed to the parser as a stream
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        return await Request(request.scope, replay).form(max_files=1, max_fields=32)
    except HTTPException as err:  # a malformed body, or more files or fields than allowed
        raise BadRequest(400, f"unreadable form: {err.detail}") from None
