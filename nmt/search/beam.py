"""Beam search: K hypotheses per sentence, the K-best rule for ending ones, n-best lists.

Rows are (sentence, beam) pairs: R = N * W for N live sentences of W rows each (1 at the first
step, then K). A sentence that is done leaves the batch with its state rows.

With positive constraints (`Constraints`, nmt/search/positive.py) a step's 2K candidates come
from dynamic beam allocation instead of the top-2K by score, and each row's constraint progress
follows the beam; without them, that code does not run.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from nmt.beam_tree import TreeRecorder
from nmt.config import DecodeConfig
from nmt.errors import NMTError
from nmt.lexicon import Lexicon, Shortlist
from nmt.models.seq2seq import Seq2Seq
from nmt.search import step
from nmt.search.constraints import NEG_INF, Banned
from nmt.search.positive import Constraints, follow
from nmt.search.step import Hypothesis, _hypothesis, _next_log_probs, _shortlist
from nmt.tokenizer import BOS, EOS


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
    banned: Banned | None = None,
    constraints: Constraints | None = None,
) -> list[list[Hypothesis]]:
    """Batched beam search: the n-best list of each sentence of src (B, S), best first.

    Each step scores every (beam, token) extension, keeps the 2K best per sentence, sets aside the
    ones ending in EOS among the first K (the K-best rule that makes beam 1 equal greedy), and
    continues with the K best that do not end. A sentence is done when K hypotheses have finished
    or it reached its length limit (then its K best are kept as they are, unended). `banned`
    phrases are blocked in every row (`Banned`); they read the history, which follows the beam.
    With `constraints`, every returned hypothesis contains each of its sentence's phrases (see
    nmt/search/positive.py); a sentence none of whose hypotheses could meet them gets an empty
    list.
    """
    batch, device, k = src.size(0), src.device, cfg.beam_size
    # looked up in its module at call time: one name to replace for every strategy (test_device)
    max_len, min_len = step._limits(cfg, src, src_lens)
    shortlist, prefix, banned, constraints = _shortlist(
        model, cfg, lexicon, src, prefix, banned, constraints
    )
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
    matched = None if constraints is None else constraints.start()  # (N, W, P) phrase progress
    met: Tensor | None = None  # (N, W): constraint pieces of each row, for the recorder

    for t in range(int(max_len.max())):
        live, width = scores.shape
        row_min = min_len[sentence].repeat_interleave(width)
        # rows' lists change only when sentences leave or the beam widens: both change R
        if shortlist is not None and (allowed is None or allowed.size(0) != live * width):
            allowed = shortlist.allowed[sentence].repeat_interleave(width, dim=0)  # (R, C)
        forced = prefix[sentence, t].repeat_interleave(width) if t < forced_steps else None
        log_probs, weights, state = _next_log_probs(
            model, prev, state, t, row_min, cfg, history, shortlist, allowed, forced, banned
        )
        vocab = log_probs.size(1)
        if vocab <= k:  # the K continuations below need K tokens other than EOS
            raise NMTError(f"decode.beam_size={k} needs a target vocabulary above {k} pieces")
        at_limit = t + 1 >= max_len[sentence]  # (N,)
        if constraints is None:
            total = (scores.view(-1, 1) + log_probs).view(live, width * vocab)
            top_scores, top = total.topk(min(2 * k, width * vocab), dim=1)  # (N, 2K), best first
        else:  # (N, 2K) in allocation order, each with its progress (N, 2K, P) and bank (N, 2K)
            top_scores, top, reached, banks = constraints.allocate(
                sentence, matched, scores, log_probs, t, max_len, forced, 2 * k
            )
            # a sentence with no candidate left (its rows could not meet the constraints) is done
            at_limit = at_limit | (top_scores[:, 0] == NEG_INF)
        if forced is not None:  # while forced, a sentence's best candidate is its only one
            ends = prefix_len[sentence] == t + 1
            prefix_scores[sentence] = torch.where(ends, top_scores[:, 0], prefix_scores[sentence])
        rows = top // vocab + torch.arange(live, device=device).unsqueeze(1) * width  # (N, 2K)
        tokens = top % vocab
        is_eos = tokens == EOS

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
                ended_met = None if constraints is None else banks[which, rank]
                nodes = recorder.finish(
                    rows[which, rank], ended, top_scores[which, rank], t + 1, ended_met
                )
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
        if constraints is not None:  # progress follows the beam like the history
            matched, met = follow(reached, banks, pick)
        if bool(done.any()):  # sentences leave: their per-sentence state goes too
            keep = (~done).nonzero().squeeze(1)
            scores, parent, prev, sentence = scores[keep], parent[keep], prev[keep], sentence[keep]
            if constraints is not None:
                matched, met = matched[keep], met[keep]
            state = state.reorder(parent.view(-1), keep)
        else:  # hypotheses change places within their sentences: keys and values stay put
            state = state.reorder(parent.view(-1))
        parent, prev = parent.view(-1), prev.view(-1)  # (R',)
        if recorder is not None:
            ids = prev if shortlist is None else shortlist.ids[prev]
            row_met = None if met is None else met.view(-1)
            recorder.advance(parent, ids, scores.view(-1), t + 1, row_met)
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
