"""Hard constraints on the next token: they set log-probabilities to -inf (or force one token).

`constrain` blocks an early EOS and repeated n-grams, `force` makes a row take its forced prefix
piece, and `Banned` blocks phrases that must never appear. All work on R rows of next-token
log-probabilities (R, V) at once, in place, and leave the unblocked values as they are (no
renormalisation), so a hypothesis is scored as the model scores it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.tokenizer import EOS

NEG_INF = float("-inf")


def constrain(
    log_probs: Tensor, t: int, min_len: Tensor, no_repeat_ngram: int, history: Tensor | None
) -> Tensor:
    """Apply the hard constraints to next-token log-probabilities, in place.

    log_probs (R, V) for step t (t tokens generated so far); min_len (R,); history (R, t) those
    tokens, needed only for no_repeat_ngram. EOS is blocked while a row is shorter than its
    minimum; a token that would complete an n-gram already in the row's history is blocked.
    Blocked tokens get -inf, the rest are left as they are (not renormalised).
    """
    log_probs[:, EOS].masked_fill_(t < min_len, NEG_INF)
    n = no_repeat_ngram
    if n and t >= n and history is not None:
        grams = history.unfold(1, n, 1)  # (R, t - n + 1, n): every n-gram so far
        prefix = history[:, t - n + 1 :]  # (R, n - 1): what the next token would extend
        seen = (grams[:, :, :-1] == prefix.unsqueeze(1)).all(dim=-1)  # (R, t - n + 1)
        banned = torch.zeros_like(log_probs).scatter_reduce(
            1, grams[:, :, -1], seen.to(log_probs.dtype), reduce="amax"
        )
        log_probs.masked_fill_(banned > 0, NEG_INF)
    return log_probs


def force(log_probs: Tensor, forced: Tensor, scores: Tensor) -> Tensor:
    """Rows with forced[r] >= 0 may take only that token, scored scores[r]; in place.
    log_probs (R, V), forced (R,), scores (R,) the forced tokens' log-probabilities."""
    rows = forced.unsqueeze(1) >= 0  # (R, 1)
    column = forced.clamp(min=0).unsqueeze(1)  # (R, 1)
    log_probs.masked_fill_(rows, NEG_INF)
    kept = torch.where(rows, scores.unsqueeze(1), log_probs.gather(1, column))  # (R, 1)
    return log_probs.scatter_(1, column, kept)


@dataclass
class Banned:
    """Piece sequences no hypothesis may contain (negative constraints), one set for a batch.

    A phrase of one piece is a plain mask: that piece is blocked at every step. A longer one is
    blocked at its last piece, in the rows whose history ends with its other pieces, so a
    hypothesis can never complete it; nothing rides along with a hypothesis but its history,
    which the beam already reorders. Each step costs one comparison per context length:
    (R, P, n) for P phrases of n + 1 pieces, no loop over rows or phrases.

    single (P1,) the one-piece phrases; groups: per context length n >= 1 (ascending), the
    phrases' first n pieces (P, n) and their last pieces (P,). Ids are vocabulary ids, or a
    shortlist's columns after `to_columns`.
    """

    single: Tensor
    groups: list[tuple[Tensor, Tensor]]

    @classmethod
    def build(cls, phrases: list[list[int]], device: torch.device) -> Banned | None:
        """From target id sequences (none empty); None when there are none."""
        if not phrases:
            return None
        single = sorted({p[0] for p in phrases if len(p) == 1})
        by_length: dict[int, list[list[int]]] = {}
        for p in phrases:
            if len(p) > 1:
                by_length.setdefault(len(p) - 1, []).append(p)
        groups = []
        for n in sorted(by_length):
            rows = torch.tensor(by_length[n], dtype=torch.long, device=device)  # (P, n + 1)
            groups.append((rows[:, :n], rows[:, n]))
        return cls(torch.tensor(single, dtype=torch.long, device=device), groups)

    @property
    def context(self) -> int:
        """The most pieces of history a step reads (0: only one-piece phrases)."""
        return self.groups[-1][0].size(1) if self.groups else 0

    def to_columns(self, ids: Tensor) -> Banned:
        """The same phrases over a shortlist's columns; ids (C,) its sorted vocabulary ids. A
        phrase with a piece outside the shortlist cannot be produced, so it is dropped."""

        def columns(x: Tensor) -> tuple[Tensor, Tensor]:
            at = torch.searchsorted(ids, x).clamp(max=ids.numel() - 1)
            return at, ids[at] == x

        at, found = columns(self.single)
        single = at[found]
        groups = []
        for context, last in self.groups:
            rows = torch.cat([context, last.unsqueeze(1)], dim=1)  # (P, n + 1)
            at, found = columns(rows)
            at = at[found.all(dim=1)]
            if at.numel():
                groups.append((at[:, :-1], at[:, -1]))
        return Banned(single, groups)

    def block(self, log_probs: Tensor, history: Tensor | None) -> Tensor:
        """Set to -inf, in place, every token that would complete a phrase. log_probs (R, V) for
        the next step; history (R, t) the tokens so far (None: no history is read)."""
        if self.single.numel():
            log_probs.index_fill_(1, self.single, NEG_INF)
        t = 0 if history is None else history.size(1)
        for context, last in self.groups:
            n = context.size(1)
            if t < n:
                break  # groups are sorted by n: no longer context fits either
            tail = history[:, t - n :]  # (R, n)
            hit = (tail.unsqueeze(1) == context.unsqueeze(0)).all(dim=-1)  # (R, P)
            column = last.expand(log_probs.size(0), -1)  # (R, P)
            values = log_probs.gather(1, column).masked_fill(hit, NEG_INF)
            # amin: two phrases with the same last piece, one hit, block it (scatter_ would keep
            # either value)
            log_probs.scatter_reduce_(1, column, values, reduce="amin")
        return log_probs
