"""The batch driver: a `SearchJob` (any number of sources, in ids, and what is asked of their
translations), decoded in length-sorted batches (`nmt.translation.inputs.length_batches`, as every
translator batches) with the configured strategy, the results in input order."""

from __future__ import annotations

import contextlib
from dataclasses import replace

import torch

from nmt.config import NEED_BEAM, DecodeConfig, Precision, Strategy
from nmt.device import autocast
from nmt.errors import NMTError
from nmt.lexicon import Lexicon
from nmt.models.compiled import settings as compile_settings
from nmt.models.int8 import int8_copy
from nmt.models.seq2seq import Seq2Seq
from nmt.translation.inputs import length_batches
from nmt.translation.search.batch import SearchBatch
from nmt.translation.search.beam import beam_search
from nmt.translation.search.job import SearchJob
from nmt.translation.search.rules import NEG_INF, StepRules
from nmt.translation.search.single_path import greedy, sample
from nmt.translation.search.step import Decoded, Hypothesis

# why a sentence has no hypothesis (`Decoded.failure`)
UNMET = (
    "no translation could meet its constraints within the length limit (a banned phrase or "
    "decode.no_repeat_ngram blocks a piece they need)"
)
BLOCKED = (
    "no translation: the step rules blocked every piece (decode.no_repeat_ngram, the banned "
    "phrases, decode.min_len_a/b or the shortlist left nothing to write)"
)


def decode_all(
    model: Seq2Seq,
    src_ids: list[list[int]],
    cfg: DecodeConfig,
    device: torch.device,
    attention: bool = False,
    lexicon: Lexicon | None = None,
    prefixes: list[list[int]] | None = None,
    free_prefix: int = 0,
) -> list[list[Hypothesis]]:
    """Decode every source (ids ending in EOS) in length-sorted batches; n-best lists (best
    first) in input order: `search_all` of a job with these sources and `prefixes` (the first
    `free_prefix` pieces of each scored 0: `SearchJob.free_prefix`)."""
    job = SearchJob(src_ids, cfg, prefixes, attention=attention, free_prefix=free_prefix)
    return [d.nbest for d in search_all(model, job, device, lexicon)]


def search_all(
    model: Seq2Seq, job: SearchJob, device: torch.device, lexicon: Lexicon | None = None
) -> list[Decoded]:
    """Each source's n-best list (best first) and, with `job.trees`, its search tree, in input
    order. `lexicon` gives the shortlists of decode.shortlist; the matrix products run in
    decode.precision.

    Constraints need beam search (an NMTError otherwise). A sentence that ends with no
    hypothesis (none met its constraints within its length limit, a banned phrase or
    decode.no_repeat_ngram blocking a piece they need; or the step rules blocked every piece)
    gets an empty n-best list and its `failure` says why; the other sentences of its batch are
    searched as if it were not there. A request is checked against what can be known before the
    search (`nmt.translation.request.prepare`)."""
    cfg = job.decode
    constraints = job.constraints if job.constraints and any(job.constraints) else None
    if constraints is not None:
        if cfg.strategy != Strategy.beam:
            raise NMTError(NEED_BEAM)
        if len(constraints) != len(job.sources):
            raise NMTError(f"{len(constraints)} constraint lists for {len(job.sources)} sources")
    job = replace(job, constraints=constraints)  # None: the batches run the plain beam
    if cfg.precision == Precision.int8:  # the same search over the model's int8 copy
        model = int8_copy(model)
    results: list[Decoded] = [Decoded([]) for _ in job.sources]
    rules = StepRules.build(job, device)  # the job's own; each batch adds its sentences'
    # a compiled step's torch settings once for the whole search, not around every step
    in_force = compile_settings() if cfg.compile else contextlib.nullcontext()
    with autocast(device, cfg.precision), in_force:
        for index in length_batches([len(ids) for ids in job.sources], cfg.batch_size):
            batch = SearchBatch.build(model, job, index, device, lexicon, rules)
            for i, result in zip(index, _decode(model, batch)):
                # a path every rule blocked (greedy and sampling take a piece at -inf) is none
                result.nbest = [h for h in result.nbest if h.score > NEG_INF]
                if not result.nbest:
                    result.failure = UNMET if constraints and constraints[i] else BLOCKED
                results[i] = result
    return results


def _decode(model: Seq2Seq, batch: SearchBatch) -> list[Decoded]:
    """The results of one batch with its strategy."""
    match batch.cfg.strategy:
        case Strategy.greedy:
            nbests = [[h] for h in greedy(model, batch)]
        case Strategy.beam:
            nbests = beam_search(model, batch)
        case Strategy.sample:
            nbests = sample(model, batch)
        case _:
            raise NMTError(f"unknown decode.strategy {batch.cfg.strategy!r}")
    if batch.recorder is None:
        return [Decoded(nbest) for nbest in nbests]
    ranks = {h.node: rank for nbest in nbests for rank, h in enumerate(nbest)}
    return [Decoded(nbest, tree) for nbest, tree in zip(nbests, batch.recorder.trees(ranks))]
