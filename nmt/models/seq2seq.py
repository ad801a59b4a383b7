"""The encoder-decoder wrapper and the interfaces every model family implements.

A decoder offers `init_state(encoder_output) -> state`, `step(prev_tokens, state) -> (logits,
attention, state)` and `forward(tgt_in, state) -> (logits, attention)` (teacher forcing); its state
offers `reorder(index)`. Attention comes as maps (B, L, h, S) per step: L attention layers (1 for
the recurrent family), h heads (1 unless multi-head), so a Bahdanau scorer and a Transformer head
can be shown the same way; teacher forcing may return None where computing them would cost speed.
Search code (nmt/search.py) only talks to `Seq2Seq`, so it never asks which family it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from torch import Tensor, nn


@dataclass
class EncoderOutput:
    """memory (B, S, D); src_mask (B, S), True on real tokens; final (B, D) summary or None."""

    memory: Tensor
    src_mask: Tensor
    final: Tensor | None


class DecoderState(Protocol):
    def reorder(self, index: Tensor) -> DecoderState:
        """Keep/duplicate batch rows: row i of the result is row index[i] of this state."""
        ...


class Seq2Seq(nn.Module):
    def __init__(self, encoder: nn.Module, decoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def encode(self, src: Tensor, src_lens: Tensor) -> EncoderOutput:
        """src (B, S) token ids, src_lens (B,) -> EncoderOutput."""
        return self.encoder(src, src_lens)

    def init_state(self, encoded: EncoderOutput) -> DecoderState:
        return self.decoder.init_state(encoded)

    def decode_step(
        self, prev: Tensor, state: DecoderState
    ) -> tuple[Tensor, Tensor | None, DecoderState]:
        """prev (B,) last tokens -> logits (B, V), attention (B, L, h, S) or None, new state."""
        return self.decoder.step(prev, state)

    def forward(
        self, src: Tensor, src_lens: Tensor, tgt_in: Tensor
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing: tgt_in (B, T) -> logits (B, T, V), attention (B, T, L, h, S) or None."""
        return self.decoder(tgt_in, self.init_state(self.encode(src, src_lens)))
