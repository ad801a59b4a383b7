"""The encoder-decoder wrapper and the interfaces every model family implements.

A decoder offers `init_state(encoder_output, steps=None, compiled=False) -> state` (`steps`: the
search's length limit, when known; `compiled`: its steps through torch.compile), `step(prev_tokens,
state, output=None) -> (logits, attention, state)` (`output`: `OutputRows`, a slice of the output
layer whose logits are the only ones computed), `output_layer() -> (weight, bias)` and
`forward(tgt_in, state) -> (logits, attention)` (teacher forcing); its state offers `reorder(rows,
sentences)`. A step may write its caches in place: the state passed to `step` is not to be used
again, only the one it returns. Attention comes as maps (B, L, h, S) per step: L attention layers
(1 for the recurrent family), h heads (1 unless multi-head), so a Bahdanau scorer and a Transformer
head can be shown the same way; teacher forcing may return None where computing them would cost
speed. Search code (nmt/translation/search/) only talks to `Seq2Seq`, so it never asks which family
it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch.nn.functional as F
from torch import Tensor, nn

from nmt.models.int8 import Int8Product


@dataclass
class OutputRows:
    """Some rows of the output layer: logits = x weightᵀ + bias score those C target ids alone."""

    weight: Tensor | None  # (C, H); None in an int8 model that holds no fp32 output weights
    bias: Tensor | None  # (C,)
    int8: Int8Product | None = None  # the same product in int8 (an int8 model's, nmt.models.int8)

    def __call__(self, x: Tensor) -> Tensor:
        """x (.., H) -> logits (.., C)."""
        return self.int8(x) if self.int8 is not None else F.linear(x, self.weight, self.bias)


@dataclass
class EncoderOutput:
    """memory (B, S, D); src_mask (B, S), True on real tokens; final (B, D) summary or None."""

    memory: Tensor
    src_mask: Tensor
    final: Tensor | None


class DecoderState(Protocol):
    """A decoder's state between steps. It holds two kinds of tensors: per row (one row per live
    hypothesis: recurrent state, self-attention caches) and per sentence (what depends on the
    source alone: attention keys and values, the source mask). Rows are grouped by sentence, the
    same number per sentence and in sentence order (beam search's K rows of sentence 0 first), so
    one sentence's keys serve all of its rows without being copied for each of them."""

    def reorder(self, rows: Tensor, sentences: Tensor | None = None) -> DecoderState:
        """Row i of the result is row rows[i] of this state; with `sentences`, sentence j of the
        result is sentence sentences[j] (None: the same sentences, as in a beam step where the
        hypotheses of each sentence only change places). `rows` must keep the grouping."""
        ...


class Seq2Seq(nn.Module):
    def __init__(self, encoder: nn.Module, decoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def encode(self, src: Tensor, src_lens: Tensor) -> EncoderOutput:
        """src (B, S) token ids, src_lens (B,) -> EncoderOutput."""
        return self.encoder(src, src_lens)

    def init_state(
        self, encoded: EncoderOutput, steps: int | None = None, compiled: bool = False
    ) -> DecoderState:
        """The state before the first step. `steps`, when known: the most steps the search will
        take (a decoder may preallocate what it would otherwise grow); `compiled`: the steps from
        this state run through torch.compile (decode.compile, nmt.models.compiled)."""
        return self.decoder.init_state(encoded, steps, compiled)

    def decode_step(
        self, prev: Tensor, state: DecoderState, output: OutputRows | None = None
    ) -> tuple[Tensor, Tensor | None, DecoderState]:
        """prev (B,) last tokens -> logits (B, V), attention (B, L, h, S) or None, new state.
        With `output` (see `output_rows`), the logits (B, C) of its C target ids alone."""
        return self.decoder.step(prev, state, output)

    def output_rows(self, ids: Tensor) -> OutputRows:
        """The output layer's rows for the target ids `ids` (C,): a shortlist's layer, sliced once
        per batch and used at every step (its product costs C/V of the full one)."""
        product = getattr(self.decoder, "int8", None)
        if isinstance(product, Int8Product):  # an int8 output layer: its int8 rows, as they are
            return OutputRows(None, None, product.rows(ids))
        weight, bias = self.decoder.output_layer()
        rows = OutputRows(weight[ids], None if bias is None else bias[ids])
        if product:  # an int8 recurrent model's rows multiply in int8 too
            rows.int8 = Int8Product(rows.weight, rows.bias, per_batch=True)
        return rows

    def forward(
        self, src: Tensor, src_lens: Tensor, tgt_in: Tensor, attention_layer: int | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing: tgt_in (B, T) -> logits (B, T, V), attention (B, T, L, h, S) or None:
        a recurrent decoder's one attention (L = 1); a Transformer's layer `attention_layer`
        alone (L = 1), none without one (training runs the fused kernels)."""
        state = self.init_state(self.encode(src, src_lens))
        return self.decoder(tgt_in, state, attention_layer)
