"""One path per row: greedy search (the argmax each step) and sampling (a draw each step).

`_single_path` runs both: one row per hypothesis, a finished row leaves the batch at once (its
state rows are dropped with `reorder`). `sample` decodes the `n_best` rows its batch holds for
each sentence.
"""

from __future__ import annotations

import torch
from torch import Tensor

from nmt.config import DecodeConfig
from nmt.models.seq2seq import Seq2Seq
from nmt.tokenizer import BOS, EOS
from nmt.translation.search.batch import SearchBatch
from nmt.translation.search.rules import NEG_INF, Step
from nmt.translation.search.step import Hypothesis, hypothesis, next_log_probs


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
    model: Seq2Seq, batch: SearchBatch, generator: torch.Generator | None
) -> list[Hypothesis]:
    """Greedy (generator None) or sampling: one hypothesis per row of the batch."""
    cfg, src, max_len = batch.cfg, batch.src, batch.max_len
    size, device = src.size(0), src.device
    shortlist, recorder, context = batch.shortlist, batch.recorder, batch.rules.context
    steps = int(max_len.max())
    tokens = torch.zeros((size, steps), dtype=torch.long, device=device)
    scores = torch.zeros(size, device=device)
    lengths = torch.zeros(size, dtype=torch.long, device=device)  # tokens produced, EOS included
    maps: Tensor | None = None  # (B, steps, L, h, S)
    # (B, steps, 1) with batch.statistics: each token's log-probability there
    stats = None if batch.statistics is None else torch.zeros((size, steps, 1), device=device)
    prefix_scores = torch.zeros(size, device=device)
    last_node = torch.zeros(size, dtype=torch.long, device=device)  # (B,) with a recorder

    # a compiled step wants its caches preallocated; eager, growing them measured no slower
    limit = steps if cfg.compile else None
    state = model.init_state(model.encode(src, batch.src_lens), limit, cfg.compile)
    prev = torch.full((size,), BOS, dtype=torch.long, device=device)
    alive = torch.arange(size, device=device)  # original rows still decoding
    allowed: Tensor | None = None  # (R, C): the shortlist's pieces each row may produce
    for t in range(steps):
        # the token history is gathered only as far back as a rule reads it
        history = tokens[alive, max(0, t - context) : t] if context else None
        # a row's list changes only when rows leave (then the row count changes)
        if shortlist is not None and (allowed is None or allowed.size(0) != alive.numel()):
            allowed = shortlist.allowed[alive]
        step = Step(t, alive, history, batch.rules.forced(t, alive), allowed)
        log_probs, weights, state, step_stats = next_log_probs(model, prev, state, batch, step)
        choice = _draw(log_probs, cfg, generator)
        tokens[alive, t] = choice
        if stats is not None and step_stats is not None:
            stats[alive, t] = step_stats.pick(torch.arange(choice.numel(), device=device), choice)
        scores[alive] += log_probs.gather(1, choice.unsqueeze(1)).squeeze(1)
        lengths[alive] = t + 1
        if step.forced is not None:  # a prefix that ends at this step: its score is the row's now
            ends = batch.prefix_len[alive] == t + 1
            prefix_scores[alive] = torch.where(ends, scores[alive], prefix_scores[alive])
        if batch.attention and weights is not None:
            if maps is None:
                maps = weights.new_zeros((size, steps, *weights.shape[1:]), dtype=torch.float)
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
    stats = None if stats is None else stats.cpu()
    nodes = last_node.tolist() if recorder is not None else [None] * size
    out = []
    for row, (n, seq, score, prefix_score) in enumerate(
        zip(lengths.tolist(), tokens.tolist(), scores.tolist(), prefix_scores.tolist())
    ):
        attn = None if maps is None else maps[row, :n, ..., : int(batch.src_lens[row])]
        hyp = hypothesis(seq[:n], score, attn, cfg)
        hyp.prefix_score, hyp.node = prefix_score, nodes[row]
        hyp.statistics = None if stats is None else stats[row, :n]
        out.append(hyp)
    return out


@torch.inference_mode()
def greedy(model: Seq2Seq, batch: SearchBatch) -> list[Hypothesis]:
    """Batched greedy search: the most probable piece each step, one hypothesis per sentence.
    Rows leave the batch when they finish."""
    return _single_path(model, batch, None)


@torch.inference_mode()
def sample(model: Seq2Seq, batch: SearchBatch) -> list[list[Hypothesis]]:
    """`cfg.n_best` independent draws per sentence (the batch holds n_best rows per sentence,
    `SearchBatch.build`), sorted by normalised score. Reproducible for the same inputs, batching
    and `cfg.seed`."""
    generator = torch.Generator(device=batch.src.device).manual_seed(batch.cfg.seed)
    n = batch.cfg.n_best
    hyps = _single_path(model, batch, generator)
    return [sorted(hyps[i : i + n], key=lambda h: -h.normalized) for i in range(0, len(hyps), n)]
