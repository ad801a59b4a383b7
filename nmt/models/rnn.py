"""The recurrent family: a GRU/LSTM encoder and Bahdanau- or Luong-style attention decoders.

Shapes: B batch, S source length, T target length, E embedding size, H hidden size (the encoder's
output size; a bidirectional encoder gives H/2 per direction, as OpenNMT does, so that dot
attention and the bridge need no extra projection), L decoder layers, V target vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from nmt.config import Bridge, Cell, DecoderStyle, RNNConfig
from nmt.models.attention import Attention, Prepared, build_attention
from nmt.models.seq2seq import EncoderOutput
from nmt.tokenizer import PAD

Hidden = Tensor | tuple[Tensor, Tensor]  # GRU: h (L, B, H); LSTM: (h, c)


def _rnn(
    cell: Cell,
    input_size: int,
    hidden_size: int,
    layers: int,
    dropout: float,
    bidirectional: bool = False,
) -> nn.RNNBase:
    cls = nn.GRU if cell == Cell.gru else nn.LSTM
    return cls(
        input_size,
        hidden_size,
        num_layers=layers,
        batch_first=True,
        dropout=dropout if layers > 1 else 0.0,
        bidirectional=bidirectional,
    )


# One layer's state in a step loop: h (B, H) for a GRU, (h, c) for an LSTM.
Layer = Tensor | tuple[Tensor, Tensor]


def _gru_cell(x_proj: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor) -> Tensor:
    """One GRU step from the input projection x_proj = W_ih x + b_ih (B, 3H), as nn.GRU computes
    it: r = σ(x_r + h_r), z = σ(x_z + h_z), n = tanh(x_n + r * h_n), h' = (h - n) z + n."""
    size = w_hh.size(1)  # split by size, not chunk(3): exporters trace shapes symbolically
    x_r, x_z, x_n = x_proj.split(size, 1)
    h_r, h_z, h_n = F.linear(h, w_hh, b_hh).split(size, 1)
    r = torch.sigmoid(x_r + h_r)
    z = torch.sigmoid(x_z + h_z)
    n = torch.tanh(x_n + r * h_n)
    return (h - n) * z + n


