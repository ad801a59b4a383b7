"""The recurrent family's encoder and decoder-step graphs (see `nmt.export.graphs`): the encoder
runs each direction of each layer as its own RNN instead of packing, and the decoder's state
object becomes a tuple of tensors."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nmt.config import Cell, DecoderStyle, RNNConfig
from nmt.export.graphs.spec import GraphSpec, TensorSpec
from nmt.models.attention import Prepared
from nmt.models.rnn import RNNDecoder, RNNEncoder, RNNState
from nmt.models.seq2seq import Seq2Seq
from nmt.tokenizer import PAD


def _single_rnns(rnn: nn.RNNBase) -> nn.ModuleList:
    """One single-layer, one-direction copy of `rnn` per (layer, direction), in that order."""
    dirs = 2 if rnn.bidirectional else 1
    out = nn.ModuleList()
    for layer in range(rnn.num_layers):
        for d in range(dirs):
            suffix = f"_l{layer}" + ("_reverse" if d else "")
            size = rnn.input_size if layer == 0 else rnn.hidden_size * dirs
            single = type(rnn)(size, rnn.hidden_size, num_layers=1, batch_first=True)
            single.load_state_dict(
                {f"{name}_l0": getattr(rnn, name + suffix) for name in _RNN_WEIGHTS}
            )
            out.append(single)
    return out


_RNN_WEIGHTS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


class RNNEncoderGraph(nn.Module):
    """src (B, S), src_lens (B,) -> the decoder's initial state (hidden, [cell], [feed]) and the
    attention keys / values / src_mask prepared once per sentence.

    `RNNEncoder` packs the padded batch; instead, each direction of each layer runs here as its
    own one-layer RNN, the backward one on every sentence reversed within its length (padding
    stays at the end, after the real tokens), so padding never reaches a real position's state:
    the same states as packing, with ops every exporter knows."""

    def __init__(self, encoder: RNNEncoder, decoder: RNNDecoder) -> None:
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.singles = _single_rnns(encoder.rnn)
        self.dirs, self.layers = encoder.directions, encoder.layers

    def forward(self, src: Tensor, src_lens: Tensor) -> tuple[Tensor, ...]:
        src_mask = src != PAD
        steps = torch.arange(src.size(1), device=src.device).unsqueeze(0)  # (1, S)
        lens = src_lens.unsqueeze(1)  # (B, 1)
        reverse = torch.where(steps < lens, lens - 1 - steps, steps)  # (B, S), its own inverse
        x = self.encoder.embed(src)
        last = (src_lens - 1).view(-1, 1, 1)
        final: list[Tensor] = []
        for layer in range(self.layers):
            outputs = []
            for d in range(self.dirs):
                rnn = self.singles[layer * self.dirs + d]
                if d == 0:
                    out = rnn(x)[0]
                    if layer == self.layers - 1:  # the state after the last real token
                        final.append(out.gather(1, last.expand(-1, 1, out.size(2))).squeeze(1))
                else:
                    index = reverse.unsqueeze(2).expand(-1, -1, x.size(2))
                    out = rnn(x.gather(1, index))[0]
                    out = out.gather(1, reverse.unsqueeze(2).expand(-1, -1, out.size(2)))
                    if layer == self.layers - 1:  # the backward pass ends at position 0
                        final.append(out[:, 0])
                outputs.append(out)
            x = torch.cat(outputs, dim=-1)
        memory = x * src_mask.unsqueeze(2).to(x.dtype)  # padding positions are 0, as unpacked
        return self.init_state(memory, src_mask, torch.cat(final, dim=-1))

    def init_state(self, memory: Tensor, src_mask: Tensor, final: Tensor) -> tuple[Tensor, ...]:
        """RNNDecoder.init_state, spelled out as tensors."""
        cfg: RNNConfig = self.decoder.cfg
        if self.decoder.bridge is not None:
            h = torch.tanh(self.decoder.bridge(final)).unsqueeze(0)
            h = h.expand(cfg.decoder_layers, -1, -1).contiguous()
        else:
            h = memory.new_zeros(cfg.decoder_layers, memory.size(0), cfg.hidden_size)
        out = [h]
        if cfg.cell == Cell.lstm:
            out.append(h.clone())  # the model starts the cell state at the hidden state
        if _has_feed(cfg):
            out.append(memory.new_zeros(memory.size(0), 1, cfg.hidden_size))
        if self.decoder.attention is not None:
            keys, values = self.decoder.attention.prepare(memory)
            out += [keys, values, src_mask]
        return tuple(out)


def _has_feed(cfg: RNNConfig) -> bool:
    return cfg.decoder == DecoderStyle.luong and cfg.input_feeding


class RNNStepGraph(nn.Module):
    """One decoding step: `RNNDecoder.step` itself, on a state rebuilt from the inputs."""

    def __init__(self, decoder: RNNDecoder) -> None:
        super().__init__()
        self.decoder = decoder
        cfg: RNNConfig = decoder.cfg
        self.lstm, self.feed = cfg.cell == Cell.lstm, _has_feed(cfg)
        self.attention = decoder.attention is not None

    def forward(self, prev: Tensor, *inputs: Tensor) -> tuple[Tensor, ...]:
        items = list(inputs)
        hidden = items.pop(0)
        hidden_state = (hidden, items.pop(0)) if self.lstm else hidden
        feed = items.pop(0) if self.feed else None
        if self.attention:
            keys, values, src_mask = items
            prepared: Prepared | None = Prepared(keys, values)
        else:
            src_mask, prepared = prev.new_ones(prev.size(0), 1, dtype=torch.bool), None
        state = RNNState(hidden_state, src_mask, prepared, feed)
        logits, weights, state = self.decoder.step(prev, state)
        out = [torch.log_softmax(logits.float(), dim=-1)]
        if weights is not None:
            out.append(weights)  # (B, 1, h, S)
        if self.lstm:
            out += list(state.hidden)
        else:
            out.append(state.hidden)
        if self.feed:
            out.append(state.feed)
        return tuple(out)


def rnn_spec(model: Seq2Seq) -> GraphSpec:
    dec: RNNDecoder = model.decoder
    cfg: RNNConfig = dec.cfg
    hidden = TensorSpec("hidden", "float32", [cfg.decoder_layers, "batch", cfg.hidden_size], 1)
    state = [hidden]
    if cfg.cell == Cell.lstm:
        state.append(TensorSpec("cell", "float32", hidden.shape, 1, "LSTM cell state"))
    if _has_feed(cfg):
        state.append(TensorSpec("feed", "float32", ["batch", 1, cfg.hidden_size], 0, "h~_{t-1}"))
    memory: list[TensorSpec] = []
    heads = 1
    if dec.attention is not None:
        probe = torch.zeros(1, 1, cfg.hidden_size, device=dec.out.weight.device)  # for the shapes
        keys, values = dec.attention.prepare(probe)
        heads = values.size(1)
        key_shape = ["batch", *(["src_len"] if keys.dim() == 3 else [heads, "src_len"])]
        memory = [
            TensorSpec("keys", "float32", [*key_shape, keys.size(-1)], 0, "prepared keys"),
            TensorSpec("values", "float32", ["batch", heads, "src_len", values.size(-1)], 0),
            TensorSpec("src_mask", "bool", ["batch", "src_len"], 0, "True on real tokens"),
        ]
    outputs = [TensorSpec("log_probs", "float32", ["batch", "vocab"], 0)]
    if dec.attention is not None:
        outputs.append(TensorSpec("attention", "float32", ["batch", 1, heads, "src_len"], 0))
    new_state = [TensorSpec("new_" + t.name, t.dtype, t.shape, t.batch_axis) for t in state]
    return GraphSpec(
        family="rnn",
        encoder_inputs=[
            TensorSpec("src", "int64", ["batch", "src_len"], 0, "ids ending in EOS, 0-padded"),
            TensorSpec("src_lens", "int64", ["batch"], 0, "real lengths (EOS included)"),
        ],
        encoder_outputs=state + memory,
        step_inputs=[TensorSpec("prev", "int64", ["batch"], 0), *state, *memory],
        step_outputs=outputs + new_state,
        state={"new_" + t.name: t.name for t in state},
        memory=[t.name for t in memory],
    )
