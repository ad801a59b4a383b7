"""What every strategy shares: its results (`Hypothesis`, `Decoded`) and one step of the model as
next-piece log-probabilities.

`next_log_probs` is the whole per-step path: the model's step (over the shortlist's columns when
there is one), log-softmax in fp32, then the batch's step rules (`nmt.translation.search.rules`) in
their order, the forced prefix last.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.config import DecodeConfig
from nmt.models.seq2seq import Seq2Seq
from nmt.tokenizer import EOS
from nmt.translation.search.batch import SearchBatch
from nmt.translation.search.rules import NEG_INF, Step
from nmt.translation.search.tree import BeamTree


@dataclass
class Hypothesis:
    tokens: list[int]  # target ids, without BOS and EOS
    score: float  # sum of log-probabilities, EOS included when it was produced
    normalized: float  # `score` with the length penalty: what n-best lists are sorted by
    ended: bool  # produced EOS (False: stopped by the length limit)
    attention: Tensor | None  # (steps, L, h, S) on CPU: one row per generated token (EOS incl.)
    prefix_score: float = 0.0  # log-probability of the forced prefix (0 without one)
    node: int | None = None  # its node in the batch's TreeRecorder, when one records
    # (steps, 1) on CPU with `SearchJob.statistics`: per generated token (EOS incl.), its
    # log-probability at the job's temperature
    statistics: Tensor | None = None


@dataclass
class Decoded:
    """One sentence's result: its n-best list, best first, and the search tree if recorded; a
    sentence with no hypothesis has an empty list and its `failure` (why, in words)."""

    nbest: list[Hypothesis]
    tree: BeamTree | None = None
    failure: str | None = None


@dataclass
class StepStatistics:
    """A step's log-probabilities at `SearchJob.statistics`' temperature, before the step rules,
    as teacher forcing reads them (`nmt.translation.scoring.piece_statistics`): what a piece's
    confidence is read from. Kept as the (tempered) logits and each row's log-sum-exp, so that
    picking a piece's log-probability is a subtraction: at temperature 1 the log-sum-exp is read
    off the search's own log-softmax (no pass over the vocabulary: measured on a GRU's greedy
    steps, the statistics then cost nothing beside the step), at another one it is one."""

    tempered: Tensor  # (R, V) or (R, C): the logits over the temperature
    normalizer: Tensor  # (R,): their log-sum-exp, so a piece's log-probability is z - normalizer

    @classmethod
    def of(cls, logits: Tensor, log_probs: Tensor, temperature: float) -> StepStatistics:
        """From a step's logits (R, V) (masked outside a shortlist, where the first columns, the
        specials, are always allowed) and their log-softmax `log_probs` before the step rules,
        which change it in place after."""
        z = logits.float()
        if temperature == 1.0:
            return cls(z, z[:, 0] - log_probs[:, 0])
        z = z * (1.0 / temperature)
        return cls(z, torch.logsumexp(z, dim=-1))

    def pick(self, rows: Tensor, tokens: Tensor) -> Tensor:
        """(..., 1): the log-probability of tokens[...] on rows[...]."""
        return (self.tempered[rows, tokens] - self.normalizer[rows]).unsqueeze(-1)


def next_log_probs(model: Seq2Seq, prev: Tensor, state, batch: SearchBatch, step: Step):
    """Log-probabilities (R, V), or (R, C) over the batch's shortlist with `step.allowed` (R, C)
    the columns each row may produce, after the step rules; the attention weights of the step,
    the next state and, when the batch records them, the step's `StepStatistics` (else None).
    prev (R,) holds vocabulary ids, or shortlist columns."""
    shortlist = batch.shortlist
    if shortlist is None:
        logits, weights, state = model.decode_step(prev, state)
    else:
        logits, weights, state = model.decode_step(shortlist.ids[prev], state, batch.output)
        logits = logits.masked_fill(~step.allowed, NEG_INF)
    log_probs = torch.log_softmax(logits.float(), dim=-1)  # fp32 whatever the autocast
    stats = None
    if batch.statistics is not None:
        stats = StepStatistics.of(logits, log_probs, batch.statistics)
    return batch.rules(log_probs, step), weights, state, stats


def hypothesis(
    seq: list[int], score: float, attention: Tensor | None, cfg: DecodeConfig
) -> Hypothesis:
    """seq: every generated token, a final EOS included when there is one."""
    ended = bool(seq) and seq[-1] == EOS
    normalized = cfg.normalize(score, len(seq))
    return Hypothesis(seq[:-1] if ended else seq, score, normalized, ended, attention)
