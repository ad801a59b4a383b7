"""The recurrent family: a GRU/LSTM encoder and Bahdanau- or Luong-style attention decoders.

Shapes: B batch, S source length, T target length, E embedding size, H hidden size (the encoder's
output size; a bidirectional encoder gives H/2 per direction, as OpenNMT does, so that dot
attention and the bridge need no extra projection), L decoder layers, V target vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from nmt.config import Bridge, Cell, DecoderStyle, RNNConfig
from nmt.models.attention import Attention, Prepared, build_attention
from nmt.models.compiled import compiled, sized_by_the_model
from nmt.models.dropout import Dropout
from nmt.models.int8 import Int8Product
from nmt.models.seq2seq import EncoderOutput, OutputRows
from nmt.tokenizer import PAD

Hidden = Tensor | tuple[Tensor, Tensor]  # GRU: h (L, B, H); LSTM: (h, c)


class LSTM(nn.LSTM):
    """`nn.LSTM` that runs in float32 under a CPU autocast; its state dict is nn.LSTM's.

    CPU autocast sends the fused LSTM to oneDNN's bf16 kernel, which exists only on CPUs with
    AVX-512 (an AVX2-only CPU fails with "could not create a primitive descriptor for the LSTM
    forward propagation primitive", in training and in search alike). Running the cell in fp32 on
    every CPU keeps bf16 working everywhere and gives one result on every CPU; the matrix products
    around the cell (attention, output layer) stay in bf16. GPUs keep autocast's choice."""

    def forward(self, input, hx=None):  # noqa: ANN001, ANN201 - nn.LSTM's own signature
        data = input.data if isinstance(input, PackedSequence) else input
        if data.device.type != "cpu" or not torch.is_autocast_enabled("cpu"):
            return super().forward(input, hx)
        if hx is not None:
            hx = (hx[0].float(), hx[1].float())
        with torch.autocast("cpu", enabled=False):
            return super().forward(input.float(), hx)


def _rnn(
    cell: Cell,
    input_size: int,
    hidden_size: int,
    layers: int,
    dropout: float,
    bidirectional: bool = False,
) -> nn.RNNBase:
    cls = nn.GRU if cell == Cell.gru else LSTM
    return cls(
        input_size,
        hidden_size,
        num_layers=layers,
        batch_first=True,
        dropout=dropout if layers > 1 else 0.0,
        bidirectional=bidirectional,
    )


class RNNEncoder(nn.Module):
    def __init__(self, cfg: RNNConfig, vocab_size: int) -> None:
        super().__init__()
        self.directions = 2 if cfg.bidirectional else 1
        self.layers = cfg.encoder_layers
        self.embed = nn.Embedding(vocab_size, cfg.emb_size, padding_idx=PAD)
        self.embed_dropout = Dropout(cfg.embedding_p)
        self.dropout = Dropout(cfg.dropout)
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
        x = self.embed_dropout(self.embed(src))
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
    compiled: bool = False  # steps run through torch.compile (`RNNDecoder.step`)

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
        return RNNState(hidden, src_mask, prepared, feed, self.compiled)


class RNNDecoder(nn.Module):
    """What both decoder styles share: embeddings, bridge, attention, output projection.

    Subclasses implement `run(emb, state) -> (outputs (B, T, H), weights (B, T, 1, h, S) | None,
    state)`, where outputs are the vectors fed to the vocabulary projection, and `run_step`, the
    same for one step of search from `PieceTables`. `forward` and `step` go through them, and the
    projection to V (the most expensive layer) is applied once per call.
    """

    # an int8 form keeps its fp32 weights: the per-piece tables are built from them (again
    # whenever the weights change), and so are the products the step writes out (`PieceTables`)
    int8_reads_fp32 = True

    def __init__(self, cfg: RNNConfig, vocab_size: int, rnn_input_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.hidden_size = cfg.hidden_size
        self.embed = nn.Embedding(vocab_size, cfg.emb_size, padding_idx=PAD)
        self.embed_dropout = Dropout(cfg.embedding_p)
        self.dropout = Dropout(cfg.dropout)
        self.rnn = _rnn(cfg.cell, rnn_input_size, cfg.hidden_size, cfg.decoder_layers, cfg.dropout)
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
        self._tables: PieceTables | None = None
        self.int8 = False  # the step's own products in int8 (`use_int8`)

    def use_int8(self) -> None:
        """Run the products a step writes out itself (the piece tables' gates and output layer)
        in int8: an int8 copy of the model (`nmt.models.int8`), whose modules multiply in int8."""
        self.int8 = True
        self._tables = None

    def init_state(
        self, encoded: EncoderOutput, steps: int | None = None, compiled: bool = False
    ) -> RNNState:
        """`steps` (the search's length limit) is not needed: the state does not grow."""
        batch = encoded.memory.size(0)
        if self.bridge is not None:
            h0 = torch.tanh(self.bridge(encoded.final))  # (B, H)
            h = h0.unsqueeze(0).repeat(self.cfg.decoder_layers, 1, 1).contiguous()
        else:
            h = encoded.memory.new_zeros(self.cfg.decoder_layers, batch, self.hidden_size)
        hidden: Hidden = (h, h) if self.cfg.cell == Cell.lstm else h
        if self._tables is not None and not self._tables.fresh(self):
            self._tables = None  # the weights changed: built again below
        if self.steps_from_tables(encoded.memory.device):
            self.piece_tables()  # here, not in the first step: a compiled step only reads them
        prepared = self.attention.prepare(encoded.memory) if self.attention is not None else None
        return RNNState(hidden, encoded.src_mask, prepared, None, compiled)

    def attend(self, query: Tensor, state: RNNState) -> tuple[Tensor, Tensor | None]:
        """query (B, T, H) -> context (B, T, H), weights (B, T, 1, h, S): one attention layer."""
        if self.attention is None:
            # the no-attention baseline: the decoder sees the source only through the bridge
            return query.new_zeros(query.shape), None
        context, weights = self.attention(query, state.prepared, state.src_mask)
        return context, weights.transpose(1, 2).unsqueeze(2)

    def run(self, emb: Tensor, state: RNNState) -> tuple[Tensor, Tensor | None, RNNState]:
        raise NotImplementedError

    def output_layer(self) -> tuple[Tensor, Tensor | None]:
        return self.out.weight, self.out.bias

    def step(
        self, prev: Tensor, state: RNNState, output: OutputRows | None = None
    ) -> tuple[Tensor, Tensor | None, RNNState]:
        """prev (B,) -> logits (B, V) (or (B, C) for `output`), attention (B, 1, h, S) or None,
        new state.

        Under inference mode (search) the step reads its products with the embedding of prev from
        per-piece tables (`PieceTables`): the same function as `run`, with fewer multiply-adds.
        Training and export (traced under no_grad) run the modules themselves, and so does CUDA:
        there a step is bound by kernel launches, and the fused cuDNN cell is one launch where
        the written-out gates would be a dozen (not measured on a GPU). With `state.compiled`
        the step runs through torch.compile (nmt.models.compiled)."""
        advance = RNNDecoder.advance
        advance = compiled(advance) if state.compiled else advance
        return advance(self, prev, state, output, self.steps_from_tables(prev.device))

    def advance(
        self, prev: Tensor, state: RNNState, output: OutputRows | None, tables: bool
    ) -> tuple[Tensor, Tensor | None, RNNState]:
        """`step`, as torch.compile sees it (`tables`: whether it reads the piece tables)."""
        if not tables:
            emb = self.embed_dropout(self.embed(prev.unsqueeze(1)))
            outputs, weights, state = self.run(emb, state)
            outputs = outputs.squeeze(1)
        else:
            outputs, weights, state = self.run_step(prev, state)
        logits = self.logits(outputs, output)
        return logits, None if weights is None else weights.squeeze(1), state

    def steps_from_tables(self, device: torch.device) -> bool:
        """Whether `step` reads the piece tables: in a search (inference mode) on a CPU."""
        return not self.training and torch.is_inference_mode_enabled() and device.type != "cuda"

    def run_step(self, prev: Tensor, state: RNNState) -> tuple[Tensor, Tensor | None, RNNState]:
        """`run` for one step from the tables: prev (R,) -> outputs (R, H), weights (R, 1, 1, h, S)
        or None, state."""
        raise NotImplementedError

    def embedded_output(self) -> nn.Linear | None:
        """A layer after the cell whose input ends with the embedding (Bahdanau's pre-output)."""
        return None

    def piece_tables(self) -> PieceTables:
        """The tables of the current weights: built at the first search step, and again after
        the weights change. A load or an in-place edit bumps a parameter's version, which
        `init_state` checks once per search (not at each step: reading every parameter's
        version took 5% of a beam step at batch 1); an optimizer step may not (fused Adam
        leaves the versions as they were), so `train()` and `eval()`, which bracket every
        validation inside training, drop the tables as well."""
        if self._tables is None:
            self._tables = PieceTables(self)
        return self._tables

    def train(self, mode: bool = True) -> RNNDecoder:
        self._tables = None
        return super().train(mode)

    def logits(self, outputs: Tensor, output: OutputRows | None) -> Tensor:
        """outputs (R, H) -> logits (R, V), or (R, C) for the C rows of `output`."""
        return self.out(outputs) if output is None else output(outputs)

    def forward(
        self, tgt_in: Tensor, state: RNNState, attention_layer: int | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing: tgt_in (B, T) -> logits (B, T, V), attention (B, T, 1, h, S) or None
        (the one attention there is, whatever `attention_layer` says)."""
        outputs, weights, _ = self.run(self.embed_dropout(self.embed(tgt_in)), state)
        return self.out(outputs), weights


def _top(hidden: Hidden) -> Tensor:
    """The top layer's hidden state as a query (B, 1, H)."""
    h = hidden[0] if isinstance(hidden, tuple) else hidden
    return h[-1].unsqueeze(1)


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
        hidden = state.hidden
        states, contexts, weights = [], [], []
        # unbind, not emb[:, t]: a slice's backward writes a zero tensor of the whole (B, T, E)
        for emb_t in emb.unbind(1):
            context, w = self.attend(_top(hidden), state)  # (B, 1, H)
            out, hidden = self.rnn(torch.cat([emb_t.unsqueeze(1), context], dim=-1), hidden)
            states.append(out)
            contexts.append(context)
            weights.append(w)
        s, c = torch.cat(states, dim=1), torch.cat(contexts, dim=1)  # (B, T, H)
        outputs = self.dropout(torch.tanh(self.pre_output(torch.cat([s, c, emb], dim=-1))))
        return outputs, _stack(weights), replace(state, hidden=hidden)

    def embedded_output(self) -> nn.Linear | None:
        return self.pre_output

    def run_step(self, prev: Tensor, state: RNNState) -> tuple[Tensor, Tensor | None, RNNState]:
        tables, hidden = self.piece_tables(), state.hidden
        context, weights = self.attend(_top(hidden), state)  # (R, 1, H)
        context = context.squeeze(1)
        emb_gates, emb_out = tables.rows(prev)  # (R, G*H) with G gates, (R, H)
        hidden = tables.cell(tables.first_input(emb_gates, context), hidden)
        s_c = torch.cat([_top(hidden).squeeze(1), context], dim=-1)  # (R, 2H)
        outputs = torch.tanh(tables.output(emb_out, s_c))
        return outputs, weights, replace(state, hidden=hidden)


class PieceTables:
    """Per target piece, a recurrent decoder step's products with the embedding e of y_{t-1}.

    The first layer's input starts with e: W_ih [e; x] = W_ih^e e + W_ih^x x, where x is
    Bahdanau's context, Luong's input feed, or nothing (Luong without feeding). Bahdanau's output
    layer W_o [s; c; e] ends with it. Precomputed for all V pieces, biases folded in, a step gathers
    R rows where it multiplied R embeddings by (G+1)H x E weights (G = 3 gates for a GRU, 4 for an
    LSTM; +1 for Bahdanau's output layer). For the Bahdanau GRU with E = H = A = 256, 20 source
    pieces and 3,853 target pieces that is 14% of a step's multiply-adds, and 21% with a shortlist
    of 1,400 pieces. The first layer's cell is then written out (the fused cell takes x, not
    W_ih x); layers above it run the fused cells. The same function summed in another order: equal
    to float rounding (tests/test_models.py runs step = teacher forcing under inference mode).
    """

    def __init__(self, decoder: RNNDecoder) -> None:
        rnn, emb = decoder.rnn, decoder.embed.weight  # emb (V, E)
        # in the weights' dtype under any autocast: tables built in a bf16 validation serve fp32 too
        with torch.autocast(emb.device.type, enabled=False):
            self._build(decoder, rnn, emb)

    def _build(self, decoder: RNNDecoder, rnn: nn.RNNBase, emb: Tensor) -> None:
        e = emb.size(1)
        self.versions = _versions(decoder)
        self.lstm = isinstance(rnn, nn.LSTM)
        w_ih = rnn.weight_ih_l0  # (G*H, E + X): [e; x]
        tables = [torch.addmm(rnn.bias_ih_l0, emb, w_ih[:, :e].t())]  # (V, G*H)
        self.input_rest = w_ih[:, e:].t().contiguous()  # (X, G*H), X = 0 without x
        output, self.output_rest = decoder.embedded_output(), None
        if output is not None:
            tables.append(torch.addmm(output.bias, emb, output.weight[:, -e:].t()))  # (V, H)
            self.output_rest = output.weight[:, :-e].t().contiguous()  # (2H, H): [s; c]
        self.sizes = [t.size(1) for t in tables]
        self.emb = torch.cat(tables, dim=1)
        self.gates_hidden = rnn.weight_hh_l0.t().contiguous()  # (H, G*H)
        self.gates_bias = rnn.bias_hh_l0
        for table in (self.emb, self.input_rest, self.output_rest, self.gates_hidden):
            if table is not None:
                sized_by_the_model(table)
        # an int8 model's products (the tables themselves are gathered rows: fp32)
        self.int8_input = self.int8_hidden = self.int8_output = None
        if decoder.int8:
            if self.input_rest.size(0):
                self.int8_input = Int8Product(w_ih[:, e:])
            self.int8_hidden = Int8Product(rnn.weight_hh_l0, rnn.bias_hh_l0)
            if output is not None:
                self.int8_output = Int8Product(output.weight[:, :-e])
        self.upper = [
            [
                getattr(rnn, f"{name}_l{layer}")
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
            ]
            for layer in range(1, rnn.num_layers)
        ]

    def fresh(self, decoder: RNNDecoder) -> bool:
        return self.versions == _versions(decoder)

    def rows(self, prev: Tensor) -> list[Tensor]:
        """prev (R,) -> the embedding's share of the first layer's gates (R, G*H), and of the
        output layer (R, H) if the decoder has one."""
        return list(self.emb.index_select(0, prev).split(self.sizes, dim=1))

    def first_input(self, emb_gates: Tensor, x: Tensor) -> Tensor:
        """W_ih [e; x] + b_ih (R, G*H) from the embedding's share and the rest x (R, X)."""
        if self.int8_input is not None:
            return self.int8_input(x, add=emb_gates)
        return torch.addmm(emb_gates, x, self.input_rest)

    def output(self, emb_out: Tensor, s_c: Tensor) -> Tensor:
        """Bahdanau's W_o [s; c; e] + b_o (R, H) from the embedding's share and [s; c] (R, 2H)."""
        if self.int8_output is not None:
            return self.int8_output(s_c, add=emb_out)
        assert self.output_rest is not None
        return torch.addmm(emb_out, s_c, self.output_rest)

    def hidden_gates(self, h: Tensor) -> Tensor:
        """W_hh h + b_hh (R, G*H) of the first layer."""
        if self.int8_hidden is not None:
            return self.int8_hidden(h)
        return torch.addmm(self.gates_bias, h, self.gates_hidden)

    def cell(self, gates_in: Tensor, hidden: Hidden) -> Hidden:
        """One step of every layer: gates_in (R, G*H) = W_ih x + b_ih of the first layer."""
        if self.lstm:
            assert isinstance(hidden, tuple)
            h, c = hidden  # (L, R, H) each
            gates = self.hidden_gates(h[0]).add_(gates_in)
            i, f, g, o = gates.chunk(4, dim=1)
            c0 = torch.sigmoid(f) * c[0] + torch.sigmoid(i) * torch.tanh(g)
            hs, cs = [torch.sigmoid(o) * torch.tanh(c0)], [c0]
            for layer, weights in enumerate(self.upper, start=1):
                h_l, c_l = torch.lstm_cell(hs[-1], (h[layer], c[layer]), *weights)
                hs.append(h_l)
                cs.append(c_l)
            return torch.stack(hs), torch.stack(cs)
        assert isinstance(hidden, Tensor)
        gates_h = self.hidden_gates(hidden[0])  # (R, 3H)
        i_rz, i_n = gates_in.tensor_split([2 * gates_h.size(1) // 3], dim=1)
        h_rz, h_n = gates_h.tensor_split([2 * gates_h.size(1) // 3], dim=1)
        r, z = torch.sigmoid(i_rz + h_rz).chunk(2, dim=1)
        n = torch.tanh(i_n + r * h_n)
        hs = [n + z * (hidden[0] - n)]  # (1 - z) n + z h
        for layer, weights in enumerate(self.upper, start=1):
            hs.append(torch.gru_cell(hs[-1], hidden[layer], *weights))
        return torch.stack(hs)


def _versions(decoder: RNNDecoder) -> list[tuple[int, int]]:
    """Which tensor and which write of it each parameter is: what the tables were made from."""
    return [(p.data_ptr(), p._version) for p in decoder.parameters()]


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
        hidden = state.hidden
        feed = (
            state.feed
            if state.feed is not None
            else emb.new_zeros(emb.size(0), 1, self.hidden_size)
        )
        outputs, weights = [], []
        for emb_t in emb.unbind(1):  # unbind: see BahdanauDecoder.run
            h, hidden = self.rnn(torch.cat([emb_t.unsqueeze(1), feed], dim=-1), hidden)
            feed, w = self.attentional(h, state)
            outputs.append(feed)
            weights.append(w)
        return torch.cat(outputs, dim=1), _stack(weights), replace(state, hidden=hidden, feed=feed)

    def run_step(self, prev: Tensor, state: RNNState) -> tuple[Tensor, Tensor | None, RNNState]:
        tables = self.piece_tables()
        (emb_gates,) = tables.rows(prev)  # (R, G*H)
        if state.feed is not None:  # zero at the first step: nothing to add
            emb_gates = tables.first_input(emb_gates, state.feed.squeeze(1))
        hidden = tables.cell(emb_gates, state.hidden)
        outputs, weights = self.attentional(_top(hidden), state)  # (R, 1, H)
        feed = outputs if self.cfg.input_feeding else None
        return outputs.squeeze(1), weights, replace(state, hidden=hidden, feed=feed)


def build_rnn_decoder(cfg: RNNConfig, vocab_size: int) -> RNNDecoder:
    match cfg.decoder:
        case DecoderStyle.bahdanau:
            return BahdanauDecoder(cfg, vocab_size)
        case DecoderStyle.luong:
            return LuongDecoder(cfg, vocab_size)
