"""The top-level schema of each command (``nmt-train``, ``nmt-evaluate``, ``nmt-translate``...),
built from the parts in ``nmt/config.py``, and the training config a run and its checkpoints store.

``nmt/cli/main.py`` registers these with Hydra; a command's function receives one instance.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf

from nmt.config import (
    DataConfig,
    DecodeConfig,
    EnsembleCombine,
    ModelConfig,
    Split,
    Strategy,
    TextFormat,
    TextOptions,
    TrainConfig,
    TransformerConfig,
    model_schema,
)
from nmt.errors import NMTError


def _paths(key: str, value: object) -> list[str]:
    """A key that takes one path or a list of them, as a list (None: [])."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise NMTError(f"{key}={value!r}: expected a path or a list of paths, {key}=[a,b]")


def _check_device(device: str) -> None:
    if device not in ("auto", "cpu", "cuda", "mps") and not device.startswith("cuda:"):
        raise NMTError(f"device={device!r}: expected one of auto, cpu, cuda, cuda:N, mps")


@dataclass
class TrainRunConfig:
    data: DataConfig = MISSING
    model: ModelConfig = MISSING
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    # the decoding the confidence calibration is fitted with at the end of training
    # (train.calibrate): a calibration belongs to its decode settings, and nmt-translate,
    # nmt-evaluate and nmt-serve decode with beam search by default
    calibration_decode: DecodeConfig = field(
        default_factory=lambda: DecodeConfig(strategy=Strategy.beam)
    )
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
class CheckpointsConfig:
    """The model a decoding command runs: one checkpoint directory, or several decoded as one
    ensemble (`ckpt=[a,b,c]`, nmt/models/ensemble.py). `ckpts` gives the list either way."""

    # a checkpoint directory (holds ckpt.pt, config.yaml and the tokenizer), or a list of them
    ckpt: Any = MISSING  # str | list[str] (OmegaConf has no union of str and list)
    ckpt_weights: list[float] | None = None  # an ensemble's weights, one per ckpt; None = equal
    ensemble_combine: EnsembleCombine = EnsembleCombine.prob  # mean of probabilities or logprob
    # the attention shown (REPL, page, heatmaps): "mean" over members, or a member's index
    ensemble_attention: str = "mean"
    # the language of the sources, for a model that reads a code for it (an NLLB-200 or M2M-100
    # import: "deu_Latn", "de"); null = the checkpoint's data.src_lang; nmt-translate: "auto" =
    # each line's, identified (nmt/cli/source_language.py)
    src_lang: str | None = None

    @property
    def ckpts(self) -> list[str]:
        return _paths("ckpt", self.ckpt)

    @property
    def attention_member(self) -> str | int:
        return "mean" if self.ensemble_attention == "mean" else int(self.ensemble_attention)

    def check_ckpts(self) -> None:
        """The checks that need no checkpoint read (the members' tokenizers are compared when
        they are loaded)."""
        count = len(self.ckpts)
        if not count:
            raise NMTError("ckpt=[] names no checkpoint")
        if self.ckpt_weights is not None and len(self.ckpt_weights) != count:
            raise NMTError(f"ckpt_weights has {len(self.ckpt_weights)} weights for {count} ckpt")
        if self.ckpt_weights is not None and not all(w > 0 for w in self.ckpt_weights):
            raise NMTError(f"ckpt_weights={self.ckpt_weights}: every weight must be positive")
        attention = self.ensemble_attention
        if attention != "mean" and not (
            attention.lstrip("-").isdigit() and -count <= int(attention) < count
        ):
            raise NMTError(
                f"ensemble_attention={attention!r}: expected mean or a member's index, "
                f"0..{count - 1}"
            )


def _no_auto(src_lang: str | None, why: str) -> None:
    """src_lang=auto is nmt-translate's (each line's language identified): refused by name
    where a command reads one language, rather than taken for a language called "auto"."""
    if src_lang == "auto":
        raise NMTError(
            f"src_lang=auto identifies each line's language in nmt-translate; {why}: give its "
            "code (src_lang=de), or none"
        )


