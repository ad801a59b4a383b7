"""The Transformer family (Vaswani et al. 2017), written on `F.scaled_dot_product_attention`.

Shapes: B batch, S source length, T target length, d model size, h heads, k = d / h per head,
L decoder layers, V target vocabulary.

Training runs the decoder over the whole target at once (causal self-attention, fused kernels,
no attention weights materialised). Decoding runs `step`, which computes only the newest position:
every layer's self-attention keys/values of earlier positions live in the state (the KV cache),
and the cross-attention keys/values of the source are projected once per sentence in
`init_state`. A step returns the cross-attention weights of every layer and head, (B, L, h, S).

T5's variant is options of the same layers (`TransformerConfig`): RMSNorm, relative position
biases instead of positions added to the embeddings (`RelativePositions`), a gated feed-forward
(`Gated`), attention without the 1/sqrt(k) scale, no biases, a head size of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.config import Activation, Norm, NormType, Positions, TransformerConfig
from nmt.errors import NMTError
from nmt.models.attention import group_rows, ungroup_rows
from nmt.models.compiled import compiled
from nmt.models.dropout import Dropout, dropout
from nmt.models.int8 import Int8Linear, Int8Product
from nmt.models.seq2seq import EncoderOutput, OutputRows
from nmt.tokenizer import PAD


def sinusoids(
    length: int, d: int, offset: int = 0, layout: Positions = Positions.sinusoidal
) -> Tensor:
    """(length, d) sinusoidal encodings of positions offset .. offset+length-1: the sine and the
    cosine of each rate side by side (`Positions.sinusoidal`), or every sine first, then every
    cosine (`sinusoidal_halves`, Marian's layout), or that layout as fairseq computes it
    (`sinusoidal_fairseq`, NLLB's: d/2 rates exp(-i log(10000) / (d/2 - 1)), positions counted
    from 2, a zero column last when d is odd)."""
    if layout == Positions.sinusoidal_fairseq:
        half = d // 2
        position = torch.arange(offset + 2, offset + 2 + length, dtype=torch.float).unsqueeze(1)
        rate = torch.exp(torch.arange(half, dtype=torch.float) * (-math.log(10000.0) / (half - 1)))
        angles = position * rate
        return torch.cat([angles.sin(), angles.cos(), torch.zeros(length, d % 2)], dim=1)
    position = torch.arange(offset, offset + length, dtype=torch.float).unsqueeze(1)
    rate = torch.exp(torch.arange(0, d, 2, dtype=torch.float) * (-math.log(10000.0) / d))
    sines, cosines = torch.sin(position * rate), torch.cos(position * rate[: d // 2])
    if layout == Positions.sinusoidal_halves:
        return torch.cat([sines, cosines], dim=1)
    table = torch.zeros(length, d)
    table[:, 0::2] = sines
    table[:, 1::2] = cosines
    return table


class Embedding(nn.Module):
    """Token embedding (scaled by sqrt(d)) plus positions, with `embed_norm` a LayerNorm, then
    dropout."""

    def __init__(self, cfg: TransformerConfig, table: nn.Embedding) -> None:
        super().__init__()
        self.table = table
        self.scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.embed_norm else None
        self.dropout = Dropout(cfg.dropout)
        self.learned = (
            nn.Embedding(cfg.max_positions, cfg.d_model)
            if cfg.positions == Positions.learned
            else None
        )
        # sinusoids are cached up to max_positions and computed on the fly beyond, so any length
        # works; a buffer that is not saved keeps checkpoints independent of this cache
        self.layout = cfg.positions
        with torch.device("cpu"):  # computed, not loaded: real even in a model built on "meta"
            length = 0 if self.layout == Positions.relative else cfg.max_positions
            fixed = sinusoids(length, cfg.d_model, layout=self.layout)
        self.register_buffer("fixed", fixed, persistent=False)

    def positions(self, length: int, offset: int) -> Tensor:
        """(length, d) encodings for positions offset .. offset+length-1."""
        if self.learned is not None:
            # a learned table has no row past max_positions: longer inputs reuse the last row
            # rather than fail, so translation never drops a line
            index = torch.arange(offset, offset + length, device=self.learned.weight.device)
            return self.learned(index.clamp(max=self.learned.num_embeddings - 1))
        if offset + length <= self.fixed.size(0):
            return self.fixed[offset : offset + length]
        return sinusoids(length, self.fixed.size(1), offset, self.layout).to(self.fixed.device)

    def forward(self, tokens: Tensor, offset: int = 0) -> Tensor:
        """tokens (B, T) -> (B, T, d); offset = position of the first token."""
        x = self.table(tokens) * self.scale
        if self.layout != Positions.relative:  # relative positions are the attention's
            x = x + self.positions(tokens.size(1), offset).to(x.dtype)
        return self.dropout(x if self.norm is None else self.norm(x))


def norm(cfg: TransformerConfig) -> nn.Module:
    """The model's normalisation over d: LayerNorm, or RMSNorm (weight, no bias)."""
    if cfg.norm_type == NormType.rms:
        return nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)


