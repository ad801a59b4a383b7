"""The Transformer's encoder and decoder-step graphs (see `nmt.export.graphs`): positions read from
tensor sizes instead of Python ints, and a self-attention cache that grows by concatenation
instead of being written in place.

T5's options (`nmt.models.transformer`) are the model's own modules, reused as they are (RMSNorm,
the gated feed-forward, no biases, unscaled attention, heads of `head_size`), except the relative
positions (`positions=relative`): their biases are computed here from the offsets key - query read
from tensor sizes (`relative_bias`), with the model's own buckets and table: the encoder's over
the whole source, the step's for the new position (the caches' length) against every position
decoded so far, added to the self-attention's energies."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from nmt.config import Positions
from nmt.export.graphs.spec import GraphSpec, TensorSpec
from nmt.models.seq2seq import Seq2Seq
from nmt.models.transformer import RelativePositions, TransformerDecoder, TransformerEncoder
from nmt.tokenizer import PAD


class Positional(nn.Module):
    """The positions `nmt.models.transformer.Embedding` adds, for an offset a trace keeps
    variable (a size read from a tensor): sinusoids of any position (the formula of `sinusoids`),
    or the learned table, positions past its end clamped to the last row as the model does."""

    def __init__(
        self, d: int, learned: nn.Embedding | None, layout: Positions = Positions.sinusoidal
    ) -> None:
        super().__init__()
        self.d, self.learned = d, learned
        self.halves = layout != Positions.sinusoidal
        # fairseq's: d/2 rates spaced by 1 / (d/2 - 1), positions counted from 2
        self.fairseq = layout == Positions.sinusoidal_fairseq
        if self.fairseq:
            spacing, count = math.log(10000.0) / (d // 2 - 1), d // 2
        else:
            spacing, count = math.log(10000.0) / d * 2, (d + 1) // 2
        rate = torch.exp(torch.arange(count, dtype=torch.float) * -spacing)
        self.register_buffer("rate", rate, persistent=False)

    def forward(self, offset: int, length: int) -> Tensor:
        """(length, d) encodings of positions offset .. offset+length-1 (sizes read from tensors,
        so that a trace keeps them variable)."""
        index = torch.arange(length, device=self.rate.device) + offset + 2 * self.fairseq
        if self.learned is not None:
            return self.learned(index.clamp(max=self.learned.num_embeddings - 1))
        angle = index.to(torch.float).unsqueeze(1) * self.rate  # (T, ceil(d/2))
        sin, cos = torch.sin(angle), torch.cos(angle)
        if self.halves:  # Positions.sinusoidal_halves or _fairseq (a zero column for an odd d)
            tail = sin.new_zeros(sin.size(0), self.d - sin.size(1) - self.d // 2)
            return torch.cat([sin, cos[:, : self.d // 2], tail], dim=1)
        # interleave: even columns sin, odd columns cos (an odd d has one sin column more)
        return torch.stack([sin, cos], dim=-1).flatten(1)[:, : self.d]


def _embed(embed: nn.Module, positional: Positional, tokens: Tensor, offset: int) -> Tensor:
    """tokens (B, T) -> (B, T, d), as `Embedding.forward` in eval mode."""
    x = embed.table(tokens) * embed.scale
    if embed.layout != Positions.relative:  # relative positions are the attention's
        x = x + positional(offset, tokens.size(1)).to(x.dtype)
    return x if embed.norm is None else embed.norm(x)


def relative_bias(relative: RelativePositions, queries: Tensor, keys: Tensor) -> Tensor:
    """`RelativePositions.forward` for positions given as tensors (a trace keeps their sizes
    variable): queries (Q,) and keys (K,) positions -> biases (1, h, Q, K). Detached: a mask
    that requires grad sends torch.export's scaled_dot_product_attention down another kernel
    than its decomposition for ONNX, whose output layout then differs (the export fails)."""
    offset = keys[None, :] - queries[:, None]
    return relative.table(relative.buckets(offset)).permute(2, 0, 1).unsqueeze(0).detach()


class TransformerEncoderGraph(nn.Module):
    """src (B, S) -> src_mask (B, S), cross_keys / cross_values (L, B, h, S, k): the memory
    projected once for every decoder layer, and the empty self-attention caches (L, B, h, 0, k)."""

    def __init__(self, encoder: TransformerEncoder, decoder: TransformerDecoder) -> None:
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.positional = _positional(encoder)

    def forward(self, src: Tensor) -> tuple[Tensor, ...]:
        src_mask = src != PAD
        mask = src_mask[:, None, None, :]
        relative = self.encoder.relative
        if relative is not None:  # (B, h, S, S): the positions' biases, padding -inf
            positions = torch.arange(src.size(1), device=src.device)
            bias = relative_bias(relative, positions, positions)
            mask = bias.masked_fill(~mask, float("-inf"))
        x = _embed(self.encoder.embed, self.positional, src, 0)
        for layer in self.encoder.layers:
            x = layer(x, mask)
        memory = self.encoder.norm(x)
        cross = [layer.cross_attention.project_kv(memory) for layer in self.decoder.layers]
        keys = torch.stack([k for k, _ in cross])
        values = torch.stack([v for _, v in cross])
        empty = keys[:, :, :, :0]  # (L, B, h, 0, k): nothing decoded yet
        return src_mask, keys, values, empty, empty.clone()


class TransformerStepGraph(nn.Module):
    """One decoding step; the self-attention caches grow by one position per call, and the
    position of the new token is their length."""

    def __init__(self, decoder: TransformerDecoder) -> None:
        super().__init__()
        self.decoder = decoder
        self.positional = _positional(decoder)

    def forward(
        self,
        prev: Tensor,
        self_keys: Tensor,
        self_values: Tensor,
        cross_keys: Tensor,
        cross_values: Tensor,
        src_mask: Tensor,
    ) -> tuple[Tensor, ...]:
        position = self_keys.size(3)  # positions decoded so far = the new token's position
        if self.decoder.relative is not None and not torch.jit.is_tracing():
            # one batch: torch.export cannot tell the rows of `prev` from the sentences of the
            # cross-attention keys here, and would keep a (rows // sentences) query axis (a
            # TorchScript trace has no such symbols: its sizes are tensors, not bools)
            torch._check(prev.size(0) == cross_keys.size(1))
        x = _embed(self.decoder.embed, self.positional, prev.unsqueeze(1), position)  # (B, 1, d)
        keys, values, maps = [], [], []
        mask = src_mask[:, None, None, :]
        bias = None  # relative positions: (1, h, 1, P+1), the new position against all so far
        for i, layer in enumerate(self.decoder.layers):
            # DecoderLayer.forward with an appended (instead of preallocated) cache
            y = layer.sub_self.input(x)
            k, v = layer.self_attention.project_kv(y)
            k = torch.cat([self_keys[i], k], dim=2)
            v = torch.cat([self_values[i], v], dim=2)
            if self.decoder.relative is not None and bias is None:
                seen = torch.arange(k.size(2), device=k.device)  # positions 0 .. P
                bias = relative_bias(self.decoder.relative, seen[-1:], seen)
            x = layer.sub_self.output(x, layer.self_attention(y, k, v, bias)[0])
            y, w = layer.cross_attention(
                layer.sub_cross.input(x), cross_keys[i], cross_values[i], mask, need_weights=True
            )
            x = layer.sub_cross.output(x, y)
            x = layer.sub_ff.output(x, layer.feed_forward(layer.sub_ff.input(x)))
            keys.append(k)
            values.append(v)
            maps.append(w.squeeze(2))  # (B, h, S)
        logits = self.decoder.project(self.decoder.norm(x)).squeeze(1)
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        return log_probs, torch.stack(maps, 1), torch.stack(keys), torch.stack(values)


def _positional(module: TransformerEncoder | TransformerDecoder) -> Positional:
    embed = module.embed
    return Positional(embed.table.embedding_dim, embed.learned, embed.layout)


def transformer_spec(model: Seq2Seq) -> GraphSpec:
    dec = model.decoder
    layers, heads = len(dec.layers), dec.layers[0].cross_attention.heads
    k = dec.layers[0].cross_attention.q.out_features // heads  # head_size, or d / h
    cache: list[int | str] = [layers, "batch", heads, "steps", k]
    cross: list[int | str] = [layers, "batch", heads, "src_len", k]
    new_cache: list[int | str] = [layers, "batch", heads, "steps+1", k]
    f32 = "float32"
    return GraphSpec(
        family="transformer",
        encoder_inputs=[TensorSpec("src", "int64", ["batch", "src_len"], 0, "ids ending in EOS")],
        encoder_outputs=[
            TensorSpec("src_mask", "bool", ["batch", "src_len"], 0, "True on real tokens"),
            TensorSpec("cross_keys", f32, cross, 1, "cross-attention keys of every layer"),
            TensorSpec("cross_values", f32, cross, 1, "cross-attention values of every layer"),
            TensorSpec("self_keys", f32, cache, 1, "empty self-attention key cache (steps=0)"),
            TensorSpec("self_values", f32, cache, 1, "empty self-attention value cache"),
        ],
        step_inputs=[
            TensorSpec("prev", "int64", ["batch"], 0, "previous token (BOS at the first step)"),
            TensorSpec("self_keys", f32, cache, 1, "keys of the positions decoded so far"),
            TensorSpec("self_values", f32, cache, 1, "values of the positions decoded so far"),
            TensorSpec("cross_keys", f32, cross, 1),
            TensorSpec("cross_values", f32, cross, 1),
            TensorSpec("src_mask", "bool", ["batch", "src_len"], 0),
        ],
        step_outputs=[
            TensorSpec("log_probs", f32, ["batch", "vocab"], 0, "log-softmax of the next token"),
            TensorSpec("attention", f32, ["batch", layers, heads, "src_len"], 0, "cross-attention"),
            TensorSpec("new_self_keys", f32, new_cache, 1),
            TensorSpec("new_self_values", f32, new_cache, 1),
        ],
        state={"new_self_keys": "self_keys", "new_self_values": "self_values"},
        memory=["cross_keys", "cross_values", "src_mask"],
    )
