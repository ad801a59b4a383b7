"""nmt-translate: translate standard input or a file, N lines in, N lines out in the same order (a
blank line gives a blank line, no output line holds a newline), or an interactive prompt on a
terminal. With `prefix_tsv=true` each line is `source<TAB>prefix`: its translation starts with
the prefix. With `constraints_tsv=true` each line is `source<TAB>phrase<TAB>phrase...`: its
translation contains every phrase (beam search; `Translator.translate_full`'s `constraints`). A
line whose prefix or constraints cannot be met is an error naming it: with input=FILE every line
is checked before any is translated, so nothing is written; a pipe cannot be read twice, so its
lines are checked a chunk at a time, just before they are translated. At the prompt, `/prefix
TEXT` forces a prefix ("what if"), `/include` and `/avoid` set phrases every translation must
contain or must not, `/tree` prints the search tree of the last sentence. With `rerank=[ckpt,...]`
other models rescore each line's n-best list and the best weighted sum (`rerank_weights`) is the
translation (`nmt.translation.rerank`; batch mode only).

Lines are read by a thread of their own (`arrivals`), so a pause in a pipe never holds back the
translations of the lines that came before it, and memory stays bounded however long the input.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import logging
import os
import queue
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from nmt.cli.confidence_columns import (
    confidence_columns,
    line_confidences,
    retry_flagged,
    write_review,
)  # fmt: skip
from nmt.cli.document_job import translate_document
from nmt.cli.file_job import FileJob, model_digests, rank_device, show_progress
from nmt.config import DecodeConfig, Strategy, TextFormat, TextOptions
from nmt.data.splits import read_lines
from nmt.distributed import Dist, from_environment
from nmt.documents.alignment import moses
from nmt.documents.files import open_document, translate_segments
from nmt.documents.sentences import split
from nmt.documents.texts import read_block, translate_texts
from nmt.errors import NMTError
from nmt.run_config import TranslateRunConfig, flatten
from nmt.translation.attention_map import format_attention, save_heatmap
from nmt.translation.confidence import Calibration, for_checkpoint, search_kind
from nmt.translation.phrases import constraint_ids
from nmt.translation.request import Request
from nmt.translation.rerank import Reranker
from nmt.translation.search.tree import BeamTree
from nmt.translation.translator import Translation, Translator, raise_failure

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
    without it, and a file job finishes."""
    if fmt.text is not None and fmt.plain and reranker is None:
        return _text_lines(translator, lines, first, decode, fmt)
    request = line_request(lines, decode, first, fmt.prefix_tsv, fmt.constraints_tsv, fmt.tgt_lang)
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


def _text_lines(
    translator: Translator, lines: list[str], first: int, decode: DecodeConfig, fmt: LineFormat
) -> list[str]:
    """Plain lines read as `fmt.text` says (`nmt.documents.texts`): each its translation, then
    its alignment and its confidence columns when asked; a line with no translation is blank, and
    named."""
    temperature = None if fmt.calibration is None else fmt.calibration.temperature
    results = translate_texts(translator, lines, decode, fmt.text, fmt.tgt_lang, first,
                              statistics=temperature)  # fmt: skip
    found = None
    if fmt.calibration is not None:
        found = line_confidences(translator, results, fmt.calibration, fmt.tgt_lang)
        if fmt.retry_flagged:
            retry_flagged(translator, lines, first, decode, fmt.text, fmt.calibration,
                          fmt.tgt_lang, (results, found))  # fmt: skip
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
                   first_line=first_line)  # fmt: skip


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
    with _open_text(path, "r", sys.stdin) as source:
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


def _open_text(path: str | None, mode: str, fallback: TextIO) -> TextIO:
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


REPL_HELP = """Type a sentence and press Enter; Ctrl-C cancels, Ctrl-D quits. Commands:
  /prefix TEXT   translations start with TEXT (the last sentence is translated again from it)
  /prefix        no prefix
  /include A; B  translations contain the phrases A and B (decode=beam; the last sentence again)
  /include       no phrases to include
  /avoid A; B    translations never contain the phrases A or B (the last sentence again)
  /avoid         no phrases to avoid
  /show          the prefix and the phrases in force
  /tree          the search tree of the last sentence (decode=beam shows the whole beam)"""


def _phrases(argument: str) -> list[str]:
    """The phrases of `/include A; B` or `/avoid A; B`: split at semicolons, blanks left out."""
    return [p.strip() for p in argument.split(";") if p.strip()]