class RelativePositions(nn.Module):
    """T5's relative position biases: one learned scalar per head for each bucket of the offset
    key position - query position, added to every self-attention energy of one side's layers
    (the table is the side's, as T5 keeps it in its first layer and shares it).

    Offsets below half the buckets (of a direction) have a bucket each; longer ones share
    buckets spaced logarithmically up to `max_distance`, beyond which all share the last. The
    encoder's are bidirectional (half the buckets for keys after the query); the decoder's are
    causal (a query sees no later key)."""

    def __init__(self, cfg: TransformerConfig, bidirectional: bool) -> None:
        super().__init__()
        self.table = nn.Embedding(cfg.relative_buckets, cfg.heads)
        self.bidirectional = bidirectional
        self.max_distance = cfg.relative_max_distance

    def buckets(self, offset: Tensor) -> Tensor:
        """offset (..) key - query positions -> their buckets (..), long."""
        n = self.table.num_embeddings
        if self.bidirectional:
            n //= 2
            base = (offset > 0).long() * n
            distance = offset.abs()
        else:
            base = torch.zeros_like(offset)
            distance = (-offset).clamp(min=0)
        exact = n // 2
        # exact + log(distance / exact) / log(max_distance / exact) * (n - exact), in this order
        # of operations (the float rounding decides the buckets at their edges, as in T5)
        spread = torch.log(distance.clamp(min=exact).float() / exact)
        spread = spread / math.log(self.max_distance / exact) * (n - exact)
        far = (exact + spread.long()).clamp(max=n - 1)
        return base + torch.where(distance < exact, distance, far)

    def forward(self, queries: int, keys: int, first: int = 0, causal: bool = False) -> Tensor:
        """Biases (1, h, queries, keys) of queries at positions first.. against keys 0..; with
        `causal`, -inf where a key comes after its query (a whole target at once)."""
        device = self.table.weight.device
        query = torch.arange(first, first + queries, device=device)
        offset = torch.arange(keys, device=device)[None, :] - query[:, None]
        bias = self.table(self.buckets(offset)).permute(2, 0, 1).unsqueeze(0)
        if causal:
            bias = bias.masked_fill(offset > 0, float("-inf"))
        return bias


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention over h heads; keys/values are projected by `project_kv`.

    Self-attention projects its own input; cross-attention projects the encoder memory once and
    reuses it for every decoding step. Heads are k = head_size wide (d / h unless the config
    says), so the projections are (d -> h k) and (h k -> d).
    """

    def __init__(self, cfg: TransformerConfig, dropout: float) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.dropout = dropout
        k = cfg.head_size or cfg.d_model // cfg.heads
        self.scale = 1 / math.sqrt(k) if cfg.scale_attention else 1.0
        d, inner = cfg.d_model, cfg.heads * k
        self.q = nn.Linear(d, inner, bias=cfg.bias)
        self.kv = nn.Linear(d, 2 * inner, bias=cfg.bias)
        self.out = nn.Linear(inner, d, bias=cfg.bias)

    def split(self, x: Tensor) -> Tensor:
        """(B, T, d) -> (B, h, T, k)."""
        return x.unflatten(-1, (self.heads, -1)).transpose(1, 2)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(B, S, d) -> keys, values (B, h, S, k)."""
        k, v = self.kv(x).chunk(2, dim=-1)
        return self.split(k), self.split(v)

    def forward(
        self,
        x: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x (R, T, d) queries; keys/values (N, h, S, k); mask broadcastable to (N, h, T, S),
        True where attention is allowed, or a float bias added to the energies (-inf: not
        allowed) -> output (R, T, d), weights (R, h, T, S) or None.

        R = N except in beam search's cross-attention, where the R = N * G rows are grouped by
        sentence and each sentence's keys serve its G rows as G*T query positions (no copies)."""
        rows = x.size(0)
        x = group_rows(x, keys.size(0))  # (N, G*T, d)
        q = self.split(self.q(x))
        p = self.dropout if self.training else 0.0
        if need_weights:
            # the weights are wanted (decoding, attention maps): compute them explicitly
            energies = q @ keys.transpose(-2, -1) * self.scale
            if mask is not None and mask.dtype == torch.bool:
                energies = energies.masked_fill(~mask, float("-inf"))
            elif mask is not None:
                energies = energies + mask
            if causal:  # as SDPA's is_causal: query i sees keys 0..i (square, no cache)
                future = torch.ones(energies.shape[-2:], dtype=torch.bool, device=q.device)
                energies = energies.masked_fill(future.triu(1), float("-inf"))
            weights = torch.softmax(energies.float(), dim=-1).type_as(q)
            context = dropout(weights, p, self.training) @ values
        else:
            # fused kernels (flash / memory-efficient on GPU) never materialise the weights
            if mask is not None and mask.dtype != torch.bool:
                mask = mask.to(q.dtype)
            context = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=mask, dropout_p=p, is_causal=causal, scale=self.scale
            )
            weights = None
        out = ungroup_rows(self.out(context.transpose(1, 2).flatten(2)), rows)  # (R, T, d)
        if weights is not None:  # (N, h, G*T, S) -> (R, h, T, S)
            weights = ungroup_rows(weights.transpose(1, 2), rows).transpose(1, 2)
        return out, weights