def check_text_modes(cfg: TextOptions, modes: dict[str, bool]) -> None:
    """A line read as columns (a prefix, constraints) or answered as rows (an n-best list) is one
    sentence of plain text: refuse text options that would read it otherwise."""
    given = [name for name, on in modes.items() if on]
    if not given:
        return
    other = [
        f"format={cfg.format.value}"
        if cfg.format not in (TextFormat.auto, TextFormat.text)
        else "",
        "alignments=true" if cfg.alignments else "",
    ]
    other = [o for o in other if o]
    if other:
        raise NMTError(
            f"{' and '.join(other)} with {', '.join(given)}: a line of those is one sentence of "
            "plain text (its columns, or its n-best rows); drop one or the other"
        )


@dataclass
class EvaluateRunConfig(TextOptions, CheckpointsConfig):
    split: Split = Split.test
    # also judge the translations' confidence (nmt.translation.confidence): Spearman's rho with
    # sentence chrF, calibration errors, flags; fitted first on the valid split and stored in
    # the checkpoint as calibration.json when it has none
    confidence: bool = False
    src_file: str | None = None  # evaluate on these files instead of a data split
    ref_file: str | None = None
    data: DataConfig | None = None  # None = the data config stored in the checkpoint
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    out_dir: str | None = None  # None = <run_dir>/eval
    heatmaps: int = 0  # attention heatmaps (PNG) for the first K sentences
    attention_layer: int | None = -1  # which attention layer they show; None = mean of layers
    attention_head: int | None = None  # which head; None = mean of heads
    heatmap_grid: bool = False  # also one PNG per sentence with every layer and head
    # a model trained on data.corpora: the direction scored, "de-en" (its corpus's split, its
    # target tag; with src_file, the tag alone); null = every direction in turn, each reported
    direction: str | None = None
    # a model with language codes (an NLLB-200 or M2M-100 import): the language translated into,
    # "eng_Latn" (with src_lang for the sources'); null = the checkpoint's data.tgt_lang
    tgt_lang: str | None = None
    # hypothesis files (one path, or a list) compared with this checkpoint's own hypotheses:
    # BLEU, chrF and TER with 95% confidence intervals and paired-bootstrap p-values
    compare: Any = None  # str | list[str] | None (OmegaConf has no union of str and list)
    # the hypotheses are a file job (nmt/cli/file_job.py): resumable, split among torchrun's
    # processes; as nmt-translate's
    chunk_lines: int = 1000
    progress: str = "auto"
    device: str = "auto"

    def __post_init__(self) -> None:
        TextOptions.__post_init__(self)
        _check_device(self.device)
        self.check_ckpts()
        _no_auto(self.src_lang, "nmt-evaluate reads a test set in one language")
        self.progress = _progress(self.progress)
        if self.chunk_lines < 1:
            raise NMTError(f"chunk_lines={self.chunk_lines} must be >= 1")
        if self.format not in (TextFormat.auto, TextFormat.text):
            raise NMTError(
                f"format={self.format.value}: nmt-evaluate scores plain text against plain "
                "references; translate a document with nmt-translate input=FILE output=FILE"
            )
        if (self.src_file is None) != (self.ref_file is None):
            raise NMTError("give both src_file and ref_file, or neither")
        self.compare = _paths("compare", self.compare)
        if self.direction is not None and len(self.direction.split("-")) != 2:
            raise NMTError(f"direction={self.direction!r}: expected SRC-TGT, e.g. direction=de-en")
        if len(self.ckpts) > 1 and not self.out_dir:
            raise NMTError(
                "an ensemble (ckpt=[...]) needs out_dir=DIR: its hypotheses are no one member's"
            )


