"""A lexical translation table learned from the training corpus, and the shortlists it gives.

The output layer is the largest product of a recurrent decoder's step: (R, H) x (H, V), and the
softmax and top-k after it run over all V target pieces too. A sentence needs few of them.
`Lexicon` keeps, for every source piece, the target pieces most likely to translate it (IBM Model
1, Brown et al. 1993, trained by EM on the training pairs), and the target pieces by frequency.
`decode.shortlist=N` then scores only, per sentence, the N best translations of each of its
source pieces, the `decode.shortlist_frequent` most frequent target pieces and the special ones:
Marian's lexical shortlists and CTranslate2's vocabulary maps work the same way. It is an
approximation (a piece outside the list cannot be produced, and the softmax is taken over the
list), so it is off by default; docs/benchmarks.md measures what it costs in BLEU and gains in
speed.

The table is learned by `nmt-train` before the first update (seconds) and travels with every
checkpoint as lexicon.pt. For a checkpoint written without one: `python -m nmt.lexicon CKPT_DIR`.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from nmt.config import SHORTLIST_MAX
from nmt.data import Encoded
from nmt.errors import NMTError
from nmt.models.seq2seq import OutputRows
from nmt.tokenizer import EOS

LEXICON_FILE = "lexicon.pt"
NO_LEXICON = (
    "decode.shortlist needs the checkpoint's lexicon.pt, and this checkpoint has none (written "
    "before nmt learned one): python -m nmt.lexicon CKPT_DIR learns it"
)
SPECIALS = EOS + 1  # PAD, UNK, BOS, EOS: ids 0..3 on both sides, always scored
ITERATIONS = 5  # EM iterations of Model 1; the ranking of the top translations settles by then


@dataclass
class Shortlist:
    """The target pieces one batch scores. ids (C,) ascending, so the specials come first and
    keep their ids (EOS is column EOS); allowed (B, C): which of them each sentence may produce;
    output: the output layer's rows for `ids` (filled in by the search, once per batch)."""

    ids: Tensor
    allowed: Tensor
    output: OutputRows | None = None


@dataclass
class Lexicon:
    translations: Tensor  # (V_src, SHORTLIST_MAX) target ids, best first; -1 where there are fewer
    frequent: Tensor  # (V_tgt,) every target id, the most frequent in training first

    @property
    def shape(self) -> tuple[int, int]:
        """(source, target) vocabulary sizes the table was learned for."""
        return self.translations.size(0), self.frequent.numel()

    def shortlist(self, src: Tensor, per_source: int, frequent: int, columns: int = 0) -> Shortlist:
        """The pieces a batch of sources src (B, S) may produce, on src's device. The batch
        scores at least `columns` pieces (the most frequent fill up the union, allowed to no
        sentence), so that a beam's 2K candidates always exist, however short the lists."""
        device = src.device
        if self.translations.device != device:  # once per device: later batches find it there
            self.translations = self.translations.to(device)
            self.frequent = self.frequent.to(device)
        batch, vocab = src.size(0), self.frequent.numel()
        allowed = torch.zeros((batch, vocab), dtype=torch.bool, device=device)
        allowed[:, :SPECIALS] = True
        allowed[:, self.frequent[:frequent]] = True
        candidates = self.translations[src, :per_source]  # (B, S, n); PAD and EOS rows are -1
        sentence = torch.arange(batch, device=device).view(-1, 1, 1).expand_as(candidates)
        found = candidates >= 0
        allowed[sentence[found], candidates[found]] = True
        scored = allowed.any(dim=0)
        scored[self.frequent[:columns]] = True
        ids = scored.nonzero().squeeze(1)
        return Shortlist(ids, allowed[:, ids])

    def save(self, path: Path) -> None:
        table = {"translations": self.translations.int(), "frequent": self.frequent.int()}
        torch.save({k: v.cpu() for k, v in table.items()}, path)


def load_lexicon(directory: Path) -> Lexicon | None:
    """The lexicon of a run or checkpoint directory, None when it has none."""
    path = Path(directory) / LEXICON_FILE
    if not path.is_file():
        return None
    try:
        table = torch.load(path, map_location="cpu", weights_only=True)
        return Lexicon(table["translations"].long(), table["frequent"].long())
    except Exception as err:  # a damaged file: say which
        raise NMTError(f"cannot read the lexicon {path}: {err}") from err


