"""Model construction: one `build_model` with a single match on the config type."""

from __future__ import annotations

from nmt.config import ModelConfig, RNNConfig
from nmt.errors import NMTError
from nmt.models.rnn import RNNEncoder, build_rnn_decoder
from nmt.models.seq2seq import Seq2Seq


def build_model(cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> Seq2Seq:
    match cfg:
        case RNNConfig():
            return Seq2Seq(RNNEncoder(cfg, src_vocab_size), build_rnn_decoder(cfg, tgt_vocab_size))
    raise NMTError(f"no model family for config {type(cfg).__name__}")