@dataclass
class TranslateRunConfig(TextOptions, CheckpointsConfig):
    input: str | None = None  # a file; None = stdin (interactive when it is a terminal)
    output: str | None = None  # None = stdout
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    show_attention: bool = False  # print the attention matrix as text (interactive mode)
    attention_png: str | None = None  # interactive: write the last heatmap to this file
    attention_layer: int | None = -1  # which attention layer is shown; None = mean of layers
    attention_head: int | None = None  # which head; None = mean of heads
    nbest_tsv: bool = False  # batch mode: line<TAB>rank<TAB>score<TAB>text per n-best hypothesis
    # batch mode: each input line is source<TAB>prefix, and its translation starts with the
    # prefix (forced, scored by the model; a line without a tab has none)
    prefix_tsv: bool = False
    # batch mode: each input line is source<TAB>phrase<TAB>phrase..., and its translation contains
    # every phrase (positive constraints, beam search only; a line without a tab has none)
    constraints_tsv: bool = False
    # checkpoints (a path or a list) that rescore each line's n-best list
    # (nmt/translation/rerank.py): the translation is the hypothesis with the best weighted sum of
    # the features; batch mode only
    rerank: Any = None  # str | list[str] | None (OmegaConf has no union of str and list)
    # the features' weights: the main model's normalised score, then each rerank model's
    # log-probability per piece; None = equal (scripts/rerank_tune.py chooses them on valid)
    rerank_weights: list[float] | None = None
    # a model trained with target tags (data.corpora): the language to translate into, "fr";
    # null = its one target language (an error naming them when it has several)
    tgt_lang: str | None = None
    # input=FILE output=FILE: lines per unit of work (one call of the search; what a resume after
    # a kill may redo; what torchrun's processes share out, nmt/cli/file_job.py)
    chunk_lines: int = 1000
    progress: str = "auto"  # auto (when stderr is a terminal), true or false: lines, lines/s, ETA
    device: str = "auto"
    # each line's confidence (nmt.translation.confidence): columns after its translation, the
    # probability that it is good, its flags, each word's probability
    confidence: bool = False
    review: str | None = None  # with confidence: the lines to check, least confident first
    # with confidence: a flagged line is translated again with settings against degenerate
    # output (beam >= 8, no_repeat_ngram=3, repetition_penalty=1.2); the likelier good is kept
    retry_flagged: bool = False
    # a translation memory (TMX, or TSV of source<TAB>target): a line or segment it holds, after
    # whitespace is normalised, is written as the memory has it (nmt/translation/memory.py)
    tm: str | None = None

    def __post_init__(self) -> None:
        TextOptions.__post_init__(self)
        _check_device(self.device)
        self.check_ckpts()
        self.progress = _progress(self.progress)
        if self.chunk_lines < 1:
            raise NMTError(f"chunk_lines={self.chunk_lines} must be >= 1")
        if self.review and self.input is None:
            raise NMTError("review=FILE lists lines of input=FILE: give input=FILE")
        if (self.review or self.retry_flagged) and not self.confidence:
            raise NMTError("review=FILE and retry_flagged=true read each line's confidence: add "
                           "confidence=true")  # fmt: skip
        self.rerank = _paths("rerank", self.rerank)
        modes = {
            "nbest_tsv=true": self.nbest_tsv,
            "prefix_tsv=true": self.prefix_tsv,
            "constraints_tsv=true": self.constraints_tsv,
            "rerank": bool(self.rerank),
        }
        check_text_modes(self, modes)  # fmt: skip
        given = [name for name, on in modes.items() if on]
        if self.confidence and given:
            raise NMTError(
                f"confidence=true with {', '.join(given)}: confidence is a column of plain "
                "lines' translations; drop one or the other"
            )
        if self.rerank_weights is not None and not self.rerank:
            raise NMTError(
                "rerank_weights needs rerank=[ckpt,...]: the checkpoints that rescore the n-best"
            )
        if self.rerank:
            check_rerank_weights(len(self.rerank), self.rerank_weights)
            check_rerank_nbest(self.decode)
        if self.constraints_tsv:
            self._check_constraints_tsv()
        if self.tm is not None:
            self._check_tm(given)

    def _check_tm(self, given: list[str]) -> None:
        """tm='s combinations, refused before any checkpoint is read: a line from the memory
        has one translation, no score, no prefix or phrases of its own, and no alignment."""
        if given or self.alignments:
            shown = ", ".join(given + ["alignments=true"] * self.alignments)
            raise NMTError(
                f"tm={self.tm} with {shown}: a line from the memory has its translation alone "
                "(no n-best, score, prefix, phrases or alignment); drop one or the other"
            )

    def _check_constraints_tsv(self) -> None:
        """constraints_tsv's combinations, refused before any checkpoint is read."""
        if self.prefix_tsv:
            raise NMTError(
                "prefix_tsv=true and constraints_tsv=true both read the columns after a line's "
                "tab: choose one (a prefix for every line can be decode.prefix=TEXT)"
            )
        if self.decode.strategy != Strategy.beam:
            raise NMTError(
                f"constraints_tsv=true needs decode=beam (got decode.strategy="
                f"{self.decode.strategy.value}): only beam search keeps hypotheses that meet "
                "the constraints; set decode=beam (nmt-translate's default)"
            )
        if self.decode.constraints:
            raise NMTError(
                f"constraints_tsv=true and decode.constraints={self.decode.constraints}: a "
                "line's constraints come from its TSV columns; give these in every line, or "
                "drop constraints_tsv"
            )