def _lstm_cell(
    x_proj: Tensor, state: tuple[Tensor, Tensor], w_hh: Tensor, b_hh: Tensor
) -> tuple[Tensor, Tensor]:
    """One LSTM step from x_proj = W_ih x + b_ih (B, 4H), gates in nn.LSTM's order i, f, g, o."""
    h, c = state
    i, f, g, o = (x_proj + F.linear(h, w_hh, b_hh)).split(w_hh.size(1), 1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def _unstack(hidden: Hidden) -> list[Layer]:
    """(L, B, H) (or a pair of them) -> L per-layer states."""
    if isinstance(hidden, tuple):
        return list(zip(hidden[0].unbind(0), hidden[1].unbind(0), strict=True))
    return list(hidden.unbind(0))


def _restack(layers: list[Layer]) -> Hidden:
    if isinstance(layers[0], tuple):
        return torch.stack([h for h, _ in layers]), torch.stack([c for _, c in layers])
    return torch.stack(layers)


def _output(layer: Layer) -> Tensor:
    return layer[0] if isinstance(layer, tuple) else layer


class StepCells:
    """The decoder's nn.GRU/nn.LSTM run one step at a time on its own weights, taking the first
    layer's input projection precomputed. The recurrent decoders' input is [e(y_{t-1}); c_t] or
    [e(y_{t-1}); h~_{t-1}]: the embedding's share of W_ih x does not depend on the previous step,
    so it is computed for all T in one product (as nn.GRU itself does for a whole sequence), and
    each step adds only the other part's. The weights, checkpoints and results are nn.GRU's /
    nn.LSTM's (tests/test_rnn_cells.py)."""

    def __init__(self, rnn: nn.RNNBase, embedding_size: int) -> None:
        self.rnn, self.split = rnn, embedding_size
        self.step_layer = _lstm_cell if isinstance(rnn, nn.LSTM) else _gru_cell

    def project_embeddings(self, emb: Tensor) -> list[Tensor]:
        """emb (B, T, E) -> T tensors (B, G*H): W_ih[:, :E] e_t + b_ih for each step."""
        w = self.rnn.weight_ih_l0[:, : self.split]
        return F.linear(emb, w, self.rnn.bias_ih_l0).transpose(0, 1).contiguous().unbind(0)

    def step(self, emb_proj: Tensor, extra: Tensor, layers: list[Layer]) -> list[Layer]:
        """emb_proj (B, G*H) from project_embeddings, extra (B, H') the rest of the first layer's
        input, the per-layer states -> the new per-layer states."""
        rnn = self.rnn
        x_proj = emb_proj + F.linear(extra, rnn.weight_ih_l0[:, self.split :])
        new: list[Layer] = []
        for i, state in enumerate(layers):
            if i > 0:  # nn.GRU's dropout between layers, in training only
                x = F.dropout(_output(new[-1]), rnn.dropout, rnn.training)
                x_proj = F.linear(x, getattr(rnn, f"weight_ih_l{i}"), getattr(rnn, f"bias_ih_l{i}"))
            w_hh, b_hh = getattr(rnn, f"weight_hh_l{i}"), getattr(rnn, f"bias_hh_l{i}")
            new.append(self.step_layer(x_proj, state, w_hh, b_hh))
        return new


class RNNEncoder(nn.Module):
    def __init__(self, cfg: RNNConfig, vocab_size: int) -> None:
        super().__init__()
        self.directions = 2 if cfg.bidirectional else 1
        self.layers = cfg.encoder_layers
        self.embed = nn.Embedding(vocab_size, cfg.emb_size, padding_idx=PAD)
        self.dropout = nn.Dropout(cfg.dropout)
        self.rnn = _rnn(
            cfg.cell,
            cfg.emb_size,
            cfg.hidden_size // self.directions,
            cfg.encoder_layers,
            cfg.dropout,
            cfg.bidirectional,
        )

    def forward(self, src: Tensor, src_lens: Tensor) -> EncoderOutput:
        """src (B, S), src_lens (B,) -> memory (B, S, H), final (B, H) from the top layer."""
        x = self.dropout(self.embed(src))
        # packing keeps padding out of the recurrent states, in both directions
        packed = pack_padded_sequence(x, src_lens.cpu(), batch_first=True, enforce_sorted=False)
        out, hidden = self.rnn(packed)
        memory, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
        h = hidden[0] if isinstance(hidden, tuple) else hidden  # (layers * dirs, B, H / dirs)
        top = h.view(self.layers, self.directions, src.size(0), -1)[-1]  # (dirs, B, H / dirs)
        final = top.transpose(0, 1).reshape(src.size(0), -1)  # (B, H)
        return EncoderOutput(self.dropout(memory), src != PAD, final)


@dataclass
class RNNState:
    """Decoder state; everything the next step needs, nothing stored on the modules. Per row:
    hidden, feed; per sentence: src_mask, prepared (see DecoderState)."""

    hidden: Hidden  # (L, R, H) or (h, c)
    src_mask: Tensor  # (N, S)
    prepared: Prepared | None  # attention keys/values of the N sentences, computed once
    feed: Tensor | None  # Luong input feeding: h~_{t-1} (R, 1, H)

    def reorder(self, rows: Tensor, sentences: Tensor | None = None) -> RNNState:
        if isinstance(self.hidden, tuple):
            hidden: Hidden = tuple(h.index_select(1, rows) for h in self.hidden)
        else:
            hidden = self.hidden.index_select(1, rows)
        src_mask, prepared = self.src_mask, self.prepared
        if sentences is not None:
            src_mask = src_mask.index_select(0, sentences)
            prepared = None if prepared is None else prepared.index_select(sentences)
        feed = None if self.feed is None else self.feed.index_select(0, rows)
        return RNNState(hidden, src_mask, prepared, feed)


class RNNDecoder(nn.Module):
    """What both decoder styles share: embeddings, bridge, attention, output projection.

    Subclasses implement `run(emb, state) -> (outputs (B, T, H), weights (B, T, 1, h, S) | None,
    state)`,
    where outputs are the vectors fed to the vocabulary projection. `step` and `forward` both go
    through `run`, and the projection to V (the most expensive layer) is applied once per call.
    """

    def __init__(self, cfg: RNNConfig, vocab_size: int, rnn_input_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.hidden_size = cfg.hidden_size
        self.embed = nn.Embedding(vocab_size, cfg.emb_size, padding_idx=PAD)
        self.dropout = nn.Dropout(cfg.dropout)
        self.rnn = _rnn(cfg.cell, rnn_input_size, cfg.hidden_size, cfg.decoder_layers, cfg.dropout)
        self.cells = StepCells(self.rnn, cfg.emb_size)  # the step loops' way to run self.rnn
        size = cfg.attention_size or cfg.hidden_size
        self.attention: Attention | None = build_attention(
            cfg.attention, cfg.hidden_size, cfg.hidden_size, size, cfg.heads
        )
        self.bridge = (
            nn.Linear(cfg.hidden_size, cfg.hidden_size) if cfg.bridge == Bridge.linear else None
        )
        self.out = nn.Linear(cfg.hidden_size, vocab_size)
        if cfg.tie_embeddings:
            self.out.weight = self.embed.weight

    def init_state(self, encoded: EncoderOutput) -> RNNState:
        batch = encoded.memory.size(0)
        if self.bridge is not None:
            h0 = torch.tanh(self.bridge(encoded.final))  # (B, H)
            h = h0.unsqueeze(0).repeat(self.cfg.decoder_layers, 1, 1).contiguous()
        else:
            h = encoded.memory.new_zeros(self.cfg.decoder_layers, batch, self.hidden_size)
        hidden: Hidden = (h, h) if self.cfg.cell == Cell.lstm else h
        prepared = self.attention.prepare(encoded.memory) if self.attention is not None else None
        return RNNState(hidden, encoded.src_mask, prepared, None)

    def attend(self, query: Tensor, state: RNNState) -> tuple[Tensor, Tensor | None]:
        """query (B, T, H) -> context (B, T, H), weights (B, T, 1, h, S): one attention layer."""
        if self.attention is None:
            # the no-attention baseline: the decoder sees the source only through the bridge
            return query.new_zeros(query.shape), None
        context, weights = self.attention(query, state.prepared, state.src_mask)
        return context, weights.transpose(1, 2).unsqueeze(2)

    def run(self, emb: Tensor, state: RNNState) -> tuple[Tensor, Tensor | None, RNNState]:
        raise NotImplementedError

    def step(self, prev: Tensor, state: RNNState) -> tuple[Tensor, Tensor | None, RNNState]:
        """prev (B,) -> logits (B, V), attention (B, 1, h, S) or None, new state."""
        outputs, weights, state = self.run(self.dropout(self.embed(prev.unsqueeze(1))), state)
        return self.out(outputs).squeeze(1), None if weights is None else weights.squeeze(1), state

    def forward(self, tgt_in: Tensor, state: RNNState) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing: tgt_in (B, T) -> logits (B, T, V), attention (B, T, 1, h, S) or None."""
        outputs, weights, _ = self.run(self.dropout(self.embed(tgt_in)), state)
        return self.out(outputs), weights


def _stack(items: list[Tensor | None]) -> Tensor | None:
    return None if items[0] is None else torch.cat(items, dim=1)


class BahdanauDecoder(RNNDecoder):
    """Query s_{t-1}; c_t enters the cell with y_{t-1}; the output layer sees s_t, c_t, y_{t-1}.

    s_t = RNN([e(y_{t-1}); c_t], s_{t-1}),  c_t = attend(s_{t-1}),
    o_t = tanh(W_o [s_t; c_t; e(y_{t-1})]),  p(y_t) = softmax(W_out o_t).
    The query depends on the previous state, so even teacher forcing runs step by step.
    """

    def __init__(self, cfg: RNNConfig, vocab_size: int) -> None:
        super().__init__(cfg, vocab_size, cfg.emb_size + cfg.hidden_size)
        self.pre_output = nn.Linear(2 * cfg.hidden_size + cfg.emb_size, cfg.hidden_size)

    def run(self, emb: Tensor, state: RNNState) -> tuple[Tensor, Tensor | None, RNNState]:
        layers = _unstack(state.hidden)
        states, contexts, weights = [], [], []
        for emb_proj in self.cells.project_embeddings(emb):  # T x (B, G*H)
            query = _output(layers[-1]).unsqueeze(1)  # s_{t-1} of the top layer (B, 1, H)
            context, w = self.attend(query, state)  # (B, 1, H)
            # [:, 0], not squeeze(1): an exporter that traces the beam grouping symbolically
            # cannot prove the step axis is 1, and squeeze would leave it in
            layers = self.cells.step(emb_proj, context[:, 0], layers)
            states.append(_output(layers[-1]))
            contexts.append(context)
            weights.append(w)
        s, c = torch.stack(states, dim=1), torch.cat(contexts, dim=1)  # (B, T, H)
        outputs = self.dropout(torch.tanh(self.pre_output(torch.cat([s, c, emb], dim=-1))))
        return outputs, _stack(weights), replace(state, hidden=_restack(layers))


class LuongDecoder(RNNDecoder):
    """The cell runs first; query h_t; the attentional state h~_t = tanh(W_c [c_t; h_t]) is output.

    With input feeding, h~_{t-1} joins the next input, which forces a step-by-step loop. Without
    it, the cell runs over the whole target in one call and attention is batched over T.
    """

    def __init__(self, cfg: RNNConfig, vocab_size: int) -> None:
        extra = cfg.hidden_size if cfg.input_feeding else 0
        super().__init__(cfg, vocab_size, cfg.emb_size + extra)
        self.combine = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)

    def attentional(self, h: Tensor, state: RNNState) -> tuple[Tensor, Tensor | None]:
        """h (B, T, H) -> h~ (B, T, H), weights (B, T, S)."""
        context, weights = self.attend(h, state)
        return self.dropout(torch.tanh(self.combine(torch.cat([context, h], dim=-1)))), weights

    def run(self, emb: Tensor, state: RNNState) -> tuple[Tensor, Tensor | None, RNNState]:
        if not self.cfg.input_feeding:
            h, hidden = self.rnn(emb, state.hidden)  # one call over all T positions
            outputs, weights = self.attentional(h, state)
            return outputs, weights, replace(state, hidden=hidden)
        layers = _unstack(state.hidden)
        feed = (
            state.feed
            if state.feed is not None
            else emb.new_zeros(emb.size(0), 1, self.hidden_size)
        )
        outputs, weights = [], []
        for emb_proj in self.cells.project_embeddings(emb):  # T x (B, G*H)
            layers = self.cells.step(emb_proj, feed[:, 0], layers)  # [:, 0]: see Bahdanau
            feed, w = self.attentional(_output(layers[-1]).unsqueeze(1), state)  # (B, 1, H)
            outputs.append(feed)
            weights.append(w)
        hidden = _restack(layers)
        return torch.cat(outputs, dim=1), _stack(weights), replace(state, hidden=hidden, feed=feed)


def build_rnn_decoder(cfg: RNNConfig, vocab_size: int) -> RNNDecoder:
    match cfg.decoder:
        case DecoderStyle.bahdanau:
            return BahdanauDecoder(cfg, vocab_size)
        case DecoderStyle.luong:
            return LuongDecoder(cfg, vocab_size)
