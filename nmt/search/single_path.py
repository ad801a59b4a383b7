"""One path per row: greedy search (the argmax each step) and sampling (a draw each step).

`_single_path` runs both: one row per hypothesis, a finished row leaves the batch at once (its
state rows are dropped with `reorder`). `sample` decodes `n_best` copies of each sentence.
"""

from __future__ import annotations

import torch
from torch import Tensor

from nmt.beam_tree import TreeRecorder
from nmt.config import DecodeConfig
from nmt.lexicon import Lexicon
from nmt.models.seq2seq import Seq2Seq
from nmt.search import step
from nmt.search.constraints import NEG_INF, Banned
from nmt.search.step import Hypothesis, _hypothesis, _next_log_probs, _shortlist
from nmt.tokenizer import BOS, EOS


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
    banned: Banned | None = None,
) -> list[Hypothesis]:
    """Greedy (generator None) or sampling: one hypothesis per row of src (B, S)."""
    batch, device = src.size(0), src.device
    # looked up in its module at call time: one name to replace for every strategy (test_device)
    max_len, min_len = step._limits(cfg, src, src_lens)
    shortlist, prefix, banned, _ = _shortlist(model, cfg, lexicon, src, prefix, banned)
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
        # the token history is gathered only when a constraint reads it: all of it for the
        # n-gram constraint, the longest phrase's context for banned phrases
        if cfg.no_repeat_ngram:
            history = tokens[alive, :t]
        elif banned is not None and banned.context:
            history = tokens[alive, max(0, t - banned.context) : t]
        else:
            history = None
        # a row's list changes only when rows leave (then the row count changes)
        if shortlist is not None and (allowed is None or allowed.size(0) != alive.numel()):
            allowed = shortlist.allowed[alive]
        forced = prefix[alive, t] if t < forced_steps else None
        log_probs, weights, state = _next_log_probs(
            model, prev, state, t, min_len[alive], cfg, history, shortlist, allowed, forced,
            banned,
        )  # fmt: skip
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
    banned: Banned | None = None,
) -> list[Hypothesis]:
    """Batched greedy search. src (B, S), src_lens (B,). Rows leave the batch when they finish.
    `banned` phrases are never produced (`Banned`)."""
    return _single_path(
        model, src, src_lens, cfg, attention, None, lexicon, prefix, recorder, banned
    )


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
    banned: Banned | None = None,
) -> list[list[Hypothesis]]:
    """`cfg.n_best` independent draws per sentence, sorted by normalised score. Reproducible for
    the same inputs, batching and `cfg.seed`. A recorder is made with `n_best` rows per sentence
    (`TreeRecorder(torch.arange(B).repeat_interleave(n_best), B)`)."""
    generator = torch.Generator(device=src.device).manual_seed(cfg.seed)
    n = cfg.n_best
    prefix = None if prefix is None else prefix.repeat_interleave(n, 0)
    hyps = _single_path(
        model, src.repeat_interleave(n, 0), src_lens.repeat_interleave(n, 0), cfg, attention,
        generator, lexicon, prefix, recorder, banned,
    )  # fmt: skip
    return [
        sorted(hyps[i * n : (i + 1) * n], key=lambda h: -h.normalized) for i in range(src.size(0))
    ]
