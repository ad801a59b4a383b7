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


def restore_model(ckpt: Checkpoint, device: torch.device, take: bool = False) -> Seq2Seq:
    """Build the model its config describes and load the weights (eval mode).

    The model is built on the "meta" device (shapes, no memory, no random initialisation) and
    its parameters are copies of the checkpoint's tensors, or with `take` the tensors themselves:
    a caller that loaded the checkpoint for this model alone (`Translator.from_checkpoint` given
    a path) has it in memory once while it loads, not twice (an NLLB-600M-shaped import peaked
    at 5.1 GB, twice its weights). Taken, the tensors are the model's and leave the checkpoint
    (its payload's "model" is emptied). Parameters the model shares (tied embeddings and output
    layer) are shared again after; a tensor saved in another dtype is converted."""
    with torch.device("meta"):
        model = build_model(
            ckpt.config.model, len(ckpt.vocabs.src), len(ckpt.vocabs.tgt), ckpt.vocabs.joint
        )
    shared = _shared_parameters(model)
    wanted = model.state_dict()
    weights = {
        k: v.to(wanted[k].dtype) if k in wanted and v.dtype != wanted[k].dtype else v
        for k, v in ckpt.payload["model"].items()
    }
    if not take:  # copies, one per saved tensor: tied entries stay one tensor
        copies: dict[tuple, torch.Tensor] = {}
        for k, v in weights.items():
            where = (v.untyped_storage().data_ptr(), v.storage_offset(), v.shape, v.stride())
            if where not in copies:
                copies[where] = v.clone()
            weights[k] = copies[where]
    try:
        model.load_state_dict(weights, assign=True)
    except RuntimeError as err:
        first = str(err).splitlines()[1].strip() if "\n" in str(err) else str(err)
        raise NMTError(
            f"the weights in {ckpt.path} do not fit its config/vocabulary: {first}"
        ) from err
    for places in shared:
        owner, name = places[0]
        for module, other in places[1:]:
            setattr(module, other, getattr(owner, name))
    if take:  # the model's now, and its alone: a weight it drops later (an int8 form's fp32
        # products, nmt.models.int8) is freed then, not held on by the checkpoint
        ckpt.payload["model"] = {}
    left = [n for n, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta]
    if left:  # a tensor neither saved nor computed at construction: a model this cannot load
        raise NMTError(f"{ckpt.path}: no weights for {', '.join(left)}")
    return model.to(device).eval()


def _shared_parameters(model: torch.nn.Module) -> list[list[tuple[torch.nn.Module, str]]]:
    """The (module, name) places of each parameter held in more than one place."""
    places: dict[int, list[tuple[torch.nn.Module, str]]] = {}
    for module in model.modules():
        for name, param in module._parameters.items():
            if param is not None:
                places.setdefault(id(param), []).append((module, name))
    return [p for p in places.values() if len(p) > 1]
