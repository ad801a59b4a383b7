"""Decoding strategies over the `Seq2Seq` step interface; they never ask which family they run.

`greedy`, `sample` and `beam_search` decode one padded batch and return an n-best list per
sentence; `decode_all` runs the configured strategy over any number of sentences in length-sorted
batches (`nmt.inputs.length_batches`, as every translator batches) and returns the lists in the
input order.

All three work on rows: one row per live hypothesis, a decoder state with one row each. A finished
sentence leaves the batch at once (its rows are dropped from the state with `reorder`), so a batch
costs what its live sentences cost, and no loop over the sentences of a batch runs per step.
Shapes: B sentences, K beam size, R live rows, V vocabulary, S source length, M attention maps
(L layers, h heads) of one step: (R, L, h, S).

With `decode.shortlist` (and a `Lexicon`), a batch scores only the C target ids of its
`Shortlist`, and each sentence only those it allows (the others get -inf, so its output does not
depend on the batch it is in). Tokens are then column numbers of the shortlist, mapped back to
vocabulary ids when a hypothesis is stored; the shortlist's ids start with the specials, so EOS
is EOS in both.

A forced prefix (`prefix`, (B, P) target ids, -1 past each sentence's own prefix) makes row r
take prefix[r, t] at step t: every other token gets -inf, the forced one keeps the
log-probability the model gives it (before the hard constraints, which a prefix overrides), so
the hypothesis is scored as if the model had chosen it, and the search goes on from there. A beam
then carries one live row per sentence until the prefix ends (the others score -inf). A
`TreeRecorder` records every hypothesis kept (`nmt.beam_tree`); without one nothing is recorded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.batches import collate
from nmt.beam_tree import BeamTree, TreeRecorder
from nmt.config import DecodeConfig, Strategy
from nmt.device import autocast
from nmt.errors import NMTError
from nmt.inputs import length_batches
from nmt.lexicon import NO_LEXICON, Lexicon, Shortlist
from nmt.models.seq2seq import Seq2Seq
from nmt.tokenizer import BOS, EOS

NEG_INF = float("-inf")


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


def _shortlist(
    model: Seq2Seq, cfg: DecodeConfig, lexicon: Lexicon | None, src: Tensor, prefix: Tensor | None
) -> tuple[Shortlist | None, Tensor | None]:
    """The batch's shortlist (None without decode.shortlist) and the prefix in its columns."""
    if not cfg.shortlist:
        return None, prefix
    if lexicon is None:
        raise NMTError(NO_LEXICON)
    # a beam picks among 2K candidates of the first step's single row: never fewer columns
    columns = 2 * cfg.beam_size + 1 if cfg.strategy == Strategy.beam else 0
    shortlist = lexicon.shortlist(src, cfg.shortlist, cfg.shortlist_frequent, columns, prefix)
    shortlist.output = model.output_rows(shortlist.ids)
    if prefix is not None:  # the prefix's pieces are in the shortlist: ids -> columns
        columns_of = torch.searchsorted(shortlist.ids, prefix.clamp(min=0))
        prefix = torch.where(prefix >= 0, columns_of, prefix)
    return shortlist, prefix


def force(log_probs: Tensor, forced: Tensor, scores: Tensor) -> Tensor:
    """Rows with forced[r] >= 0 may take only that token, scored scores[r]; in place.
    log_probs (R, V), forced (R,), scores (R,) the forced tokens' log-probabilities."""
    rows = forced.unsqueeze(1) >= 0  # (R, 1)
    column = forced.clamp(min=0).unsqueeze(1)  # (R, 1)
    log_probs.masked_fill_(rows, NEG_INF)
    kept = torch.where(rows, scores.unsqueeze(1), log_probs.gather(1, column))  # (R, 1)
    return log_probs.scatter_(1, column, kept)


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
):
    """Log-probabilities (R, V), or (R, C) over `shortlist` with `allowed` (R, C) its entries
    each row may produce; prev (R,) holds vocabulary ids, or shortlist columns; forced (R,) the
    token each row must take at this step, -1 where it is free."""
    if shortlist is None:
        logits, weights, state = model.decode_step(prev, state)
    else:
        logits, weights, state = model.decode_step(shortlist.ids[prev], state, shortlist.output)
        logits = logits.masked_fill(~allowed, NEG_INF)
    log_probs = torch.log_softmax(logits.float(), dim=-1)  # fp32 whatever the autocast
    if forced is None:
        return constrain(log_probs, t, min_len, cfg.no_repeat_ngram, history), weights, state
    chosen = log_probs.gather(1, forced.clamp(min=0).unsqueeze(1)).squeeze(1)  # unconstrained
    log_probs = constrain(log_probs, t, min_len, cfg.no_repeat_ngram, history)
    return force(log_probs, forced, chosen), weights, state