def check_rerank_weights(models: int, weights: Sequence[float] | None) -> list[float]:
    """Reranking's weights (`nmt.translation.rerank`) with `models` rerank checkpoints: the main
    model's, then one per rerank checkpoint, each >= 0 and one > 0; None gives equal weights."""
    if weights is None:
        return [1.0] * (models + 1)
    weights = [float(w) for w in weights]
    if len(weights) != models + 1:
        raise NMTError(
            f"rerank_weights has {len(weights)} weights but {models + 1} are expected: the main "
            f"model's (ckpt) first, then one per rerank checkpoint ({models}), e.g. "
            f"rerank_weights=[{','.join(['1'] * (models + 1))}]"
        )
    if not all(math.isfinite(w) and w >= 0 for w in weights) or not any(weights):
        raise NMTError(
            f"rerank_weights={weights}: every weight must be a finite number >= 0, and one > 0"
        )
    return weights


def check_rerank_nbest(decode: DecodeConfig) -> None:
    """Reranking needs an n-best list to choose from."""
    if decode.n_best < 2:
        raise NMTError(
            f"rerank rescores each line's n-best list, but decode.n_best={decode.n_best}: set "
            f"decode.n_best to 2 or more (with decode=beam, at most decode.beam_size="
            f"{decode.beam_size}), e.g. decode.n_best={max(2, decode.beam_size)}"
        )


class ScoreFormat(str, Enum):
    tsv = "tsv"
    jsonl = "jsonl"


@dataclass
class ScoreRunConfig(CheckpointsConfig):
    src: str | None = None  # sources, one a line ...
    hyp: str | None = None  # ... and their translations, as many lines
    tsv: str | None = None  # or source<TAB>translation lines; none of the three: stdin as TSV
    pieces: bool = False  # also each piece and its log-probability
    format: ScoreFormat = ScoreFormat.tsv
    decode: DecodeConfig = field(default_factory=DecodeConfig)  # length penalty, shortlist...
    # a model trained with target tags (data.corpora): the language the translations are in;
    # null = its one target language (an error naming them when it has several)
    tgt_lang: str | None = None
    device: str = "auto"

    def __post_init__(self) -> None:
        _check_device(self.device)
        self.check_ckpts()
        _no_auto(self.src_lang, "nmt-score scores translations of sources in one language")
        if (self.src is None) != (self.hyp is None):
            raise NMTError("give both src=FILE and hyp=FILE (or tsv=FILE, or TSV on stdin)")
        if self.tsv is not None and self.src is not None:
            raise NMTError("give src=FILE hyp=FILE or tsv=FILE, not both")


def _progress(value: object) -> str:
    """progress=auto|true|false (Hydra reads true and false as booleans: they are taken too)."""
    text = str(value).lower()
    if text not in ("auto", "true", "false"):
        raise NMTError(f"progress={value!r}: expected one of auto, true, false")
    return text


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


# config options a checkpoint directory may carry (nmt-import writes them): the commands take them
# from the checkpoint they are given when their command line names none of that group
# (nmt.cli.compose): nmt-train the model of train.init_from, the decoding commands the decode
# settings of ckpt (an imported model's authors')
CHECKPOINT_OPTIONS = {
    "model": Path("model") / "imported.yaml",
    "decode": Path("decode") / "imported.yaml",
}


def load_run_config(path: Path) -> TrainRunConfig:
    """Rebuild a typed training config from the ``config.yaml`` stored in a run or checkpoint,
    read as data: an interpolation in it is refused (`load_data_yaml`)."""
    raw = load_data_yaml(path)
    schema = OmegaConf.structured(TrainRunConfig)
    model = OmegaConf.structured(model_schema(raw.model.arch))
    return OmegaConf.to_object(OmegaConf.merge(schema, {"model": model}, raw))