def learn_lexicon(data: Encoded, src_vocab: int, tgt_vocab: int) -> Lexicon:
    """IBM Model 1 by EM over the training pairs (sources end with EOS, which plays NULL: the
    source word that target words without a counterpart align to).

    Vectorised over every (source token, target token) pair of every sentence: P pairs, T target
    tokens, U distinct (source id, target id) pairs. Multi30k: P = 5M, 3 s on 2 cores.
    """
    src_lens = torch.tensor([len(s) for s in data.src])  # EOS included: NULL is a position
    tgt_lens = torch.tensor([len(t) for t in data.tgt])
    src_flat = torch.tensor([i for s in data.src for i in s])
    tgt_flat = torch.tensor([i for t in data.tgt for i in t])
    src_start = torch.cumsum(src_lens, 0) - src_lens
    tgt_sentence = torch.repeat_interleave(torch.arange(len(data)), tgt_lens)  # (T,)
    # each target token pairs with every source position of its sentence
    per_token = src_lens[tgt_sentence]  # (T,)
    token = torch.repeat_interleave(torch.arange(tgt_flat.numel()), per_token)  # (P,)
    first = torch.cumsum(per_token, 0) - per_token
    offset = torch.arange(token.numel()) - first[token]
    pair_src = src_flat[src_start[tgt_sentence[token]] + offset]
    keys = pair_src * tgt_vocab + tgt_flat[token]
    del pair_src, offset, first
    distinct, which = torch.unique(keys, return_inverse=True)  # (U,), (P,)
    del keys
    d_src, d_tgt = distinct // tgt_vocab, distinct % tgt_vocab

    prob = torch.ones(distinct.numel())  # t(target | source); uniform to start
    for _ in range(ITERATIONS):
        weight = prob[which]  # (P,)
        norm = torch.zeros(tgt_flat.numel()).index_add_(0, token, weight)  # (T,)
        counts = torch.zeros(distinct.numel()).index_add_(0, which, weight / norm[token])
        totals = torch.zeros(src_vocab).index_add_(0, d_src, counts)
        prob = counts / totals[d_src]

    # per source id, its targets by probability: sort by probability, then (stably) by source
    order = torch.sort(prob, descending=True, stable=True).indices
    order = order[torch.sort(d_src[order], stable=True).indices]
    srcs, tgts = d_src[order], d_tgt[order]
    starts = torch.cumsum(torch.bincount(srcs, minlength=src_vocab), 0)
    rank = torch.arange(srcs.numel()) - (starts - torch.bincount(srcs, minlength=src_vocab))[srcs]
    top = rank < SHORTLIST_MAX
    translations = torch.full((src_vocab, SHORTLIST_MAX), -1, dtype=torch.long)
    translations[srcs[top], rank[top]] = tgts[top]
    translations[EOS] = -1  # NULL's "translations" are the words nothing aligns to
    frequency = torch.bincount(tgt_flat, minlength=tgt_vocab)
    frequent = torch.sort(frequency, descending=True, stable=True).indices
    return Lexicon(translations, frequent)


def main(argv: list[str] | None = None) -> None:
    """Learn the lexicon of a checkpoint written without one, from its run's training data."""
    from nmt.checkpoint import load_checkpoint
    from nmt.config import Split
    from nmt.data import encode, filter_length, read_split

    parser = argparse.ArgumentParser(
        prog="python -m nmt.lexicon",
        description="learn lexicon.pt (for decode.shortlist) into a checkpoint directory",
    )
    parser.add_argument("ckpt", help="checkpoint directory, e.g. runs/NAME/checkpoints/best")
    args = parser.parse_args(argv)
    try:
        ckpt = load_checkpoint(args.ckpt)
        data = ckpt.config.data
        pairs = filter_length(encode(read_split(data, Split.train), ckpt.vocabs), data.max_len)
        lexicon = learn_lexicon(pairs, len(ckpt.vocabs.src), len(ckpt.vocabs.tgt))
        lexicon.save(ckpt.path / LEXICON_FILE)
    except NMTError as err:
        sys.exit(f"nmt: error: {err}")
    print(f"wrote {ckpt.path / LEXICON_FILE} ({len(pairs)} training pairs)")


if __name__ == "__main__":
    main()