ACTIVATIONS = {
    Activation.relu: nn.ReLU, Activation.gelu: nn.GELU, Activation.swish: nn.SiLU,
    Activation.gelu_tanh: lambda: nn.GELU(approximate="tanh"),
}  # fmt: skip


class Gated(nn.Module):
    """(.., 2 f) -> (.., f): act(a) * b of the halves (a, b), a gated linear unit's product
    (Shazeer 2020; T5 v1.1's gated-GELU). The two projections are one layer, one product."""

    def __init__(self, activation: nn.Module) -> None:
        super().__init__()
        self.activation = activation

    def forward(self, x: Tensor) -> Tensor:
        a, b = x.chunk(2, dim=-1)
        return self.activation(a) * b


class FeedForward(nn.Sequential):
    """Linear (d -> f, or 2 f gated), activation, dropout, linear (f -> d)."""

    def __init__(self, cfg: TransformerConfig) -> None:
        activation = ACTIVATIONS[cfg.activation]()
        super().__init__(
            nn.Linear(cfg.d_model, cfg.ff_size * (2 if cfg.gated else 1), bias=cfg.bias),
            Gated(activation) if cfg.gated else activation,
            Dropout(cfg.activation_dropout),
            nn.Linear(cfg.ff_size, cfg.d_model, bias=cfg.bias),
        )