def _hypothesis(
    seq: list[int], score: float, attention: Tensor | None, cfg: DecodeConfig
) -> Hypothesis:
    """seq: every generated token, a final EOS included when there is one."""
    ended = bool(seq) and seq[-1] == EOS
    normalized = cfg.normalize(score, len(seq))
    return Hypothesis(seq[:-1] if ended else seq, score, normalized, ended, attention)


def _draw(log_probs: Tensor, cfg: DecodeConfig, generator: torch.Generator | None) -> Tensor:
    """One token per row (R,): the argmax, or a draw from the tempered, truncated distribution."""
    if generator is None:
        return log_probs.argmax(dim=-1)
    logits = log_probs / cfg.temperature
    if cfg.top_k and cfg.top_k < logits.size(-1):
        kth = logits.topk(cfg.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, NEG_INF)
    if cfg.top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # keep a token if the mass before it is below top_p (so the most probable always stays)
        drop = probs.cumsum(dim=-1) - probs >= cfg.top_p
        logits = logits.scatter(1, order, sorted_logits.masked_fill(drop, NEG_INF))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


def _single_path(
    model: Seq2Seq,
    src: Tensor,
    src_lens: Tensor,
    cfg: DecodeConfig,
    attention: bool,
    generator: torch.Generator | None,
    lexicon: Lexicon | None,
    prefix: Tensor | None = None,
    recorder: TreeRecorder | None = None,
) -> list[Hypothesis]:
    """Greedy (generator None) or sampling: one hypothesis per row of src (B, S)."""
    batch, device = src.size(0), src.device
    max_len, min_len = _limits(cfg, src, src_lens)
    shortlist, prefix = _shortlist(model, cfg, lexicon, src, prefix)
    steps = int(max_len.max())
    tokens = torch.zeros((batch, steps), dtype=torch.long, device=device)
    scores = torch.zeros(batch, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)  # tokens produced, EOS included
    maps: Tensor | None = None  # (B, steps, L, h, S)
    forced_steps = 0 if prefix is None else prefix.size(1)
    prefix_len = None if prefix is None else (prefix >= 0).sum(1)  # (B,)
    prefix_scores = torch.zeros(batch, device=device)
    last_node = torch.zeros(batch, dtype=torch.long, device=device)  # (B,) with a recorder

    state = model.init_state(model.encode(src, src_lens))
    prev = torch.full((batch,), BOS, dtype=torch.long, device=device)
    alive = torch.arange(batch, device=device)  # original rows still decoding
    allowed: Tensor | None = None  # (R, C): the shortlist's pieces each row may produce
    for t in range(steps):
        # the token history is gathered only when the n-gram constraint reads it
        history = tokens[alive, :t] if cfg.no_repeat_ngram else None
        # a row's list changes only when rows leave (then the row count changes)
        if shortlist is not None and (allowed is None or allowed.size(0) != alive.numel()):
            allowed = shortlist.allowed[alive]
        forced = prefix[alive, t] if t < forced_steps else None
        log_probs, weights, state = _next_log_probs(
            model, prev, state, t, min_len[alive], cfg, history, shortlist, allowed, forced
        )
        choice = _draw(log_probs, cfg, generator)
        tokens[alive, t] = choice
        scores[alive] += log_probs.gather(1, choice.unsqueeze(1)).squeeze(1)
        lengths[alive] = t + 1
        if forced is not None:  # a prefix that ends at this step: its score is the row's now
            ends = prefix_len[alive] == t + 1
            prefix_scores[alive] = torch.where(ends, scores[alive], prefix_scores[alive])
        if attention and weights is not None:
            if maps is None:
                maps = weights.new_zeros((batch, steps, *weights.shape[1:]), dtype=torch.float)
            maps[alive, t] = weights.float()
        done = (choice == EOS) | (t + 1 >= max_len[alive])
        if recorder is not None:
            rows = torch.arange(alive.numel(), device=device)
            ids = choice if shortlist is None else shortlist.ids[choice]
            last_node[alive] = recorder.advance(rows, ids, scores[alive], t + 1)
        finished = int(done.sum())  # the step's one device-to-host read
        if finished == done.size(0):
            break
        if finished:
            keep = (~done).nonzero().squeeze(1)  # one row per sentence: rows = sentences
            state, alive, choice = state.reorder(keep, keep), alive[keep], choice[keep]
            if recorder is not None:
                recorder.keep(keep)
        prev = choice

    if shortlist is not None:
        tokens = shortlist.ids[tokens]
    if recorder is not None:
        recorder.mark_finished(last_node)
    # one device-to-host copy per tensor, then plain Python
    maps = None if maps is None else maps.cpu()
    nodes = last_node.tolist() if recorder is not None else [None] * batch
    out = []
    for row, (n, seq, score, prefix_score) in enumerate(
        zip(lengths.tolist(), tokens.tolist(), scores.tolist(), prefix_scores.tolist())
    ):
        attn = None if maps is None else maps[row, :n, ..., : int(src_lens[row])]
        hyp = _hypothesis(seq[:n], score, attn, cfg)
        hyp.prefix_score, hyp.node = prefix_score, nodes[row]
        out.append(hyp)
    return out