def load_data_yaml(path: Path) -> DictConfig:
    """A YAML file of a checkpoint (its config.yaml, an import's model and decode options) as an
    OmegaConf tree, refusing every interpolation in it by name: a checkpoint may come from a
    stranger, and `${oc.env:NAME}` would put the reader's environment variable into the config
    (nmt-serve's /info shows it), `${oc.decode:...}` would parse what it names. A config nmt
    writes has none (`save_run_config` writes resolved values)."""
    raw = OmegaConf.load(path)
    found = _interpolations(raw, "")
    if found:
        key, value = found[0]
        raise NMTError(
            f"{path}: {key} is {value!r}, an interpolation: a checkpoint's config is read as "
            f"data and never resolved (it could read this machine's environment); write the "
            f"value itself ({len(found)} interpolation(s) in the file)"
        )
    return raw


def _interpolations(node: DictConfig | ListConfig, where: str) -> list[tuple[str, str]]:
    """(key, raw value) of every interpolation under `node`, unresolved."""
    keys = list(node.keys()) if isinstance(node, DictConfig) else list(range(len(node)))
    found = []
    for key in keys:
        name = f"{where}{key}" if isinstance(node, DictConfig) else f"{where.rstrip('.')}[{key}]"
        if OmegaConf.is_interpolation(node, key):
            raw = OmegaConf.to_container(node, resolve=False)
            found.append((name, str(raw[key])))
            continue
        child = node._get_node(key)  # the node itself: reading the value would resolve it
        if isinstance(child, (DictConfig, ListConfig)) and not child._is_none():
            found += _interpolations(child, f"{name}.")
    return found


def save_run_config(cfg: TrainRunConfig, path: Path) -> None:
    path.write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)), encoding="utf-8")


