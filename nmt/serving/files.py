"""Files over HTTP: a document uploaded, translated through the server's models, and kept until
its owner fetches it (LibreTranslate's /translate_file, DeepL's /v2/document).

    done = await translate_file(models, data, "page.html", "de", "en", client)
    held = files.add(account, done)            # an id (and a key) to fetch it by
    files.take(account, held.file_id)          # the file, once

A file is read as `nmt.documents.files` reads nmt-translate's documents (HTML, Markdown,
SubRip) or as lines (.txt), its segments translated in requests of at most `max_texts` through
the same text loop and batcher as any text, and written back with everything that is not a
segment the same bytes. A file is one request: its characters count against `max_chars` and a
key's quota. Word files are not taken over HTTP yet: python-docx reads a package whole, and a
small zip can expand to gigabytes (a budgeted reader is the next issue's). Translated files
are kept in memory, at most MAX_HELD per server and for KEEP_S seconds.
"""

from __future__ import annotations

import dataclasses
import secrets
import tempfile
import threading
import time
from pathlib import Path

from starlette.concurrency import run_in_threadpool

from nmt.config import TextFormat, TextOptions
from nmt.documents.files import open_document
from nmt.documents.formats import BY_EXTENSION
from nmt.errors import NMTError
from nmt.serving.http import BadRequest
from nmt.serving.models import Models, TextAnswer
from nmt.serving.server import Asked
from nmt.translation.request import Request

LINES = ".txt"  # a file of lines: each line a text
# the extensions a file may have over HTTP (docx: see the module's notes)
SERVED = tuple(sorted(e for e, f in BY_EXTENSION.items() if not f.binary)) + (LINES,)
MEDIA = {".html": "text/html", ".htm": "text/html", ".xhtml": "application/xhtml+xml",
         ".md": "text/markdown", ".markdown": "text/markdown", ".srt": "application/x-subrip",
         LINES: "text/plain"}  # fmt: skip
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
    models: Models, data: bytes, name: str, src: str | None, tgt: str, client: object = None
) -> Translated:
    """The file `name` holding `data`, translated from `src` (None: detected) into `tgt`."""
    suffix = Path(name).suffix.lower()
    if suffix not in SERVED:
        raise BadRequest(400, f"{name[:80]}: nmt translates {', '.join(SERVED)} files over HTTP")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(400, f"{name[:80]}: not UTF-8 text") from None
    if len(text) > models.cfg.max_chars:
        raise BadRequest(413, f"{len(text)} characters: this server takes at most "
                         f"{models.cfg.max_chars} in a request, a file's included")  # fmt: skip
    if src is None:
        found = models.detect([text])
        src = found.language if found is not None else None
    if suffix == LINES:
        lines = text.split("\n")
        done = await _segments(models, [(t, TextFormat.text) for t in lines], src, tgt, client)
        out = "\n".join(done).encode("utf-8")
    else:
        out = await _document(models, data, suffix, src, tgt, client)
    stem = Path(name).stem or "document"
    return Translated(out, f"{stem}.{tgt}{suffix}", MEDIA[suffix], len(text), src)


async def _document(
    models: Models, data: bytes, suffix: str, src: str | None, tgt: str, client: object
) -> bytes:
    """A document file's segments translated, and the file written again around them."""
    with tempfile.TemporaryDirectory(prefix="nmt-file-") as folder:
        path = Path(folder) / f"in{suffix}"
        path.write_bytes(data)
        try:
            document = await run_in_threadpool(open_document, path, TextFormat.auto)
        except NMTError as err:
            raise BadRequest(400, str(err).replace(str(path), "the file")) from None
        assert document is not None  # SERVED holds document extensions and .txt alone
        done = await _segments(models, document.segments(), src, tgt, client)
        out = Path(folder) / f"out{suffix}"
        await run_in_threadpool(document.write, done, out)
        return out.read_bytes()


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
