"""Model construction: one `build_model` with a single match on the config type."""

from __future__ import annotations

from nmt.config import ModelConfig, RNNConfig, TransformerConfig
from nmt.errors import NMTError
from nmt.models.rnn import RNNEncoder, build_rnn_decoder
from nmt.models.seq2seq import Seq2Seq
from nmt.models.transformer import build_transformer


def build_model(
    cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, shared_vocab: bool = False
) -> Seq2Seq:
    """`shared_vocab`: one id space, the target's ids the first of the source's (`Vocabs.joint`),
    so that one embedding table may serve both sides."""
    match cfg:
        case RNNConfig():
            return Seq2Seq(RNNEncoder(cfg, src_vocab_size), build_rnn_decoder(cfg, tgt_vocab_size))
        case TransformerConfig():
            return Seq2Seq(*build_transformer(cfg, src_vocab_size, tgt_vocab_size, shared_vocab))
    raise NMTError(f"no model family for config {type(cfg).__name__}")