@torch.inference_mode()
def greedy(
    model: Seq2Seq,
    src: Tensor,
    src_lens: Tensor,
    cfg: DecodeConfig,
    attention: bool = True,
    lexicon: Lexicon | None = None,
    prefix: Tensor | None = None,
    recorder: TreeRecorder | None = None,
) -> list[Hypothesis]:
    """Batched greedy search. src (B, S), src_lens (B,). Rows leave the batch when they finish."""
    return _single_path(model, src, src_lens, cfg, attention, None, lexicon, prefix, recorder)


@torch.inference_mode()
def sample(
    model: Seq2Seq,
    src: Tensor,
    src_lens: Tensor,
    cfg: DecodeConfig,
    attention: bool = True,
    lexicon: Lexicon | None = None,
    prefix: Tensor | None = None,
    recorder: TreeRecorder | None = None,
) -> list[list[Hypothesis]]:
    """`cfg.n_best` independent draws per sentence, sorted by normalised score. Reproducible for
    the same inputs, batching and `cfg.seed`. A recorder is made with `n_best` rows per sentence
    (`TreeRecorder(torch.arange(B).repeat_interleave(n_best), B)`)."""
    generator = torch.Generator(device=src.device).manual_seed(cfg.seed)
    n = cfg.n_best
    prefix = None if prefix is None else prefix.repeat_interleave(n, 0)
    hyps = _single_path(
        model, src.repeat_interleave(n, 0), src_lens.repeat_interleave(n, 0), cfg, attention,
        generator, lexicon, prefix, recorder,
    )  # fmt: skip
    return [
        sorted(hyps[i * n : (i + 1) * n], key=lambda h: -h.normalized) for i in range(src.size(0))
    ]


