"""Learning the lexical table of `nmt.lexicon.Lexicon`: IBM Model 1 (Brown et al. 1993) by EM over
the training pairs, once per run before the first update; the table travels with every checkpoint
as lexicon.pt and gives `decode.shortlist` its shortlists.

Memory stays bounded whatever the corpus: the table is learned on at most SAMPLE_PAIRS pairs (a
reproducible sample; all of Multi30k), and each EM iteration walks them in chunks of at most
CHUNK_PAIRS (source token, target token) pairs. Only the distinct (source id, target id) pairs
and their probabilities are kept across chunks.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch import Tensor

from nmt.config import SHORTLIST_MAX
from nmt.data.cache import digest
from nmt.data.splits import Encoded
from nmt.data.tokenized import TokenizedCorpus
from nmt.lexicon import Lexicon, read_lexicon
from nmt.tokenizer import EOS, Vocabs

LEXICON_VERSION = 1  # bump when how the table is learned changes: cached ones are then not read
ITERATIONS = 5  # EM iterations of Model 1; the ranking of the top translations settles by then
SAMPLE_PAIRS = 100_000  # sentence pairs the table is learned on, at most
# token pairs of one E-step chunk: bounds the memory (tens of bytes a pair); on Multi30k (7.6M
# pairs) chunks of 2M give the table of a single pass, entry for entry
CHUNK_PAIRS = 2_000_000


def corpus_lexicon(corpus: TokenizedCorpus, vocabs: Vocabs, max_len: int) -> Lexicon:
    """The lexicon of a tokenized training split's pairs within `max_len`, learned once and kept
    beside the split in the cache."""
    path = corpus.path / f"lexicon-{digest(max_len, SAMPLE_PAIRS, LEXICON_VERSION)}.pt"
    lexicon = read_lexicon(path)
    if lexicon is None:
        rows = sample_rows(len(corpus))
        lexicon = learn_from_arrays(*corpus.flat(rows), len(vocabs.src), len(vocabs.tgt))
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        lexicon.save(tmp)
        os.replace(tmp, path)  # a reader sees the whole file or none
    return lexicon


def learn_lexicon(data: Encoded, src_vocab: int, tgt_vocab: int) -> Lexicon:
    """IBM Model 1 over the pairs of `data` (id lists; see `learn_from_arrays`)."""
    return learn_from_arrays(
        np.fromiter((i for s in data.src for i in s), dtype=np.int64),
        np.array([len(s) for s in data.src], dtype=np.int64),
        np.fromiter((i for t in data.tgt for i in t), dtype=np.int64),
        np.array([len(t) for t in data.tgt], dtype=np.int64),
        src_vocab,
        tgt_vocab,
    )


def sample_rows(pairs: int, most: int = SAMPLE_PAIRS) -> np.ndarray:
    """The examples the table is learned on: all, or `most` of them drawn with a fixed seed."""
    if pairs <= most:
        return np.arange(pairs)
    return np.sort(np.random.default_rng(0).choice(pairs, size=most, replace=False))


def learn_from_arrays(
    src: np.ndarray,
    src_lens: np.ndarray,
    tgt: np.ndarray,
    tgt_lens: np.ndarray,
    src_vocab: int,
    tgt_vocab: int,
) -> Lexicon:
    """IBM Model 1 by EM over sentence pairs given as flat id arrays and their lengths (sources
    end with EOS, which plays NULL: the source word that target words without a counterpart align
    to). Vectorised within a chunk over every (source token, target token) pair of its sentences:
    P pairs, T target tokens; U distinct (source id, target id) pairs over the whole corpus."""
    # int32 throughout where the ids allow it: the chunk's P-sized temporaries are most of the
    # memory, and a (source, target) key fits in 32 bits for vocabularies up to 46,340 each
    wide = src_vocab * tgt_vocab >= 2**31
    ids = torch.int64 if wide else torch.int32
    src, tgt = torch.from_numpy(src).to(ids), torch.from_numpy(tgt).to(ids)
    src_lens = torch.from_numpy(src_lens).to(torch.int64)
    tgt_lens = torch.from_numpy(tgt_lens).to(torch.int64)
    src_start = torch.cumsum(src_lens, 0) - src_lens
    tgt_start = torch.cumsum(tgt_lens, 0) - tgt_lens
    chunks = _chunks(src_lens * tgt_lens, CHUNK_PAIRS)

    def pairs(first: int, last: int) -> tuple[Tensor, Tensor, int]:
        """Sentences first..last-1: (key of each pair (P,), its target token (P,), T)."""
        lens_t = tgt_lens[first:last]
        t_lo, t_hi = int(tgt_start[first]), int(tgt_start[last - 1] + lens_t[-1])
        sentence = torch.repeat_interleave(torch.arange(first, last), lens_t)  # (T,)
        per_token = src_lens[sentence]  # each target token pairs with its sentence's source
        token = torch.repeat_interleave(torch.arange(t_hi - t_lo, dtype=torch.int32), per_token)
        first_pair = (torch.cumsum(per_token, 0) - per_token).to(torch.int32)
        offset = torch.arange(token.numel(), dtype=torch.int32) - first_pair[token]  # (P,)
        start = (src_start[sentence]).to(torch.int32)[token]  # (P,): each pair's source start
        pair_src = src[start + offset]
        del offset, start
        return pair_src * tgt_vocab + tgt[t_lo:t_hi][token], token, t_hi - t_lo

    distinct = torch.unique(torch.cat([torch.unique(pairs(a, b)[0]) for a, b in chunks]))  # (U,)
    d_src, d_tgt = (distinct // tgt_vocab).long(), (distinct % tgt_vocab).long()
    prob = torch.ones(distinct.numel())  # t(target | source); uniform to start
    for _ in range(ITERATIONS):
        counts = torch.zeros(distinct.numel())
        for a, b in chunks:
            keys, token, n_tokens = pairs(a, b)
            which = torch.searchsorted(distinct, keys, out_int32=not wide)
            weight = prob[which]  # (P,)
            norm = torch.zeros(n_tokens).index_add_(0, token, weight)  # (T,)
            counts.index_add_(0, which, weight / norm[token])
        totals = torch.zeros(src_vocab).index_add_(0, d_src, counts)
        prob = counts / totals[d_src]
    return _ranked(prob, d_src, d_tgt, tgt.long(), src_vocab, tgt_vocab)


def _chunks(pairs_per_sentence: Tensor, most: int) -> list[tuple[int, int]]:
    """Consecutive sentence ranges [a, b) of at most `most` token pairs (at least one sentence)."""
    ends = torch.cumsum(pairs_per_sentence, 0).tolist()
    chunks, first, base = [], 0, 0
    for i, end in enumerate(ends):
        if end - base > most and i > first:
            chunks.append((first, i))
            first, base = i, ends[i - 1]
    if ends:
        chunks.append((first, len(ends)))
    return chunks


def _ranked(
    prob: Tensor, d_src: Tensor, d_tgt: Tensor, tgt: Tensor, src_vocab: int, tgt_vocab: int
) -> Lexicon:
    """Per source id, its targets by probability: sort by probability, then (stably) by source;
    and the target ids by frequency."""
    order = torch.sort(prob, descending=True, stable=True).indices
    order = order[torch.sort(d_src[order], stable=True).indices]
    srcs, tgts = d_src[order], d_tgt[order]
    starts = torch.cumsum(torch.bincount(srcs, minlength=src_vocab), 0)
    rank = torch.arange(srcs.numel()) - (starts - torch.bincount(srcs, minlength=src_vocab))[srcs]
    top = rank < SHORTLIST_MAX
    translations = torch.full((src_vocab, SHORTLIST_MAX), -1, dtype=torch.long)
    translations[srcs[top], rank[top]] = tgts[top]
    translations[EOS] = -1  # NULL's "translations" are the words nothing aligns to
    frequency = torch.bincount(tgt, minlength=tgt_vocab)
    frequent = torch.sort(frequency, descending=True, stable=True).indices
    return Lexicon(translations, frequent)
