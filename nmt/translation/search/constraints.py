"""Positive constraints: phrases every returned hypothesis must contain, each contiguous.

Beam search with dynamic beam allocation (Hu et al., NAACL 2019), vectorized over the batch: no
loop over sentences, rows or phrases runs per step, and a step reads nothing back to the host.

Progress. A sentence has P phrases (piece sequences). Each hypothesis carries, per phrase, how
many of its pieces end the hypothesis: a Knuth-Morris-Pratt state, `matched` (N, W, P), which
rides along with the beam (its rows are picked with the beam's). A piece that continues a phrase
moves its state on by one; any other piece resets it, not to 0 but to the longest start of the
phrase that still ends the hypothesis (phrase "a a b" after "a a", then "a": still "a a", so
"a a a b" meets it). A phrase whose state reaches its length is met, and stays met. Phrases are
followed independently, so one piece may advance several, and overlapping phrases may share
pieces ("a b" and "b c" are both met by "a b c").

Banks. A hypothesis's bank is the number of constraint pieces it has: the pieces of its met
phrases plus the most of any unmet phrase (0 .. `total`). What it still needs, `total - bank`,
is an upper bound on the pieces that meet every phrase (finish the most advanced one, write the
others in full). Each step:
  1. EOS is blocked (-inf) in every row that has not met all of its phrases;
  2. candidates, per sentence: the 2K best (row, piece) extensions; each row's next piece of
     every phrase it has not met; each row's best piece. Duplicates are dropped (-inf);
  3. a candidate that could no longer meet its phrases within the length limit (what it needs
     exceeds the steps left) is dropped (-inf), except on a forced prefix's rows;
  4. allocation: candidates are ranked within their banks by score, then taken round-robin over
     the banks, the highest bank first (the best of every bank, then the second of every bank,
     ...): a bank's share of the beam is equal, and what a bank cannot fill flows to the others.
     The first 2K of that order are the step's candidates, and the beam's K-best rule runs on
     them as on the score order (beam.py).
So a finished hypothesis (EOS, or the length limit) has met every phrase; with the feasibility
rule some candidate always can (barring a banned phrase or `no_repeat_ngram` that blocks a
phrase's piece: then the sentence has no hypothesis, and its `Decoded.failure` says so). A sentence
may get fewer than n_best hypotheses: those that could no longer meet the phrases are dropped, and
when none is left the sentence is done.

A forced prefix's pieces count toward the constraints: the prefix is part of the hypothesis.
`nmt.translation.phrases.pieces_needed` is what the search's feasibility rule starts from after a
prefix, and the request's length check (`nmt.translation.phrases.problem`) uses it. Greedy and
sampling keep one path per row, with no beam to allocate: they refuse constraints
(`nmt.config.NEED_BEAM`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from nmt.errors import NMTError
from nmt.tokenizer import EOS
from nmt.translation.phrases import jumps
from nmt.translation.search.rules import NEG_INF


def _padded(table: list[list[int]], size: int) -> list[list[int]]:
    """A phrase's `jumps` (n, n) padded with 0 to (size, size)."""
    n = len(table)
    return [row + [0] * (size - n) for row in table] + [[0] * size] * (size - n)