def _describe(prefix: str, include: list[str], avoid: list[str]) -> str:
    """The settings `/show` prints, one line."""
    shown = [
        f"prefix: {prefix!r}" if prefix else "no prefix",
        f"include: {'; '.join(include)}" if include else "nothing to include",
        f"avoid: {'; '.join(avoid)}" if avoid else "nothing to avoid",
    ]
    return f"({', '.join(shown)})"


def _check_phrases(
    translator: Translator, decode: DecodeConfig, include: list[str], avoid: list[str]
) -> None:
    """Raise NMTError for phrases that no sentence could take under `decode` (constraints
    without beam search, a piece the target vocabulary lacks, a phrase to avoid that no
    translation could hold), as soon as they are typed; what depends on the sentence (its length
    limit, a search that finds no way) is known when it is translated."""
    translator.prepare(Request([""], decode, banned=avoid, constraints=[include]), warn=False)
    for phrase in include:
        constraint_ids(translator.vocabs.tgt, phrase)


def repl(translator: Translator, cfg: TranslateRunConfig) -> None:
    """Translate what is typed, as Python's own prompt behaves: arrow keys and history (when the
    readline module exists), Ctrl-C drops the line being typed or stops the translation under way
    and returns to the prompt, Ctrl-D on an empty line quits. A line starting with one of the
    commands of REPL_HELP is that command. The prefix and the phrases start as cfg.decode's
    (decode.prefix, decode.constraints, decode.banned), and each command replaces its own."""
    # importing readline is what gives input() line editing and history; where it is missing
    # (Windows, a Python built without it) plain input() still works
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401
    print(REPL_HELP, file=sys.stderr)
    calibration = for_checkpoint(cfg.ckpts[0], search_kind(cfg.decode)) if cfg.confidence else None
    text_format = LineFormat(tgt_lang=cfg.tgt_lang, text=cfg, calibration=calibration)
    typed = 0  # numbers the sentences in length warnings
    last, prefix = "", cfg.decode.prefix
    include, avoid = list(cfg.decode.constraints), list(cfg.decode.banned)
    # `/avoid` and `/include` replace decode.banned and decode.constraints: the calls give them
    decode = replace(translator.decode, banned=[], constraints=[])
    while True:
        try:
            line = input("> ")
        except EOFError:
            print(file=sys.stderr)
            return
        except KeyboardInterrupt:
            print(file=sys.stderr)
            continue
        command, _, argument = line.strip().partition(" ")
        tree, previous = command == "/tree", (prefix, include, avoid)
        if command in ("/prefix", "/include", "/avoid"):
            if command == "/prefix":
                prefix = argument.strip()
                print(f"(prefix: {prefix!r})" if prefix else "(no prefix)", file=sys.stderr)
            else:
                if command == "/include":
                    include = _phrases(argument)
                else:
                    avoid = _phrases(argument)
                try:
                    _check_phrases(translator, decode, include, avoid)
                except NMTError as err:
                    print(f"nmt: {err}", file=sys.stderr)
                    prefix, include, avoid = previous
                    continue
                print(_describe(prefix, include, avoid), file=sys.stderr)
            if not last:
                continue
            line = last
        elif command == "/show":
            print(_describe(prefix, include, avoid), file=sys.stderr)
            continue
        elif tree:
            if not last:
                print("(translate a sentence first)", file=sys.stderr)
                continue
            line = last
        elif not line.strip():
            continue
        else:
            typed += 1
        if not tree and not (prefix or include or avoid) and as_text(translator, cfg, line):
            # a paragraph, markup, or columns asked for: the line as a pipe gives it (sentences
            # split and rejoined, tags placed, alignment and confidence columns), not the one
            # sentence the display below is for
            try:
                print(_text_lines(translator, [line], typed, decode, text_format)[0], flush=True)
            except KeyboardInterrupt:
                print("(translation cancelled)", file=sys.stderr)
            except NMTError as err:
                print(f"nmt: {err}", file=sys.stderr)
            last = line
            continue
        try:
            request = Request(
                [line], decode, [prefix], avoid, [include], cfg.tgt_lang, attention=True,
                tree=tree, first_line=typed,
            )  # fmt: skip
            result = raise_failure(translator.run(translator.prepare(request)), request)[0]
        except KeyboardInterrupt:
            # search keeps nothing between calls, so an interrupted one leaves no state behind
            print("(translation cancelled)", file=sys.stderr)
            continue
        except NMTError as err:  # a prefix or phrases the model cannot take: say so, keep the last
            print(f"nmt: {err}", file=sys.stderr)
            prefix, include, avoid = previous
            continue
        last = line
        if tree and result.tree is not None:
            print(format_tree(result.tree))
            continue
        _show(result, cfg, line)


