"""One padded batch of a search, built once before its first step: the sources on the device,
each sentence's length limits, the shortlist, the step rules, the positive constraints and the
tree recorder, all in the shortlist's columns when there is one. A strategy reads what it needs
from it and never asks where it came from.

With decode.shortlist (and a `Lexicon`), the batch scores only the C target ids of its
`Shortlist`, and each sentence only those it allows (the others get -inf, so its output does not
depend on the batch it is in). A sentence's shortlist allows its prefix's and its constraints'
pieces, so that it can produce them. Pieces are then column numbers of the shortlist, mapped back
to vocabulary ids when a hypothesis is stored; the shortlist's ids start with the specials, so
EOS is EOS in both.

For sampling the batch holds n_best rows per sentence (each a draw of its own), so the strategy
runs one path per row like greedy search.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.config import DecodeConfig, Strategy
from nmt.data.batches import collate
from nmt.errors import NMTError
from nmt.lexicon import NO_LEXICON, Lexicon, Shortlist
from nmt.models.seq2seq import OutputRows, Seq2Seq
from nmt.translation.search.constraints import Constraints
from nmt.translation.search.job import SearchJob
from nmt.translation.search.rules import StepRules
from nmt.translation.search.tree import TreeRecorder


@dataclass
class SearchBatch:
    src: Tensor  # (B, S) source ids, padded
    src_lens: Tensor  # (B,) on the CPU (packing wants it there)
    cfg: DecodeConfig
    max_len: Tensor  # (B,) the most pieces each sentence may generate, EOS included
    rules: StepRules
    prefix_len: Tensor | None  # (B,) each sentence's forced pieces; None: no prefix
    constraints: Constraints | None  # None: no sentence has one
    shortlist: Shortlist | None
    output: OutputRows | None  # the output layer's rows for the shortlist's ids
    recorder: TreeRecorder | None  # records the search tree when asked for
    attention: bool  # keep the attention maps of each hypothesis
    statistics: float | None = None  # `SearchJob.statistics`: the temperature, or not recorded

    @classmethod
    def build(
        cls,
        model: Seq2Seq,
        job: SearchJob,
        index: list[int],
        device: torch.device,
        lexicon: Lexicon | None,
        rules: StepRules,
    ) -> SearchBatch:
        """The batch of the job's sources `index`; `rules`: the job's (`StepRules.build`)."""
        cfg = job.decode
        copies = cfg.n_best if cfg.strategy == Strategy.sample else 1
        rows = [i for i in index for _ in range(copies)]
        batch = collate(rows, job.sources, None).to(device)
        src, src_lens = batch.src, batch.src_lens
        max_len, min_len = _limits(cfg, src, src_lens)
        prefix = None if job.prefixes is None else _prefix_tensor([job.prefixes[i] for i in rows])
        prefix = None if prefix is None else prefix.to(device)
        wanted = None
        if job.constraints is not None:
            wanted = Constraints.build([job.constraints[i] for i in rows], device)
        rules = rules.for_batch(cfg, min_len, prefix)
        shortlist = output = None
        if cfg.shortlist:
            shortlist = _shortlist(cfg, lexicon, src, prefix, wanted)
            output = model.output_rows(shortlist.ids)
            rules = rules.to_columns(shortlist.ids)
            wanted = None if wanted is None else wanted.to_columns(shortlist.ids)
        recorder = None
        if job.trees:
            goals = None if wanted is None else wanted.total.tolist()
            row_sentence = torch.arange(len(index), device=device).repeat_interleave(copies)
            recorder = TreeRecorder(row_sentence, len(index), goals)
        return cls(
            src, src_lens, cfg, max_len, rules, None if prefix is None else (prefix >= 0).sum(1),
            wanted, shortlist, output, recorder, job.attention, job.statistics,
        )  # fmt: skip


def _limits(cfg: DecodeConfig, src: Tensor, src_lens: Tensor) -> tuple[Tensor, Tensor]:
    """Per sentence: max and min number of generated tokens (the EOS counts toward max), on the
    device of `src`: `src_lens` stays on the CPU (packing wants it there), the limits index and
    compare with device tensors every step."""
    lens = src_lens.tolist()
    max_len = torch.tensor([cfg.max_len(n) for n in lens], device=src.device)
    min_len = torch.tensor([cfg.min_len(n) for n in lens], device=src.device)
    return max_len, min_len


def _prefix_tensor(prefixes: list[list[int]]) -> Tensor | None:
    """(B, P) target ids, -1 past each prefix; None when no sentence has one."""
    width = max((len(p) for p in prefixes), default=0)
    if width == 0:
        return None
    out = torch.full((len(prefixes), width), -1, dtype=torch.long)
    for row, ids in enumerate(prefixes):
        out[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out


def _shortlist(
    cfg: DecodeConfig,
    lexicon: Lexicon | None,
    src: Tensor,
    prefix: Tensor | None,
    constraints: Constraints | None,
) -> Shortlist:
    """The batch's shortlist, allowing each sentence the pieces of its prefix and constraints."""
    if lexicon is None:
        raise NMTError(NO_LEXICON)
    # a beam picks among 2K candidates of the first step's single row: never fewer columns
    columns = 2 * cfg.beam_size + 1 if cfg.strategy == Strategy.beam else 0
    needed = prefix  # (B, X): the pieces each sentence must be able to produce, -1 padded
    if constraints is not None:
        pieces = constraints.pieces()
        needed = pieces if prefix is None else torch.cat([prefix, pieces], dim=1)
    return lexicon.shortlist(src, cfg.shortlist, cfg.shortlist_frequent, columns, needed)