class Sublayer(nn.Module):
    """Residual wrapper: pre-norm x + f(LN(x)), or post-norm LN(x + f(x)), dropout on f."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.pre = cfg.norm == Norm.pre
        self.norm = norm(cfg)
        self.dropout = Dropout(cfg.dropout)

    def input(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.pre else x

    def output(self, x: Tensor, y: Tensor) -> Tensor:
        """x the sublayer input, y what the sublayer computed from `input(x)`."""
        x = x + self.dropout(y)
        return x if self.pre else self.norm(x)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.attention = MultiHeadAttention(cfg, cfg.attention_dropout)
        self.feed_forward = FeedForward(cfg)
        self.sub_attention, self.sub_ff = Sublayer(cfg), Sublayer(cfg)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x (B, S, d), mask (B, 1, 1, S) True where allowed, or a float bias (B, h, S, S) ->
        (B, S, d)."""
        y = self.sub_attention.input(x)
        x = self.sub_attention.output(x, self.attention(y, *self.attention.project_kv(y), mask)[0])
        return self.sub_ff.output(x, self.feed_forward(self.sub_ff.input(x)))


class TransformerEncoder(nn.Module):
    def __init__(self, cfg: TransformerConfig, table: nn.Embedding) -> None:
        super().__init__()
        self.embed = Embedding(cfg, table)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        # pre-norm leaves the residual stream unnormalised: normalise the memory once
        self.norm = norm(cfg) if cfg.norm == Norm.pre else nn.Identity()
        self.relative = (
            RelativePositions(cfg, bidirectional=True)
            if cfg.positions == Positions.relative
            else None
        )

    def forward(self, src: Tensor, src_lens: Tensor) -> EncoderOutput:
        """src (B, S), src_lens (B,) -> memory (B, S, d); no final summary vector."""
        src_mask = src != PAD
        mask = src_mask[:, None, None, :]
        if self.relative is not None:  # (B, h, S, S): the positions' biases, padding -inf
            length = src.size(1)
            mask = self.relative(length, length).masked_fill(~mask, float("-inf"))
        x = self.embed(src)
        for layer in self.layers:
            x = layer(x, mask)
        return EncoderOutput(self.norm(x), src_mask, None)


def write_cache(cache: Tensor | None, new: Tensor, position: int) -> Tensor:
    """Write `new` (R, h, n, k) at positions position.. of a preallocated (R, h, capacity, k)
    cache, in place; a full (or missing) cache is replaced by one twice the size needed, so each
    step writes one position instead of concatenating (copying) the whole history."""
    end = position + new.size(2)
    if cache is None or end > cache.size(2):
        grown = new.new_empty(new.size(0), new.size(1), max(16, 2 * end), new.size(3))
        if cache is not None:
            grown[:, :, :position] = cache[:, :, :position]
        cache = grown
    cache[:, :, position:end] = new
    return cache


@dataclass
class TransformerState:
    """Per-layer caches. Per row: self_keys/values (R, h, capacity, k), of which the first
    `position` are filled (the positions decoded so far). Per sentence: cross_keys/values
    (N, h, S, k), projected from the memory once, and src_mask (N, S). See DecoderState.

    `spare_keys/values`: per layer, a buffer at least the caches' size that no state reads,
    where the next `reorder` gathers the filled positions; the caches it gathered from become
    the spares of the state it returns. Two buffers alternate instead of one allocated each
    step, and only the filled positions are copied (the whole preallocated capacity, freshly
    allocated each step, took a quarter of a beam search's time). A state reordered is
    therefore not to be read again, as a state stepped is not."""

    self_keys: list[Tensor | None]
    self_values: list[Tensor | None]
    cross_keys: list[Tensor]
    cross_values: list[Tensor]
    src_mask: Tensor  # (N, S)
    position: int
    spare_keys: list[Tensor | None] = field(default_factory=list)
    spare_values: list[Tensor | None] = field(default_factory=list)
    compiled: bool = False  # steps run `TransformerDecoder.advance` through torch.compile

    def reorder(self, rows: Tensor, sentences: Tensor | None = None) -> TransformerState:
        def gather(caches: list, spares: list) -> tuple[list, list]:
            picked = [
                _gather(cache, spare, rows, self.position)
                for cache, spare in zip(caches, spares or [None] * len(caches))
            ]
            return picked, list(caches)

        cross_keys, cross_values, src_mask = self.cross_keys, self.cross_values, self.src_mask
        if sentences is not None:
            cross_keys = [k.index_select(0, sentences) for k in cross_keys]
            cross_values = [v.index_select(0, sentences) for v in cross_values]
            src_mask = src_mask.index_select(0, sentences)
        keys, spare_keys = gather(self.self_keys, self.spare_keys)
        values, spare_values = gather(self.self_values, self.spare_values)
        return TransformerState(
            keys, values, cross_keys, cross_values, src_mask, self.position, spare_keys,
            spare_values, self.compiled,
        )  # fmt: skip


