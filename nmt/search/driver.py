"""The batch driver: any number of sources, decoded in length-sorted batches
(`nmt.inputs.length_batches`, as every translator batches) with the configured strategy, the
results in input order."""

from __future__ import annotations

import torch
from torch import Tensor

from nmt.batches import collate
from nmt.beam_tree import TreeRecorder
from nmt.config import DecodeConfig, Strategy
from nmt.device import autocast
from nmt.errors import NMTError
from nmt.inputs import length_batches
from nmt.lexicon import Lexicon
from nmt.models.seq2seq import Seq2Seq
from nmt.search.beam import beam_search
from nmt.search.constraints import Banned
from nmt.search.positive import NEED_BEAM, Constraints, Unmet, problem
from nmt.search.single_path import greedy, sample
from nmt.search.step import Decoded, Hypothesis


def decode_all(
    model: Seq2Seq,
    src_ids: list[list[int]],
    cfg: DecodeConfig,
    device: torch.device,
    attention: bool = False,
    lexicon: Lexicon | None = None,
    prefixes: list[list[int]] | None = None,
    banned: list[list[int]] | None = None,
    constraints: list[list[list[int]]] | None = None,
) -> list[list[Hypothesis]]:
    """Decode every source (ids ending in EOS) in length-sorted batches; n-best lists (best
    first) in input order. `attention` keeps the attention maps of each hypothesis; `lexicon`
    gives the shortlists of `cfg.shortlist`; `prefixes` (target ids, no EOS; [] for none) are
    forced at the start of each source's translations; `banned` (target id sequences, none
    empty) never appear in any translation (`Banned`: the ids are what is blocked; `cfg.banned`
    is text, which the caller tokenizes: `nmt.translate`); `constraints` (per source, target id
    sequences; [] for none) appear in every translation of their source (beam search only:
    `nmt.search.positive`); the matrix products run in `cfg.precision`."""
    decoded = search_all(
        model, src_ids, cfg, device, attention, lexicon, prefixes, banned=banned,
        constraints=constraints,
    )  # fmt: skip
    return [d.nbest for d in decoded]


def search_all(
    model: Seq2Seq,
    src_ids: list[list[int]],
    cfg: DecodeConfig,
    device: torch.device,
    attention: bool = False,
    lexicon: Lexicon | None = None,
    prefixes: list[list[int]] | None = None,
    trees: bool = False,
    banned: list[list[int]] | None = None,
    constraints: list[list[list[int]]] | None = None,
) -> list[Decoded]:
    """`decode_all`, and with `trees` each sentence's search tree (`nmt.beam_tree`).

    Constraints that cannot be met are an NMTError naming the source (its index in `src_ids`),
    before any decoding: with greedy or sampling, a phrase with a banned piece sequence, or more
    pieces than the length limit leaves (`nmt.search.positive.problem`); should a sentence still
    end with no hypothesis meeting them (a banned phrase or decode.no_repeat_ngram blocking a
    piece in every context), `Unmet` names it."""
    if constraints is not None and not any(constraints):
        constraints = None
    if constraints is not None:
        _check_constraints(src_ids, cfg, prefixes, banned or [], constraints)
    results: list[Decoded] = [Decoded([]) for _ in src_ids]
    blocked = Banned.build(banned or [], device)
    with autocast(device, cfg.precision):
        for index in length_batches([len(ids) for ids in src_ids], cfg.batch_size):
            batch_prefixes = None if prefixes is None else [prefixes[i] for i in index]
            wanted = None if constraints is None else [constraints[i] for i in index]
            decoded = _decode_batch(
                model, src_ids, index, cfg, device, attention, lexicon, batch_prefixes, trees,
                blocked, wanted,
            )  # fmt: skip
            for i, result in zip(index, decoded):
                if wanted is not None and not result.nbest:
                    raise Unmet(
                        i, f"source {i}: no hypothesis met its constraints within the length "
                        "limit (a banned phrase or decode.no_repeat_ngram blocks a needed piece)",
                    )  # fmt: skip
                results[i] = result
    return results


def _check_constraints(
    src_ids: list[list[int]],
    cfg: DecodeConfig,
    prefixes: list[list[int]] | None,
    banned: list[list[int]],
    constraints: list[list[list[int]]],
) -> None:
    """Raise NMTError naming the first source whose constraints cannot be met."""
    if len(constraints) != len(src_ids):
        raise NMTError(f"{len(constraints)} constraint lists for {len(src_ids)} sources")
    if cfg.strategy != Strategy.beam:
        raise NMTError(NEED_BEAM)
    for i, (src, phrases) in enumerate(zip(src_ids, constraints)):
        prefix = [] if prefixes is None else prefixes[i]
        why = phrases and problem(phrases, prefix, cfg.max_len(len(src)), banned)
        if why:
            raise NMTError(f"source {i}: {why}")


def _prefix_tensor(prefixes: list[list[int]] | None, device: torch.device) -> Tensor | None:
    """(B, P) target ids, -1 past each prefix; None when no sentence has one."""
    width = max((len(p) for p in prefixes), default=0) if prefixes is not None else 0
    if width == 0:
        return None
    out = torch.full((len(prefixes), width), -1, dtype=torch.long)
    for row, ids in enumerate(prefixes):
        out[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out.to(device)


def _decode_batch(
    model: Seq2Seq,
    src_ids: list[list[int]],
    index: list[int],
    cfg: DecodeConfig,
    device: torch.device,
    attention: bool,
    lexicon: Lexicon | None,
    prefixes: list[list[int]] | None,
    trees: bool,
    banned: Banned | None = None,
    constraints: list[list[list[int]]] | None = None,
) -> list[Decoded]:
    """The results for the sources `index` of `src_ids`, one padded batch."""
    batch = collate(index, src_ids, None).to(device)
    src, lens = batch.src, batch.src_lens
    prefix = _prefix_tensor(prefixes, device)
    rows = torch.arange(len(index), device=device)
    if cfg.strategy == Strategy.sample:
        rows = rows.repeat_interleave(cfg.n_best)
    # None when no sentence of this batch has one: the batch runs the plain beam
    wanted = None if constraints is None else Constraints.build(constraints, device)
    goals = None if wanted is None else wanted.total.tolist()
    recorder = TreeRecorder(rows, len(index), goals) if trees else None
    match cfg.strategy:
        case Strategy.greedy:
            nbests = [
                [h]
                for h in greedy(model, src, lens, cfg, attention, lexicon, prefix, recorder, banned)
            ]
        case Strategy.beam:
            nbests = beam_search(
                model, src, lens, cfg, attention, lexicon, prefix, recorder, banned, wanted
            )
        case Strategy.sample:
            nbests = sample(model, src, lens, cfg, attention, lexicon, prefix, recorder, banned)
        case _:
            raise NMTError(f"unknown decode.strategy {cfg.strategy!r}")
    if recorder is None:
        return [Decoded(nbest) for nbest in nbests]
    ranks = {h.node: rank for nbest in nbests for rank, h in enumerate(nbest)}
    return [Decoded(nbest, tree) for nbest, tree in zip(nbests, recorder.trees(ranks))]
