"""Files over HTTP: a document uploaded, translated through the server's models, and kept until
its owner fetches it (LibreTranslate's /translate_file, DeepL's /v2/document).

    done = await translate_file(models, data, "page.html", "de", "en", client)
    held = files.add(account, done)            # an id (and a key) to fetch it by
    files.take(account, held.file_id)          # the file, once

A file is read by its format in the one table of formats (`nmt.documents.formats`: HTML,
Markdown, SubRip, Word, PowerPoint, Excel, OpenDocument, EPUB, XLIFF, PO; a zip-based one
within `nmt.documents.package`'s budgets) or as lines (.txt), its segments translated in
requests of at most `max_texts` through the same text loop and batcher as any text, and written
back with everything that is not a segment the same bytes. A file is one request: the
characters of its segments count against `max_chars` and a key's quota. Translated files are
kept in memory, at most MAX_HELD per server and for KEEP_S seconds.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path

from starlette.concurrency import run_in_threadpool

from nmt.config import TextFormat, TextOptions
from nmt.documents.formats import BY_EXTENSION
from nmt.errors import NMTError
from nmt.serving.http import BadRequest
from nmt.serving.models import Models, TextAnswer
from nmt.serving.server import Asked
from nmt.translation.request import Request

LINES = ".txt"  # a file of lines: each line a text
SERVED = (*sorted(BY_EXTENSION), LINES)  # the extensions a file may have over HTTP
MAX_HELD = 256  # translated files held for their owners, all accounts together
KEEP_S = 3600.0  # how long a translated file waits to be fetched


@dataclasses.dataclass(frozen=True)
class Translated:
    """A file translated: its bytes, name and media type, and the characters it held."""

    data: bytes
    name: str
    media_type: str
    characters: int
    source: str | None  # the language it was read as (a tag; None: the model's own)


async def translate_file(
    models: Models, data: bytes, name: str, src: str | None, tgt: str, client: object = None,
    admit: Callable[[int], None] | None = None,
) -> Translated:  # fmt: skip
    """The file `name` holding `data`, translated from `src` (None: detected) into `tgt`;
    `admit` is told the characters of its text before any is translated (a key's quota)."""
    suffix = Path(name).suffix.lower()
    if suffix not in SERVED:
        raise BadRequest(400, f"{name[:80]}: nmt translates {', '.join(SERVED)} files")
    if suffix == LINES:
        try:
            lines = data.decode("utf-8").split("\n")
        except UnicodeDecodeError:
            raise BadRequest(400, f"{name[:80]}: not UTF-8 text") from None
        opened, segments = None, [(line, TextFormat.text) for line in lines]
    else:
        try:  # reading a package (a zip) takes time: off the event loop
            opened = await run_in_threadpool(BY_EXTENSION[suffix].open, data, name[:80])
        except NMTError as err:
            raise BadRequest(400, str(err)) from None
        segments = opened.segments()
    chars = sum(len(text) for text, _ in segments)
    if chars > models.cfg.max_chars:
        raise BadRequest(413, f"{chars} characters of text: this server takes at most "
                         f"{models.cfg.max_chars} in a request, a file's included")  # fmt: skip
    if admit is not None:
        admit(chars)
    if src is None:
        found = models.detect([text for text, _ in segments])
        src = found.language if found is not None else None
    done = await _segments(models, segments, src, tgt, client)
    if opened is None:
        out = "\n".join(done).encode("utf-8")
    else:
        out = await run_in_threadpool(opened.write, done)
    stem = Path(name).stem or "document"
    media = MEDIA.get(suffix, "application/octet-stream")
    return Translated(out, f"{stem}.{tgt}{suffix}", media, chars, src)


MEDIA = {
    ".html": "text/html", ".htm": "text/html", ".xhtml": "application/xhtml+xml",
    ".md": "text/markdown", ".markdown": "text/markdown", ".srt": "application/x-subrip",
    LINES: "text/plain", ".xlf": "application/xliff+xml", ".xliff": "application/xliff+xml",
    ".po": "text/x-gettext-translation", ".pot": "text/x-gettext-translation",
    ".epub": "application/epub+zip", ".odt": "application/vnd.oasis.opendocument.text",
    ".odp": "application/vnd.oasis.opendocument.presentation",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}  # fmt: skip


async def _segments(
    models: Models, segments: list[tuple[str, TextFormat]], src: str | None, tgt: str,
    client: object,
) -> list[str]:  # fmt: skip
    """Each segment's translation, in requests of at most max_texts segments of one format."""
    cfg = models.cfg
    out: list[str | None] = [None] * len(segments)
    chunks: list[list[int]] = []
    for i, (_, fmt) in enumerate(segments):
        last = chunks[-1] if chunks else None
        if last and segments[last[0]][1] == fmt and len(last) < cfg.max_texts:
            last.append(i)
        else:
            chunks.append([i])

    async def one(chunk: list[int]) -> None:
        fmt = segments[chunk[0]][1]
        texts = [segments[i][0] for i in chunk]
        if not any(t.strip() for t in texts):
            for i in chunk:
                out[i] = segments[i][0]
            return
        request = Request(texts, cfg.decode, tgt_lang=tgt, src_lang=src, noun="segment")
        options = TextOptions(fmt, cfg.split_sentences, False, list(cfg.protect),
                              list(cfg.protect_patterns))  # fmt: skip
        found, _ = await models.translate(Asked(request, options), TextAnswer(), client)
        for i, text in zip(chunk, found):
            out[i] = text

    for chunk in chunks:  # one after another: a long file takes its turns in the queue
        await one(chunk)
    return [text if text is not None else "" for text in out]


@dataclasses.dataclass(frozen=True)
class Held:
    """A translated file waiting for its owner: `file_id` names it, `key` proves the right to
    it (DeepL's document_key), `expires` when it is dropped."""

    file_id: str
    key: str
    account: str
    translated: Translated
    expires: float


class Files:
    """Translated files held until fetched (see the module's notes)."""

    def __init__(self, clock=time.monotonic) -> None:
        self._held: dict[str, Held] = {}
        self._lock = threading.Lock()
        self._clock = clock

    def add(self, account: str, translated: Translated) -> Held:
        now = self._clock()
        held = Held(secrets.token_hex(16), secrets.token_hex(32), account, translated,
                    now + KEEP_S)  # fmt: skip
        with self._lock:
            self._drop_expired(now)
            if len(self._held) >= MAX_HELD:  # the oldest leaves: a server never grows without end
                self._held.pop(next(iter(self._held)))
            self._held[held.file_id] = held
        return held

    def get(self, file_id: str, account: str | None = None, key: str | None = None) -> Held:
        """The file `file_id` (of `account`, with `key`, where given); else 404. Its id alone is
        128 random bits: LibreTranslate's download URL needs no more."""
        with self._lock:
            self._drop_expired(self._clock())
            held = self._held.get(file_id)
        wrong = held is not None and (
            (account is not None and held.account != account)
            or (key is not None and not secrets.compare_digest(key, held.key))
        )
        if held is None or wrong:
            raise BadRequest(404, "no such document (or it has expired)")
        return held

    def _drop_expired(self, now: float) -> None:
        for file_id in [f for f, h in self._held.items() if h.expires <= now]:
            del self._held[file_id]
