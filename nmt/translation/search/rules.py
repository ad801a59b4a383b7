"""Step rules: what the search may produce next, one list applied to every step's
log-probabilities.

The list is built from the decode settings and the job's content once per job (`StepRules.build`),
and each batch adds its sentences' own (`for_batch`), in this order:

  1. minimum length (decode.min_len_a/b): EOS is blocked while a row is shorter;
  2. repetition penalty (decode.repetition_penalty): a piece the row has is scored lower;
  3. n-gram blocking (decode.no_repeat_ngram): a piece that would repeat an n-gram of the row;
  4. banned phrases: the last piece of each phrase whose other pieces end the row (`Banned`);
  5. the forced prefix, last: a row with a prefix piece at this step takes only that piece,
     scored as the model scored it before any rule, so a prefix overrides every other rule.

A rule changes the rows' log-probabilities (R, V): it sets blocked pieces to -inf and leaves the
others as they are (no renormalisation), so a hypothesis is scored as the model scores it; the
repetition penalty alone rescales some, and the score then takes the rescaled values. A rule
reads what the step says (`Step`): its number, the sentence of each row, each row's last pieces
(as many as the rules' `context` asks for), the forced pieces. With a shortlist the list is
mapped to its columns once per batch (`to_columns`), and pieces are columns throughout.

A new rule is a class with `context`, `__call__` and `to_columns`, and one line in `build`; the
setting that turns it on is named in `DecodeConfig.step_rules`, so the exported runtimes, which
apply only the rules they know, refuse it by name rather than ignore it.

Positive constraints are not a rule: they choose which candidates a beam keeps, and beam search
asks them (`nmt.translation.search.constraints`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from nmt.config import DecodeConfig
from nmt.tokenizer import EOS
from nmt.translation.search.job import SearchJob

NEG_INF = float("-inf")
ALL = 1 << 30  # a rule's `context` when it reads a row's whole history


@dataclass
class Step:
    """What a rule may read at step t (t pieces generated so far), for R rows."""

    t: int
    rows: Tensor  # (R,) the sentence of each row in its batch
    # (R, n) each row's last pieces, n >= min(t, the rules' context); None when it is 0
    history: Tensor | None
    forced: Tensor | None = None  # (R,) the piece each row must take, -1 where free
    allowed: Tensor | None = None  # (R, C) with a shortlist: the columns each row may produce
    # (R,) the forced pieces' log-probabilities before any rule: set by `StepRules`
    forced_scores: Tensor | None = None


class Rule(Protocol):
    context: int  # the pieces of a row's history it reads: 0, n, or ALL

    def __call__(self, log_probs: Tensor, step: Step) -> Tensor: ...

    def to_columns(self, ids: Tensor) -> Rule: ...


@dataclass
class MinLength:
    """EOS is blocked while a row has fewer pieces than its sentence's minimum."""

    min_len: Tensor  # (B,) per sentence
    context: int = 0

    def __call__(self, log_probs: Tensor, step: Step) -> Tensor:
        log_probs[:, EOS].masked_fill_(step.t < self.min_len[step.rows], NEG_INF)
        return log_probs

    def to_columns(self, ids: Tensor) -> MinLength:
        return self  # EOS is EOS in a shortlist's columns (its ids start with the specials)


@dataclass
class NoRepeatNgram:
    """A piece that would complete an n-gram already in the row's history is blocked."""

    n: int
    context: int = ALL

    def __call__(self, log_probs: Tensor, step: Step) -> Tensor:
        n, t, history = self.n, step.t, step.history
        if t < n or history is None:
            return log_probs
        grams = history.unfold(1, n, 1)  # (R, t - n + 1, n): every n-gram so far
        start = history[:, t - n + 1 :]  # (R, n - 1): what the next piece would extend
        seen = (grams[:, :, :-1] == start.unsqueeze(1)).all(dim=-1)  # (R, t - n + 1)
        blocked = torch.zeros_like(log_probs).scatter_reduce(
            1, grams[:, :, -1], seen.to(log_probs.dtype), reduce="amax"
        )
        return log_probs.masked_fill_(blocked > 0, NEG_INF)

    def to_columns(self, ids: Tensor) -> NoRepeatNgram:
        return self  # it compares the row's own pieces: columns as well as ids


@dataclass
class RepetitionPenalty:
    """A piece already in the row's history has its log-probability multiplied by `penalty`:
    above 1 that lowers it (log-probabilities are at most 0), as Hugging Face's beam search does.
    The row's score takes the lowered value."""

    penalty: float
    context: int = ALL

    def __call__(self, log_probs: Tensor, step: Step) -> Tensor:
        if step.history is None or step.history.size(1) == 0:
            return log_probs
        seen = torch.zeros_like(log_probs, dtype=torch.bool).scatter_(1, step.history, True)
        return torch.where(seen, log_probs * self.penalty, log_probs)

    def to_columns(self, ids: Tensor) -> RepetitionPenalty:
        return self  # it compares the row's own pieces: columns as well as ids