@dataclass
class Constraints:
    """The phrases of one batch of B sentences: at most P phrases of at most L pieces each.

    phrases (B, P, L) piece ids (vocabulary ids, or a shortlist's columns after `to_columns`),
    -1 past a phrase's end and for a sentence's missing phrases; lengths (B, P), 0 for a missing
    phrase (met from the start); jumps (B, P, L, L) each phrase's `nmt.translation.phrases.jumps`;
    total (B,) each sentence's pieces in all, its highest bank; levels: the batch's highest bank +
    1."""

    phrases: Tensor
    lengths: Tensor
    jumps: Tensor
    total: Tensor
    levels: int
    # `_live`'s gathered tensors and the `sentence` they are for
    _cached: tuple[Tensor, ...] | None = field(default=None, repr=False)

    @classmethod
    def build(cls, per_sentence: list[list[list[int]]], device: torch.device) -> Constraints | None:
        """From each sentence's phrases (target id sequences, none empty); None when no sentence
        has one. A phrase given twice is kept once."""
        per_sentence = [list(map(list, dict.fromkeys(map(tuple, ps)))) for ps in per_sentence]
        if not any(per_sentence):
            return None
        if any(not p for ps in per_sentence for p in ps):
            raise NMTError("a constraint has no pieces")
        most = max(len(ps) for ps in per_sentence)
        longest = max(len(p) for ps in per_sentence for p in ps)
        # plain lists, one tensor each: a batch of 64 sentences builds in about a millisecond
        missing = [-1] * longest
        phrases = [
            [p + missing[len(p) :] for p in ps] + [missing] * (most - len(ps))
            for ps in per_sentence
        ]
        lengths = [[len(p) for p in ps] + [0] * (most - len(ps)) for ps in per_sentence]
        empty = [[0] * longest] * longest
        tables = [
            [_padded(jumps(p), longest) for p in ps] + [empty] * (most - len(ps))
            for ps in per_sentence
        ]
        lengths_t = torch.tensor(lengths, dtype=torch.long)
        total = lengths_t.sum(1)
        return cls(
            torch.tensor(phrases, dtype=torch.long, device=device), lengths_t.to(device),
            torch.tensor(tables, dtype=torch.long, device=device), total.to(device),
            int(total.max()) + 1,
        )  # fmt: skip

    def pieces(self) -> Tensor:
        """(B, P * L) every phrase's pieces, -1 padded: what a sentence's shortlist must allow."""
        return self.phrases.flatten(1)

    def to_columns(self, ids: Tensor) -> Constraints:
        """The same phrases over a shortlist's columns; ids (C,) its sorted vocabulary ids, which
        hold every phrase's pieces (`pieces` went into the shortlist)."""
        columns = torch.searchsorted(ids, self.phrases.clamp(min=0))
        phrases = torch.where(self.phrases >= 0, columns, self.phrases)
        return Constraints(phrases, self.lengths, self.jumps, self.total, self.levels)

    def start(self) -> Tensor:
        """The progress of the first step's rows, one per sentence: (B, 1, P), nothing matched."""
        return torch.zeros_like(self.lengths).unsqueeze(1)

    def allocate(
        self,
        sentence: Tensor,
        matched: Tensor,
        scores: Tensor,
        log_probs: Tensor,
        t: int,
        max_len: Tensor,
        forced: Tensor | None,
        count: int,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One step's candidates by dynamic beam allocation (see the module's notes).

        sentence (N,) each live sentence's index in the batch; matched (N, W, P) its rows'
        progress; scores (N, W); log_probs (R, V) the rows' next pieces (R = N * W; EOS is
        blocked here, in place, where a row has not met its phrases); max_len (B,) the length
        limits; forced (R,) the piece each row is forced to take, -1 where free (None: none is).
        Returns `count` candidates per sentence in allocation order: their scores (N, count) and
        indices into (W * V) as a top-k over `scores + log_probs` gives them, and for each its
        progress (N, count, P) and bank (N, count)."""
        live, width = scores.shape
        vocab = log_probs.size(1)
        phrases, lengths, jumps, total, limit = self._live(sentence, max_len)
        log_probs[:, EOS].masked_fill_(~(matched >= lengths).all(-1).view(-1), NEG_INF)
        scored = (scores.view(-1, 1) + log_probs).view(live, width * vocab)

        # the candidates (N, M) as indices into W * V, M = A + W + W * P: the A = min(2K, W * V)
        # best of the sentence, each row's best, each row's next piece of every phrase
        best = scored.topk(min(count, width * vocab), dim=1)[1]
        offset = torch.arange(width, device=scores.device).unsqueeze(1) * vocab  # (W, 1)
        row_best = log_probs.max(1).indices.view(live, width) + offset[:, 0]  # (N, W)
        at = matched.clamp(max=phrases.size(-1) - 1).unsqueeze(-1)  # (N, W, P, 1)
        next_piece = phrases.unsqueeze(1).expand(-1, width, -1, -1).gather(3, at).squeeze(3)
        pool = torch.cat([best, row_best, (next_piece.clamp(min=0) + offset).flatten(1)], dim=1)
        size, fixed = pool.size(1), best.size(1) + width
        pool_scores = scored.gather(1, pool)
        # a met phrase has no next piece: its candidate is invalid (-inf), and gets a key of its
        # own below, so that it never hides a valid candidate of the same (row, piece)
        invalid = (matched >= lengths).flatten(1)  # (N, W * P)
        pool_scores[:, fixed:].masked_fill_(invalid, NEG_INF)
        key = pool.clone()
        key[:, fixed:].masked_fill_(invalid, width * vocab)
        key += torch.arange(size, device=pool.device) * (key >= width * vocab)
        # one candidate per (row, piece): sorted keys put the duplicates side by side
        sorted_key, by_key = key.sort(dim=1, stable=True)
        repeat = torch.zeros_like(pool, dtype=torch.bool)
        repeat[:, 1:] = sorted_key[:, 1:] == sorted_key[:, :-1]
        pool_scores.masked_fill_(repeat.scatter(1, by_key, repeat), NEG_INF)

        # each candidate's progress and bank
        parent = pool // vocab  # (N, M) its row within the sentence
        before = matched.gather(1, parent.unsqueeze(-1).expand(-1, -1, matched.size(-1)))
        reached = self._advance(phrases, lengths, jumps, before, pool % vocab)  # (N, M, P)
        met = reached >= lengths
        bank = torch.where(met, lengths, 0).sum(-1) + torch.where(met, 0, reached).amax(-1)
        # too far from its phrases to meet them in the steps left (forced rows excepted: the
        # prefix overrides, and `problem` checked that what it leaves fits)
        late = total - bank > limit - (t + 1)  # (N, M)
        if forced is not None:
            late &= forced.view(live, width).gather(1, parent) < 0
        pool_scores.masked_fill_(late, NEG_INF)

        # allocation: rank within the bank by score, then round-robin over the banks, highest
        # first; -inf candidates last
        ranked, by_score = pool_scores.sort(dim=1, descending=True, stable=True)
        banks = bank.gather(1, by_score)
        in_bank = banks.unsqueeze(-1) == torch.arange(self.levels, device=bank.device)
        rank = (in_bank.cumsum(1) * in_bank).sum(-1)  # (N, M): 1 + place within its bank
        order_key = rank * self.levels - banks
        order_key.masked_fill_(ranked == NEG_INF, (size + 1) * self.levels)
        order = by_score.gather(1, order_key.argsort(dim=1, stable=True)[:, : min(count, size)])
        progress = reached.gather(1, order.unsqueeze(-1).expand(-1, -1, reached.size(-1)))
        return pool_scores.gather(1, order), pool.gather(1, order), progress, bank.gather(1, order)

    def _live(self, sentence: Tensor, max_len: Tensor) -> tuple[Tensor, ...]:
        """The live sentences' phrases (N, P, L), lengths (N, 1, P), jumps (N, P * L * L),
        totals (N, 1) and length limits (N, 1): gathered again only when sentences leave the
        batch (the beam then makes a new `sentence` tensor)."""
        if self._cached is None or self._cached[0] is not sentence:
            self._cached = (
                sentence, self.phrases[sentence], self.lengths[sentence].unsqueeze(1),
                self.jumps[sentence].flatten(1), self.total[sentence].unsqueeze(1),
                max_len[sentence].unsqueeze(1),
            )  # fmt: skip
        return self._cached[1:]

    @staticmethod
    def _advance(
        phrases: Tensor, lengths: Tensor, jumps: Tensor, matched: Tensor, piece: Tensor
    ) -> Tensor:
        """Progress (N, M, P) after candidates with progress `matched` (N, M, P) produce `piece`
        (N, M): a met phrase stays met; an unmet one follows its `jumps` (phrases (N, P, L),
        lengths (N, 1, P), jumps (N, P * L * L) as `_live` gives them)."""
        longest = phrases.size(-1)
        hit = phrases.unsqueeze(1) == piece.view(*piece.shape, 1, 1)  # (N, M, P, L)
        # each phrase's row of jumps at its state: (N, M, P, L); a piece that is not in the
        # phrase sends it back to 0, one that is takes the jump of (any of) its places in it
        state = matched.clamp(max=longest - 1)
        p = torch.arange(matched.size(-1), device=matched.device)
        row = ((p * longest + state) * longest).unsqueeze(-1) + torch.arange(
            longest, device=matched.device
        )
        jumped = jumps.gather(1, row.flatten(1)).view_as(hit)
        moved = torch.where(hit, jumped, 0).amax(-1)
        return torch.where(matched >= lengths, matched, moved)


def follow(reached: Tensor, bank: Tensor, pick: Tensor) -> tuple[Tensor, Tensor]:
    """The progress (N, K, P) and banks (N, K) of the candidates the beam `pick`s (N, K)."""
    index = pick.unsqueeze(-1).expand(-1, -1, reached.size(-1))
    return reached.gather(1, index), bank.gather(1, pick)
