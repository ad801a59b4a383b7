"""How well a translation and its source agree by the checkpoint's lexical table (`nmt.lexicon`):
two features of a sentence's confidence beside the model's own probabilities
(`nmt.translation.confidence`), in the spirit of QuEst's lexical translation features. They
catch what a fluent, confident translation can still do wrong: add words the source does not
hold, and leave out words it does.

- precision: each target piece (but the FREQUENT most frequent in training, function words) is
  given its best rank among the source pieces' translations (0: the first translation of one of
  them; UNLISTED where none lists it) as log(1 + rank), averaged over the pieces;
- recall: each source piece the table knows is given the best rank of its translations that the
  target holds, log(1 + rank), averaged.

Lower is better for both. Measured on Multi30k (docs/confidence.md): with them the sentence
predictor ranks translations by chrF closer to TP + 0.05 than without. A model without a table
(an import) reads 0 for both, and its fit gives them no weight.

    agreement(lexicon, [[12, 40, 3]], [[7, 9, 3]])   # [(0.35, 0.0)]: (precision, recall)
"""

from __future__ import annotations

import weakref

import torch

from nmt.lexicon import Lexicon
from nmt.tokenizer import EOS

FREQUENT = 50  # the most frequent target pieces, left out of precision
LISTED = 32  # the translations of a source piece read, of the SHORTLIST_MAX the lexicon keeps
UNLISTED = LISTED  # the rank of a piece no list holds
_RANKS = torch.arange(LISTED, dtype=torch.int16)
CHUNK = 256  # pairs at a time at most: two (pairs, target vocabulary) tables
CELLS = 1 << 22  # ... and at most this many cells in each (8 MB of int16, 4 MB of bool)
_TABLES: weakref.WeakKeyDictionary[Lexicon, torch.Tensor] = weakref.WeakKeyDictionary()


def agreement(
    lexicon: Lexicon | None, sources: list[list[int]], targets: list[list[int]]
) -> list[tuple[float, float]]:
    """(precision, recall) of each (source ids, target ids) pair, specials (ids <= EOS: the end
    of sentence, a tag's padding) left out; (0, 0) for every pair without a lexicon."""
    if lexicon is None:
        return [(0.0, 0.0)] * len(sources)
    rows = max(1, min(CHUNK, CELLS // lexicon.frequent.numel()))  # 16 for NLLB's 256k pieces
    out: list[tuple[float, float]] = []
    for first in range(0, len(sources), rows):
        out += _chunk(lexicon, sources[first : first + rows], targets[first : first + rows])
    return out


def _chunk(
    lexicon: Lexicon, sources: list[list[int]], targets: list[list[int]]
) -> list[tuple[float, float]]:
    table = _table(lexicon)  # (V_src + 1, LISTED), the last row empty: padding's
    vocab = lexicon.frequent.numel()
    src, src_real = _padded(sources, table.size(0) - 1)  # (N, S)
    tgt, tgt_real = _padded(targets, 0)  # (N, T)
    n = src.size(0)
    lists = table[src]  # (N, S, K) int32, -1 where a list is shorter
    listed = lists >= 0
    ids = lists.clamp_min(0).flatten(1).long()  # (N, S * K); empty slots point at id 0, a special
    ranks = _RANKS.expand_as(lists).masked_fill(~listed, UNLISTED).flatten(1)
    # per pair and target id: its best rank among the source pieces' translations
    best = torch.full((n, vocab), UNLISTED, dtype=torch.int16)
    best.scatter_reduce_(1, ids, ranks, reduce="amin")
    target_rank = best.gather(1, tgt)  # (N, T)
    content = tgt_real & ~torch.isin(tgt, lexicon.frequent[:FREQUENT].cpu())
    # per pair and target id: whether the translation holds it
    held = torch.zeros((n, vocab), dtype=torch.bool)
    held.scatter_(1, tgt, tgt_real)
    found = held.gather(1, ids).view_as(lists)  # (N, S, K); id 0 is never held
    source_rank = torch.where(found, _RANKS, UNLISTED).amin(2)  # (N, S)
    known = src_real & listed[:, :, 0]
    precision = _mean(torch.log1p(target_rank.float()), content)
    recall = _mean(torch.log1p(source_rank.float()), known)
    return list(zip(precision.tolist(), recall.tolist()))


def _table(lexicon: Lexicon) -> torch.Tensor:
    """The lexicon's first LISTED translations of each source piece as int32, and an empty row
    after them that padding points at; made once per lexicon."""
    cached = _TABLES.get(lexicon)
    if cached is None:
        lists = lexicon.translations[:, :LISTED].cpu().int()
        cached = torch.cat([lists, torch.full((1, lists.size(1)), -1, dtype=torch.int32)])
        _TABLES[lexicon] = cached
    return cached


def _padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, L) ids with their specials and padding as `pad`, and where the real pieces are."""
    width = max(max((len(r) for r in rows), default=0), 1)
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.long)
    real = ids > EOS
    return ids.masked_fill(~real, pad), real


def _mean(values: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Each row's mean of `values` where `keep`; 0 for a row with none kept."""
    count = keep.sum(1)
    return torch.where(count > 0, (values * keep).sum(1) / count.clamp_min(1), 0.0)
