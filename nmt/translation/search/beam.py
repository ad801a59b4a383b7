"""Beam search: K hypotheses per sentence, the K-best rule for ending ones, n-best lists.

Rows are (sentence, beam) pairs: R = N * W for N live sentences of W rows each (1 at the first
step, then K). A sentence that is done leaves the batch with its state rows.

With positive constraints (`Constraints`, nmt/translation/search/constraints.py) a step's 2K
candidates come from dynamic beam allocation instead of the top-2K by score, and each row's
constraint progress follows the beam; without them, that code does not run.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from nmt.errors import NMTError
from nmt.models.seq2seq import Seq2Seq
from nmt.tokenizer import BOS, EOS
from nmt.translation.search.batch import SearchBatch
from nmt.translation.search.constraints import follow
from nmt.translation.search.rules import NEG_INF, Step
from nmt.translation.search.step import Hypothesis, hypothesis, next_log_probs


@torch.inference_mode()
def beam_search(model: Seq2Seq, batch: SearchBatch) -> list[list[Hypothesis]]:
    """Batched beam search: the n-best list of each sentence of the batch, best first.

    Each step scores every (beam, token) extension, keeps the 2K best per sentence, sets aside the
    ones ending in EOS among the first K (the K-best rule that makes beam 1 equal greedy), and
    continues with the K best that do not end. A sentence is done when K hypotheses have finished
    (max(n_best, ceil(patience * K)); with decode.early_stopping=false, and once its best live
    hypothesis, normalised at its current length, no longer ranks above the worst of those K:
    Hugging Face's rule) or it reached its length limit (then its K best are kept as they are,
    unended). The step rules read the history, which follows the beam. With positive constraints,
    every returned hypothesis contains each of its sentence's phrases (see
    nmt/translation/search/constraints.py); a sentence none of whose hypotheses could meet them gets
    an empty list.
    """
    cfg, src, max_len = batch.cfg, batch.src, batch.max_len
    size, device, k = src.size(0), src.device, cfg.beam_size
    shortlist, constraints, recorder = batch.shortlist, batch.constraints, batch.recorder
    prefix_scores = torch.zeros(size, device=device)
    steps = int(max_len.max())
    # a compiled step wants its caches preallocated; eager, growing them measured no slower
    limit = steps if cfg.compile else None
    # the first step has one row per sentence (the empty hypothesis); the next ones K rows each
    state = model.init_state(model.encode(src, batch.src_lens), limit, cfg.compile)
    sentence = torch.arange(size, device=device)  # (N,) original index of each live sentence
    scores = torch.zeros((size, 1), device=device)  # (N, W): W rows per sentence, 1 then K
    history = torch.zeros((size, 0), dtype=torch.long, device=device)  # (R, t)
    maps = _Maps() if batch.attention else None  # every step's maps, by back-pointers
    # (R, t, 1) with batch.statistics: each row's tokens' log-probabilities there
    stats = None if batch.statistics is None else torch.zeros((size, 0, 1), device=device)
    prev = torch.full((size,), BOS, dtype=torch.long, device=device)
    enough = max(cfg.n_best, math.ceil(cfg.patience * k))  # finished hypotheses that end a sentence
    finished = _Finished(batch, enough)
    allowed: Tensor | None = None  # (R, C): the shortlist's pieces each row may produce
    n_finished = torch.zeros(size, dtype=torch.long, device=device)
    matched = None if constraints is None else constraints.start()  # (N, W, P) phrase progress
    met: Tensor | None = None  # (N, W): constraint pieces of each row, for the recorder

    for t in range(steps):
        live, width = scores.shape
        row_sentence = sentence.repeat_interleave(width)  # (R,)
        # rows' lists change only when sentences leave or the beam widens: both change R
        if shortlist is not None and (allowed is None or allowed.size(0) != live * width):
            allowed = shortlist.allowed[row_sentence]  # (R, C)
        step = Step(t, row_sentence, history, batch.rules.forced(t, row_sentence), allowed)
        log_probs, weights, state, step_stats = next_log_probs(model, prev, state, batch, step)
        here = None if maps is None or weights is None else maps.add(weights)  # (R,)
        forced = step.forced
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
            ends = batch.prefix_len[sentence] == t + 1
            prefix_scores[sentence] = torch.where(ends, top_scores[:, 0], prefix_scores[sentence])
        rows = top // vocab + torch.arange(live, device=device).unsqueeze(1) * width  # (N, 2K)
        tokens = top % vocab
        is_eos = tokens == EOS
        # (N, 2K, 1): each candidate's statistics (`StepStatistics`), with batch.statistics
        candidate = None if stats is None or step_stats is None else step_stats.pick(rows, tokens)

        # finish: EOS among the first K; at the length limit, all of the first K
        finish = torch.zeros_like(is_eos)
        finish[:, :k] = is_eos[:, :k] | at_limit.unsqueeze(1)
        finish &= top_scores > NEG_INF
        if bool(finish.any()):
            which, rank = finish.nonzero(as_tuple=True)
            n_finished.index_add_(0, sentence[which], torch.ones_like(which))
            ended_rows, ended_tokens = rows[which, rank], tokens[which, rank]
            nodes = None
            if recorder is not None:
                ended = ended_tokens if shortlist is None else shortlist.ids[ended_tokens]
                ended_met = None if constraints is None else banks[which, rank]
                nodes = recorder.finish(
                    ended_rows, ended, top_scores[which, rank], t + 1, ended_met
                )
            seqs = torch.cat([history[ended_rows], ended_tokens.unsqueeze(1)], dim=1)
            attn = None
            if here is not None:
                attn = maps.paths(here, ended_rows)  # (F, t + 1, L, h, S)
            ended_stats = None  # (F, t + 1, 1)
            if candidate is not None:
                ended_stats = torch.cat([stats[ended_rows], candidate[which, rank, None]], 1)
            finished.add(sentence[which], seqs, top_scores[which, rank], attn, nodes, ended_stats)

        done = at_limit | (n_finished[sentence] >= enough)
        if not cfg.early_stopping:  # ...and the best live one, ranked now, could not rank higher
            live_best = top_scores.masked_fill(is_eos, NEG_INF).amax(dim=1)  # (N,)
            better = cfg.normalize(live_best, t + 1) > finished.worst[sentence]
            done = at_limit | (done & ~better)
        if bool(done.all()):
            break
        # continue with the K best that did not end in EOS (there are at least K: each row
        # contributes at most one EOS to the candidates, and there are more than K of them)
        order = (is_eos.long() * (2 * k) + torch.arange(top.size(1), device=device)).argsort(1)
        pick = order[:, :k]  # (N, K)
        parent = rows.gather(1, pick)  # (N, K) rows of this step
        scores, prev = top_scores.gather(1, pick), tokens.gather(1, pick)
        chosen = None  # (N, K, 1)
        if candidate is not None:
            chosen = candidate.gather(1, pick.unsqueeze(2))
        if constraints is not None:  # progress follows the beam like the history
            matched, met = follow(reached, banks, pick)
        if bool(done.any()):  # sentences leave: their per-sentence state goes too
            keep = (~done).nonzero().squeeze(1)
            scores, parent, prev, sentence = scores[keep], parent[keep], prev[keep], sentence[keep]
            chosen = None if chosen is None else chosen[keep]
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
        if stats is not None and chosen is not None:
            stats = torch.cat([stats[parent], chosen.view(-1, 1, 1)], dim=1)
        if here is not None:
            maps.follow(here, parent)

    prefix_of = prefix_scores.tolist()
    for i, hyps in enumerate(finished.lists):
        for hyp in hyps:
            hyp.prefix_score = prefix_of[i]
    return [sorted(hyps, key=lambda h: -h.normalized)[: cfg.n_best] for hyps in finished.lists]


class _Maps:
    """The attention maps of a beam's hypotheses, kept with linear work: each step's maps (R, L,
    h, S) are written once into one flat buffer, and each live row keeps, per step, the buffer
    row of its map there (`rows` (R, t), small integers that follow the beam as the token
    history does). A finished hypothesis's maps are then one gather. Copying every row's whole
    map history at each step instead costs rows x steps^2 x L x h x S (12x the search itself for
    beam 16 over a long text)."""

    def __init__(self) -> None:
        self.buffer: Tensor | None = None  # (capacity, L, h, S), filled up to `used`
        self.used = 0
        self.rows: Tensor | None = None  # (R, t): buffer rows of each live row's maps

    def add(self, weights: Tensor) -> Tensor:
        """Write a step's maps (R, L, h, S), once; the buffer row of each of its rows (R,). The
        buffer doubles when full, so writing costs each map row a constant on average."""
        count = weights.size(0)
        if self.buffer is None or self.used + count > self.buffer.size(0):
            size = max(2 * (0 if self.buffer is None else self.buffer.size(0)), self.used + count)
            grown = weights.new_empty((size, *weights.shape[1:]), dtype=torch.float)
            if self.buffer is not None:
                grown[: self.used] = self.buffer[: self.used]
            self.buffer = grown
        self.buffer[self.used : self.used + count] = weights.float()
        self.used += count
        return torch.arange(self.used - count, self.used, device=weights.device)

    def paths(self, here: Tensor, rows: Tensor) -> Tensor:
        """The maps (F, t + 1, L, h, S) of hypotheses that end at rows `rows` (F,) of this step
        (`here`: its buffer rows, from `add`)."""
        path = here[rows].unsqueeze(1)
        if self.rows is not None:
            path = torch.cat([self.rows[rows], path], dim=1)
        assert self.buffer is not None
        return self.buffer[path]

    def follow(self, here: Tensor, parent: Tensor) -> None:
        """The next step's rows: row i continues row parent[i] of this step."""
        step = here[parent].unsqueeze(1)
        self.rows = step if self.rows is None else torch.cat([self.rows[parent], step], dim=1)


