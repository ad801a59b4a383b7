"""Translation: the `Translator` library API, batch translation of a stream, and the REPL.

Whatever the input lines hold (empty, huge, control characters, invalid UTF-8), N lines in give
N lines out in the same order: blank inputs give blank outputs and no output contains a newline.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TextIO

import torch
from torch import Tensor

from nmt.attention_map import format_attention, save_heatmap, select_map
from nmt.checkpoint import load_checkpoint, restore_model
from nmt.config import DecodeConfig, TranslateRunConfig
from nmt.data import clean
from nmt.device import resolve_device
from nmt.errors import NMTError
from nmt.models.seq2seq import Seq2Seq
from nmt.search import decode_all
from nmt.tokenizer import EOS, Vocabs

CHUNK_LINES = 1000  # batch mode reads and writes this many lines at a time


@dataclass
class Translation:
    source: str
    text: str  # detokenized, on one line
    src_pieces: list[str]  # EOS included, to label attention columns
    tgt_pieces: list[str]  # EOS included when produced, to label attention rows
    maps: Tensor | None  # attention maps (len(tgt_pieces), L, h, len(src_pieces))
    score: float  # log-probability
    nbest: list[tuple[str, float]]  # every hypothesis kept, best first: (text, normalised score)

    def attention(self, layer: int | None = -1, head: int | None = None) -> Tensor | None:
        """(len(tgt_pieces), len(src_pieces)): one layer's map (None: the mean of the layers),
        one head or the mean of the heads; see `select_map`."""
        return None if self.maps is None else select_map(self.maps, layer, head)


class Translator:
    def __init__(
        self, model: Seq2Seq, vocabs: Vocabs, decode: DecodeConfig, device: torch.device
    ) -> None:
        self.model = model.eval()
        self.vocabs = vocabs
        self.decode = decode
        self.device = device

    @classmethod
    def from_checkpoint(
        cls, path: str | Path, decode: DecodeConfig | None = None, device: str = "auto"
    ) -> Translator:
        """`decode=None` decodes as the run validated (greedy unless it was trained with
        decode=beam); pass e.g. `DecodeConfig(strategy=Strategy.beam)` for beam search."""
        ckpt = load_checkpoint(path)
        dev = resolve_device(device)
        return cls(restore_model(ckpt, dev), ckpt.vocabs, decode or ckpt.config.decode, dev)

    def translate(self, sentences: list[str]) -> list[str]:
        return [t.text for t in self.translate_full(sentences, attention=False)]

    def translate_full(self, sentences: list[str], attention: bool = True) -> list[Translation]:
        """The best translation of each sentence with its n-best list and (when `attention`) its
        attention maps. Blank sentences give blank translations."""
        cleaned = [clean(s) for s in sentences]
        todo = [i for i, s in enumerate(cleaned) if s]  # blank lines are not sent to the model
        src_ids = [ids + [EOS] for ids in self.vocabs.src.encode([cleaned[i] for i in todo])]
        nbests = decode_all(self.model, src_ids, self.decode, self.device, attention)
        flat = [h.tokens for hyps in nbests for h in hyps]
        # byte pieces could decode to a newline: clean() keeps every text on one line
        texts = iter([clean(t) for t in self.vocabs.tgt.decode(flat)] if flat else [])
        out = [Translation(s, "", [], [], None, 0.0, [("", 0.0)]) for s in sentences]
        for i, ids, hyps in zip(todo, src_ids, nbests):
            nbest = [(next(texts), h.normalized) for h in hyps]
            best = hyps[0]
            out[i] = Translation(
                source=sentences[i],
                text=nbest[0][0],
                src_pieces=self.vocabs.src.id_to_piece(ids),
                tgt_pieces=self.vocabs.tgt.id_to_piece(best.tokens + [EOS] * best.ended),
                maps=best.attention,
                score=best.score,
                nbest=nbest,
            )
        return out

    def translate_stream(self, lines: Iterable[str], nbest_tsv: bool = False) -> Iterator[str]:
        """Translate an unbounded stream chunk by chunk, keeping the order. Yields one line per
        input line, or with `nbest_tsv` one `line<TAB>rank<TAB>score<TAB>text` row per hypothesis
        (line and rank from 1; a blank input line gives one row with an empty text)."""
        it = iter(lines)
        first = 1
        while chunk := list(islice(it, CHUNK_LINES)):
            chunk = [line.rstrip("\n") for line in chunk]
            if not nbest_tsv:
                yield from self.translate(chunk)
            else:
                for n, result in enumerate(self.translate_full(chunk, attention=False), first):
                    for rank, (text, score) in enumerate(result.nbest, 1):
                        yield f"{n}\t{rank}\t{score:.4f}\t{text}"
            first += len(chunk)


def _open_text(path: str | None, mode: str, fallback: TextIO) -> TextIO:
    """A UTF-8 stream that splits lines on '\\n' only and never fails on bad bytes."""
    if path is None:
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
    print("Type a sentence and press Enter; Ctrl-D quits.", file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except EOFError:
            print(file=sys.stderr)
            return
        except KeyboardInterrupt:
            print(file=sys.stderr)
            return
        if not line.strip():
            continue
        result = translator.translate_full([line])[0]
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
    try:
        for text in translator.translate_stream(source, cfg.nbest_tsv):
            sink.write(text + "\n")
        sink.flush()
    finally:
        if cfg.input is not None:
            source.close()
        if cfg.output is not None:
            sink.close()
        else:
            sink.detach()  # leave sys.stdout usable
