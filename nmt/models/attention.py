"""The attention family: score functions behind one interface, and the one `Attention` module.

A scorer turns a query q (decoder side) and keys k_j (from the encoder states) into energies e_j.
Masking, the softmax and the weighted sum of values are the same for every scorer and live only in
`Attention`. Everything that depends on the encoder alone (key and value projections) happens in
`prepare`, once per batch; the result travels in the decoder state, never on the module.

Shapes: memory (B, S, D); query (B, T, Q) with T = 1 for one decoding step; energies and weights
(B, h, T, S) where h = 1 except for multi-head; context (B, T, D).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.config import AttentionType
from nmt.errors import NMTError


class Prepared(NamedTuple):
    """The per-batch, query-independent part: keys (scorer-specific), values (B, h, S, dv)."""

    keys: Tensor
    values: Tensor

    def index_select(self, index: Tensor) -> Prepared:
        return Prepared(self.keys.index_select(0, index), self.values.index_select(0, index))


def group_rows(query: Tensor, sentences: int) -> Tensor:
    """(R, T, ...) rows grouped by sentence -> (N, G*T, ...): the G rows of a sentence (its beam)
    become G*T query positions over that sentence's keys, so the keys are never copied per row."""
    return query.reshape(sentences, -1, *query.shape[2:])


def ungroup_rows(x: Tensor, rows: int) -> Tensor:
    """Inverse of `group_rows` on the query axis (dim 1): (N, G*T, ...) -> (R, T, ...)."""
    return x.reshape(rows, -1, *x.shape[2:])


class Scorer(nn.Module):
    """Base scorer: keys and values are the memory itself, one head."""

    def prepare(self, memory: Tensor) -> Prepared:
        return Prepared(memory, memory.unsqueeze(1))

    def energies(self, query: Tensor, keys: Tensor) -> Tensor:
        raise NotImplementedError

    def merge(self, context: Tensor) -> Tensor:
        """(B, h, T, dv) -> (B, T, D)."""
        return context.squeeze(1)