def as_text(translator: Translator, cfg: TranslateRunConfig, line: str) -> bool:
    """Whether a line typed at the prompt is more than the one plain sentence the prompt's own
    display shows (its translation, n-best, attention): several sentences (split_sentences),
    markup (format), protected spans (a URL, a number: kept verbatim, as in a pipe), or
    alignment or confidence columns asked for."""
    if cfg.alignments or cfg.confidence or cfg.format not in (TextFormat.text, TextFormat.auto):
        return True
    if read_block(line.strip(), TextFormat.text, cfg).codes:
        return True
    parts = split(line, translator.source_language or "", translator.sentence_starts)
    return cfg.split_sentences and len(parts.sentences) > 1


def _show(result: Translation, cfg: TranslateRunConfig, line: str) -> None:
    print(result.text, flush=True)
    if result.prefix_score is not None:
        print(f"  (prefix: {result.prefix_pieces} pieces, log-prob {result.prefix_score:.4f})")
    if len(result.nbest) > 1:
        for rank, (text, score) in enumerate(result.nbest, 1):
            print(f"  {rank:>2}  {score:8.4f}  {text}")
    weights = result.attention(cfg.attention_layer, cfg.attention_head)
    if weights is None:
        return
    if cfg.show_attention:
        print(format_attention(result.src_pieces, result.tgt_pieces, weights))
    if cfg.attention_png:
        save_heatmap(result.src_pieces, result.tgt_pieces, weights, cfg.attention_png, line)
        print(f"(attention map written to {cfg.attention_png})", file=sys.stderr)


def format_tree(tree: BeamTree) -> str:
    """The tree as indented text, one node per line: piece, cumulative log-probability, state
    (and n-best rank); children in the order the search kept them."""
    children: dict[int, list[int]] = {}
    for i, node in enumerate(tree.nodes):
        children.setdefault(node.parent, []).append(i)
    lines: list[str] = []
    stack = [(i, 0) for i in reversed(children.get(-1, []))]
    while stack:
        i, depth = stack.pop()
        node = tree.nodes[i]
        rank = "" if node.rank is None else f" #{node.rank + 1}"
        label = "<root>" if node.parent < 0 else node.piece
        lines.append(f"{'  ' * depth}{label}  {node.score:.3f}  {node.state}{rank}")
        stack.extend((c, depth + 1) for c in reversed(children.get(i, [])))
    return "\n".join(lines)


