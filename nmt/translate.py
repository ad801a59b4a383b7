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

from nmt.attention_map import format_attention, save_heatmap
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
    attention: Tensor | None  # (len(tgt_pieces), len(src_pieces))
    score: float


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
        ckpt = load_checkpoint(path)
        dev = resolve_device(device)
        return cls(restore_model(ckpt, dev), ckpt.vocabs, decode or ckpt.config.decode, dev)

    def translate(self, sentences: list[str]) -> list[str]:
        return [t.text for t in self.translate_full(sentences)]

    def translate_full(self, sentences: list[str]) -> list[Translation]:
        cleaned = [clean(s) for s in sentences]
        todo = [i for i, s in enumerate(cleaned) if s]  # blank lines are not sent to the model
        src_ids = [ids + [EOS] for ids in self.vocabs.src.encode([cleaned[i] for i in todo])]
        hyps = decode_all(self.model, src_ids, self.decode, self.device)
        texts = self.vocabs.tgt.decode([h.tokens for h in hyps]) if hyps else []
        out = [Translation(s, "", [], [], None, 0.0) for s in sentences]
        for i, ids, hyp, text in zip(todo, src_ids, hyps, texts):
            tgt_ids = hyp.tokens + [EOS] if hyp.ended else hyp.tokens
            out[i] = Translation(
                source=sentences[i],
                text=clean(text),  # byte pieces could decode to a newline; one line out per line in
                src_pieces=self.vocabs.src.id_to_piece(ids),
                tgt_pieces=self.vocabs.tgt.id_to_piece(tgt_ids),
                attention=hyp.attention,
                score=hyp.score,
            )
        return out

    def translate_stream(self, lines: Iterable[str]) -> Iterator[str]:
        """Translate an unbounded stream chunk by chunk, keeping the order; yields one line each."""
        it = iter(lines)
        while chunk := list(islice(it, CHUNK_LINES)):
            yield from self.translate([line.rstrip("\n") for line in chunk])


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


def repl(translator: Translator, show_attention: bool, attention_png: str | None) -> None:
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
        if result.attention is None:
            continue
        if show_attention:
            print(format_attention(result.src_pieces, result.tgt_pieces, result.attention))
        if attention_png:
            save_heatmap(
                result.src_pieces, result.tgt_pieces, result.attention, attention_png, line
            )
            print(f"(attention map written to {attention_png})", file=sys.stderr)


def translate_main(cfg: TranslateRunConfig) -> None:
    translator = Translator.from_checkpoint(cfg.ckpt, cfg.decode, cfg.device)
    if cfg.input is None and cfg.output is None and sys.stdin.isatty():
        repl(translator, cfg.show_attention, cfg.attention_png)
        return
    source = _open_text(cfg.input, "r", sys.stdin)
    sink = _open_text(cfg.output, "w", sys.stdout)
    try:
        for text in translator.translate_stream(source):
            sink.write(text + "\n")
        sink.flush()
    finally:
        if cfg.input is not None:
            source.close()
        if cfg.output is not None:
            sink.close()
        else:
            sink.detach()  # leave sys.stdout usable
