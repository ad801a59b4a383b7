"""Lines in, lines out: what nmt-translate does with a pipe or a file of lines. N lines in, N
lines out in the same order (a blank line gives a blank line, no output line holds a newline);
`prefix_tsv`, `constraints_tsv` and `nbest_tsv` columns; each line read as its format says and
split into its sentences (`nmt.documents.texts`).

Lines are read by a thread of their own (`arrivals`), so a pause in a pipe never holds back the
translations of the lines that came before it, and memory stays bounded however long the input.
"""

from __future__ import annotations

import io
import itertools
import logging
import os
import queue
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TextIO

from nmt.cli.confidence_columns import (
    confidence_columns,
    from_memory,
    line_confidences,
    retry_flagged,
)
from nmt.cli.source_language import AUTO, by_language
from nmt.config import DecodeConfig, Strategy, TextOptions
from nmt.documents.alignment import moses
from nmt.documents.texts import translate_texts
from nmt.errors import NMTError
from nmt.translation.confidence import Calibration
from nmt.translation.memory import TranslationMemory
from nmt.translation.request import Request
from nmt.translation.rerank import Reranker
from nmt.translation.translator import Translator

log = logging.getLogger(__name__)

CHUNK_LINES = 1000  # batch mode translates at most this many lines at a time


def translate_stream(
    translator: Translator,
    lines: Iterable[str],
    decode: DecodeConfig | None = None,
    fmt: LineFormat | None = None,
    reranker: Reranker | None = None,
) -> Iterator[str]:
    """Translate an unbounded stream, keeping the order. Yields one line per input line, or
    with `fmt.nbest_tsv` one `line<TAB>rank<TAB>score<TAB>text` row per hypothesis (line and rank
    from 1; a blank input line gives one row with an empty text). With `prefix_tsv` an input
    line is `source<TAB>prefix` (split at its first tab; no tab: no prefix); with
    `constraints_tsv` it is `source<TAB>phrase<TAB>phrase...`, and every hypothesis of the line
    contains its phrases (`line_request`). With a `reranker` (whose main model is
    `translator`) each line's n-best list is rescored (`nmt.translation.rerank`): the line is its
    best hypothesis, and the n-best rows are in its order, with its combined score. `tgt_lang`:
    the target language of a model trained with target tags (`Translator`). With `fmt.text`
    (nmt-translate's: its format, sentence splitting, alignments, protected spans;
    `nmt.documents.texts`), a plain line is read as that says; without, as one sentence.

    Lines are translated as they arrive: whatever has come in (up to CHUNK_LINES) goes to the
    model as soon as one line is there, so an interactive pipe gets each answer at once and a
    file still gets full batches. Sampling waits for full chunks instead: its draws depend on
    how the sentences are batched, and `decode.seed` promises the same samples every run."""
    decode = decode or translator.decode
    fmt = fmt or LineFormat()
    first = 1
    wait_full = decode.strategy == Strategy.sample
    for chunk in arrivals(lines, CHUNK_LINES, wait_full):
        chunk = [line.rstrip("\n") for line in chunk]
        yield from translate_lines(translator, chunk, first, decode, fmt, reranker)
        first += len(chunk)


@dataclass(frozen=True)
class LineFormat:
    """How input lines are read (TSV columns) and output lines written (n-best rows)."""

    nbest_tsv: bool = False
    prefix_tsv: bool = False
    constraints_tsv: bool = False
    tgt_lang: str | None = None
    # how a plain line is read (format, sentences, alignments, protected spans); None: as one
    # sentence of plain text
    text: TextOptions | None = None
    # with it, each line's confidence after its translation (nmt.translation.confidence)
    calibration: Calibration | None = None
    retry_flagged: bool = False
    # the sources' language, a model's code for it; "auto": each line's, identified
    # (`nmt.cli.source_language`); None: the translator's
    src_lang: str | None = None
    # tm=FILE: a line the memory holds is written as the memory has it (`translate_lines`)
    memory: TranslationMemory | None = None

    @property
    def plain(self) -> bool:
        """Whether a line is text alone (not columns, not n-best rows)."""
        return not (self.nbest_tsv or self.prefix_tsv or self.constraints_tsv)


