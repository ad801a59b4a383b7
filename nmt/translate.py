"""Translation: the `Translator` library API, batch translation of a stream, and the REPL.

Whatever the input lines hold (empty, huge, control characters, invalid UTF-8), N lines in give
N lines out in the same order: blank inputs give blank outputs and no output contains a newline.
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import torch
from torch import Tensor

from nmt.attention_map import format_attention, save_heatmap, select_map
from nmt.checkpoint import load_checkpoint, restore_model
from nmt.config import DecodeConfig, Strategy
from nmt.data import clean
from nmt.device import autocast, check_precision, resolve_device
from nmt.errors import NMTError
from nmt.lexicon import NO_LEXICON, Lexicon
from nmt.models.seq2seq import Seq2Seq
from nmt.run_config import TranslateRunConfig
from nmt.search import decode_all
from nmt.tokenizer import EOS, Vocab, Vocabs

CHUNK_LINES = 1000  # batch mode translates at most this many lines at a time
# Raw characters kept per allowed piece before a capped source is tokenized: a piece spans at most
# 16 characters (sentencepiece's max_sentencepiece_length), so 64 leaves a wide margin, and a
# million-character line costs the tokenizer tens of thousands of characters, not a million.
CHARS_PER_PIECE = 64


@dataclass
class Translation:
    source: str
    text: str  # detokenized, on one line
    src_pieces: list[str]  # EOS included, to label attention columns
    tgt_pieces: list[str]  # EOS included when produced, to label attention rows
    maps: Tensor | None  # attention maps (len(tgt_pieces), L, h, len(src_pieces))
    score: float  # log-probability
    nbest: list[tuple[str, float]]  # every hypothesis kept, best first: (text, normalised score)
    # with attention: (target pieces, maps) of each n-best hypothesis, in the order of `nbest`
    nbest_maps: list[tuple[list[str], Tensor | None]] = field(default_factory=list)

    def attention(self, layer: int | None = -1, head: int | None = None) -> Tensor | None:
        """(len(tgt_pieces), len(src_pieces)): one layer's map (None: the mean of the layers),
        one head or the mean of the heads; see `select_map`."""
        return None if self.maps is None else select_map(self.maps, layer, head)


class Translator:
    def __init__(
        self,
        model: Seq2Seq,
        vocabs: Vocabs,
        decode: DecodeConfig,
        device: torch.device,
        lexicon: Lexicon | None = None,
    ) -> None:
        """`lexicon` (the checkpoint's) is needed by `decode.shortlist` alone."""
        check_precision(device, decode.precision, "decode.precision")
        if decode.shortlist and lexicon is None:
            raise NMTError(NO_LEXICON)
        if decode.shortlist and lexicon.shape != (len(vocabs.src), len(vocabs.tgt)):
            raise NMTError(
                "the checkpoint's lexicon.pt was learned for another vocabulary: "
                "python -m nmt.lexicon CKPT_DIR learns it again"
            )
        self.model = model.eval()
        self.vocabs = vocabs
        self.decode = decode
        self.device = device
        self.lexicon = lexicon

    @classmethod
    def from_checkpoint(
        cls, path: str | Path, decode: DecodeConfig | None = None, device: str = "auto"
    ) -> Translator:
        """`decode=None` decodes as the run validated (greedy unless it was trained with
        decode=beam); pass e.g. `DecodeConfig(strategy=Strategy.beam)` for beam search."""
        ckpt = load_checkpoint(path)
        dev = resolve_device(device)
        decode = decode or ckpt.config.decode
        return cls(restore_model(ckpt, dev), ckpt.vocabs, decode, dev, ckpt.lexicon)

    def translate(self, sentences: list[str], first_line: int = 1) -> list[str]:
        return [t.text for t in self.translate_full(sentences, False, first_line)]

    def translate_full(
        self, sentences: list[str], attention: bool = True, first_line: int = 1
    ) -> list[Translation]:
        """The best translation of each sentence with its n-best list and (when `attention`) its
        attention maps. Blank sentences give blank translations. A sentence longer than
        `decode.max_src_pieces` is translated from its first pieces, with a warning on stderr that
        names its line (`first_line` numbers the first sentence)."""
        cleaned = [clean(s) for s in sentences]
        todo = [i for i, s in enumerate(cleaned) if s]  # blank lines are not sent to the model
        cap = self.decode.max_src_pieces
        src_ids, cut = source_ids(self.vocabs.src, [cleaned[i] for i in todo], cap)
        for k in cut:
            text = sentences[todo[k]]
            print(
                f"nmt: warning: line {first_line + todo[k]} has {len(text.split())} words "
                f"({len(text)} characters), more than decode.max_src_pieces={cap} pieces: only its "
                f"first {cap - 1} pieces are translated",
                file=sys.stderr,
                flush=True,
            )
        with autocast(self.device, self.decode.precision):
            nbests = decode_all(
                self.model, src_ids, self.decode, self.device, attention, self.lexicon
            )
        flat = [h.tokens for hyps in nbests for h in hyps]
        # byte pieces could decode to a newline: clean() keeps every text on one line
        texts = iter([clean(t) for t in self.vocabs.tgt.decode(flat)] if flat else [])
        out = [Translation(s, "", [], [], None, 0.0, [("", 0.0)]) for s in sentences]
        for i, ids, hyps in zip(todo, src_ids, nbests):
            nbest = [(next(texts), h.normalized) for h in hyps]
            pieces = [self.vocabs.tgt.id_to_piece(h.tokens + [EOS] * h.ended) for h in hyps]
            best = hyps[0]
            out[i] = Translation(
                source=sentences[i],
                text=nbest[0][0],
                src_pieces=self.vocabs.src.id_to_piece(ids),
                tgt_pieces=pieces[0],
                maps=best.attention,
                score=best.score,
                nbest=nbest,
                nbest_maps=[(p, h.attention) for p, h in zip(pieces, hyps)] if attention else [],
            )
        return out

    def translate_stream(self, lines: Iterable[str], nbest_tsv: bool = False) -> Iterator[str]:
        """Translate an unbounded stream, keeping the order. Yields one line per input line, or
        with `nbest_tsv` one `line<TAB>rank<TAB>score<TAB>text` row per hypothesis (line and rank
        from 1; a blank input line gives one row with an empty text).

        Lines are translated as they arrive: whatever has come in (up to CHUNK_LINES) goes to the
        model as soon as one line is there, so an interactive pipe gets each answer at once and a
        file still gets full batches. Sampling waits for full chunks instead: its draws depend on
        how the sentences are batched, and `decode.seed` promises the same samples every run."""
        first = 1
        wait_full = self.decode.strategy == Strategy.sample
        for chunk in arrivals(lines, CHUNK_LINES, wait_full):
            chunk = [line.rstrip("\n") for line in chunk]
            if not nbest_tsv:
                yield from self.translate(chunk, first)
            else:
                for n, result in enumerate(self.translate_full(chunk, False, first), first):
                    for rank, (text, score) in enumerate(result.nbest, 1):
                        yield f"{n}\t{rank}\t{score:.4f}\t{text}"
            first += len(chunk)


def source_ids(vocab: Vocab, texts: list[str], cap: int) -> tuple[list[list[int]], list[int]]:
    """The ids of non-blank cleaned `texts`, each ending in EOS and at most `cap` long (0 = no
    cap), and the indices of the texts that were cut.

    A text far longer than the cap is cut before tokenization, at a space when one is near the cut,
    so tokenizing stays cheap; sentencepiece never joins pieces across a space, so the first `cap`
    pieces are those of the whole text. Should the cut text give fewer than `cap` pieces after all
    (pieces longer than CHARS_PER_PIECE), the whole text is tokenized."""
    if not cap:
        return [ids + [EOS] for ids in vocab.encode(texts)], []
    bound = cap * CHARS_PER_PIECE
    shortened = [_cut_text(text, bound) for text in texts]
    ids = vocab.encode(shortened)
    cut = []
    for i, (text, short) in enumerate(zip(texts, shortened)):
        if len(short) < len(text) and len(ids[i]) < cap:
            ids[i] = vocab.encode([text])[0]
        if len(ids[i]) >= cap:  # EOS makes one more
            ids[i] = ids[i][: cap - 1]
            cut.append(i)
        ids[i].append(EOS)
    return ids, cut


def _cut_text(text: str, bound: int) -> str:
    """`text` up to `bound` characters, ending before a space in its second half if it has one."""
    if len(text) <= bound:
        return text
    space = text.rfind(" ", bound // 2, bound)
    return text[:space] if space > 0 else text[:bound]


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


def repl(translator: Translator, cfg: TranslateRunConfig) -> None:
    """Translate what is typed, as Python's own prompt behaves: arrow keys and history (when the
    readline module exists), Ctrl-C drops the line being typed or stops the translation under way
    and returns to the prompt, Ctrl-D on an empty line quits."""
    # importing readline is what gives input() line editing and history; where it is missing
    # (Windows, a Python built without it) plain input() still works
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401
    print("Type a sentence and press Enter; Ctrl-C cancels, Ctrl-D quits.", file=sys.stderr)
    typed = 0  # numbers the sentences in length warnings
    while True:
        try:
            line = input("> ")
        except EOFError:
            print(file=sys.stderr)
            return
        except KeyboardInterrupt:
            print(file=sys.stderr)
            continue
        if not line.strip():
            continue
        typed += 1
        try:
            result = translator.translate_full([line], first_line=typed)[0]
        except KeyboardInterrupt:
            # search keeps nothing between calls, so an interrupted one leaves no state behind
            print("(translation cancelled)", file=sys.stderr)
            continue
        print(result.text, flush=True)
        if len(result.nbest) > 1:
            for rank, (text, score) in enumerate(result.nbest, 1):
                print(f"  {rank:>2}  {score:8.4f}  {text}")
        weights = result.attention(cfg.attention_layer, cfg.attention_head)
        if weights is None:
            continue
        if cfg.show_attention:
            print(format_attention(result.src_pieces, result.tgt_pieces, weights))
        if cfg.attention_png:
            save_heatmap(result.src_pieces, result.tgt_pieces, weights, cfg.attention_png, line)
            print(f"(attention map written to {cfg.attention_png})", file=sys.stderr)


def translate_main(cfg: TranslateRunConfig) -> None:
    translator = Translator.from_checkpoint(cfg.ckpt, cfg.decode, cfg.device)
    if cfg.input is None and cfg.output is None and sys.stdin.isatty():
        repl(translator, cfg)
        return
    source = _open_text(cfg.input, "r", sys.stdin)
    sink = _open_text(cfg.output, "w", sys.stdout)
    read_all = False
    try:
        for text in translator.translate_stream(source, cfg.nbest_tsv):
            sink.write(text + "\n")
            sink.flush()  # through a pipe each line leaves now, not when a buffer fills
        read_all = True
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
