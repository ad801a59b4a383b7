"""Typed configuration schemas: dataclasses and str Enums, validated in ``__post_init__``.

Hydra composes YAML onto these schemas (see ``nmt/cli/compose.py``), so a misspelt key or a bad enum
value fails at composition with the valid choices listed. Library code only ever receives instances
of these classes; ``nmt/run_config.py`` builds each command's schema from these parts. Enum member
names equal their values because OmegaConf matches overrides by name (``model.attention=dot``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import Enum

from omegaconf import MISSING

from nmt.errors import NMTError

SHORTLIST_MAX = 64  # translations per source piece a lexicon keeps (nmt/lexicon.py)
NEED_BEAM = (
    "constraints need decode=beam: greedy and sampling keep one path per sentence, with no beam "
    "to allocate over the constraints' progress (set decode.strategy=beam)"
)


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


class NormType(str, Enum):
    layer = "layer"  # LayerNorm: centred and scaled, with a bias
    rms = "rms"  # RMSNorm: scaled by the root mean square only, no bias (T5, Zhang & Sennrich 2019)


class Positions(str, Enum):
    sinusoidal = "sinusoidal"  # fixed, any length; sine and cosine of a rate side by side
    # the same encodings with the sines in the first half of the dimensions, the cosines in the
    # second (Marian, OPUS-MT)
    sinusoidal_halves = "sinusoidal_halves"
    # fairseq's (NLLB-200, M2M-100): the halves layout with the rates spaced by 1 / (d/2 - 1)
    # instead of 1 / (d/2), and position p encoded as p + 2 (fairseq counts from padding_idx + 1)
    sinusoidal_fairseq = "sinusoidal_fairseq"
    learned = "learned"  # trained table of `max_positions` rows
    # none added to the embeddings: every self-attention adds a learned bias per head for the
    # bucket of its key - query offset, one table per side (T5, Raffel et al. 2020)
    relative = "relative"


class Activation(str, Enum):
    relu = "relu"
    gelu = "gelu"
    swish = "swish"  # x * sigmoid(x), SiLU (Marian, OPUS-MT)
    gelu_tanh = "gelu_tanh"  # GELU's tanh approximation (T5 v1.1, mT5, MADLAD-400: gelu_new)


class CodeStyle(str, Enum):
    """Where a model with language codes (`DataConfig.language_codes`) reads them."""

    # the source's code before the source, the target's forced as the first target piece
    # (NLLB-200, M2M-100, mBART-50)
    source_and_target = "source_and_target"
    # the target's code before the source, nothing on the target (MADLAD-400's "<2de> X")
    target_on_source = "target_on_source"


class DataFormat(str, Enum):
    auto = "auto"  # pick text / tsv / jsonl from the files present
    text = "text"  # {split}.{lang} pairs, one sentence per line
    tsv = "tsv"  # {split}.tsv: source<TAB>target
    jsonl = "jsonl"  # {split}.jsonl: {"<src_lang>": ..., "<tgt_lang>": ...} per line
    tmx = "tmx"  # {split}.tmx: a translation memory's units in src_lang and tgt_lang (nmt.data.tmx)
    xliff = "xliff"  # {split}.xliff: an XLIFF file's translated units (nmt.data.tmx.xliff_pairs)


class PieceModel(str, Enum):
    unigram = "unigram"
    bpe = "bpe"


class Optimizer(str, Enum):
    adam = "adam"
    adamw = "adamw"


class Frozen(str, Enum):
    """Parts of a model that training leaves as they are (train.freeze), to fine-tune the rest."""

    embeddings = "embeddings"  # every embedding table: a tied output layer's weight with them
    encoder = "encoder"  # the whole encoder, its embeddings included (shared: the decoder's too)


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
    int8 = "int8"  # decode.precision only, on the CPU: int8 weights (nmt/models/int8.py)


class Strategy(str, Enum):
    greedy = "greedy"  # the most probable next token, one hypothesis
    beam = "beam"  # batched beam search, n-best lists
    sample = "sample"  # ancestral sampling with temperature / top-k / top-p


class LengthPenalty(str, Enum):
    none = "none"  # rank finished hypotheses by log-probability (favours short ones)
    average = "average"  # log-probability / length
    gnmt = "gnmt"  # log-probability / ((5 + length) / 6) ** alpha (Wu et al. 2016)
    # log-probability / length ** alpha: Hugging Face's and CTranslate2's length_penalty=alpha
    # (alpha 1 is `average`)
    power = "power"


class TextFormat(str, Enum):
    """What a text to translate is (nmt.documents): its markup is kept, its text translated."""

    auto = "auto"  # a file by its extension (.html .htm .xml .md .srt .docx), anything else: text
    text = "text"  # plain text: one text a line (a paragraph: split into sentences)
    html = "html"  # HTML: inline tags kept around the words they wrap; blocks in a file
    xml = "xml"  # XML (XLIFF-style <x id="1"/> codes): as HTML, nothing void but <x/>
    markdown = "markdown"  # Markdown: emphasis, links, code spans kept; code blocks untouched
    srt = "srt"  # SubRip subtitles (a file): numbers and timings untouched
    docx = "docx"  # Word (a file): runs, styles and the rest of the package untouched


# the protected spans a text keeps verbatim (nmt.documents.protect)
PROTECT_KINDS = ("url", "email", "placeholder", "number")


@dataclass
class TextOptions:
    """How the decoding commands read text beyond one sentence a line (nmt.documents): the
    format, sentence splitting, word alignments, protected spans."""

    format: TextFormat = TextFormat.auto
    # a text (line, HTTP text, block of a file) of several sentences is split into them,
    # translated in one batch with the others, and rejoined with its own whitespace; a text of
    # one sentence is translated as it is
    split_sentences: bool = True
    # each translation's word alignment to its source, Moses "i-j" over whitespace words
    alignments: bool = False
    # spans kept verbatim (lifted out before the search, put back by the alignment): url, email,
    # placeholder ({name}, %s, {{ var }}), number (any word with a digit); [] = none
    protect: list[str] = field(default_factory=lambda: list(PROTECT_KINDS))
    protect_patterns: list[str] = field(default_factory=list)  # regular expressions of your own

    def __post_init__(self) -> None:
        unknown = [k for k in self.protect if k not in PROTECT_KINDS]
        if unknown:
            raise NMTError(
                f"protect={unknown}: unknown kind(s); the kinds: {', '.join(PROTECT_KINDS)}"
            )
        for expression in self.protect_patterns:
            try:
                re.compile(expression)
            except re.error as err:
                raise NMTError(
                    f"protect_patterns: {expression!r} is not a regular expression: {err}"
                ) from None


class EnsembleCombine(str, Enum):
    prob = "prob"  # the mean of the members' probabilities (the default: nmt/models/ensemble.py)
    logprob = "logprob"  # the mean of their log-probabilities (a normalised geometric mean)


class Split(str, Enum):
    train = "train"
    valid = "valid"
    test = "test"


@dataclass
class TokenizerConfig:
    joint: bool = True  # one sentencepiece model for both languages
    model_type: PieceModel = PieceModel.unigram
    vocab_size: int = 8000
    byte_fallback: bool = True  # unknown characters become UTF-8 byte pieces, never <unk>
    character_coverage: float = 1.0
    # lines the model is trained on, at most (a reproducible sample): sentencepiece holds them
    # all, about 1.3 KB a line (2.8 GB at 2 million on Multi30k-like text)
    max_sentences: int = 500_000
    # keep only the pieces the target training text uses (both sides' under shared embeddings):
    # a smaller output layer, the costliest layer of training and decoding
    prune_unseen: bool = True
    # subword regularization (Kudo 2018): > 0 segments each training pair afresh every epoch,
    # drawing one of its `sample_nbest` best segmentations with probability proportional to
    # P(segmentation)^sample_alpha (0.1 to 0.5 usual; unigram models only). Validation, test,
    # translation and export always use the best segmentation. 0 = off
    sample_alpha: float = 0.0
    # how many segmentations a pair is drawn from (computed once per corpus, kept in its cache)
    sample_nbest: int = 16
    # false: sample the sources only, each target keeps its best segmentation (the decoder
    # learns the segmentation it will be scored in; the n-best lists in the cache are the same)
    sample_target: bool = True

    def __post_init__(self) -> None:
        # why n-best lists and not sentencepiece's own sampler: nmt.tokenizer.PieceSampler
        if not 0.0 <= self.sample_alpha <= 1.0:
            raise NMTError(
                f"tokenizer.sample_alpha={self.sample_alpha} must be in [0, 1] (0 = off)"
            )
        if self.sample_alpha and self.model_type != PieceModel.unigram:
            raise NMTError(
                f"data.tokenizer.sample_alpha={self.sample_alpha} needs model_type=unigram: nmt "
                "samples from a unigram model's n-best segmentations so that the same seed gives "
                "the same pieces in every process (sentencepiece's BPE-dropout cannot be seeded "
                "that way); use data.tokenizer.model_type=unigram or sample_alpha=0"
            )
        if self.sample_alpha and self.sample_nbest < 2:
            raise NMTError(
                f"data.tokenizer.sample_nbest={self.sample_nbest}: subword sampling draws from "
                "the sample_nbest best segmentations, so it needs 2 or more (16 to 64 are usual); "
                "or data.tokenizer.sample_alpha=0"
            )
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


# the specials nmt's tokenizers hold (nmt.tokenizer): no language tag may spell one
SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")


@dataclass
class CorpusConfig:
    """One entry of `data.corpora` (nmt/data/corpora.py): a corpus, its languages, its share of an
    epoch and its tags. A key left null takes the value of `data` (its files, splits, format and
    languages), so `data.local_dir=DIR` on the command line serves every entry that names none."""

    name: str = ""  # in messages and logs; "" = src_lang-tgt_lang
    src_lang: str | None = None  # null = data.src_lang
    tgt_lang: str | None = None  # null = data.tgt_lang
    local_dir: str | None = None  # this corpus's files; null (and no hub_id) = data's
    hub_id: str | None = None
    hub_config: str | None = None
    format: DataFormat | None = None
    local_splits: SplitNames | None = None
    hub_splits: SplitNames | None = None
    # share of an epoch, with data.temperature: corpus i is drawn with probability
    # p_i = weight_i * (n_i / N)^(1 / T) / sum_j weight_j * (n_j / N)^(1 / T), n_i its pairs
    weight: float = 1.0
    # a piece put before each source (a reserved symbol of the tokenizer, never split): tgt_tag
    # names the target language (Johnson et al. 2017: "<2fr>"), inserted at translation by
    # tgt_lang=...; src_tag marks the kind of data (e.g. "<bt>" for back-translation, Caswell et
    # al. 2019), in training only. Both: the target tag first
    src_tag: str | None = None
    tgt_tag: str | None = None


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
    # where the tokenizer and the tokenized training split are kept between runs
    # (nmt/data/cache.py); None = $XDG_CACHE_HOME/nmt or ~/.cache/nmt
    cache_dir: str | None = None
    num_proc: int = 0  # processes that tokenize the training split the first time; 0 = one a core
    # several corpora or language pairs in one model (nmt/data/corpora.py); [] = the one corpus
    # above
    corpora: list[CorpusConfig] = field(default_factory=list)
    # sampling across data.corpora: T = 1 keeps each corpus's own share (weights aside), a larger
    # T flattens the shares toward uniform (multilingual NMT uses T = 5)
    temperature: float = 1.0
    # a model that names its languages by code pieces (an imported NLLB-200 or M2M-100):
    # language -> its piece ("deu_Latn" -> "deu_Latn", "de" -> "__de__"). The source language's
    # code goes before each source, the target's is the first piece of each translation, forced
    # (`nmt.translation.inputs.TargetTags`); src_lang and tgt_lang are the defaults
    language_codes: dict[str, str] = field(default_factory=dict)
    code_style: CodeStyle = CodeStyle.source_and_target  # where the codes go

    def __post_init__(self) -> None:
        if self.hub_id is None and self.local_dir is None and not self._all_have_files():
            raise NMTError(f"data {self.name!r}: set data.hub_id or data.local_dir")
        if self.max_len < 1:
            raise NMTError(f"data.max_len={self.max_len} must be positive")
        if self.num_proc < 0:
            raise NMTError(f"data.num_proc={self.num_proc} must be 0 (one a core) or positive")
        if self.corpora:
            self._check_corpora()

    def _all_have_files(self) -> bool:
        return bool(self.corpora) and all(c.local_dir or c.hub_id for c in self.corpora)

    def languages(self, corpus: CorpusConfig) -> tuple[str, str]:
        """(source, target) language of an entry of `corpora`."""
        return corpus.src_lang or self.src_lang, corpus.tgt_lang or self.tgt_lang

    def direction(self, corpus: CorpusConfig) -> str:
        """ "src-tgt" of an entry of `corpora`: how nmt-evaluate and validation name it."""
        return "-".join(self.languages(corpus))

    def source_languages(self) -> list[str]:
        """The languages a model trained on this config reads, in the order of its corpora."""
        if not self.corpora:
            return [self.src_lang]
        return list(dict.fromkeys(self.languages(c)[0] for c in self.corpora))

    def target_tags(self) -> dict[str, str | None]:
        """Target language -> the tag that asks for it: what a model trained on this config
        translates into, {tgt_lang: None} for a model without target tags."""
        if not self.corpora:
            return {self.tgt_lang: None}
        return {self.languages(c)[1]: c.tgt_tag for c in self.corpora}

    def _check_corpora(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise NMTError(f"data.temperature={self.temperature} must be a positive number")
        weights = [c.weight for c in self.corpora]
        if not all(math.isfinite(w) and w >= 0 for w in weights) or not sum(weights) > 0:
            raise NMTError(
                f"data.corpora weights {weights}: each must be a finite number >= 0, and their "
                "sum positive"
            )
        names = [c.name or self.direction(c) for c in self.corpora]
        tags: dict[str, str] = {}  # tag -> what it means, to catch one piece with two meanings
        for i, (corpus, name) in enumerate(zip(self.corpora, names)):
            tgt = self.languages(corpus)[1]
            where = f"data.corpora[{i}] ({name})"
            # a source tag marks a kind of data wherever it is; a target tag, one language
            for role, tag, meaning in (("src_tag", corpus.src_tag, "a source tag"),
                                       ("tgt_tag", corpus.tgt_tag, f"target {tgt}")):  # fmt: skip
                if tag is None:
                    continue
                if not tag or tag != tag.strip() or any(ch.isspace() for ch in tag):
                    raise NMTError(f"{where}.{role}={tag!r}: a tag is one word, without spaces")
                if tag in SPECIAL_PIECES:
                    raise NMTError(f"{where}.{role}={tag!r} is a special piece of the tokenizer")
                if tags.setdefault(tag, meaning) != meaning:
                    raise NMTError(
                        f"{where}.{role}={tag!r} would mean {meaning}, but another entry uses it "
                        f"for {tags[tag]}: one tag, one meaning"
                    )
        tagged = [c.tgt_tag is not None for c in self.corpora]
        targets = {self.languages(c)[1] for c in self.corpora}
        if any(tagged) and not all(tagged):
            missing = [n for n, t in zip(names, tagged) if not t]
            raise NMTError(
                f"data.corpora: {', '.join(missing)} have no tgt_tag while others do: a model "
                "with target tags needs one on every corpus (translation inserts it)"
            )
        if any(tagged):
            by_lang: dict[str, str] = {}
            for corpus in self.corpora:
                lang = self.languages(corpus)[1]
                if by_lang.setdefault(lang, corpus.tgt_tag) != corpus.tgt_tag:
                    raise NMTError(
                        f"data.corpora: target {lang} has the tags {by_lang[lang]!r} and "
                        f"{corpus.tgt_tag!r}: give each target language one tag"
                    )
        elif targets != {self.tgt_lang}:
            raise NMTError(
                f"data.corpora translate into {sorted(targets)} but data.tgt_lang="
                f"{self.tgt_lang}: a model without target tags translates into one language; "
                "make every corpus's tgt_lang the run's, or give every corpus a tgt_tag "
                "(e.g. tgt_tag='<2fr>')"
            )


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
    dropout: float = 0.3  # between layers, on the encoder's states, on the decoder's outputs
    embedding_dropout: float | None = None  # on source and target embeddings; None = dropout
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
        if self.embedding_dropout is not None and not 0.0 <= self.embedding_dropout < 1.0:
            raise NMTError(f"model.embedding_dropout={self.embedding_dropout} must be in [0, 1)")

    @property
    def embedding_p(self) -> float:
        """The drop rate on embeddings: embedding_dropout where set, else dropout."""
        return self.dropout if self.embedding_dropout is None else self.embedding_dropout


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
    # a LayerNorm on each side's embeddings plus positions, before dropout (mBART's
    # layernorm_embedding)
    embed_norm: bool = False
    share_embeddings: bool = True  # one embedding table for both sides (needs a joint vocabulary)
    tie_output: bool = True  # output projection = target embedding
    # T5's options (`nmt.pretrained.t5` imports T5, mT5 and MADLAD-400 with them; a model trained
    # by nmt may use them too: configs/model/t5_small.yaml)
    norm_type: NormType = NormType.layer
    norm_eps: float = 1e-5  # added to the variance in every norm (T5: 1e-6)
    head_size: int | None = None  # per head; null = d_model / heads (T5's d_kv may differ)
    bias: bool = True  # biases in the attention and feed-forward layers (T5 has none)
    # the feed-forward's first layer gives two halves, act(a) * b (a GLU variant, Shazeer 2020:
    # T5 v1.1's gated-GELU); false: act(a)
    gated: bool = False
    scale_attention: bool = True  # energies divided by sqrt(head size); T5 folds it into weights
    relative_buckets: int = 32  # positions=relative: offset buckets (the encoder's: half each way)
    relative_max_distance: int = 128  # offsets from this far on share the last bucket

    def __post_init__(self) -> None:
        if self.head_size is None and self.d_model % self.heads:
            raise NMTError(
                f"model.d_model={self.d_model} is not divisible by model.heads={self.heads} "
                "(or set model.head_size)"
            )
        if min(self.encoder_layers, self.decoder_layers, self.ff_size, self.max_positions) < 1:
            raise NMTError("model layers, ff_size and max_positions must be >= 1")
        if self.head_size is not None and self.head_size < 1:
            raise NMTError(f"model.head_size={self.head_size} must be >= 1 (or null)")
        if self.relative_buckets < 4 or self.relative_max_distance < self.relative_buckets // 2:
            raise NMTError(
                f"model.relative_buckets={self.relative_buckets} must be >= 4 and "
                f"model.relative_max_distance={self.relative_max_distance} at least half of it"
            )
        if not 0.0 < self.norm_eps < 1.0:
            raise NMTError(f"model.norm_eps={self.norm_eps} must be in (0, 1)")
        for key in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise NMTError(f"model.{key}={getattr(self, key)} must be in [0, 1)")


@dataclass
class LoraConfig:
    """Low-rank adapters (`nmt.models.lora`): rank 0 trains the model itself."""

    rank: int = 0  # r of each adapter: 8 or 16 for fine-tuning an import
    alpha: float | None = None  # the update is scaled by alpha / rank; null = 2 * rank
    dropout: float = 0.0  # on an adapter's input
    # the layers adapted: "q", "kv", "out" of every attention, "ff" both feed-forward layers
    targets: list[str] = field(default_factory=lambda: ["q", "kv", "out"])

    def __post_init__(self) -> None:
        if self.rank < 0 or not 0.0 <= self.dropout < 1.0:
            raise NMTError("train.lora.rank must be >= 0 and train.lora.dropout in [0, 1)")
        known = ("q", "kv", "out", "ff")
        if self.rank and (not self.targets or set(self.targets) - set(known)):
            raise NMTError(f"train.lora.targets={list(self.targets)}: choose among {list(known)}")


@dataclass
class GuidedAlignmentConfig:
    """Guided alignment (`nmt.training.guided`): the attention taught to follow an aligner's
    links, for the word alignments that put tags back (`nmt.documents.alignment`)."""

    weight: float = 0.0  # of the attention's cross-entropy against the links; 0 = off
    # the Transformer decoder layer (negative: from the top) and head taught; a recurrent decoder
    # has one attention, taught whatever these say
    layer: int = -2
    head: int = 0

    def __post_init__(self) -> None:
        if self.weight < 0 or self.head < 0:
            raise NMTError("train.guided_alignment.weight and .head must be >= 0")


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
    # at the end, fit the confidence calibration on (up to CALIBRATION_SENTENCES of) the valid
    # split and store it with the best checkpoint (nmt/translation/confidence.py, calibration.json)
    calibrate: bool = True
    valid_heatmaps: int = 0  # attention PNGs of the first N validation sentences per validation
    log_every: int = 100  # steps
    tensorboard: bool = True  # TensorBoard event files in run_dir (tensorboard --logdir runs)
    keep_last: int = 2  # step checkpoints kept besides `best`
    precision: Precision = Precision.fp32
    compile: bool = False  # torch.compile the model for training (validation and search stay eager)
    # with compile: capture the compiled step as CUDA graphs (torch.compile mode "reduce-overhead"),
    # one per batch shape, replayed without per-kernel launches; CUDA only. Needs length_step > 0
    # and accum_steps = 1 (see __post_init__)
    cuda_graphs: bool = False
    # pad every training batch to a length that is a multiple of this and to batch_tokens // length
    # rows, so batches come in a few shapes (what compile and cuda_graphs reuse); 0 = off
    length_step: int = 0
    resume: bool = False  # continue exactly from run_dir/checkpoints/last
    overwrite: bool = False  # allow starting over in a run_dir that has checkpoints
    init_from: str | None = None  # a checkpoint: new run from its weights and tokenizer
    freeze: list[Frozen] = field(default_factory=list)  # parts not trained: embeddings, encoder
    # low-rank adapters instead of the whole model (with train.init_from: its checkpoints hold
    # the adapters alone, MBs, and name init_from as their base)
    lora: LoraConfig = field(default_factory=LoraConfig)
    guided_alignment: GuidedAlignmentConfig = field(default_factory=GuidedAlignmentConfig)
    max_bad_updates: int = 5  # NaN/inf or out-of-memory updates in a row before the run stops

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.batch_tokens < 1 or self.accum_steps < 1:
            raise NMTError("train.max_steps, train.batch_tokens and train.accum_steps must be >= 1")
        if self.precision == Precision.int8:
            raise NMTError(
                "train.precision=int8: int8 is a decoding setting (decode.precision=int8); train "
                "in fp32, bf16 or fp16"
            )
        if self.resume and self.overwrite:
            raise NMTError("train.resume and train.overwrite exclude each other")
        if self.lora.rank and not self.init_from and not self.resume:
            raise NMTError(
                "train.lora adapts a trained model: give train.init_from=CKPT (an import, or a "
                "run of your own)"
            )
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
        if self.length_step < 0:
            raise NMTError("train.length_step must be >= 0 (0 = batches as long as their longest)")
        if self.cuda_graphs and not self.compile:
            raise NMTError(
                "train.cuda_graphs=true captures the compiled step: set train.compile=true"
            )
        if self.cuda_graphs and self.accum_steps > 1:
            # a captured backward writes its gradients into static buffers that the next replay
            # overwrites; accumulating over micro-batches may keep only the last one's. Nothing
            # shows nmt sums them right, so refuse rather than train on wrong gradients
            raise NMTError(
                f"train.cuda_graphs=true with train.accum_steps={self.accum_steps}: gradients "
                "accumulated over captured steps are not known to add up; set "
                "train.accum_steps=1 with train.batch_tokens="
                f"{self.batch_tokens * self.accum_steps} (about the same update) or "
                "train.cuda_graphs=false, until a GPU test proves equal gradients"
            )
        if self.cuda_graphs and self.length_step == 0:
            # refused, not warned: a graph is recorded for every distinct batch shape, and
            # unpadded batches come in dozens of shapes (53 in an epoch of Multi30k at 4,096
            # tokens, docs/gpu.md), so much of the first epochs would record graphs instead of
            # replaying them; a warning would leave every such run slow, with no gain to show
            raise NMTError(
                "train.cuda_graphs=true needs batches in a few fixed shapes: set "
                "train.length_step > 0 (e.g. train.length_step=8), or train.cuda_graphs=false"
            )
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
    # beam only: false goes on past that while the best live hypothesis, ranked at its current
    # length, would still rank above the worst of the beam_size best ended ones (Hugging Face's
    # early_stopping=False, its default, which models imported from it decode with)
    early_stopping: bool = True
    length_penalty: LengthPenalty = LengthPenalty.none
    alpha: float = 0.6  # gnmt and power only
    min_len_a: float = 0.0  # EOS is blocked before a * source length + b target pieces
    min_len_b: int = 0
    max_len_a: float = 1.5  # target length limit = a * source length + b, capped
    max_len_b: int = 10
    max_len_cap: int = 512
    no_repeat_ngram: int = 0  # forbid repeating any n-gram of this size; 0 = off
    # a piece already in the hypothesis has its log-probability multiplied by this (> 1 lowers
    # it; as Hugging Face's beam search does, and CTranslate2's option of the same name), and the
    # hypothesis is scored with the lowered value; 1 = off
    repetition_penalty: float = 1.0
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
    # the search's matrix products in bf16 (autocast; scores and log-probabilities stay fp32):
    # on a CPU with bf16 dot-product instructions (AVX512-BF16, AMX) that is faster (on a GPU,
    # not measured: its training at small batches was slower in bf16, docs/gpu.md), and outputs
    # may differ from fp32 where two hypotheses score within bf16's rounding
    precision: Precision = Precision.fp32
    # run the model's step (the search's one call into the model per step) through torch.compile
    # (nmt/models/compiled.py): the same tokens as without, scores to float rounding; the first
    # search of each kind of batch compiles (tens of seconds on a CPU; nmt-serve and the prompt
    # of nmt-translate do it at load), and a CPU needs a C++ compiler. With precision=int8 the
    # int8 step compiles (nmt's fastest path on the CPU, docs/benchmarks.md); a rare line may
    # differ there, where a last bit of fp32 moves a rounding to int8
    compile: bool = False
    # every translation starts with this target text (a forced prefix, scored by the model):
    # interactive translation, "what if" re-decoding. Per-text prefixes (a call's `prefixes`,
    # nmt-translate's TSV input, the HTTP API's "prefix") take its place (nmt.translation.request)
    prefix: str = ""
    # phrases (target text) no translation may contain, in every strategy: the search blocks a
    # phrase's last piece where a hypothesis ends with its other pieces
    # (nmt.translation.search.rules; which piece sequences that covers:
    # nmt.translation.phrases.banned_forms). One list for all texts; a call's `banned` adds to it
    # (nmt.translation.request)
    banned: list[str] = field(default_factory=list)
    # phrases (target text) every translation must contain, each contiguous, in an order the
    # search chooses (positive constraints; beam search only, nmt.translation.search.constraints).
    # One list for all texts; a call's `constraints` (one list per text) take its place
    # (nmt.translation.request)
    constraints: list[str] = field(default_factory=list)

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
        if not self.repetition_penalty > 0:
            raise NMTError(f"decode.repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.no_repeat_ngram < 0 or self.max_len_cap < 1 or self.alpha < 0:
            raise NMTError("decode.no_repeat_ngram >= 0, max_len_cap >= 1 and alpha >= 0 needed")
        if not 0 <= self.shortlist <= SHORTLIST_MAX or self.shortlist_frequent < 0:
            raise NMTError(
                f"decode.shortlist must be in 0..{SHORTLIST_MAX} (0 = off) and decode."
                f"shortlist_frequent >= 0, got {self.shortlist} and {self.shortlist_frequent}"
            )
        for i, phrase in enumerate(self.banned):
            if not isinstance(phrase, str) or not phrase.strip():
                raise NMTError(f"decode.banned[{i}] must be a non-blank phrase, got {phrase!r}")
        for i, phrase in enumerate(self.constraints):
            if not isinstance(phrase, str) or not phrase.strip():
                raise NMTError(
                    f"decode.constraints[{i}] must be a non-blank phrase, got {phrase!r}"
                )
        if self.constraints and self.strategy != Strategy.beam:
            raise NMTError(f"decode.constraints={self.constraints}: {NEED_BEAM}")

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
        if self.repetition_penalty != 1.0:
            text += f", repetition_penalty {self.repetition_penalty:g}"
        if self.shortlist:
            text += f", shortlist {self.shortlist} per source piece + {self.shortlist_frequent}"
        if self.precision != Precision.fp32:
            text += f", {self.precision.value}"
        if self.compile:
            text += ", compiled"
        if self.prefix:
            text += f", prefix {self.prefix!r}"
        if self.banned:
            text += f", banned {', '.join(map(repr, self.banned))}"
        if self.constraints:
            text += f", constraints {', '.join(map(repr, self.constraints))}"
        return text

    def step_rules(self) -> dict[str, object]:
        """The settings that turn on a step rule of the search (`nmt.translation.search.rules`),
        with their values: what a translator that does not apply a rule (an exported runtime) must
        refuse rather than ignore. The minimum length is every translator's."""
        # each rule's setting and the value that turns it off
        off = {"no_repeat_ngram": 0, "repetition_penalty": 1.0}
        return {k: getattr(self, k) for k, value in off.items() if getattr(self, k) != value}

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
            case LengthPenalty.power:
                return score / max(length, 1) ** self.alpha


def model_schema(arch: str) -> type[ModelConfig]:
    """The schema class for a stored ``model.arch`` value."""
    match arch:
        case "rnn":
            return RNNConfig
        case "transformer":
            return TransformerConfig
    raise NMTError(f"unknown model.arch {arch!r}; expected one of: rnn, transformer")
