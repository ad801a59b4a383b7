"""The models as two pure functions over explicit tensors: what `nmt-export` traces.

A model decodes through `encode` / `init_state` / `step` with a Python state object; an exported
graph can only take and return tensors. `export_graphs(model)` wraps a trained `Seq2Seq` into

- an encoder graph: source ids (and lengths) -> the decoder's initial state, and
- a decoder-step graph: the previous token and the state -> next-token log-probabilities, the
  cross-attention of the step and the new state,

with every piece of state an explicit input and output, described by a `GraphSpec` (names, shapes,
which axis is the batch, which outputs feed which inputs at the next step). The wrappers reuse the
model's own modules (weights, attention, layers); they rewrite only what a trace cannot follow:
packed sequences (the recurrent encoder runs each direction on per-sentence reversed inputs
instead, which gives the same states) and Python-int positions and in-place caches (the
Transformer step appends to its cache and reads its position from the cache length).

Shapes: B batch, S source length, P positions decoded so far, L layers, h heads, k head size,
H hidden size, V target vocabulary. Greedy decoding over these graphs (`nmt/runtime.py`) gives the
tokens of `nmt.search.greedy`; tests/test_export.py checks it for both families.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from nmt.config import Cell, DecoderStyle, RNNConfig
from nmt.errors import NMTError
from nmt.models.attention import Prepared
from nmt.models.rnn import RNNDecoder, RNNEncoder, RNNState
from nmt.models.seq2seq import Seq2Seq
from nmt.models.transformer import TransformerDecoder, TransformerEncoder
from nmt.tokenizer import BOS, EOS, PAD


@dataclass
class TensorSpec:
    """One graph input or output. `shape` holds ints and axis names (batch, src_len, steps);
    `batch_axis` is where the batch lies (None: no batch axis)."""

    name: str
    dtype: str  # int64, float32, bool
    shape: list[int | str]
    batch_axis: int | None = 0
    doc: str = ""

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None and v != ""}


@dataclass
class GraphSpec:
    """Names and shapes of both graphs and how the decoding loop connects them: each step feeds
    the encoder's `memory` outputs unchanged and `state` (step output -> next step's input)."""

    family: str
    encoder_inputs: list[TensorSpec]
    encoder_outputs: list[TensorSpec]
    step_inputs: list[TensorSpec]
    step_outputs: list[TensorSpec]
    state: dict[str, str] = field(default_factory=dict)  # step output name -> step input name
    memory: list[str] = field(default_factory=list)  # encoder outputs fed to every step

    def to_json(self) -> dict:
        return {
            "encoder": {
                "inputs": [t.to_json() for t in self.encoder_inputs],
                "outputs": [t.to_json() for t in self.encoder_outputs],
            },
            "decoder_step": {
                "inputs": [t.to_json() for t in self.step_inputs],
                "outputs": [t.to_json() for t in self.step_outputs],
            },
            "state": self.state,
            "memory": self.memory,
        }


# ---- the Transformer ----------------------------------------------------------------------------


class Positional(nn.Module):
    """The positions `nmt.models.transformer.Embedding` adds, for an offset a trace keeps
    variable (a size read from a tensor): sinusoids of any position (the formula of `sinusoids`),
    or the learned table, positions past its end clamped to the last row as the model does."""

    def __init__(self, d: int, learned: nn.Embedding | None) -> None:
        super().__init__()
        self.d, self.learned = d, learned
        rate = torch.exp(
            torch.arange(0, self.d, 2, dtype=torch.float) * (-math.log(10000.0) / self.d)
        )
        self.register_buffer("rate", rate, persistent=False)

    def forward(self, offset: int, length: int) -> Tensor:
        """(length, d) encodings of positions offset .. offset+length-1 (sizes read from tensors,
        so that a trace keeps them variable)."""
        index = torch.arange(length, device=self.rate.device) + offset
        if self.learned is not None:
            return self.learned(index.clamp(max=self.learned.num_embeddings - 1))
        angle = index.to(torch.float).unsqueeze(1) * self.rate  # (T, ceil(d/2))
        sin, cos = torch.sin(angle), torch.cos(angle)
        # interleave: even columns sin, odd columns cos (an odd d has one sin column more)
        return torch.stack([sin, cos], dim=-1).flatten(1)[:, : self.d]


def _embed(embed: nn.Module, positional: Positional, tokens: Tensor, offset: int) -> Tensor:
    """tokens (B, T) -> (B, T, d), as `Embedding.forward` in eval mode."""
    x = embed.table(tokens) * embed.scale
    return x + positional(offset, tokens.size(1)).to(x.dtype)


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
        x = _embed(self.decoder.embed, self.positional, prev.unsqueeze(1), position)  # (B, 1, d)
        keys, values, maps = [], [], []
        mask = src_mask[:, None, None, :]
        for i, layer in enumerate(self.decoder.layers):
            # DecoderLayer.forward with an appended (instead of preallocated) cache
            y = layer.sub_self.input(x)
            k, v = layer.self_attention.project_kv(y)
            k = torch.cat([self_keys[i], k], dim=2)
            v = torch.cat([self_values[i], v], dim=2)
            x = layer.sub_self.output(x, layer.self_attention(y, k, v)[0])
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
    return Positional(module.embed.table.embedding_dim, module.embed.learned)


def _transformer_spec(model: Seq2Seq) -> GraphSpec:
    dec = model.decoder
    layers, heads = len(dec.layers), dec.layers[0].cross_attention.heads
    d = dec.embed.table.embedding_dim
    k = d // heads
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


# ---- the recurrent family -----------------------------------------------------------------------


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


def _rnn_spec(model: Seq2Seq) -> GraphSpec:
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


# ---- both ---------------------------------------------------------------------------------------


@dataclass
class Graphs:
    encoder: nn.Module
    step: nn.Module
    spec: GraphSpec

    def run(self, graph: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The session interface of `nmt.runtime` over the PyTorch graphs themselves: graph is
        "encoder" or "decoder_step"; inputs and outputs by name, as numpy arrays."""
        module, names, outputs = self._graph(graph)
        with torch.no_grad():
            out = module(*[torch.from_numpy(np.asarray(inputs[name])) for name in names])
        return {name: o.numpy() for name, o in zip(outputs, out)}

    def _graph(self, graph: str) -> tuple[nn.Module, list[str], list[str]]:
        spec = self.spec
        if graph == "encoder":
            return self.encoder, _names(spec.encoder_inputs), _names(spec.encoder_outputs)
        return self.step, _names(spec.step_inputs), _names(spec.step_outputs)

    def example_inputs(self, batch: int = 2, src_len: int = 3) -> tuple[tuple, tuple]:
        """Inputs to trace with: sizes >= 2 on every variable axis (an exporter specialises 0
        and 1), a padded batch with lengths `src_len` and `src_len - 1` and, for the
        Transformer, two positions in the caches."""
        src = np.array([[5 + i for i in range(src_len - 1)] + [EOS]] * batch, dtype=np.int64)
        src[1:, -1], src[1:, -2] = PAD, EOS
        lens = np.array([src_len] + [src_len - 1] * (batch - 1), dtype=np.int64)
        values = self.run("encoder", {"src": src, "src_lens": lens})
        prev = np.full(batch, BOS, dtype=np.int64)
        for _ in range(2 if self.spec.family == "transformer" else 0):
            out = self.run("decoder_step", {"prev": prev, **values})
            values.update({old: out[new] for new, old in self.spec.state.items()})
        _, enc_names, _ = self._graph("encoder")
        _, step_names, _ = self._graph("decoder_step")
        values |= {"src": src, "src_lens": lens, "prev": prev}
        return tuple(torch.from_numpy(values[n]) for n in enc_names), tuple(
            torch.from_numpy(values[n]) for n in step_names
        )


def _names(tensors: list[TensorSpec]) -> list[str]:
    return [t.name for t in tensors]


def export_graphs(model: Seq2Seq) -> Graphs:
    """The encoder and decoder-step graphs of a model (put in eval mode)."""
    model = model.eval()
    match model.encoder, model.decoder:
        case TransformerEncoder(), TransformerDecoder():
            return Graphs(
                TransformerEncoderGraph(model.encoder, model.decoder).eval(),
                TransformerStepGraph(model.decoder).eval(),
                _transformer_spec(model),
            )
        case RNNEncoder(), RNNDecoder():
            return Graphs(
                RNNEncoderGraph(model.encoder, model.decoder).eval(),
                RNNStepGraph(model.decoder).eval(),
                _rnn_spec(model),
            )
    raise NMTError(f"cannot export a {type(model.encoder).__name__} model")