def translate_main(cfg: TranslateRunConfig) -> None:
    where = from_environment()
    interactive = cfg.input is None and cfg.output is None and sys.stdin.isatty()
    if interactive and cfg.rerank:  # before any checkpoint is read
        raise NMTError(
            "rerank=[...] translates a file or a pipe (input=FILE, or nmt-translate ... < FILE), "
            "not at the interactive prompt"
        )
    if interactive and cfg.constraints_tsv:
        raise NMTError(
            "constraints_tsv=true reads a file or a pipe (input=FILE, or nmt-translate ... < "
            "FILE); at the interactive prompt, /include A; B sets the phrases to include"
        )
    if where.active and (cfg.input is None or cfg.output is None):
        raise NMTError(
            f"under torchrun ({where.world} processes) nmt-translate splits a file among them: "
            "give input=FILE and output=FILE"
        )
    job = cfg.input is not None and cfg.output is not None
    device = rank_device(cfg.device, where) if job else cfg.device
    translator = Translator.from_command(cfg, cfg.decode, device)
    translator.tags.ids(cfg.tgt_lang)  # an unknown tgt_lang fails before any input is read
    if interactive:
        translator.warm_up()  # the first line typed is answered as fast as the next ones
        repl(translator, cfg)
        return
    reranker = Reranker.from_command(cfg, translator) if cfg.rerank else None
    calibration = for_checkpoint(cfg.ckpts[0], search_kind(cfg.decode)) if cfg.confidence else None
    fmt = LineFormat(cfg.nbest_tsv, cfg.prefix_tsv, cfg.constraints_tsv, cfg.tgt_lang, cfg,
                     calibration, cfg.retry_flagged)  # fmt: skip
    if job:
        translate_file(translator, cfg, fmt, reranker, where)
        return
    document = open_document(Path(cfg.input), cfg.format) if cfg.input is not None else None
    if document is not None:  # a document to standard output, translated whole
        if document.fmt == TextFormat.docx:
            raise NMTError(f"input={cfg.input} is a Word file: give output=FILE.docx")
        done = translate_segments(translator, document.segments(), translator.decode, cfg,
                                  cfg.tgt_lang)  # fmt: skip
        sys.stdout.write(document.text.write(done))
        return
    if cfg.input is not None and (cfg.prefix_tsv or cfg.constraints_tsv):
        check_columns(translator, cfg.input, cfg.prefix_tsv, cfg.constraints_tsv, cfg.tgt_lang)
    source = _open_text(cfg.input, "r", sys.stdin)
    sink = _open_text(cfg.output, "w", sys.stdout)
    read_all = False
    try:
        lines = translate_stream(translator, source, fmt=fmt, reranker=reranker)
        rows = []
        for text in lines:
            sink.write(text + "\n")
            sink.flush()  # through a pipe each line leaves now, not when a buffer fills
            if cfg.review:
                rows.append(text)
        read_all = True
        if cfg.review:
            _review(cfg, read_lines(Path(cfg.input)), rows)
    finally:
        # after an early stop the reader may still be blocked on a pipe: closing the stream would
        # wait for its lock, so the open descriptor is left to the process's exit (a file's reads
        # never block for long, so a file is closed either way)
        if cfg.input is not None or read_all:
            source.close()
        if cfg.output is not None:
            sink.close()
        else:
            sink.detach()  # leave sys.stdout usable


def translate_file(
    translator: Translator,
    cfg: TranslateRunConfig,
    fmt: LineFormat,
    reranker: Reranker | None,
    where: Dist,
) -> None:
    """input=FILE output=FILE: a resumable file job, split among torchrun's processes
    (`nmt.cli.file_job`). Each process checks the TSV columns of its chunks before it translates
    any (a line that cannot be translated fails before the process writes anything)."""
    decode = translator.decode
    settings = {
        "models": model_digests([*cfg.ckpts, *(cfg.rerank or [])]),
        "decode": flatten(decode),
        **{k: getattr(cfg, k) for k in ("tgt_lang", "nbest_tsv", "prefix_tsv", "constraints_tsv")},
        **{k: getattr(cfg, k) for k in ("ckpt_weights", "rerank_weights")},
        "ensemble_combine": cfg.ensemble_combine.value,
        "text": {k: getattr(cfg, k) for k in ("split_sentences", "alignments", "protect")}
        | {"format": cfg.format.value, "protect_patterns": list(cfg.protect_patterns)},
        **({"confidence": {"retry_flagged": cfg.retry_flagged}} if cfg.confidence else {}),
    }
    document = open_document(Path(cfg.input), cfg.format)
    if document is not None:
        translate_document(translator, cfg, document, settings, where)
        return
    job = FileJob(
        Path(cfg.input), Path(cfg.output), settings, cfg.chunk_lines, where,
        show_progress(cfg.progress),
    )  # fmt: skip
    check = None
    if fmt.prefix_tsv or fmt.constraints_tsv:

        def check(lines: list[str], first: int) -> None:
            request = line_request(
                lines, decode, first, fmt.prefix_tsv, fmt.constraints_tsv, fmt.tgt_lang
            )
            try:
                translator.prepare(request, warn=False)
            except NMTError as err:
                done = (
                    "this process translated nothing" if where.active else "nothing was translated"
                )
                raise NMTError(f"{cfg.input}, {err} ({done})") from err

    job.run(lambda lines, first: translate_lines(translator, lines, first, decode, fmt, reranker),
            check)  # fmt: skip
    if cfg.review and where.main:
        rows = Path(cfg.output).read_text(encoding="utf-8").split("\n")[:-1]  # tabs and all
        _review(cfg, read_lines(Path(cfg.input)), rows)


def _review(cfg: TranslateRunConfig, sources: list[str], rows: list[str]) -> None:
    count = write_review(Path(cfg.review), sources, rows, cfg.alignments)
    print(f"review: {count} of {len(rows)} lines to check, in {cfg.review}", file=sys.stderr)