def _gather(cache: Tensor | None, spare: Tensor | None, rows: Tensor, filled: int) -> Tensor | None:
    """cache (R, h, capacity, k) -> its rows `rows` (R', h, capacity, k), the first `filled`
    positions copied, written into `spare` where it is large enough."""
    if cache is None:
        return None
    shape = (rows.size(0), *cache.shape[1:])
    if spare is None or spare.size(0) < shape[0] or spare.shape[1:] != cache.shape[1:]:
        spare = cache.new_empty(shape)
    out = spare[: shape[0]]
    torch.index_select(cache[:, :, :filled], 0, rows, out=out[:, :, :filled])
    return out


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.self_attention = MultiHeadAttention(cfg, cfg.attention_dropout)
        self.cross_attention = MultiHeadAttention(cfg, cfg.attention_dropout)
        self.feed_forward = FeedForward(cfg)
        self.sub_self, self.sub_cross, self.sub_ff = Sublayer(cfg), Sublayer(cfg), Sublayer(cfg)

    def forward(
        self,
        x: Tensor,
        cache: tuple[Tensor | None, Tensor | None, int] | None,
        cross_kv: tuple[Tensor, Tensor],
        src_mask: Tensor,
        need_weights: bool,
        positions: Tensor | None = None,
    ) -> tuple[Tensor, tuple[Tensor, Tensor] | None, Tensor | None]:
        """x (R, T, d) new positions; cache = (keys, values, position): the preallocated
        self-attention cache (R, h, capacity, k) and the number of positions in it, or None
        (teacher forcing: no cache, causal mask); `positions`: relative position biases of the
        self-attention (1, h, T, positions seen), causal included -> x, the cache written one
        step on (or None), cross-attention weights (R, h, T, S) or None."""
        y = self.sub_self.input(x)
        keys, values = self.self_attention.project_kv(y)
        written = None
        if cache is not None:
            old_keys, old_values, position = cache
            written = (
                write_cache(old_keys, keys, position),
                write_cache(old_values, values, position),
            )
            end = position + keys.size(2)
            keys, values = written[0][:, :, :end], written[1][:, :, :end]
        # new positions may see every cached one; a whole target needs the causal mask (in
        # `positions` where they are given)
        causal = cache is None and x.size(1) > 1 and positions is None
        attended = self.self_attention(y, keys, values, positions, causal=causal)[0]
        x = self.sub_self.output(x, attended)
        y, weights = self.cross_attention(
            self.sub_cross.input(x),
            *cross_kv,
            src_mask[:, None, None, :],
            need_weights=need_weights,
        )
        x = self.sub_cross.output(x, y)
        x = self.sub_ff.output(x, self.feed_forward(self.sub_ff.input(x)))
        return x, written, weights