@dataclass
class ImportRunConfig:
    source: str = MISSING  # a Marian model's directory (Hugging Face layout) or a hub id
    out: str = MISSING  # the new checkpoint directory
    # text files of the languages in use: only the pieces they need are kept (a smaller table
    # and output layer: `nmt.pretrained.trimming`); [] = every piece
    keep_text: list[str] = field(default_factory=list)
    # language codes to add to an NLLB-200 / M2M-100 model, to fine-tune it on a language it
    # lacks: new code -> "mean" (its row the mean of the codes' rows) or an existing code (a copy
    # of a related language's row): {xho_Latn: mean, gsw_Latn: deu_Latn}
    add_languages: dict[str, str] = field(default_factory=dict)
    # text files in the language the model reads, a sentence a line (its training sources, or
    # any such text): the words that start and end their sentences are kept with the checkpoint,
    # for splitting paragraphs where punctuation is missing and for checking for skipped
    # sentences (`nmt.data.starts`), as a run of nmt-train keeps its own; [] = none
    sentence_text: list[str] = field(default_factory=list)


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
class ServeRunConfig(TextOptions, CheckpointsConfig):
    ckpt: Any = None  # as CheckpointsConfig's; may be left out when `models` names the models
    # several models in one server, each a checkpoint directory (an ensemble stays ckpt=[...],
    # served first when given): a request is routed by its languages (nmt/serving/models.py)
    models: list[str] = field(default_factory=list)
    max_loaded: int = 4  # most models loaded at once; the least recently used idle one leaves
    # a file of API keys, a key a line with optional characters=N and requests=N limits
    # (nmt/serving/keys.py); null = no key needed, any accepted
    api_keys: str | None = None
    key_period_days: float = 30.0  # the period a key's characters=N quota is counted over
    # browser origins whose pages may call the API ("https://app.example"); a cross-origin
    # request from any other does no work (403)
    cors_origins: list[str] = field(default_factory=list)
    # a translation memory (TMX, or a TSV of pairs): a plain text it holds is answered as the
    # memory has it, for the pair asked, never searched (nmt/serving/models.py)
    tm: str | None = None
    host: str = "127.0.0.1"  # 0.0.0.0 to listen on every interface
    port: int = 8000  # 0 = any free port (the URL printed says which)
    decode: DecodeConfig = field(default_factory=DecodeConfig)  # defaults; a request may override
    max_chars: int = 100_000  # most characters in one request, all its texts together (HTTP 413)
    max_texts: int = 64  # most texts in one request
    max_beam: int = 16  # largest beam_size and n_best a request may ask for (HTTP 422 above)
    # most work in one request, in hypothesis steps: for each text, the hypotheses searched at
    # each step (beam_size; n_best draws for sample; 1 for greedy) times its length limit
    # (decode.max_len_a * source pieces + decode.max_len_b, at most max_len_cap), twice with the
    # search tree, and with the attention maps layers x heads x source pieces / 1500 more per
    # step (nmt.serving.admission.text_cost); HTTP 413 above
    max_request_cost: int = 100_000
    # a batch is decoded once no request has joined it for this long (at most 10x this long
    # after the worker became free), or when it is full; 0 = no batching
    batch_wait_ms: float = 5.0
    max_batch: int = 64  # most sentences in one batched decode
    # most work in one decode, as max_request_cost counts it: a costlier request is decoded in
    # pieces, and the other requests' batches take turns with them
    batch_cost: int = 16_384
    max_queue: int = 512  # most sentences waiting for a decode; above, HTTP 503 with Retry-After
    # most work waiting for a decode, counted as max_request_cost counts it; above, HTTP 503
    max_queue_cost: int = 1_000_000
    # the share of max_queue_cost one client (the address its connection comes from; behind a
    # proxy, the proxy's) may have waiting: no client fills the queue ahead of the others
    client_share: float = 0.5
    # torch threads that decode on a CPU; 0 = one fewer than the CPU cores (at least 1): the event
    # loop that reads requests and writes answers keeps a core of its own
    threads: int = 0
    device: str = "auto"

    def __post_init__(self) -> None:
        TextOptions.__post_init__(self)
        _check_device(self.device)
        if self.ckpt is None and not self.models:
            raise NMTError("give the model to serve: ckpt=DIR, or models=[DIR,...] for several")
        if self.ckpt is not None:
            self.check_ckpts()
        if self.src_lang == "auto":
            raise NMTError(
                'src_lang=auto: nmt-serve identifies a language per request ("src_lang": "auto", '
                'LibreTranslate\'s source "auto", DeepL without source_lang): give a language '
                "here, or none"
            )
        if self.max_loaded < 1:
            raise NMTError(f"max_loaded={self.max_loaded} must be >= 1")
        if self.tm is not None and not Path(self.tm).is_file():
            raise NMTError(f"tm={self.tm}: no such file")
        if self.key_period_days <= 0:
            raise NMTError(f"key_period_days={self.key_period_days} must be > 0")
        for origin in self.cors_origins:
            if origin != "*" and not re.fullmatch(r"https?://[^/\s]+", origin):
                raise NMTError(
                    f"cors_origins: {origin!r} is not an origin such as https://app.example "
                    "(scheme and host, no path)"
                )
        if not 0 <= self.port <= 65535:
            raise NMTError(f"port={self.port} must be in 0..65535")
        sizes = ("max_chars", "max_texts", "max_beam", "max_request_cost", "max_batch")
        for key in (*sizes, "batch_cost"):
            if getattr(self, key) < 1:
                raise NMTError(f"{key}={getattr(self, key)} must be >= 1")
        if self.batch_wait_ms < 0:
            raise NMTError(f"batch_wait_ms={self.batch_wait_ms} must be >= 0")
        if self.threads < 0:
            raise NMTError(f"threads={self.threads} must be >= 0 (0 = one fewer than the cores)")
        if not 0 < self.client_share <= 1:
            raise NMTError(f"client_share={self.client_share} must be in (0, 1]")
        if self.client_share * self.max_queue_cost < self.max_request_cost:
            raise NMTError(
                f"client_share * max_queue_cost = {self.client_share * self.max_queue_cost:g} "
                f"must be >= max_request_cost={self.max_request_cost}: a request of the most "
                "cost must fit in an empty queue"
            )
        if self.max_queue < self.max_texts:
            raise NMTError(
                f"max_queue={self.max_queue} must be >= max_texts={self.max_texts}: "
                "a request of max_texts texts must fit in an empty queue"
            )


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