class _Finished:
    """The hypotheses each sentence of a batch has finished, as beam search sets them aside."""

    def __init__(self, batch: SearchBatch, enough: int) -> None:
        """`enough`: the hypotheses that end a sentence (with decode.early_stopping=false, the
        sentence's `worst` is the lowest normalised score of its `enough` best)."""
        self.lists: list[list[Hypothesis]] = [[] for _ in range(batch.src.size(0))]
        self.cfg = batch.cfg
        self.src_lens = batch.src_lens.tolist()
        self.ids = None if batch.shortlist is None else batch.shortlist.ids
        self.enough = enough
        # (B,) the `enough`-th best normalised score each sentence has ended with; -inf before
        self.worst = torch.full((batch.src.size(0),), NEG_INF, device=batch.src.device)

    def add(
        self,
        sentences: Tensor,
        seqs: Tensor,
        scores: Tensor,
        attn: Tensor | None,
        nodes: Tensor | None,
        stats: Tensor | None = None,
    ) -> None:
        """F finished hypotheses: their sentences (F,), tokens (F, t + 1) (vocabulary ids, or
        shortlist columns), scores (F,), attention maps (F, t + 1, L, h, S) or None, tree
        nodes (F,) or None, and statistics (F, t + 1, 1) or None."""
        tokens = (seqs if self.ids is None else self.ids[seqs]).tolist()
        attn = None if attn is None else attn.cpu()
        stats = None if stats is None else stats.cpu()
        node_ids = [None] * len(tokens) if nodes is None else nodes.tolist()
        for f, (i, seq, score) in enumerate(zip(sentences.tolist(), tokens, scores.tolist())):
            hyp_attn = None if attn is None else attn[f, ..., : self.src_lens[i]]
            hyp = hypothesis(seq, score, hyp_attn, self.cfg)
            hyp.node = node_ids[f]
            hyp.statistics = None if stats is None else stats[f]
            self.lists[i].append(hyp)
        if not self.cfg.early_stopping:
            touched = sorted(set(sentences.tolist()))
            worst = [self._worst(i) for i in touched]
            index = torch.tensor(touched, device=self.worst.device)
            self.worst[index] = torch.tensor(worst, device=self.worst.device)

    def _worst(self, i: int) -> float:
        ranked = sorted((h.normalized for h in self.lists[i]), reverse=True)
        return ranked[self.enough - 1] if len(ranked) >= self.enough else NEG_INF