def translate_lines(
    translator: Translator,
    lines: list[str],
    first: int,
    decode: DecodeConfig,
    fmt: LineFormat,
    reranker: Reranker | None = None,
) -> list[str]:
    """The output lines of some input lines (numbered from `first`), as `translate_stream`
    writes them: one per line, or with nbest_tsv one row per hypothesis. A line the search
    finds no translation for (constraints it cannot meet with the step rules in force) is a
    blank line, with a warning that names it: the other lines are translated as they would be
    without it, and a file job finishes. With fmt.src_lang="auto", each line's language is
    identified first (`nmt.cli.source_language.by_language`). With `fmt.memory`, a line the
    memory holds is written from it (`remembered`)."""
    if fmt.memory is not None:
        return remembered(translator, lines, first, decode, fmt, reranker)
    if fmt.src_lang == AUTO:

        def translate(part: list[str], at: int, code: str | None) -> list[str]:
            asked = replace(fmt, src_lang=code)  # the language found for these lines
            return translate_lines(translator, part, at, decode, asked, reranker)

        columns = fmt.prefix_tsv or fmt.constraints_tsv  # the source alone is identified
        sources = [line.split("\t", 1)[0] for line in lines] if columns else lines
        return by_language(translator, lines, first, translate, sources)
    if fmt.text is not None and fmt.plain and reranker is None:
        return text_lines(translator, lines, first, decode, fmt)
    request = line_request(lines, decode, first, fmt.prefix_tsv, fmt.constraints_tsv, fmt.tgt_lang,
                           fmt.src_lang)  # fmt: skip
    if reranker is not None:
        found = reranker.candidates(request)
        ranked = [c.ranked(reranker.weights) for c in found]
    else:
        found = translator.run(translator.prepare(request))
        ranked = [t.nbest for t in found]
    for n, result in enumerate(found, first):
        if result.failure is not None:
            log.warning("line %d is not translated (a blank line in the output): %s", n,
                        result.failure)  # fmt: skip
    if not fmt.nbest_tsv:
        return [nbest[0][0] for nbest in ranked]
    return [
        f"{n}\t{rank}\t{score:.4f}\t{text}"
        for n, nbest in enumerate(ranked, first)
        for rank, (text, score) in enumerate(nbest, 1)
    ]


def remembered(
    translator: Translator,
    lines: list[str],
    first: int,
    decode: DecodeConfig,
    fmt: LineFormat,
    reranker: Reranker | None = None,
) -> list[str]:
    """`translate_lines` with tm=FILE: each line the memory holds is its translation in the
    memory (a line break in it a space: an output line holds none), with confidence the
    columns of `from_memory`; the others are translated in one call with the memory's lines
    blanked. A blank line costs no search, and keeps every other line's number in messages and
    its place in the batch: they come out the same bytes as without tm=."""
    found = fmt.memory.found(lines)
    rest = ["" if i in found else line for i, line in enumerate(lines)]
    out = translate_lines(translator, rest, first, decode, replace(fmt, memory=None), reranker)
    for i, target in found.items():
        row = " ".join(target.splitlines())
        out[i] = row if fmt.calibration is None else f"{row}\t{from_memory(row)}"
    return out


def text_lines(
    translator: Translator, lines: list[str], first: int, decode: DecodeConfig, fmt: LineFormat
) -> list[str]:
    """Plain lines read as `fmt.text` says (`nmt.documents.texts`): each its translation, then
    its alignment and its confidence columns when asked; a line with no translation is blank, and
    named."""
    temperature = None if fmt.calibration is None else fmt.calibration.temperature
    request = Request(lines, decode, tgt_lang=fmt.tgt_lang, first_line=first,
                      statistics=temperature, src_lang=fmt.src_lang)  # fmt: skip
    results = translate_texts(translator, request, fmt.text)
    found = None
    if fmt.calibration is not None:
        found = line_confidences(translator, results, fmt.calibration, fmt.tgt_lang, fmt.src_lang)
        if fmt.retry_flagged:
            retry_flagged(translator, request, fmt.text, fmt.calibration, (results, found))
    out = []
    for n, result in enumerate(results, first):
        if result.failure is not None:
            log.warning("line %d is not translated (a blank line in the output): %s", n,
                        result.failure)  # fmt: skip
        row = result.text
        if fmt.text.alignments:
            row += "\t" + moses(result.alignment or [])
        if found is not None:
            row += "\t" + confidence_columns(found[n - first])
        out.append(row)
    return out