@torch.inference_mode()
def beam_search(
    model: Seq2Seq,
    src: Tensor,
    src_lens: Tensor,
    cfg: DecodeConfig,
    attention: bool = True,
    lexicon: Lexicon | None = None,
    prefix: Tensor | None = None,
    recorder: TreeRecorder | None = None,
) -> list[list[Hypothesis]]:
    """Batched beam search: the n-best list of each sentence of src (B, S), best first.

    Each step scores every (beam, token) extension, keeps the 2K best per sentence, sets aside the
    ones ending in EOS among the first K (the K-best rule that makes beam 1 equal greedy), and
    continues with the K best that do not end. A sentence is done when K hypotheses have finished
    or it reached its length limit (then its K best are kept as they are, unended).
    """
    batch, device, k = src.size(0), src.device, cfg.beam_size
    max_len, min_len = _limits(cfg, src, src_lens)
    shortlist, prefix = _shortlist(model, cfg, lexicon, src, prefix)
    forced_steps = 0 if prefix is None else prefix.size(1)
    prefix_len = None if prefix is None else (prefix >= 0).sum(1)  # (B,)
    prefix_scores = torch.zeros(batch, device=device)
    # the first step has one row per sentence (the empty hypothesis); the next ones K rows each
    state = model.init_state(model.encode(src, src_lens))
    sentence = torch.arange(batch, device=device)  # (N,) original index of each live sentence
    scores = torch.zeros((batch, 1), device=device)  # (N, W): W rows per sentence, 1 then K
    history = torch.zeros((batch, 0), dtype=torch.long, device=device)  # (R, t)
    maps: Tensor | None = None  # (R, t, L, h, S)
    prev = torch.full((batch,), BOS, dtype=torch.long, device=device)
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    allowed: Tensor | None = None  # (R, C): the shortlist's pieces each row may produce
    n_finished = torch.zeros(batch, dtype=torch.long, device=device)
    enough = max(cfg.n_best, math.ceil(cfg.patience * k))  # finished hypotheses that end a sentence

    for t in range(int(max_len.max())):
        live, width = scores.shape
        row_min = min_len[sentence].repeat_interleave(width)
        # rows' lists change only when sentences leave or the beam widens: both change R
        if shortlist is not None and (allowed is None or allowed.size(0) != live * width):
            allowed = shortlist.allowed[sentence].repeat_interleave(width, dim=0)  # (R, C)
        forced = prefix[sentence, t].repeat_interleave(width) if t < forced_steps else None
        log_probs, weights, state = _next_log_probs(
            model, prev, state, t, row_min, cfg, history, shortlist, allowed, forced
        )
        vocab = log_probs.size(1)
        if vocab <= k:  # the K continuations below need K tokens other than EOS
            raise NMTError(f"decode.beam_size={k} needs a target vocabulary above {k} pieces")
        total = (scores.view(-1, 1) + log_probs).view(live, width * vocab)
        top_scores, top = total.topk(min(2 * k, width * vocab), dim=1)  # (N, 2K), best first
        if forced is not None:  # while forced, a sentence's best candidate is its only one
            ends = prefix_len[sentence] == t + 1
            prefix_scores[sentence] = torch.where(ends, top_scores[:, 0], prefix_scores[sentence])
        rows = top // vocab + torch.arange(live, device=device).unsqueeze(1) * width  # (N, 2K)
        tokens = top % vocab
        is_eos = tokens == EOS
        at_limit = t + 1 >= max_len[sentence]  # (N,)

        # finish: EOS among the first K; at the length limit, all of the first K
        finish = torch.zeros_like(is_eos)
        finish[:, :k] = is_eos[:, :k] | at_limit.unsqueeze(1)
        finish &= top_scores > NEG_INF
        if bool(finish.any()):
            which, rank = finish.nonzero(as_tuple=True)
            n_finished.index_add_(0, sentence[which], torch.ones_like(which))
            nodes = None
            if recorder is not None:
                ended = tokens[which, rank]
                ended = ended if shortlist is None else shortlist.ids[ended]
                nodes = recorder.finish(rows[which, rank], ended, top_scores[which, rank], t + 1)
            _set_aside(
                finished, cfg, sentence[which], rows[which, rank], tokens[which, rank],
                top_scores[which, rank], history, maps, weights if attention else None, src_lens,
                shortlist, nodes,
            )  # fmt: skip

        done = at_limit | (n_finished[sentence] >= enough)
        if bool(done.all()):
            break
        # continue with the K best that did not end in EOS (there are at least K: each row
        # contributes at most one EOS to the candidates, and there are more than K of them)
        order = (is_eos.long() * (2 * k) + torch.arange(top.size(1), device=device)).argsort(1)
        pick = order[:, :k]  # (N, K)
        parent = rows.gather(1, pick)  # (N, K) rows of this step
        scores, prev = top_scores.gather(1, pick), tokens.gather(1, pick)
        if bool(done.any()):  # sentences leave: their per-sentence state goes too
            keep = (~done).nonzero().squeeze(1)
            scores, parent, prev, sentence = scores[keep], parent[keep], prev[keep], sentence[keep]
            state = state.reorder(parent.view(-1), keep)
        else:  # hypotheses change places within their sentences: keys and values stay put
            state = state.reorder(parent.view(-1))
        parent, prev = parent.view(-1), prev.view(-1)  # (R',)
        if recorder is not None:
            ids = prev if shortlist is None else shortlist.ids[prev]
            recorder.advance(parent, ids, scores.view(-1), t + 1)
        history = torch.cat([history[parent], prev.unsqueeze(1)], dim=1)
        if attention and weights is not None:
            step_maps = weights.float()[parent].unsqueeze(1)
            maps = step_maps if maps is None else torch.cat([maps[parent], step_maps], dim=1)

    prefix_of = prefix_scores.tolist()
    for i, hyps in enumerate(finished):
        for hyp in hyps:
            hyp.prefix_score = prefix_of[i]
    return [sorted(hyps, key=lambda h: -h.normalized)[: cfg.n_best] for hyps in finished]


