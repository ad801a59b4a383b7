"""Vocabulary trimming of an import (`nmt-import ... keep_text=[FILES]`): the model keeps the
pieces that its tokenizer cuts the given texts into, and drops the rest of its table.

A multilingual model's table is mostly other languages' pieces: NLLB-200's has 256,206 rows, and
each decoding step multiplies the output by all of them. Trimmed to the pieces a corpus of the
languages in use needs, the embedding table and the output layer shrink to those rows, and a
step costs that much less. The specials, the ids decoding leaves out (language codes, fairseq's
extra specials) and Marian's `>>xx<<` codes are always kept. Nothing else changes: the logits of
a kept piece are the same numbers, so on a text whose pieces and whose translation's pieces are
kept, greedy search picks the same pieces (the softmax is taken over fewer of them, so beam
search's scores, and rarely its choices, move). A piece of a new text that was not kept reads as
<unk>, as any piece a vocabulary lacks does.

The importers trim their id order before the weights are converted, so the full table is never
built in nmt's layout.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

import sentencepiece as spm

from nmt.errors import NMTError
from nmt.tokenizer import EOS, clean

log = logging.getLogger(__name__)

CHUNK = 10_000  # lines encoded at a time


def pieces_used(models: Iterable[Path], files: Iterable[str]) -> set[str]:
    """Every piece the sentencepiece `models` cut the lines of `files` into (each file by every
    model: a Marian model's two sides cannot tell which file is which language)."""
    processors = [spm.SentencePieceProcessor(model_file=str(m)) for m in models]
    used: set[str] = set()
    for name in files:
        for chunk in _chunks(Path(name)):
            for sp in processors:
                for pieces in sp.Encode(chunk, out_type=str):
                    used.update(pieces)
    return used


def _chunks(path: Path) -> Iterator[list[str]]:
    if not path.is_file():
        raise NMTError(f"keep_text: {path} is not a file")
    try:
        with path.open(encoding="utf-8") as lines:
            chunk: list[str] = []
            for line in lines:
                chunk.append(clean(line))
                if len(chunk) == CHUNK:
                    yield chunk
                    chunk = []
            if chunk:
                yield chunk
    except UnicodeDecodeError as err:
        raise NMTError(f"keep_text: {path} is not UTF-8 text ({err})") from err


def trim(
    order: list[int], pieces: list[str], hidden: list[int], used: set[str]
) -> tuple[list[int], list[str], list[int]]:
    """The importer's id order (per nmt id, the source model's id whose row it takes), piece
    list and hidden ids, restricted to the specials, the hidden ids, `>>xx<<` codes and the
    pieces in `used`; ids renumbered in the same order."""
    always = set(hidden)
    keep = [
        i for i, piece in enumerate(pieces)
        if i <= EOS or i in always or piece in used or _is_code(piece)
    ]  # fmt: skip
    new = {old: k for k, old in enumerate(keep)}
    log.info("keep_text: %d of %d pieces kept", len(keep), len(pieces))
    return [order[i] for i in keep], [pieces[i] for i in keep], [new[i] for i in hidden]


def _is_code(piece: str) -> bool:
    return piece.startswith(">>") and piece.endswith("<<")
