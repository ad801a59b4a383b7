"""Typed configuration schemas: dataclasses and str Enums, validated in ``__post_init__``.

Hydra composes YAML onto these schemas (see ``nmt/cli.py``), so a misspelt key or a bad enum value
fails at composition with the valid choices listed. Library code only ever receives instances of
these classes. Enum member names equal their values because OmegaConf matches overrides by name
(``model.attention=dot``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from omegaconf import MISSING, OmegaConf

from nmt.errors import NMTError

SHORTLIST_MAX = 64  # translations per source piece a lexicon keeps (nmt/lexicon.py)


class Cell(str, Enum):
    gru = "gru"
    lstm = "lstm"


class AttentionType(str, Enum):
    dot = "dot"
    scaled_dot = "scaled_dot"
    general = "general"
    concat = "concat"
    additive = "additive"
    multihead = "multihead"
    none = "none"  # no attention: the baseline that shows what attention buys


class DecoderStyle(str, Enum):
    bahdanau = "bahdanau"  # query s_{t-1}; context enters the recurrent cell
    luong = "luong"  # query h_t; attentional state tanh(W_c [c_t; h_t]) feeds the output


class Bridge(str, Enum):
    zero = "zero"  # decoder starts from zeros
    linear = "linear"  # tanh(W · final encoder state)


class Norm(str, Enum):
    pre = "pre"  # LayerNorm before each sublayer (stable without long warm-up)
    post = "post"  # LayerNorm after each residual sum (Vaswani et al. 2017)


class Positions(str, Enum):
    sinusoidal = "sinusoidal"  # fixed, any length
    learned = "learned"  # trained table of `max_positions` rows


class Activation(str, Enum):
    relu = "relu"
    gelu = "gelu"


class DataFormat(str, Enum):
    auto = "auto"  # pick text / tsv / jsonl from the files present
    text = "text"  # {split}.{lang} pairs, one sentence per line
    tsv = "tsv"  # {split}.tsv: source<TAB>target
    jsonl = "jsonl"  # {split}.jsonl: {"<src_lang>": ..., "<tgt_lang>": ...} per line


class PieceModel(str, Enum):
    unigram = "unigram"
    bpe = "bpe"


class Optimizer(str, Enum):
    adam = "adam"
    adamw = "adamw"


class Scheduler(str, Enum):
    constant = "constant"  # warm-up, then constant
    plateau = "plateau"  # warm-up, then multiply by `plateau_factor` when validation stalls
    noam = "noam"  # warm-up, then inverse square root of the step
    linear = "linear"  # warm-up, then linear decay to min_lr at max_steps or max_minutes
    cosine = "cosine"  # warm-up, then half a cosine down to min_lr at max_steps or max_minutes


class Metric(str, Enum):
    bleu = "bleu"
    loss = "loss"
    ppl = "ppl"


class Precision(str, Enum):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class Strategy(str, Enum):
    greedy = "greedy"  # the most probable next token, one hypothesis
    beam = "beam"  # batched beam search, n-best lists
    sample = "sample"  # ancestral sampling with temperature / top-k / top-p


class LengthPenalty(str, Enum):
    none = "none"  # rank finished hypotheses by log-probability (favours short ones)
    average = "average"  # log-probability / length
    gnmt = "gnmt"  # log-probability / ((5 + length) / 6) ** alpha (Wu et al. 2016)


class Split(str, Enum):
    train = "train"
    valid = "valid"
    test = "test"


def _check_device(device: str) -> None:
    if device not in ("auto", "cpu", "cuda", "mps") and not device.startswith("cuda:"):
        raise NMTError(f"device={device!r}: expected one of auto, cpu, cuda, cuda:N, mps")


@dataclass
class TokenizerConfig:
    joint: bool = True  # one sentencepiece model for both languages
    model_type: PieceModel = PieceModel.unigram
    vocab_size: int = 8000
    byte_fallback: bool = True  # unknown characters become UTF-8 byte pieces, never <unk>
    character_coverage: float = 1.0
    max_sentences: int = 2_000_000  # sample at most this many lines to train the model
    # keep only the pieces the target training text uses (both sides' under shared embeddings):
    # a smaller output layer, the costliest layer of training and decoding
    prune_unseen: bool = True

    def __post_init__(self) -> None:
        if self.max_sentences < 1:
            raise NMTError(f"tokenizer.max_sentences={self.max_sentences} must be positive")
        floor = 4 + (256 if self.byte_fallback else 0) + 1
        if self.vocab_size < floor:
            raise NMTError(f"tokenizer.vocab_size={self.vocab_size} must be at least {floor}")


@dataclass
class SplitNames:
    train: str = "train"
    valid: str = "validation"
    test: str = "test"


@dataclass
class DataConfig:
    name: str = MISSING
    src_lang: str = MISSING
    tgt_lang: str = MISSING
    hub_id: str | None = None  # Hugging Face dataset id (or a local dataset directory)
    hub_config: str | None = None
    hub_splits: SplitNames = field(default_factory=SplitNames)
    local_dir: str | None = None  # when set, read plain files from here instead of the hub
    format: DataFormat = DataFormat.auto
    local_splits: SplitNames = field(default_factory=lambda: SplitNames(valid="valid"))
    max_len: int = 100  # training pairs longer than this (in pieces, either side) are dropped
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)

    def __post_init__(self) -> None:
        if self.hub_id is None and self.local_dir is None:
            raise NMTError(f"data {self.name!r}: set data.hub_id or data.local_dir")
        if self.max_len < 1:
            raise NMTError(f"data.max_len={self.max_len} must be positive")


@dataclass
class ModelConfig:
    """Base of the model schemas; `arch` names the concrete schema when a config is reloaded."""

    arch: str = MISSING
    name: str = MISSING


@dataclass
class RNNConfig(ModelConfig):
    arch: str = "rnn"
    name: str = "rnn"
    cell: Cell = Cell.gru
    emb_size: int = 256
    hidden_size: int = 256  # encoder output size; a bidirectional encoder splits it per direction
    encoder_layers: int = 1
    decoder_layers: int = 1
    bidirectional: bool = True
    dropout: float = 0.3
    attention: AttentionType = AttentionType.additive
    attention_size: int = 0  # inner size of additive/concat scorers; 0 = hidden_size
    heads: int = 4  # multihead only
    decoder: DecoderStyle = DecoderStyle.bahdanau
    input_feeding: bool = True  # Luong only: feed h~_{t-1} into the next step
    bridge: Bridge = Bridge.linear
    tie_embeddings: bool = False  # target embedding = output projection (needs emb == hidden)

    def __post_init__(self) -> None:
        if self.bidirectional and self.hidden_size % 2:
            raise NMTError(f"model.hidden_size={self.hidden_size} must be even when bidirectional")
        if self.attention == AttentionType.multihead and self.hidden_size % self.heads:
            raise NMTError(
                f"model.hidden_size={self.hidden_size} is not divisible by model.heads={self.heads}"
            )
        if self.tie_embeddings and self.emb_size != self.hidden_size:
            raise NMTError("model.tie_embeddings needs model.emb_size == model.hidden_size")
        if self.attention == AttentionType.none and self.bridge == Bridge.zero:
            raise NMTError(
                "model.attention=none needs model.bridge=linear (or no source reaches the decoder)"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise NMTError(f"model.dropout={self.dropout} must be in [0, 1)")


@dataclass
class TransformerConfig(ModelConfig):
    arch: str = "transformer"
    name: str = "transformer"
    d_model: int = 256  # embedding and residual stream size
    heads: int = 4
    ff_size: int = 1024  # inner size of the position-wise feed-forward layer
    encoder_layers: int = 3
    decoder_layers: int = 3
    dropout: float = 0.1  # on embeddings and every residual branch
    attention_dropout: float = 0.1  # on attention weights
    activation_dropout: float = 0.0  # inside the feed-forward layer, after the activation
    activation: Activation = Activation.relu
    norm: Norm = Norm.pre
    positions: Positions = Positions.sinusoidal
    max_positions: int = 1024  # learned positions only; later positions reuse the last row
    scale_embeddings: bool = True  # multiply embeddings by sqrt(d_model)
    share_embeddings: bool = True  # one embedding table for both sides (needs a joint vocabulary)
    tie_output: bool = True  # output projection = target embedding

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise NMTError(
                f"model.d_model={self.d_model} is not divisible by model.heads={self.heads}"
            )
        if min(self.encoder_layers, self.decoder_layers, self.ff_size, self.max_positions) < 1:
            raise NMTError("model layers, ff_size and max_positions must be >= 1")
        for key in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise NMTError(f"model.{key}={getattr(self, key)} must be in [0, 1)")


@dataclass
class TrainConfig:
    max_steps: int = 100_000  # optimizer updates
    max_epochs: int = 0  # 0 = no limit
    max_minutes: float = 0.0  # wall-clock budget, data preparation included; 0 = none
    batch_tokens: int = 4096  # padded target tokens (or source, whichever is larger) per batch
    accum_steps: int = 1  # batches per optimizer update
    optimizer: Optimizer = Optimizer.adam
    lr: float = 1e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    weight_decay: float = 0.0
    clip_grad_norm: float = 1.0  # 0 = off
    label_smoothing: float = 0.1
    scheduler: Scheduler = Scheduler.plateau
    warmup_steps: int = 0
    plateau_factor: float = 0.5
    plateau_patience: int = 2  # validations without improvement before the LR drops
    min_lr: float = 1e-6
    metric: Metric = Metric.bleu  # picks `best`, drives plateau and early stopping
    early_stopping_patience: int = 0  # validations without improvement; 0 = off
    valid_every: int = 1000  # steps
    valid_bleu: bool = True  # greedy-decode the validation set for BLEU
    valid_heatmaps: int = 0  # attention PNGs of the first N validation sentences per validation
    log_every: int = 100  # steps
    tensorboard: bool = True  # TensorBoard event files in run_dir (tensorboard --logdir runs)
    keep_last: int = 2  # step checkpoints kept besides `best`
    precision: Precision = Precision.fp32
    compile: bool = False  # torch.compile the model for training (validation and search stay eager)
    resume: bool = False  # continue exactly from run_dir/checkpoints/last
    overwrite: bool = False  # allow starting over in a run_dir that has checkpoints
    init_from: str | None = None  # a checkpoint: new run from its weights and tokenizer
    max_bad_updates: int = 5  # NaN/inf or out-of-memory updates in a row before the run stops

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.batch_tokens < 1 or self.accum_steps < 1:
            raise NMTError("train.max_steps, train.batch_tokens and train.accum_steps must be >= 1")
        if self.resume and self.overwrite:
            raise NMTError("train.resume and train.overwrite exclude each other")
        if self.resume and self.init_from:
            raise NMTError(
                "train.resume continues this run; train.init_from starts a new one from another "
                "run's weights: give one of them"
            )
        if self.valid_heatmaps < 0:
            raise NMTError("train.valid_heatmaps must be >= 0 (0 = none)")
        if self.max_minutes < 0:
            raise NMTError("train.max_minutes must be >= 0 (0 = no time limit)")
        if self.max_bad_updates < 1:
            raise NMTError("train.max_bad_updates must be >= 1")
        if self.valid_every < 1 or self.log_every < 1:
            raise NMTError("train.valid_every and train.log_every must be >= 1")
        if self.metric == Metric.bleu and not self.valid_bleu:
            raise NMTError("train.metric=bleu needs train.valid_bleu=true (or train.metric=loss)")


@dataclass
class DecodeConfig:
    strategy: Strategy = Strategy.greedy
    beam_size: int = 5  # beam only
    n_best: int = 1  # hypotheses kept per sentence (beam: <= beam_size; sample: independent draws)
    # beam only: a sentence is done once max(n_best, ceil(patience * beam_size)) hypotheses have
    # ended (Kasai et al. 2022, "A Call for Clarity in Beam Search"); 1 = fairseq's rule
    patience: float = 1.0
    length_penalty: LengthPenalty = LengthPenalty.none
    alpha: float = 0.6  # gnmt only
    min_len_a: float = 0.0  # EOS is blocked before a * source length + b target pieces
    min_len_b: int = 0
    max_len_a: float = 1.5  # target length limit = a * source length + b, capped
    max_len_b: int = 10
    max_len_cap: int = 512
    no_repeat_ngram: int = 0  # forbid repeating any n-gram of this size; 0 = off
    temperature: float = 1.0  # sample only: logits / temperature
    top_k: int = 0  # sample only: draw from the k most probable tokens; 0 = all
    top_p: float = 1.0  # sample only: from the smallest set with this much probability mass
    seed: int = 1234  # sample only
    batch_size: int = 64  # sentences per decoding batch
    # `Translator` cuts a source longer than this many pieces (EOS included) to its first pieces and
    # warns, naming the line; 0 = no cap. A decode setting rather than a Translator argument: the
    # library, nmt-translate and nmt-evaluate all pass a DecodeConfig (and a checkpoint stores
    # one), and the target length limit above follows the source length, so the cap bounds both.
    max_src_pieces: int = 1024  # as CTranslate2's max_input_length (and model.max_positions)
    # score only a shortlist of target pieces per sentence (nmt/lexicon.py): the `shortlist` best
    # translations of each source piece and the `shortlist_frequent` most frequent pieces; 0 = all
    shortlist: int = 0
    shortlist_frequent: int = 100

    def __post_init__(self) -> None:
        if self.beam_size < 1 or self.n_best < 1 or self.batch_size < 1:
            raise NMTError("decode.beam_size, decode.n_best and decode.batch_size must be >= 1")
        if not self.patience > 0:
            raise NMTError(f"decode.patience must be > 0, got {self.patience}")
        if self.max_src_pieces == 1 or self.max_src_pieces < 0:
            raise NMTError("decode.max_src_pieces must be 0 (no cap) or >= 2 (pieces and EOS)")
        if self.strategy == Strategy.beam and self.n_best > self.beam_size:
            raise NMTError(f"decode.n_best={self.n_best} exceeds decode.beam_size={self.beam_size}")
        if self.strategy == Strategy.greedy and self.n_best != 1:
            raise NMTError("decode.n_best > 1 needs decode=beam or decode=sample")
        if self.temperature <= 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise NMTError("decode.temperature must be > 0, top_p in (0, 1], top_k >= 0")
        if self.no_repeat_ngram < 0 or self.max_len_cap < 1 or self.alpha < 0:
            raise NMTError("decode.no_repeat_ngram >= 0, max_len_cap >= 1 and alpha >= 0 needed")
        if not 0 <= self.shortlist <= SHORTLIST_MAX or self.shortlist_frequent < 0:
            raise NMTError(
                f"decode.shortlist must be in 0..{SHORTLIST_MAX} (0 = off) and decode."
                f"shortlist_frequent >= 0, got {self.shortlist} and {self.shortlist_frequent}"
            )

    def describe(self) -> str:
        """A short human-readable summary, printed next to scores."""
        match self.strategy:
            case Strategy.greedy:
                text = "greedy"
            case Strategy.beam:
                penalty = self.length_penalty.value
                if self.length_penalty == LengthPenalty.gnmt:
                    penalty += f" alpha {self.alpha:g}"
                text = f"beam {self.beam_size}, length penalty {penalty}"
            case Strategy.sample:
                text = (
                    f"sample (temperature {self.temperature:g}, top_k {self.top_k}, "
                    f"top_p {self.top_p:g}, seed {self.seed})"
                )
        if self.no_repeat_ngram:
            text += f", no_repeat_ngram {self.no_repeat_ngram}"
        if self.shortlist:
            text += f", shortlist {self.shortlist} per source piece + {self.shortlist_frequent}"
        return text

    def max_len(self, src_len: int) -> int:
        return max(1, min(self.max_len_cap, int(self.max_len_a * src_len + self.max_len_b)))

    def min_len(self, src_len: int) -> int:
        return int(self.min_len_a * src_len + self.min_len_b)

    def normalize(self, score: float, length: int) -> float:
        """The score hypotheses are ranked by; length counts generated pieces, EOS included."""
        match self.length_penalty:
            case LengthPenalty.none:
                return score
            case LengthPenalty.average:
                return score / max(length, 1)
            case LengthPenalty.gnmt:
                return score / ((5 + length) / 6) ** self.alpha


@dataclass
class TrainRunConfig:
    data: DataConfig = MISSING
    model: ModelConfig = MISSING
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    run_dir: str = MISSING
    seed: int = 1234
    device: str = "auto"

    def __post_init__(self) -> None:
        _check_device(self.device)
        # caught here so the run fails before the tokenizer is trained, not at model building
        shared = isinstance(self.model, TransformerConfig) and self.model.share_embeddings
        if shared and not self.data.tokenizer.joint:
            raise NMTError(
                "model.share_embeddings=true needs data.tokenizer.joint=true "
                "(or set model.share_embeddings=false)"
            )


@dataclass
class EvaluateRunConfig:
    ckpt: str = MISSING
    split: Split = Split.test
    src_file: str | None = None  # evaluate on these files instead of a data split
    ref_file: str | None = None
    data: DataConfig | None = None  # None = the data config stored in the checkpoint
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    out_dir: str | None = None  # None = <run_dir>/eval
    heatmaps: int = 0  # attention heatmaps (PNG) for the first K sentences
    attention_layer: int | None = -1  # which attention layer they show; None = mean of layers
    attention_head: int | None = None  # which head; None = mean of heads
    heatmap_grid: bool = False  # also one PNG per sentence with every layer and head
    device: str = "auto"

    def __post_init__(self) -> None:
        _check_device(self.device)
        if (self.src_file is None) != (self.ref_file is None):
            raise NMTError("give both src_file and ref_file, or neither")


@dataclass
class TranslateRunConfig:
    ckpt: str = MISSING
    input: str | None = None  # a file; None = stdin (interactive when it is a terminal)
    output: str | None = None  # None = stdout
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    show_attention: bool = False  # print the attention matrix as text (interactive mode)
    attention_png: str | None = None  # interactive: write the last heatmap to this file
    attention_layer: int | None = -1  # which attention layer is shown; None = mean of layers
    attention_head: int | None = None  # which head; None = mean of heads
    nbest_tsv: bool = False  # batch mode: line<TAB>rank<TAB>score<TAB>text per n-best hypothesis
    device: str = "auto"

    def __post_init__(self) -> None:
        _check_device(self.device)


def flatten(obj: object, prefix: str = "") -> dict:
    """A config as {"data.tokenizer.vocab_size": 8000, ...}: leaves by dotted key (as overrides
    name them), enums as their values."""
    if not dataclasses.is_dataclass(obj):
        return {prefix: obj.value if isinstance(obj, Enum) else obj}
    out = {}
    for f in dataclasses.fields(obj):
        key = f"{prefix}.{f.name}" if prefix else f.name
        out.update(flatten(getattr(obj, f.name), key))
    return out


def model_schema(arch: str) -> type[ModelConfig]:
    """The schema class for a stored ``model.arch`` value."""
    match arch:
        case "rnn":
            return RNNConfig
        case "transformer":
            return TransformerConfig
    raise NMTError(f"unknown model.arch {arch!r}; expected one of: rnn, transformer")


def load_run_config(path: Path) -> TrainRunConfig:
    """Rebuild a typed training config from the ``config.yaml`` stored in a run or checkpoint."""
    raw = OmegaConf.load(path)
    schema = OmegaConf.structured(TrainRunConfig)
    model = OmegaConf.structured(model_schema(raw.model.arch))
    return OmegaConf.to_object(OmegaConf.merge(schema, {"model": model}, raw))


def save_run_config(cfg: TrainRunConfig, path: Path) -> None:
    path.write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)), encoding="utf-8")


@dataclass
class AverageRunConfig:
    run_dir: str | None = None  # average the newest `last` step checkpoints of run_dir/checkpoints
    ckpts: list[str] | None = None  # or exactly these checkpoint directories
    last: int = 5
    out: str | None = None  # None = <run_dir>/checkpoints/average-last<N>
    overwrite: bool = False  # replace an existing `out`

    def __post_init__(self) -> None:
        if (self.run_dir is None) == (self.ckpts is None):
            raise NMTError("give run_dir=DIR (its newest checkpoints) or ckpts=[...], not both")
        if self.ckpts is not None and not self.ckpts:
            raise NMTError("ckpts=[] names no checkpoint")
        if self.ckpts is not None and self.out is None:
            raise NMTError("ckpts=[...] needs out=DIR (where the averaged checkpoint goes)")
        if self.last < 1:
            raise NMTError(f"last={self.last} must be >= 1")


@dataclass
class PlotRunConfig:
    run_dir: str | None = None  # one run: its curves go to <run_dir>/curves.png
    run_dirs: list[str] | None = None  # or several runs on one chart (a sweep)
    out: str | None = None  # None = <run_dir>/curves.png, or curves.png in the runs' common parent

    def __post_init__(self) -> None:
        if (self.run_dir is None) == (self.run_dirs is None):
            raise NMTError("give run_dir=DIR or run_dirs=[DIR1,DIR2,...], not both")
        if self.run_dirs is not None and not self.run_dirs:
            raise NMTError("run_dirs=[] names no run")


@dataclass
class ServeRunConfig:
    ckpt: str = MISSING
    host: str = "127.0.0.1"  # 0.0.0.0 to listen on every interface
    port: int = 8000  # 0 = any free port (the URL printed says which)
    decode: DecodeConfig = field(default_factory=DecodeConfig)  # defaults; a request may override
    max_chars: int = 100_000  # most characters in one request, all its texts together (HTTP 413)
    max_texts: int = 64  # most texts in one request
    max_beam: int = 16  # largest beam_size and n_best a request may ask for (HTTP 422 above)
    batch_wait_ms: float = 5.0  # collect concurrent requests this long into one decode; 0 = off
    max_batch: int = 64  # most sentences in one batched decode
    device: str = "auto"

    def __post_init__(self) -> None:
        _check_device(self.device)
        if not 0 <= self.port <= 65535:
            raise NMTError(f"port={self.port} must be in 0..65535")
        if min(self.max_chars, self.max_texts, self.max_batch, self.max_beam) < 1:
            raise NMTError("max_chars, max_texts, max_batch and max_beam must be >= 1")
        if self.batch_wait_ms < 0:
            raise NMTError(f"batch_wait_ms={self.batch_wait_ms} must be >= 0")


class ExportFormat(str, Enum):
    torchscript = "torchscript"
    onnx = "onnx"
    ctranslate2 = "ctranslate2"


CT2_QUANTIZATIONS = (
    "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16",
    "float32",
)  # fmt: skip


@dataclass
class ExportRunConfig:
    ckpt: str = MISSING
    format: ExportFormat = ExportFormat.onnx
    out: str = MISSING  # a new directory: the exported model, its tokenizer and a README
    overwrite: bool = False  # replace an existing `out`
    quantization: str | None = None  # ctranslate2 only: weight type (int8, float16...); None = fp32

    def __post_init__(self) -> None:
        if self.quantization is None:
            return
        if self.format != ExportFormat.ctranslate2:
            raise NMTError("quantization=... applies to format=ctranslate2 only")
        if self.quantization not in CT2_QUANTIZATIONS:
            raise NMTError(
                f"quantization={self.quantization}: expected one of {', '.join(CT2_QUANTIZATIONS)}"
            )
