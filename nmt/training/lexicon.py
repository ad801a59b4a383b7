"""Learning the lexical table of `nmt.lexicon.Lexicon`: IBM Model 1 (Brown et al. 1993) by EM over
the training pairs, once per run before the first update; the table travels with every checkpoint
as lexicon.pt and gives `decode.shortlist` its shortlists.
"""

from __future__ import annotations

import torch

from nmt.config import SHORTLIST_MAX
from nmt.data import Encoded
from nmt.lexicon import Lexicon
from nmt.tokenizer import EOS

ITERATIONS = 5  # EM iterations of Model 1; the ranking of the top translations settles by then


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