class Dot(Scorer):
    """e = qᵀk (Luong dot)."""

    def energies(self, query: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(query, keys.transpose(1, 2)).unsqueeze(1)


class ScaledDot(Dot):
    """e = qᵀk / √d (the Transformer's scaling keeps the softmax out of saturation)."""

    def energies(self, query: Tensor, keys: Tensor) -> Tensor:
        return super().energies(query, keys) / math.sqrt(query.size(-1))


class General(Dot):
    """e = qᵀ W k (Luong general / bilinear); W k is computed once per batch."""

    def __init__(self, query_size: int, key_size: int) -> None:
        super().__init__()
        self.key_proj = nn.Linear(key_size, query_size, bias=False)

    def prepare(self, memory: Tensor) -> Prepared:
        return Prepared(self.key_proj(memory), memory.unsqueeze(1))


def additive_energies(query: Tensor, keys: Tensor, v: nn.Linear) -> Tensor:
    """vᵀ tanh(q' + k'_j) for projected queries q' (B, T, A) and keys given doubled, 2k' (B, S, A),
    -> (B, 1, T, S). The form both additive (Bahdanau) and concat (Luong) scoring reduce to."""
    # tanh(x) = 2 sigmoid(2x) - 1, because torch's CPU tanh is ~3x slower than its sigmoid, and
    # this is the largest elementwise op of a recurrent decoder step. The doubling goes to the
    # small operands (the keys once per batch, in `prepare`), the affine map past v:
    # vᵀ(2σ - 1) = 2 vᵀσ - Σv
    hidden = torch.sigmoid((query + query).unsqueeze(2) + keys.unsqueeze(1))  # (B, T, S, A)
    return (2 * v(hidden).squeeze(-1) - v.weight.sum()).unsqueeze(1)


class Additive(Scorer):
    """e = vᵀ tanh(W_q q + W_k k) (Bahdanau et al. 2015, eq. 6 / appendix A.1.2); W_k k is computed
    once per batch."""

    def __init__(self, query_size: int, key_size: int, attention_size: int) -> None:
        super().__init__()
        self.query_proj = nn.Linear(query_size, attention_size, bias=False)
        self.key_proj = nn.Linear(key_size, attention_size)
        self.v = nn.Linear(attention_size, 1, bias=False)

    def prepare(self, memory: Tensor) -> Prepared:
        keys = self.key_proj(memory)
        return Prepared(keys + keys, memory.unsqueeze(1))  # doubled: see additive_energies

    def energies(self, query: Tensor, keys: Tensor) -> Tensor:
        return additive_energies(self.query_proj(query), keys, self.v)


class Concat(Scorer):
    """e = vᵀ tanh(W [q; k]) (Luong et al. 2015, eq. 8, concat).

    As a function this equals the additive form with W = [W_q W_k]; it is parameterised as the
    paper writes it (one W over the concatenation, one bias) and split at use so that the key half
    is still applied once per batch instead of once per (query, key) pair.
    """

    def __init__(self, query_size: int, key_size: int, attention_size: int) -> None:
        super().__init__()
        self.query_size = query_size
        self.proj = nn.Linear(query_size + key_size, attention_size)
        self.v = nn.Linear(attention_size, 1, bias=False)

    def prepare(self, memory: Tensor) -> Prepared:
        keys = F.linear(memory, self.proj.weight[:, self.query_size :], self.proj.bias)
        return Prepared(keys + keys, memory.unsqueeze(1))  # doubled: see additive_energies

    def energies(self, query: Tensor, keys: Tensor) -> Tensor:
        query = F.linear(query, self.proj.weight[:, : self.query_size])
        return additive_energies(query, keys, self.v)


class MultiHead(Scorer):
    """h scaled-dot heads on learned projections, concatenated, times W^O (Vaswani et al.)."""

    def __init__(self, query_size: int, key_size: int, heads: int) -> None:
        super().__init__()
        if key_size % heads:
            raise NMTError(f"multihead attention: size {key_size} not divisible by {heads} heads")
        self.heads, self.head_size = heads, key_size // heads
        self.query_proj = nn.Linear(query_size, key_size)
        self.key_proj = nn.Linear(key_size, key_size)
        self.value_proj = nn.Linear(key_size, key_size)
        self.out_proj = nn.Linear(key_size, key_size)

    def _split(self, x: Tensor) -> Tensor:
        """(B, L, h*d) -> (B, h, L, d)."""
        return x.view(x.size(0), x.size(1), self.heads, self.head_size).transpose(1, 2)

    def prepare(self, memory: Tensor) -> Prepared:
        return Prepared(self._split(self.key_proj(memory)), self._split(self.value_proj(memory)))

    def energies(self, query: Tensor, keys: Tensor) -> Tensor:
        q = self._split(self.query_proj(query))
        return q @ keys.transpose(-1, -2) / math.sqrt(self.head_size)

    def merge(self, context: Tensor) -> Tensor:
        batch, _, steps, _ = context.shape
        return self.out_proj(context.transpose(1, 2).reshape(batch, steps, -1))


class Attention(nn.Module):
    """Masking, softmax and context, written once for every scorer."""

    def __init__(self, scorer: Scorer) -> None:
        super().__init__()
        self.scorer = scorer

    def prepare(self, memory: Tensor) -> Prepared:
        return self.scorer.prepare(memory)

    def forward(self, query: Tensor, prepared: Prepared, src_mask: Tensor) -> tuple[Tensor, Tensor]:
        """query (R, T, Q) for R = N * G rows grouped by sentence (G = 1 outside beam search),
        prepared keys/values and src_mask (N, S) of the N sentences -> context (R, T, D),
        weights (R, h, T, S)."""
        rows, sentences = query.size(0), src_mask.size(0)
        query = group_rows(query, sentences)  # (N, G*T, Q)
        energies = self.scorer.energies(query, prepared.keys)
        energies = energies.masked_fill(~src_mask[:, None, None, :], float("-inf"))
        # softmax in fp32: under fp16/bf16 autocast a long source would otherwise lose mass
        weights = torch.softmax(energies.float(), dim=-1).type_as(prepared.values)
        context = weights @ prepared.values  # (N, h, G*T, S) @ (N, h, S, dv) -> (N, h, G*T, dv)
        context = ungroup_rows(self.scorer.merge(context), rows)  # (R, T, D)
        # (N, h, G*T, S) -> (N, G*T, h, S) -> (R, T, h, S) -> (R, h, T, S)
        weights = ungroup_rows(weights.transpose(1, 2), rows).transpose(1, 2)
        return context, weights


def build_attention(
    kind: AttentionType, query_size: int, key_size: int, attention_size: int, heads: int
) -> Attention | None:
    """The configured attention, or None for `attention=none`."""
    if kind in (AttentionType.dot, AttentionType.scaled_dot) and query_size != key_size:
        raise NMTError(
            f"attention={kind.value} needs query size {query_size} == key size {key_size}"
        )
    match kind:
        case AttentionType.none:
            return None
        case AttentionType.dot:
            scorer: Scorer = Dot()
        case AttentionType.scaled_dot:
            scorer = ScaledDot()
        case AttentionType.general:
            scorer = General(query_size, key_size)
        case AttentionType.concat:
            scorer = Concat(query_size, key_size, attention_size)
        case AttentionType.additive:
            scorer = Additive(query_size, key_size, attention_size)
        case AttentionType.multihead:
            scorer = MultiHead(query_size, key_size, heads)
    return Attention(scorer)
