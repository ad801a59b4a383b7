"""Decoding strategies over the `Seq2Seq` step interface; they never ask which family they run.

`greedy` decodes one padded batch; `decode_all` runs the configured strategy over any number of
sentences in length-sorted batches and returns the results in the input order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.config import DecodeConfig, Strategy
from nmt.data import collate
from nmt.models.seq2seq import Seq2Seq
from nmt.tokenizer import BOS, EOS, PAD


@dataclass
class Hypothesis:
    tokens: list[int]  # target ids, without BOS and EOS
    score: float  # sum of log-probabilities, EOS included when it was produced
    ended: bool  # produced EOS (False: stopped by the length limit)
    attention: Tensor | None  # (steps, S) on CPU: one row per generated token (EOS included)


@torch.inference_mode()
def greedy(model: Seq2Seq, src: Tensor, src_lens: Tensor, cfg: DecodeConfig) -> list[Hypothesis]:
    """Batched greedy search. src (B, S), src_lens (B,). Rows leave the batch when they finish."""
    batch, device = src.size(0), src.device
    limits = torch.tensor([cfg.max_len(int(n)) for n in src_lens], device=device)  # (B,)
    steps = int(limits.max())
    tokens = torch.full((batch, steps), PAD, dtype=torch.long, device=device)
    scores = torch.zeros(batch, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)  # tokens produced, EOS included
    attention: Tensor | None = None

    state = model.init_state(model.encode(src, src_lens))
    prev = torch.full((batch,), BOS, dtype=torch.long, device=device)
    alive = torch.arange(batch, device=device)  # original rows still decoding
    for t in range(steps):
        logits, weights, state = model.decode_step(prev, state)
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        best_score, best = log_probs.max(dim=-1)
        tokens[alive, t] = best
        scores[alive] += best_score
        lengths[alive] = t + 1
        if weights is not None:
            if attention is None:
                attention = src.new_zeros((batch, steps, src.size(1)), dtype=torch.float)
            attention[alive, t] = weights.float()
        done = (best == EOS) | (t + 1 >= limits[alive])
        if bool(done.all()):
            break
        if bool(done.any()):
            keep = (~done).nonzero().squeeze(1)
            state, alive, best = state.reorder(keep), alive[keep], best[keep]
        prev = best

    # one device-to-host copy per tensor, then plain Python
    attention = None if attention is None else attention.cpu()
    out = []
    for row, (n, seq, score) in enumerate(zip(lengths.tolist(), tokens.tolist(), scores.tolist())):
        seq = seq[:n]
        ended = bool(seq) and seq[-1] == EOS
        attn = None if attention is None else attention[row, :n, : int(src_lens[row])]
        out.append(Hypothesis(seq[:-1] if ended else seq, score, ended, attn))
    return out


def decode_all(
    model: Seq2Seq, src_ids: list[list[int]], cfg: DecodeConfig, device: torch.device
) -> list[Hypothesis]:
    """Decode every source (ids ending in EOS) in length-sorted batches; results in input order."""
    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
    results: list[Hypothesis | None] = [None] * len(src_ids)
    for start in range(0, len(order), cfg.batch_size):
        index = order[start : start + cfg.batch_size]
        batch = collate(index, src_ids, None).to(device)
        match cfg.strategy:
            case Strategy.greedy:
                hyps = greedy(model, batch.src, batch.src_lens, cfg)
        for i, hyp in zip(index, hyps):
            results[i] = hyp
    return results  # type: ignore[return-value]