def line_request(
    lines: list[str],
    decode: DecodeConfig,
    first_line: int = 1,
    prefix_tsv: bool = False,
    constraints_tsv: bool = False,
    tgt_lang: str | None = None,
    src_lang: str | None = None,
) -> Request:
    """The request of some lines of input: with `prefix_tsv` each line is split at its first tab
    into source and prefix; with `constraints_tsv` at every tab into the source and its phrases,
    blank fields left out. A line without a tab has no prefix or phrases."""
    if prefix_tsv and constraints_tsv:
        raise NMTError("prefix_tsv and constraints_tsv both read a line's columns: choose one")
    texts, prefixes, constraints = lines, None, None
    if prefix_tsv:
        split = [line.partition("\t") for line in lines]
        texts, prefixes = [s for s, _, _ in split], [p for _, _, p in split]
    elif constraints_tsv:
        fields = [line.split("\t") for line in lines]
        texts, constraints = (
            [f[0] for f in fields],
            [[p for p in f[1:] if p.strip()] for f in fields],
        )
    return Request(texts, decode, prefixes, constraints=constraints, tgt_lang=tgt_lang,
                   first_line=first_line, src_lang=src_lang)  # fmt: skip


def check_columns(
    translator: Translator,
    path: str,
    prefix_tsv: bool = False,
    constraints_tsv: bool = False,
    tgt_lang: str | None = None,
) -> None:
    """Raise NMTError naming the first line of the file `path` whose prefix or constraints
    (`line_request`) cannot be met (`Translator.prepare`), without translating: run before the
    first line is translated, so that a bad line leaves no output half written. The file is read
    a chunk at a time, as it will be translated: memory stays bounded."""
    first = 1
    with open_text(path, "r", sys.stdin) as source:
        while chunk := [line.rstrip("\n") for line in itertools.islice(source, CHUNK_LINES)]:
            request = line_request(
                chunk, translator.decode, first, prefix_tsv, constraints_tsv, tgt_lang
            )
            try:
                translator.prepare(request, warn=False)
            except NMTError as err:
                raise NMTError(f"{path}, {err} (nothing was translated)") from err
            first += len(chunk)


class _Failed:
    """The reader's exception, carried through the queue to be raised where the lines are used."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()  # the reader reached the end of the input


def arrivals(lines: Iterable[str], most: int, wait_full: bool = False) -> Iterator[list[str]]:
    """The lines of `lines` in order, in lists of 1 to `most`: each list holds what has arrived
    by the time at least one line is there (with `wait_full`, `most` lines or the rest at the end).

    A thread reads `lines` into a bounded queue, so a pause in the input (a pipe that has no more
    for now) never holds back the lines that came before it, whatever `lines` is: a file, a pipe,
    a generator. The queue holds at most `most` lines, so memory does not grow with the input. An
    exception from `lines` is raised here, after the lines read before it. Closing this generator
    stops the reader at its next line."""
    waiting: queue.Queue = queue.Queue(maxsize=most)
    stop = threading.Event()

    def hand_over(item: object) -> bool:
        while not stop.is_set():  # a timeout, so that a consumer that left can stop the reader
            try:
                waiting.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def read() -> None:
        try:
            for line in lines:
                if not hand_over(line):
                    return
        except BaseException as err:  # noqa: BLE001 - handed to the consumer, who raises it
            hand_over(_Failed(err))
        else:
            hand_over(_END)

    reader = threading.Thread(target=read, name="nmt-line-reader", daemon=True)
    reader.start()
    try:
        ended = False
        while not ended:
            chunk: list[str] = []
            item = waiting.get()  # blocks until something arrives
            while True:
                if item is _END or isinstance(item, _Failed):
                    ended = True
                    break
                chunk.append(item)
                if len(chunk) == most:
                    break
                if wait_full:
                    item = waiting.get()
                else:
                    try:
                        item = waiting.get_nowait()
                    except queue.Empty:
                        break
            if chunk:
                yield chunk
            if isinstance(item, _Failed):
                raise item.error
    finally:
        stop.set()


def open_text(path: str | None, mode: str, fallback: TextIO) -> TextIO:
    """A UTF-8 stream that splits lines on '\\n' only and never fails on bad bytes.

    Standard input is read through a private duplicate of its descriptor: the thread that reads
    it may be left blocked in a read when translation stops early (Ctrl-C, `| head`), holding the
    stream's lock, and Python aborts at exit ("could not acquire lock for <stdin>") if that stream
    is sys.stdin's, which it closes on the way out."""
    if path is None and mode == "r":
        try:
            buffer = open(os.dup(fallback.fileno()), "rb")  # noqa: SIM115 - see translate_main
        except (AttributeError, OSError, io.UnsupportedOperation):  # a stand-in without a fd
            buffer = fallback.buffer
    elif path is None:
        buffer = fallback.buffer
    else:
        try:
            buffer = open(path, mode + "b")  # noqa: SIM115 - closed by the caller
        except OSError as err:
            raise NMTError(f"cannot open {path}: {err.strerror}") from err
    return io.TextIOWrapper(
        buffer, encoding="utf-8", errors="replace", newline="\n", write_through=True
    )
