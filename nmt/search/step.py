"""What every strategy shares: its results (`Hypothesis`, `Decoded`), the length limits, the
batch's shortlist, and one step of the model as constrained next-token log-probabilities.

`_next_log_probs` is the whole per-step path: the model's step (over the shortlist's columns
when there is one), log-softmax in fp32, the hard constraints (`nmt.search.constraints`), then
the forced prefix, which overrides them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.beam_tree import BeamTree
from nmt.config import DecodeConfig, Strategy
from nmt.errors import NMTError
from nmt.lexicon import NO_LEXICON, Lexicon, Shortlist
from nmt.models.seq2seq import Seq2Seq
from nmt.search.constraints import NEG_INF, Banned, constrain, force
from nmt.search.positive import Constraints
from nmt.tokenizer import EOS


@dataclass
class Hypothesis:
    tokens: list[int]  # target ids, without BOS and EOS
    score: float  # sum of log-probabilities, EOS included when it was produced
    normalized: float  # `score` with the length penalty: what n-best lists are sorted by
    ended: bool  # produced EOS (False: stopped by the length limit)
    attention: Tensor | None  # (steps, L, h, S) on CPU: one row per generated token (EOS incl.)
    prefix_score: float = 0.0  # log-probability of the forced prefix (0 without one)
    node: int | None = None  # its node in the batch's TreeRecorder, when one records


@dataclass
class Decoded:
    """One sentence's result: its n-best list, best first, and the search tree if recorded."""

    nbest: list[Hypothesis]
    tree: BeamTree | None = None


def _limits(cfg: DecodeConfig, src: Tensor, src_lens: Tensor) -> tuple[Tensor, Tensor]:
    """Per sentence: max and min number of generated tokens (the EOS counts toward max), on the
    device of `src`: `src_lens` stays on the CPU (packing wants it there), the limits index and
    compare with device tensors every step."""
    lens = src_lens.tolist()
    max_len = torch.tensor([cfg.max_len(n) for n in lens], device=src.device)
    min_len = torch.tensor([cfg.min_len(n) for n in lens], device=src.device)
    return max_len, min_len


def _shortlist(
    model: Seq2Seq,
    cfg: DecodeConfig,
    lexicon: Lexicon | None,
    src: Tensor,
    prefix: Tensor | None,
    banned: Banned | None = None,
    constraints: Constraints | None = None,
) -> tuple[Shortlist | None, Tensor | None, Banned | None, Constraints | None]:
    """The batch's shortlist (None without decode.shortlist), and the prefix, banned phrases and
    constraints in its columns. A sentence's shortlist allows its prefix's and its constraints'
    pieces, so that it can produce them."""
    if not cfg.shortlist:
        return None, prefix, banned, constraints
    if lexicon is None:
        raise NMTError(NO_LEXICON)
    # a beam picks among 2K candidates of the first step's single row: never fewer columns
    columns = 2 * cfg.beam_size + 1 if cfg.strategy == Strategy.beam else 0
    needed = prefix  # (B, X): the pieces each sentence must be able to produce, -1 padded
    if constraints is not None:
        pieces = constraints.pieces()
        needed = pieces if prefix is None else torch.cat([prefix, pieces], dim=1)
    shortlist = lexicon.shortlist(src, cfg.shortlist, cfg.shortlist_frequent, columns, needed)
    shortlist.output = model.output_rows(shortlist.ids)
    if prefix is not None:  # the prefix's pieces are in the shortlist: ids -> columns
        columns_of = torch.searchsorted(shortlist.ids, prefix.clamp(min=0))
        prefix = torch.where(prefix >= 0, columns_of, prefix)
    if banned is not None:
        banned = banned.to_columns(shortlist.ids)
    if constraints is not None:
        constraints = constraints.to_columns(shortlist.ids)
    return shortlist, prefix, banned, constraints


def _next_log_probs(
    model: Seq2Seq,
    prev: Tensor,
    state,
    t: int,
    min_len: Tensor,
    cfg: DecodeConfig,
    history: Tensor | None,
    shortlist: Shortlist | None,
    allowed: Tensor | None,
    forced: Tensor | None = None,
    banned: Banned | None = None,
):
    """Log-probabilities (R, V), or (R, C) over `shortlist` with `allowed` (R, C) its entries
    each row may produce; prev (R,) holds vocabulary ids, or shortlist columns; forced (R,) the
    token each row must take at this step, -1 where it is free; history (R, t) the tokens so far
    (read by no_repeat_ngram and `banned`)."""
    if shortlist is None:
        logits, weights, state = model.decode_step(prev, state)
    else:
        logits, weights, state = model.decode_step(shortlist.ids[prev], state, shortlist.output)
        logits = logits.masked_fill(~allowed, NEG_INF)
    log_probs = torch.log_softmax(logits.float(), dim=-1)  # fp32 whatever the autocast
    chosen = None
    if forced is not None:  # the forced token keeps the model's score, constraints or not
        chosen = log_probs.gather(1, forced.clamp(min=0).unsqueeze(1)).squeeze(1)
    log_probs = constrain(log_probs, t, min_len, cfg.no_repeat_ngram, history)
    if banned is not None:
        log_probs = banned.block(log_probs, history)
    if forced is not None:
        log_probs = force(log_probs, forced, chosen)
    return log_probs, weights, state


def _hypothesis(
    seq: list[int], score: float, attention: Tensor | None, cfg: DecodeConfig
) -> Hypothesis:
    """seq: every generated token, a final EOS included when there is one."""
    ended = bool(seq) and seq[-1] == EOS
    normalized = cfg.normalize(score, len(seq))
    return Hypothesis(seq[:-1] if ended else seq, score, normalized, ended, attention)
