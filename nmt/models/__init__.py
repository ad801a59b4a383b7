"""Model construction: one `build_model` with a single match on the config type, and
`restore_model`, a checkpoint's model with its weights."""

from __future__ import annotations

import torch

from nmt.checkpoint import Checkpoint
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


def restore_model(ckpt: Checkpoint, device: torch.device) -> Seq2Seq:
    """Build the model its config describes and load the weights (eval mode)."""
    model = build_model(
        ckpt.config.model, len(ckpt.vocabs.src), len(ckpt.vocabs.tgt), ckpt.vocabs.joint
    )
    try:
        model.load_state_dict(ckpt.payload["model"])
    except RuntimeError as err:
        first = str(err).splitlines()[1].strip() if "\n" in str(err) else str(err)
        raise NMTError(
            f"the weights in {ckpt.path} do not fit its config/vocabulary: {first}"
        ) from err
    return model.to(device).eval()
