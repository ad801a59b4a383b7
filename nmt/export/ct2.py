"""`nmt-export format=ctranslate2`: a Transformer checkpoint as a CTranslate2 model, and the
CTranslate2 translation options that decode as a `DecodeConfig` does.

The model is built with CTranslate2's converter spec API: a `TransformerSpec` whose encoder and
decoder specs are filled from our state dict by a `Converter` subclass. How our settings map:

- `norm=pre` -> `pre_norm=True`, with our final encoder / decoder LayerNorm as the spec's final
  `layer_norm`; `norm=post` -> `pre_norm=False` (LayerNorm after each residual sum, no final one);
  `norm_type=rms` -> `rms_norm=True` (a gamma, no beta); `norm_eps` is the model config's
  `layer_norm_epsilon`, one for every norm (the embeddings' LayerNorm of `embed_norm` keeps
  PyTorch's 1e-5: another `norm_eps` beside it is refused).
- positions: CTranslate2's built-in sinusoids differ from ours (sin and cos halves instead of
  interleaved, positions from 1), so the encodings always go in as a table: our sinusoids for
  `max(max_positions, 1024)` positions, or the learned table. Our learned positions reuse the last
  row past `max_positions`; CTranslate2 cannot, so `decode_options` caps the lengths there.
  `positions=relative` (T5) -> `relative_attention_bias=True`: no position table, each side's
  (buckets, heads) table in every self-attention of that side (stored once), with
  `relative_max_distance`; CTranslate2 reads the bucket count from the table, the encoder's
  bidirectional and the decoder's causal as ours.
- `embed_norm` (mBART's `layernorm_embedding`) -> the spec's `layernorm_embedding`, applied after
  the scaled embedding plus positions, as ours is.
- `scale_embeddings` -> the spec's `scale_embeddings` (sqrt(d_model)); shared embeddings and a tied
  output projection are the same array in several places (CTranslate2 stores it once).
- attention: our fused key/value projection is the spec's fused [K; V] linear of cross-attention;
  self-attention gets [Q; K; V]; queries scaled by 1/sqrt(d/h) as CTranslate2 does, or by
  `queries_scale` = 1/sqrt(head_size) (`head_size` set: also the spec's `head_dim`, as h k may
  differ from d) or 1 (`scale_attention=false`). `bias=false`: linears without a bias.
- activation relu -> RELU, gelu (exact, erf) -> GELU, gelu_tanh -> GELUTanh, swish -> SWISH;
  `gated` (act(a) * b of the halves of feed_forward.0) -> `ffn_glu=True`: the first half is
  `linear_0` (activated), the second `linear_0_noact`.
- an output layer of its own (`tie_output=false`: T5 v1.1, mT5, MADLAD-400) is the spec's
  projection, its bias (BOS blocked) included.
- vocabularies: the sentencepiece pieces in id order; special tokens by their pieces;
  `add_source_eos=True` (our sources end with EOS), decoding starts from BOS. An NLLB-200 /
  M2M-100 import's BOS row is `</s>`'s (decoding starts from it) under the name `<s>`, which
  Hugging Face's own `<s>` (a later id) also has: CTranslate2 reads a name as its first id, BOS.
  Its language codes: `CT2Translator` puts the source's code before each source and gives the
  target's as `target_prefix`, as nmt's search forces it. A T5-family import (MADLAD-400,
  `code_style=target_on_source`) starts from BOS, the row of T5's `<pad>`, named `<s>`; its
  target's code goes first on the source, in the pieces sentencepiece spells it with ("▁",
  "<2de>"), and no `target_prefix` (`TargetTags.ids` / `forced` decide both).

Recurrent checkpoints are refused (CTranslate2 has no recurrent attention decoders): use onnx.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from nmt.checkpoint import Checkpoint
from nmt.config import (
    Activation,
    DecodeConfig,
    LengthPenalty,
    ModelConfig,
    Norm,
    NormType,
    Positions,
    RNNConfig,
    Strategy,
    TransformerConfig,
)
from nmt.errors import NMTError
from nmt.export.runtime import check_supported, manifest_tags, manifest_vocabs, read_manifest
from nmt.models.transformer import sinusoids
from nmt.tokenizer import BOS, EOS, UNK, Vocab, Vocabs, clean
from nmt.translation.inputs import length_batches
from nmt.translation.request import Request, prepare

LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, which the embeddings' LayerNorm uses
# model.activation -> CTranslate2's common_spec.Activation member
ACTIVATIONS = {
    Activation.relu: "RELU", Activation.gelu: "GELU", Activation.swish: "SWISH",
    Activation.gelu_tanh: "GELUTanh",
}  # fmt: skip
MIN_SINUSOID_ROWS = 1024  # decode.max_src_pieces' default; more when max_positions is larger
# CTranslate2's beam search with length_penalty=0 ends a sentence as soon as its top beam ends;
# ours ends it when beam_size hypotheses have ended (as CTranslate2 does with any penalty). A
# penalty this small divides no float32 score (length ** 1e-9 rounds to 1.0f) but selects that
# rule: length_penalty=none then searches exactly as ours.
NO_EARLY_EXIT = 1e-9


def _import_ctranslate2():
    try:
        import ctranslate2
    except ImportError as err:
        raise NMTError("format=ctranslate2 needs ctranslate2: pip install ctranslate2") from err
    return ctranslate2


def check_convertible(cfg: ModelConfig) -> None:
    """Raise NMTError, naming the setting, for what CTranslate2 cannot represent."""
    if isinstance(cfg, RNNConfig):
        raise NMTError(
            f"format=ctranslate2 converts Transformer checkpoints only; this one is a recurrent "
            f"model (model.arch=rnn, {cfg.cell.value} + {cfg.attention.value} attention), which "
            "CTranslate2 cannot run: export it with format=onnx (or format=torchscript)"
        )
    if not isinstance(cfg, TransformerConfig):
        raise NMTError(f"format=ctranslate2: unknown model.arch {cfg.arch!r}")
    if cfg.activation not in ACTIVATIONS:  # a value added later
        raise NMTError(f"format=ctranslate2: model.activation={cfg.activation.value} unsupported")
    if cfg.embed_norm and cfg.norm_eps != LAYER_NORM_EPS:
        raise NMTError(
            f"format=ctranslate2: model.norm_eps={cfg.norm_eps} with model.embed_norm=true "
            f"(whose LayerNorm has epsilon {LAYER_NORM_EPS}): CTranslate2 has one epsilon for "
            "every norm"
        )


def write_ctranslate2(ckpt: Checkpoint, out: Path, quantization: str | None = None) -> dict:
    """Convert `ckpt` into the new directory `out`; returns the manifest entries."""
    check_convertible(ckpt.config.model)
    ct2 = _import_ctranslate2()

    class NMTConverter(ct2.converters.Converter):
        """CTranslate2's converter contract: `_load` returns the filled spec."""

        def _load(self):
            return build_spec(ckpt)

    NMTConverter().convert(str(out), quantization=quantization, force=True)
    cfg: TransformerConfig = ckpt.config.model
    return {
        "ctranslate2": {
            "version": ct2.__version__,
            "quantization": quantization or "float32",
            "position_rows": _position_rows(cfg),
            "add_source_eos": True,
        }
    }