@dataclass
class Banned:
    """Piece sequences no hypothesis may contain (negative constraints), one set for a batch.

    A phrase of one piece is a plain mask: that piece is blocked at every step. A longer one is
    blocked at its last piece, in the rows whose history ends with its other pieces, so a
    hypothesis can never complete it; nothing rides along with a hypothesis but its history,
    which the search already keeps. Each step costs one comparison per context length:
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

    def __call__(self, log_probs: Tensor, step: Step) -> Tensor:
        return self.block(log_probs, step.history)

    def block(self, log_probs: Tensor, history: Tensor | None) -> Tensor:
        """Set to -inf, in place, every piece that would complete a phrase. log_probs (R, V) for
        the next step; history (R, n) the last pieces so far (None: none is read)."""
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


@dataclass
class ForcedPrefix:
    """The last rule: a row whose sentence has a prefix piece at this step may take only that
    piece, with the log-probability the model gave it before any rule."""

    prefix: Tensor  # (B, P) target ids (or columns), -1 past each sentence's own prefix
    context: int = 0

    def at(self, t: int, rows: Tensor) -> Tensor | None:
        """(R,) the piece each row must take at step t, -1 where free; None past every prefix."""
        return self.prefix[rows, t] if t < self.prefix.size(1) else None

    def __call__(self, log_probs: Tensor, step: Step) -> Tensor:
        if step.forced is None:
            return log_probs
        forced = step.forced.unsqueeze(1)  # (R, 1)
        rows = forced >= 0
        column = forced.clamp(min=0)
        log_probs.masked_fill_(rows, NEG_INF)
        kept = torch.where(rows, step.forced_scores.unsqueeze(1), log_probs.gather(1, column))
        return log_probs.scatter_(1, column, kept)

    def to_columns(self, ids: Tensor) -> ForcedPrefix:
        """The prefix in a shortlist's columns (its pieces are in the shortlist: see
        `nmt.translation.search.batch`)."""
        columns = torch.searchsorted(ids, self.prefix.clamp(min=0))
        return ForcedPrefix(torch.where(self.prefix >= 0, columns, self.prefix))


@dataclass
class StepRules:
    """The rules of one batch, in the order they run (see the module's notes)."""

    rules: list[Rule]
    prefix: ForcedPrefix | None = None  # also the list's last rule
    free: int = 0  # steps whose forced piece scores 0 (`SearchJob.free_prefix`)

    @classmethod
    def build(cls, job: SearchJob, device: torch.device) -> StepRules:
        """The rules every batch of a job shares, built once: those of its settings and its
        banned phrases (`for_batch` adds each batch's own)."""
        rules: list[Rule] = []
        if job.decode.repetition_penalty != 1.0:
            rules.append(RepetitionPenalty(job.decode.repetition_penalty))
        if job.decode.no_repeat_ngram:
            rules.append(NoRepeatNgram(job.decode.no_repeat_ngram))
        banned = Banned.build(job.banned, device)
        if banned is not None:
            rules.append(banned)
        return cls(rules, free=job.free_prefix)

    def for_batch(self, cfg: DecodeConfig, min_len: Tensor, prefix: Tensor | None) -> StepRules:
        """These rules with a batch's own: min_len (B,) its sentences' minimum lengths, first;
        prefix (B, P) their forced prefixes (-1 padded; None: no sentence has one), last."""
        first: list[Rule] = []
        if cfg.min_len_a > 0 or cfg.min_len_b > 0:  # else no minimum is above 0
            first.append(MinLength(min_len))
        forced = None if prefix is None else ForcedPrefix(prefix)
        return StepRules([*first, *self.rules, *([forced] if forced else [])], forced, self.free)

    @property
    def context(self) -> int:
        """The most pieces of a row's history a step must give the rules (ALL: every one)."""
        return max((rule.context for rule in self.rules), default=0)

    def forced(self, t: int, rows: Tensor) -> Tensor | None:
        """(R,) the piece each row must take at step t, -1 where free; None when no row has one."""
        return None if self.prefix is None else self.prefix.at(t, rows)

    def to_columns(self, ids: Tensor) -> StepRules:
        """The same rules over a shortlist's columns; ids (C,) its sorted vocabulary ids."""
        rules = [rule.to_columns(ids) for rule in self.rules]
        forced = rules[-1] if self.prefix is not None else None
        return StepRules(rules, forced, self.free)

    def __call__(self, log_probs: Tensor, step: Step) -> Tensor:
        """Apply every rule to log_probs (R, V) in place, in order."""
        if step.forced is not None:  # the forced piece keeps the model's score, rules or not
            step.forced_scores = log_probs.gather(1, step.forced.clamp(min=0).unsqueeze(1))[:, 0]
            if step.t < self.free:  # a language code: scored 0
                step.forced_scores = torch.where(step.forced >= 0, 0.0, step.forced_scores)
        for rule in self.rules:
            log_probs = rule(log_probs, step)
        return log_probs