class TiedProjection(nn.Module):
    """The output layer tied to an embedding table: logits (.., V) = x E[:V]ᵀ + b. The table may
    be longer than V: a table shared with the source holds the target's pieces first
    (nmt/tokenizer.py prune_vocabs), and only those are scored."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, x: Tensor, table: Tensor) -> Tensor:
        return F.linear(x, table[: self.bias.size(0)], self.bias)


class TransformerDecoder(nn.Module):
    def __init__(self, cfg: TransformerConfig, table: nn.Embedding, vocab_size: int) -> None:
        super().__init__()
        self.embed = Embedding(cfg, table)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        self.norm = norm(cfg) if cfg.norm == Norm.pre else nn.Identity()
        self.relative = (
            RelativePositions(cfg, bidirectional=False)
            if cfg.positions == Positions.relative
            else None
        )
        self.out: nn.Module = (
            TiedProjection(vocab_size) if cfg.tie_output else nn.Linear(cfg.d_model, vocab_size)
        )
        self.int8: Int8Product | None = None  # the output layer in int8 (`use_int8`)

    def use_int8(self) -> None:
        """Run the output layer in int8 (an int8 copy of the model, `nmt.models.int8`; its other
        layers are `Int8Linear`s already)."""
        if isinstance(self.out, Int8Linear):  # an untied output layer: its own product
            self.int8 = self.out.product
        else:
            self.int8 = Int8Product(*self.output_layer())

    def output_layer(self) -> tuple[Tensor, Tensor | None]:
        """(weight (V, d), bias (V,)); tied, the first V rows of the embedding table."""
        if isinstance(self.out, TiedProjection):
            return self.embed.table.weight[: self.out.bias.size(0)], self.out.bias
        return self.out.weight, self.out.bias

    def project(self, x: Tensor, output: OutputRows | None = None) -> Tensor:
        """(.., d) -> logits (.., V) over the target vocabulary, or (.., C) for `output`."""
        if output is not None:
            return output(x)
        if self.int8 is not None:
            return self.int8(x)
        if isinstance(self.out, TiedProjection):
            return self.out(x, self.embed.table.weight)
        return self.out(x)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # checkpoints written before TiedProjection also hold the tied table as out.weight
        if isinstance(self.out, TiedProjection):
            state_dict.pop(prefix + "out.weight", None)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def init_state(
        self, encoded: EncoderOutput, steps: int | None = None, compiled: bool = False
    ) -> TransformerState:
        """`steps`: the most steps the search will take (its length limit): the self-attention
        caches are preallocated to it and a step only writes into them, as a compiled step wants;
        None: they start empty and grow by doubling. `compiled`: see `advance`."""
        cross = [layer.cross_attention.project_kv(encoded.memory) for layer in self.layers]
        if compiled:  # rows dropped later (`reorder`) are gathered into contiguous tensors, and
            # a compiled step is specialised to its inputs' layout
            cross = [[t.contiguous() for t in kv] for kv in cross]

        def caches() -> list[Tensor | None]:
            if steps is None:
                return [None] * len(self.layers)
            rows, heads, _, k = cross[0][0].shape  # (N, h, S, k)
            # one position more than the steps: no step fills a cache to its end, a case torch
            # would compile apart (the filled part is then the whole tensor)
            return [cross[0][0].new_empty(rows, heads, steps + 1, k) for _ in self.layers]

        return TransformerState(
            caches(), caches(), [k for k, _ in cross], [v for _, v in cross], encoded.src_mask, 0,
            compiled=compiled,
        )  # fmt: skip

    def step(
        self, prev: Tensor, state: TransformerState, output: OutputRows | None = None
    ) -> tuple[Tensor, Tensor, TransformerState]:
        """prev (R,) -> logits (R, V) (or (R, C) for `output`), cross-attention (R, L, h, S), the
        state one position on. The self-attention caches are written in place: `state` itself is
        not to be reused."""
        advance = TransformerDecoder.advance
        advance = compiled(advance) if state.compiled else advance
        logits, maps, keys, values = advance(
            self, prev, state.position, (state.self_keys, state.self_values),
            (state.cross_keys, state.cross_values), state.src_mask, output,
        )  # fmt: skip
        new = TransformerState(
            keys, values, state.cross_keys, state.cross_values, state.src_mask,
            state.position + 1, state.spare_keys, state.spare_values, state.compiled,
        )  # fmt: skip
        return logits, maps, new

    def advance(
        self,
        prev: Tensor,
        position: int,
        caches: tuple[list[Tensor | None], list[Tensor | None]],
        cross: tuple[list[Tensor], list[Tensor]],
        src_mask: Tensor,
        output: OutputRows | None,
    ) -> tuple[Tensor, Tensor, list[Tensor], list[Tensor]]:
        """A step's arithmetic on tensors: prev (R,) at `position`, the self-attention caches
        (keys, values) of every layer, written in place, and the cross-attention (keys, values)
        -> logits, maps (R, L, h, S), the caches (new ones where they had to grow). What
        decode.compile compiles: the state's bookkeeping (`step`) stays outside."""
        x = self.embed(prev.unsqueeze(1), offset=position)  # (R, 1, d)
        bias = None if self.relative is None else self.relative(1, position + 1, position)
        keys, values, maps = [], [], []
        for layer, k, v, cross_k, cross_v in zip(self.layers, *caches, *cross):
            x, (k, v), w = layer(x, (k, v, position), (cross_k, cross_v), src_mask, True, bias)
            keys.append(k)
            values.append(v)
            maps.append(w)
        logits = self.project(self.norm(x).squeeze(1), output)
        return logits, torch.stack(maps, dim=1).squeeze(3), keys, values  # maps: L x (R, h, 1, S)

    def forward(
        self, tgt_in: Tensor, state: TransformerState, attention_layer: int | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing: tgt_in (B, T) -> logits (B, T, V), and with `attention_layer` (an
        index, negative from the top) that layer's cross-attention weights (B, T, 1, h, S),
        else None. Layers whose weights are not wanted run the fused kernels."""
        x, kept = self.embed(tgt_in), None
        wanted = None if attention_layer is None else attention_layer % len(self.layers)
        length = tgt_in.size(1)
        bias = None if self.relative is None else self.relative(length, length, causal=True)
        for i, layer in enumerate(self.layers):
            cross = (state.cross_keys[i], state.cross_values[i])
            x, _, weights = layer(x, None, cross, state.src_mask, i == wanted, bias)
            if i == wanted:
                kept = weights.transpose(1, 2).unsqueeze(2)  # (B, h, T, S) -> (B, T, 1, h, S)
        return self.project(self.norm(x)), kept


def _init(module: nn.Module, d_model: int) -> None:
    """Xavier-uniform linear layers; token embeddings N(0, d^-1/2), so that scaled by sqrt(d) they
    have unit variance. Embeddings come last, so a tied output weight keeps their initialisation."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    for m in module.modules():
        if isinstance(m, nn.Embedding) and m.padding_idx == PAD:
            nn.init.normal_(m.weight, mean=0.0, std=d_model**-0.5)
            with torch.no_grad():
                m.weight[PAD].zero_()
        elif isinstance(m, RelativePositions):  # small biases: positions matter a little at first
            nn.init.normal_(m.table.weight, mean=0.0, std=d_model**-0.5)


def build_transformer(
    cfg: TransformerConfig, src_vocab_size: int, tgt_vocab_size: int, shared_vocab: bool
) -> tuple[TransformerEncoder, TransformerDecoder]:
    if cfg.share_embeddings:
        if not shared_vocab:
            raise NMTError(
                "model.share_embeddings=true needs a joint vocabulary "
                "(data.tokenizer.joint=true); or set model.share_embeddings=false"
            )
        # one table over the source's ids, whose first tgt_vocab_size are the target's
        src_table = tgt_table = nn.Embedding(src_vocab_size, cfg.d_model, padding_idx=PAD)
    else:
        src_table = nn.Embedding(src_vocab_size, cfg.d_model, padding_idx=PAD)
        tgt_table = nn.Embedding(tgt_vocab_size, cfg.d_model, padding_idx=PAD)
    encoder = TransformerEncoder(cfg, src_table)
    decoder = TransformerDecoder(cfg, tgt_table, tgt_vocab_size)
    # a shared table is initialised once per owner, the same way each time
    _init(encoder, cfg.d_model)
    _init(decoder, cfg.d_model)
    return encoder, decoder