def _position_rows(cfg: TransformerConfig) -> int:
    if cfg.positions == Positions.learned:
        return cfg.max_positions
    if cfg.positions == Positions.relative:
        return 0  # no table
    return max(cfg.max_positions, MIN_SINUSOID_ROWS)


def build_spec(ckpt: Checkpoint):
    """The filled `TransformerSpec` of a Transformer checkpoint."""
    _import_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    cfg: TransformerConfig = ckpt.config.model
    check_convertible(cfg)
    weights = {k: v.detach().float().cpu().numpy() for k, v in ckpt.payload["model"].items()}
    activation = getattr(common_spec.Activation, ACTIVATIONS[cfg.activation])
    pre = cfg.norm == Norm.pre
    relative = cfg.positions == Positions.relative
    # embed_norm (mBART's layernorm_embedding): CTranslate2 normalises after the scaled
    # embedding plus positions, as nmt's Embedding does
    side = {"pre_norm": pre, "activation": activation, "layernorm_embedding": cfg.embed_norm}
    # the T5 options only where set: the spec of every other model stays as it was
    side |= {"relative_attention_bias": True} if relative else {}
    side |= {"ffn_glu": True} if cfg.gated else {}
    side |= {"rms_norm": True} if cfg.norm_type == NormType.rms else {}
    side |= {"head_dim": cfg.head_size} if cfg.head_size is not None else {}
    encoder = transformer_spec.TransformerEncoderSpec(cfg.encoder_layers, cfg.heads, **side)
    decoder = transformer_spec.TransformerDecoderSpec(cfg.decoder_layers, cfg.heads, **side)
    _fill_side(encoder, weights, "encoder", cfg, encoder.embeddings[0])
    _fill_side(decoder, weights, "decoder", cfg, decoder.embeddings)
    scale = _queries_scale(cfg)
    for i, layer in enumerate(encoder.layer):
        w = _scope(weights, f"encoder.layers.{i}.")
        _self_attention(layer.self_attention, w, "attention.", "sub_attention.norm.", scale)
        _feed_forward(layer.ffn, w, cfg.gated)
    for i, layer in enumerate(decoder.layer):
        w = _scope(weights, f"decoder.layers.{i}.")
        _self_attention(layer.self_attention, w, "self_attention.", "sub_self.norm.", scale)
        _cross_attention(layer.attention, w, scale)
        _feed_forward(layer.ffn, w, cfg.gated)
    if relative:  # one table per side, in each of its self-attentions (CTranslate2 stores it once)
        for name, spec_side in (("encoder", encoder), ("decoder", decoder)):
            table = weights[f"{name}.relative.table.weight"]
            for layer in spec_side.layer:
                layer.self_attention.relative_attention_bias = table
                layer.self_attention.relative_attention_max_distance = np.int32(
                    cfg.relative_max_distance
                )
    # the target's rows: a table shared with the source holds them first (prune_vocabs), and a
    # tied projection is that table (TiedProjection keeps only the bias)
    rows = len(ckpt.vocabs.tgt)
    decoder.embeddings.weight = decoder.embeddings.weight[:rows]
    projection = _scope(weights, "decoder.out.")
    projection.setdefault("weight", weights["decoder.embed.table.weight"])
    _linear(decoder.projection, {k: v[:rows] for k, v in projection.items()})

    spec = transformer_spec.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = cfg.norm_eps
    pieces = _pieces(ckpt.vocabs.tgt)
    spec.config.unk_token = pieces[UNK]
    spec.config.bos_token = pieces[BOS]
    spec.config.eos_token = pieces[EOS]
    spec.config.decoder_start_token = pieces[BOS]
    spec.config.add_source_eos = True
    spec.register_source_vocabulary(_pieces(ckpt.vocabs.src))
    spec.register_target_vocabulary(pieces)
    return spec