def _set_aside(
    finished: list[list[Hypothesis]],
    cfg: DecodeConfig,
    sentences: Tensor,
    rows: Tensor,
    tokens: Tensor,
    scores: Tensor,
    history: Tensor,
    maps: Tensor | None,
    weights: Tensor | None,
    src_lens: Tensor,
    shortlist: Shortlist | None,
    nodes: Tensor | None = None,
) -> None:
    """Record finished hypotheses (F of them): their sentence, the row they extend, last token,
    and (with a recorder) their tree nodes (F,)."""
    seqs = torch.cat([history[rows], tokens.unsqueeze(1)], dim=1)  # (F, t + 1)
    seqs = (seqs if shortlist is None else shortlist.ids[seqs]).tolist()
    attn = None
    if weights is not None:
        last = weights.float()[rows].unsqueeze(1)  # (F, 1, L, h, S)
        attn = (last if maps is None else torch.cat([maps[rows], last], dim=1)).cpu()
    lens = src_lens.tolist()
    node_ids = [None] * len(seqs) if nodes is None else nodes.tolist()
    for f, (i, seq, score) in enumerate(zip(sentences.tolist(), seqs, scores.tolist())):
        hyp_attn = None if attn is None else attn[f, ..., : lens[i]]
        hyp = _hypothesis(seq, score, hyp_attn, cfg)
        hyp.node = node_ids[f]
        finished[i].append(hyp)


def decode_all(
    model: Seq2Seq,
    src_ids: list[list[int]],
    cfg: DecodeConfig,
    device: torch.device,
    attention: bool = False,
    lexicon: Lexicon | None = None,
    prefixes: list[list[int]] | None = None,
) -> list[list[Hypothesis]]:
    """Decode every source (ids ending in EOS) in length-sorted batches; n-best lists (best
    first) in input order. `attention` keeps the attention maps of each hypothesis; `lexicon`
    gives the shortlists of `cfg.shortlist`; `prefixes` (target ids, no EOS; [] for none) are
    forced at the start of each source's translations; the matrix products run in
    `cfg.precision`."""
    decoded = search_all(model, src_ids, cfg, device, attention, lexicon, prefixes)
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
) -> list[Decoded]:
    """`decode_all`, and with `trees` each sentence's search tree (`nmt.beam_tree`)."""
    results: list[Decoded] = [Decoded([]) for _ in src_ids]
    with autocast(device, cfg.precision):
        for index in length_batches([len(ids) for ids in src_ids], cfg.batch_size):
            batch_prefixes = None if prefixes is None else [prefixes[i] for i in index]
            decoded = _decode_batch(
                model, src_ids, index, cfg, device, attention, lexicon, batch_prefixes, trees
            )
            for i, result in zip(index, decoded):
                results[i] = result
    return results


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
) -> list[Decoded]:
    """The results for the sources `index` of `src_ids`, one padded batch."""
    batch = collate(index, src_ids, None).to(device)
    src, lens = batch.src, batch.src_lens
    prefix = _prefix_tensor(prefixes, device)
    rows = torch.arange(len(index), device=device)
    if cfg.strategy == Strategy.sample:
        rows = rows.repeat_interleave(cfg.n_best)
    recorder = TreeRecorder(rows, len(index)) if trees else None
    match cfg.strategy:
        case Strategy.greedy:
            nbests = [
                [h] for h in greedy(model, src, lens, cfg, attention, lexicon, prefix, recorder)
            ]
        case Strategy.beam:
            nbests = beam_search(model, src, lens, cfg, attention, lexicon, prefix, recorder)
        case Strategy.sample:
            nbests = sample(model, src, lens, cfg, attention, lexicon, prefix, recorder)
        case _:
            raise NMTError(f"unknown decode.strategy {cfg.strategy!r}")
    if recorder is None:
        return [Decoded(nbest) for nbest in nbests]
    ranks = {h.node: rank for nbest in nbests for rank, h in enumerate(nbest)}
    return [Decoded(nbest, tree) for nbest, tree in zip(nbests, recorder.trees(ranks))]