def _scope(weights: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    return {k.removeprefix(prefix): v for k, v in weights.items() if k.startswith(prefix)}


def _fill_side(side, weights: dict, name: str, cfg: TransformerConfig, embeddings) -> None:
    """Embeddings, scaling, position table, the embeddings' LayerNorm (`embed_norm`) and the
    (pre-norm) final LayerNorm of one side."""
    w = _scope(weights, f"{name}.")
    embeddings.weight = w["embed.table.weight"]
    side.scale_embeddings = bool(cfg.scale_embeddings)
    if cfg.positions == Positions.learned:
        side.position_encodings.encodings = w["embed.learned.weight"]
    elif cfg.positions != Positions.relative:  # relative: the attention's (no table here)
        table = sinusoids(_position_rows(cfg), cfg.d_model, layout=cfg.positions).numpy()
        side.position_encodings.encodings = table
    if cfg.embed_norm:
        _layer_norm(side.layernorm_embedding, _scope(w, "embed.norm."))
    if cfg.norm == Norm.pre:
        _layer_norm(side.layer_norm, _scope(w, "norm."))


def _queries_scale(cfg: TransformerConfig) -> float | None:
    """The attention's `queries_scale`: None (CTranslate2's own 1/sqrt(d/h)) unless the model
    scales otherwise (`scale_attention=false`: 1; `head_size`: 1/sqrt(head_size))."""
    if not cfg.scale_attention:
        return 1.0
    if cfg.head_size is not None:
        return 1 / math.sqrt(cfg.head_size)
    return None


def _layer_norm(spec, w: dict) -> None:
    """A LayerNorm's gamma and beta, or an RMSNorm's gamma alone."""
    spec.gamma = w["weight"]
    if "bias" in w:
        spec.beta = w["bias"]


def _linear(spec, w: dict) -> None:
    spec.weight = w["weight"]
    if "bias" in w:
        spec.bias = w["bias"]


def _self_attention(spec, w: dict, attention: str, norm: str, scale: float | None) -> None:
    """linear[0] = fused [Q; K; V], linear[1] = output; the sublayer's norm."""
    a = _scope(w, attention)
    spec.linear[0].weight = np.concatenate([a["q.weight"], a["kv.weight"]])
    if "q.bias" in a:  # bias=false: none
        spec.linear[0].bias = np.concatenate([a["q.bias"], a["kv.bias"]])
    _linear(spec.linear[1], _scope(a, "out."))
    _layer_norm(spec.layer_norm, _scope(w, norm))
    if scale is not None:
        spec.queries_scale = np.float32(scale)


def _cross_attention(spec, w: dict, scale: float | None) -> None:
    """linear[0] = Q, linear[1] = fused [K; V] (our kv layout), linear[2] = output."""
    a = _scope(w, "cross_attention.")
    _linear(spec.linear[0], _scope(a, "q."))
    _linear(spec.linear[1], _scope(a, "kv."))
    _linear(spec.linear[2], _scope(a, "out."))
    _layer_norm(spec.layer_norm, _scope(w, "sub_cross.norm."))
    if scale is not None:
        spec.queries_scale = np.float32(scale)


def _feed_forward(spec, w: dict, gated: bool = False) -> None:
    """FeedForward = Sequential(Linear, activation, Dropout, Linear); gated, the first linear's
    rows are [a; b] of act(a) * b: a is CTranslate2's `linear_0`, b its `linear_0_noact`."""
    first = _scope(w, "feed_forward.0.")
    if gated:
        halves = {k: np.split(v, 2) for k, v in first.items()}
        _linear(spec.linear_0, {k: v[0] for k, v in halves.items()})
        _linear(spec.linear_0_noact, {k: v[1] for k, v in halves.items()})
    else:
        _linear(spec.linear_0, first)
    _linear(spec.linear_1, _scope(w, "feed_forward.3."))
    _layer_norm(spec.layer_norm, _scope(w, "sub_ff.norm."))


def _pieces(vocab: Vocab) -> list[str]:
    return vocab.id_to_piece(list(range(len(vocab))))


# ---- decoding options ---------------------------------------------------------------------------


def decode_options(
    cfg: DecodeConfig, src_lens: list[int], model: ModelConfig | None = None
) -> dict:
    """`Translator.translate_batch` keyword arguments that search as `cfg` does, for a batch of
    sources of these lengths (pieces + EOS, as our limits count them). docs/export.md has the
    table; in short:

    Exact: greedy, beam size, n-best, length_penalty none (-> 0 for greedy, NO_EARLY_EXIT for
    beam search), average (-> 1) and power (-> alpha), with the EOS counted in the length as
    ours counts it (`return_end_token=True`; strip it from the output),
    the length limits. CTranslate2 has one limit per call: max_decoding_length is the largest of
    `src_lens` (`translate_pieces` groups sources with equal limits, so that it is each one's).
    min_len and no_repeat_ngram block
    the same tokens, but CTranslate2 renormalises the log-probabilities after blocking (we do
    not), so scores and beam rankings may differ. Refused: the gnmt length penalty in beam search
    and sampling (CTranslate2 has neither our formula nor our random stream)."""
    if cfg.strategy == Strategy.sample:
        raise NMTError("decode=sample has no exact CTranslate2 equivalent (a different RNG)")
    if cfg.banned:
        # CTranslate2's suppress_sequences is close, but not mapped or tested against ours
        raise NMTError(
            f"decode.banned={cfg.banned} is not supported by the CTranslate2 export: translate "
            "with the checkpoint (nmt.translation.Translator), or set decode.banned=[]"
        )
    if cfg.constraints:
        raise NMTError(
            f"decode.constraints={cfg.constraints} is not supported by the CTranslate2 export "
            "(CTranslate2 has no positive constraints): translate with the checkpoint "
            "(nmt.translation.Translator, decode=beam), or set decode.constraints=[]"
        )
    rules = {k: v for k, v in cfg.step_rules().items() if k != "no_repeat_ngram"}
    if rules:  # a step rule CTranslate2 is not known to apply as nmt's search does
        shown = ", ".join(f"decode.{k}={v}" for k, v in rules.items())
        raise NMTError(f"{shown} is not supported by the CTranslate2 export")
    beam = cfg.strategy == Strategy.beam
    if cfg.length_penalty == LengthPenalty.gnmt and beam:
        raise NMTError(
            "decode.length_penalty=gnmt has no CTranslate2 equivalent (CTranslate2 divides the "
            "score by length ** length_penalty): use decode.length_penalty=none, average or "
            "power"
        )
    if beam and not cfg.early_stopping:
        raise NMTError(
            "decode.early_stopping=false is not supported by the CTranslate2 export (its beam "
            "search ends a sentence once beam_size hypotheses have ended): set "
            "decode.early_stopping=true"
        )
    # CTranslate2 divides by length ** length_penalty, counting the end token when it returns it
    by_length = cfg.length_penalty in (LengthPenalty.average, LengthPenalty.power)
    power = 1.0 if cfg.length_penalty == LengthPenalty.average else cfg.alpha
    max_len = max(cfg.max_len(n) for n in src_lens)
    max_input = 0  # sources are capped (decode.max_src_pieces) before
    if isinstance(model, TransformerConfig) and model.positions == Positions.learned:
        # no position rows past the table: CTranslate2 would fail where we reuse the last row
        max_len = min(max_len, model.max_positions)
        max_input = model.max_positions - 1  # + the EOS it appends
    return {
        "beam_size": cfg.beam_size if beam else 1,
        "num_hypotheses": cfg.n_best if beam else 1,
        "patience": cfg.patience,
        "length_penalty": power if by_length else (NO_EARLY_EXIT if beam else 0.0),
        "return_end_token": by_length,
        "max_decoding_length": max_len,
        "min_decoding_length": min(max(cfg.min_len(n) for n in src_lens), max_len),
        "no_repeat_ngram_size": cfg.no_repeat_ngram,
        "max_input_length": max_input,
        "return_scores": True,
    }


def translate_pieces(
    translator,
    pieces: list[list[str]],
    cfg: DecodeConfig,
    eos: str = "</s>",
    model: ModelConfig | None = None,
    exact_limits: bool = True,
    prefixes: list[list[str]] | None = None,
) -> list[list[tuple[list[str], float]]]:
    """Translate source pieces (without EOS: the model adds it) with a `ctranslate2.Translator`
    in length-sorted batches, as `nmt.translation.search.decode_all` batches; n-best lists of
    (target pieces without the `eos` piece, score) in input order. The score is our
    `Hypothesis.normalized`. `prefixes` (target pieces, one list per source) go to CTranslate2's
    `target_prefix`; `cfg.prefix` is text, not read here: `CT2Translator` turns it into `prefixes`.

    CTranslate2 takes one length limit per call; ours depends on the source length. With
    `exact_limits` the length-sorted sources are cut into batches of at most `cfg.batch_size`
    that share their limits (sources of equal length mostly), so each sentence gets its own
    limit; without, batches of `cfg.batch_size` get one call each, with the batch's largest
    limit."""
    # the limits grow with the length, so each batch of `same` holds one pair of limits
    limits = lambda n: (cfg.max_len(n + 1), cfg.min_len(n + 1))  # noqa: E731
    batches = length_batches(
        [len(p) for p in pieces], cfg.batch_size, limits if exact_limits else None
    )
    out: list[list[tuple[list[str], float]]] = [[] for _ in pieces]
    for index in batches:
        sources = [pieces[i] for i in index]
        options = decode_options(cfg, [len(p) + 1 for p in sources], model)
        if prefixes is not None and any(prefixes[i] for i in index):
            options["target_prefix"] = [prefixes[i] for i in index]
        for i, result in zip(index, translator.translate_batch(sources, **options)):
            out[i] = [
                (tokens[:-1] if tokens and tokens[-1] == eos else tokens, score)
                for tokens, score in zip(result.hypotheses, result.scores)
            ]
    return out


class CT2Translator:
    """Translation with an `nmt-export format=ctranslate2` directory: the input read as
    `nmt.translation.Translator` reads it (`nmt.translation.inputs`), the search options that decode
    as a `DecodeConfig` does (`decode_options`; greedy and beam search), the output detokenized and
    cleaned as ours is. Needs ctranslate2 and sentencepiece, not the model code.

        translator = CT2Translator("runs/ct2")
        translator.translate(["Ein Hund läuft."], decode=DecodeConfig(strategy=Strategy.beam))
    """

    def __init__(
        self,
        directory: str | Path,
        decode: DecodeConfig | None = None,
        threads: int = 0,
        compute_type: str = "default",
        src_lang: str | None = None,
    ) -> None:
        """`src_lang`: the sources' language, for a model with language codes (None: the
        checkpoint's data.src_lang)."""
        ct2 = _import_ctranslate2()
        directory = Path(directory)
        manifest = read_manifest(directory)
        if manifest.get("format") != "ctranslate2":
            raise NMTError(f"{directory} is a {manifest.get('format')} export, not ctranslate2")
        self.translator = ct2.Translator(
            str(directory), device="cpu", compute_type=compute_type, intra_threads=threads,
            inter_threads=1,
        )  # fmt: skip
        self.vocabs = Vocabs(*manifest_vocabs(directory, manifest))
        self.src_vocab, self.tgt_vocab = self.vocabs.src, self.vocabs.tgt
        self.tags = manifest_tags(manifest, self.src_vocab, src_lang)
        self.model = TransformerConfig(**{**manifest["model"], "arch": "transformer"})
        self.decode = decode or DecodeConfig(**manifest["decode"])
        self.eos = self.tgt_vocab.id_to_piece([EOS])[0]

    def translate(
        self,
        texts: list[str],
        *,
        decode: DecodeConfig | None = None,
        first_line: int = 1,
        exact_limits: bool = True,
        prefixes: list[str] | None = None,
        tgt_lang: str | None = None,
    ) -> list[str]:
        """The best translation of each text; blank texts give blank translations. See
        `translate_pieces` for `exact_limits`, and `hypotheses` for the other options."""
        request = Request(
            texts, decode or self.decode, prefixes, tgt_lang=tgt_lang, first_line=first_line
        )
        nbests = self.hypotheses(request, exact_limits)
        return self.detokenize([nbest[0][0] if nbest else [] for nbest in nbests])

    def detokenize(self, pieces: list[list[str]]) -> list[str]:
        """Target pieces to text, cleaned as `Translator`'s output is."""
        ids = [[self.tgt_vocab.piece_to_id(p) for p in seq] for seq in pieces]
        return [clean(text) for text in self.tgt_vocab.decode(ids)] if ids else []

    def hypotheses(
        self, request: Request, exact_limits: bool = True
    ) -> list[list[tuple[list[str], float]]]:
        """Each text's n-best list of (target pieces, normalised score); [] for a blank text.
        The request is read as the Translator reads it (`nmt.translation.request`): each text's
        forced prefix (its own, or decode.prefix), its target language's tag before each source (the
        manifest's `target_tags`); with language codes, the source's code before it and the
        target's first in the prefix. Banned phrases, constraints, attention maps and search trees
        are refused (`check_supported`), as is a setting CTranslate2 cannot honour
        (`decode_options`)."""
        check_supported(request, "CTranslate2 export", rules=("no_repeat_ngram",))
        tags, lang = self.tags, request.tgt_lang
        prepared = prepare(request, self.vocabs, tags.ids(lang, request.src_lang), True,
                           tags.forced(lang))  # fmt: skip
        live = [text for text in prepared.texts if text.src]
        pieces = [self.src_vocab.id_to_piece(t.src[:-1]) for t in live]  # CT2 adds the EOS
        forced = [self.tgt_vocab.id_to_piece(t.prefix) for t in live]
        nbests = iter(
            translate_pieces(
                self.translator, pieces, prepared.settings, self.eos, self.model, exact_limits,
                forced,
            )
        )  # fmt: skip
        return [next(nbests) if text.src else [] for text in prepared.texts]
