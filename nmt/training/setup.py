"""Everything a training run needs before its first update: the run directory, the corpora, the
tokenizer and the lexicon (learned by rank 0, read by the others), the model, and the checkpoint
to resume from.

`prepare_run` is separate from the loop (nmt/training/trainer.py) so that benchmarks and tests can
build a run exactly as `nmt-train` does and then drive `Trainer` themselves.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import sentencepiece as spm
import torch

from nmt import tokenizer
from nmt.checkpoint import Checkpoint, load_resume_point
from nmt.config import Split, TransformerConfig
from nmt.data import corpora
from nmt.data import splits as data_module
from nmt.data.batches import EpochSampling
from nmt.data.cache import building, cache_root, code_digest, copy_files, digest
from nmt.data.corpora import MixedCorpus
from nmt.data.languages import code_prefixes, inherit_codes
from nmt.data.splits import Encoded, SplitText, encode, read_split, split_digest
from nmt.data.starts import EDGES_FILE, write_sentence_files
from nmt.data.tokenized import TokenizedCorpus, tokenize
from nmt.distributed import SINGLE, Dist, barrier
from nmt.errors import NMTError
from nmt.lexicon import LEXICON_FILE, Lexicon, load_lexicon
from nmt.models import build_model
from nmt.models.seq2seq import Seq2Seq
from nmt.run_config import TrainRunConfig, flatten
from nmt.tokenizer import (
    JOINT_FILE,
    KEPT_FILES,
    SAMPLING_KEYS,
    SRC_FILE,
    TGT_FILE,
    PieceSampler,
    Vocabs,
    load_vocabs,
    prune_vocabs,
    train_vocabs,
)
from nmt.training.guided import Links, check_guided, corpus_links
from nmt.training.lexicon import corpus_lexicon, sample_rows
from nmt.training.resume import check_resume, load_init
from nmt.training.run_log import remove_logs
from nmt.training.validation import validation_prefixes

log = logging.getLogger(__name__)

# the code that decides what a cached tokenizer holds: how its lines are read and cleaned, sampled,
# trained on, and pruned. Its source is in the key (no hand-bumped version): an edit to any of
# these trains the tokenizer again instead of reusing one made by other code
TOKENIZER_CODE = (
    SplitText.__iter__, data_module._lines, tokenizer.clean, tokenizer._SPACE,
    train_vocabs, tokenizer.train_piece_model, tokenizer._sample, tokenizer._train,
    prune_vocabs, tokenizer._pieces_used, tokenizer._chunks, tokenizer._no_symbol,
    corpora.CorporaText.__init__, corpora.CorporaText.__iter__, corpora.corpus_data,
)  # fmt: skip


@dataclass
class RunData:
    """What a run trains and validates on: the tokenizer and the encoded corpora."""

    vocabs: Vocabs
    # memory-mapped; lengths in memory, rows read per batch (several corpora: MixedCorpus)
    train: TokenizedCorpus | MixedCorpus
    valid: Encoded
    valid_references: list[str]  # raw target side of the validation split, for BLEU
    lexicon: Lexicon  # saved with every checkpoint, for decode.shortlist (nmt/lexicon.py)
    # several corpora: direction ("de-en") -> its rows of `valid`, each also scored alone
    valid_directions: dict[str, range] = field(default_factory=dict)
    links: Links | None = None  # each training pair's aligned pieces, for guided alignment


def prepare_run(
    cfg: TrainRunConfig, where: Dist = SINGLE
) -> tuple[RunData, Seq2Seq, Checkpoint | None]:
    """The run's data, its model, and the checkpoint to resume from (or None).

    What is wrong with the data (a missing split, files of different lengths, a line that is not
    UTF-8) fails before any work. The tokenizer and the tokenized training split come from the
    cache when this corpus was prepared before (rank 0 builds them otherwise; the others wait).
    Every rank builds the same model from `cfg.seed`; DistributedDataParallel then makes sure of it
    by broadcasting rank 0's weights.
    """
    root = _check_run_dir(cfg)
    check_guided(cfg)
    if where.main:
        _reset_run_dir(cfg, root)
    barrier(where)
    torch.manual_seed(cfg.seed)
    run_dir, cache = Path(cfg.run_dir), cache_root(cfg.data.cache_dir)
    mixed = bool(cfg.data.corpora)  # several corpora (nmt/data/corpora.py)
    # small, and checked before the big one
    valid_corpus = None if mixed else read_split(cfg.data, Split.valid)
    valid_mix = corpora.valid_splits(cfg.data) if mixed else []
    if mixed:
        digests = corpora.train_digests(cfg.data)
        source = digest([d for d, _ in digests], corpora.tag_symbols(cfg.data))
        pairs = sum(n for _, n in digests)
    else:
        digests = []
        source, pairs = split_digest(cfg.data, Split.train)
    if pairs == 0:
        raise NMTError("the training split is empty")
    resume = load_resume_point(root) if cfg.train.resume else None
    init = load_init(cfg) if cfg.train.init_from else None
    start = resume or init
    if start is not None:  # a model with language codes: the run's languages get theirs
        inherit_codes(cfg.data, start.config.data, str(start.path))
    if resume is not None:
        check_resume(cfg, resume)
        vocabs = _own_vocabs(resume.vocabs, run_dir, where)
    elif init is not None:
        vocabs = _own_vocabs(init.vocabs, run_dir, where)
    else:
        if where.main:
            _tokenizer(cfg, run_dir, cache, source)
        barrier(where)  # the others read what rank 0 wrote
        vocabs = load_vocabs(run_dir)
    # a tag the tokenizer lacks (one from train.init_from) fails before tokenizing
    tag_ids = corpora.check_tags(vocabs.src, corpora.tag_symbols(cfg.data))
    # a model with language codes: the ids before each source and each target (one corpus)
    codes = code_prefixes(cfg.data, cfg.data.src_lang, cfg.data.tgt_lang, vocabs.src)
    if mixed:
        train_data = _mixed_corpus(cfg, vocabs, cache, digests, tag_ids, where)
    else:
        if where.main:
            tokenize(cfg.data, vocabs, cache, source, pairs)
        barrier(where)
        entry = tokenize(cfg.data, vocabs, cache, source, pairs)  # built: every rank finds it
        train_data = TokenizedCorpus(entry, cfg.data.max_len, _sampling(cfg, vocabs), codes)
    try:  # the caller closes the corpus (`with data.train:`) once it has it
        if len(train_data) == 0:
            raise NMTError("no training pairs left after length filtering (data.max_len)")
        # a resumed run keeps its lexicon; a new one (or a run from before lexicons) gets one
        if where.main and (resume is None or not (run_dir / LEXICON_FILE).is_file()):
            corpus_lexicon(train_data, vocabs, cfg.data.max_len).save(run_dir / LEXICON_FILE)
        barrier(where)
        lexicon = load_lexicon(run_dir)
        if lexicon is None:
            raise NMTError(f"{run_dir / LEXICON_FILE} is missing: rank 0 wrote it to another disk?")
        if where.main and (resume is None or not (run_dir / EDGES_FILE).is_file()):
            write_sentence_files(_sources(train_data, vocabs), run_dir)
        links = None
        if cfg.train.guided_alignment.weight:  # rank 0 aligns; the others read its cache entry
            if where.main:
                corpus_links(train_data, cfg.data.max_len)
            barrier(where)
            links = corpus_links(train_data, cfg.data.max_len)
        directions: dict[str, range] = {}
        if valid_corpus is not None:
            valid, references = encode(valid_corpus, vocabs), valid_corpus.tgt
            src, tgt = [codes[0] + s for s in valid.src], [codes[1] + t for t in valid.tgt]
            valid = Encoded(src, tgt, len(codes[1]))
        else:
            valid, references, directions = corpora.encode_valid(
                valid_mix, vocabs, tag_ids, cfg.data
            )
        if cfg.train.valid_bleu:  # a prefix validation cannot force fails now, not at step 1000
            validation_prefixes(valid.src, vocabs.tgt, cfg.decode)
        data = RunData(vocabs, train_data, valid, references, lexicon, directions, links)
        model = build_model(cfg.model, len(vocabs.src), len(vocabs.tgt), vocabs.joint)
        if init is not None:
            model.load_state_dict(init.payload["model"])
    except BaseException:
        train_data.close()
        raise
    return data, model, resume


def _sources(corpus: TokenizedCorpus | MixedCorpus, vocabs: Vocabs) -> list[str]:
    """The training sources the lexicon is learned on, as text (what the start words and
    sentence edges are learned on: `write_sentence_files`)."""
    src, src_lens, _, _ = corpus.flat(sample_rows(len(corpus)))
    return vocabs.src.decode([ids.tolist() for ids in np.split(src, np.cumsum(src_lens)[:-1])])


def _mixed_corpus(
    cfg: TrainRunConfig,
    vocabs: Vocabs,
    cache: Path,
    digests: list[tuple[str, int]],
    tag_ids: dict[str, int],
    where: Dist,
) -> MixedCorpus:
    """data.corpora: each corpus tokenized into its own cache entry (rank 0 builds, the others
    wait), read as one `MixedCorpus`."""
    data = [corpora.corpus_data(cfg.data, c) for c in cfg.data.corpora]
    if where.main:
        for corpus, (source, pairs) in zip(data, digests):
            tokenize(corpus, vocabs, cache, source, pairs)
    barrier(where)
    entries = [tokenize(c, vocabs, cache, s, n) for c, (s, n) in zip(data, digests)]
    codes = [code_prefixes(cfg.data, *cfg.data.languages(c), vocabs.src) for c in cfg.data.corpora]
    prefixes = [
        corpora.source_prefix(c, tag_ids) + src for c, (src, _) in zip(cfg.data.corpora, codes)
    ]
    tgt_prefixes = [tgt for _, tgt in codes]
    key = [prefixes, tgt_prefixes] if any(tgt_prefixes) else prefixes  # older mixtures' keys kept
    path = cache / "mixtures" / digest([e.name for e in entries], key)
    path.mkdir(parents=True, exist_ok=True)  # the mixture's lexicon is kept there
    parts: list[TokenizedCorpus] = []
    try:
        for entry in entries:
            parts.append(TokenizedCorpus(entry, cfg.data.max_len))
        weights = [c.weight for c in cfg.data.corpora]
        return MixedCorpus(
            parts, prefixes, weights, cfg.data.temperature, cfg.seed, _sampling(cfg, vocabs),
            path, tgt_prefixes,
        )  # fmt: skip
    except BaseException:
        for part in parts:
            part.close()
        raise


def _own_vocabs(vocabs: Vocabs, run_dir: Path, where: Dist) -> Vocabs:
    """The vocabulary of a checkpoint (resumed from, or train.init_from), read from the run's own
    copy of its files. Every checkpoint copies the files its Vocabs names; had they stayed in
    the checkpoint's directory, keep_last would delete that directory as the run goes on (or the
    user the init_from run), and the next save would fail."""
    if where.main:
        for path in vocabs.files():
            own = run_dir / path.name
            if not own.is_file() or own.read_bytes() != path.read_bytes():
                shutil.copy2(path, own)
    barrier(where)  # the others read what rank 0 wrote
    own = load_vocabs(run_dir)
    if (own.src.digest(), own.tgt.digest()) != (vocabs.src.digest(), vocabs.tgt.digest()):
        raise NMTError(
            f"{run_dir} holds another tokenizer's files beside the checkpoint's: train in a new "
            "run_dir, or remove them"
        )
    return own


def _sampling(cfg: TrainRunConfig, vocabs: Vocabs) -> EpochSampling | None:
    """Subword regularization of the training batches, when data.tokenizer.sample_alpha > 0."""
    tok = cfg.data.tokenizer
    if tok.sample_alpha == 0:
        return None
    src = PieceSampler(vocabs.src, tok)
    tgt = src if vocabs.tgt is vocabs.src else PieceSampler(vocabs.tgt, tok)
    return EpochSampling(src, tgt if tok.sample_target else None, cfg.seed, cfg.data.max_len)


def _tokenizer(cfg: TrainRunConfig, run_dir: Path, cache: Path, source: str) -> None:
    """The tokenizer of this training split and tokenizer config into `run_dir`: from the cache,
    or trained (on a reproducible sample of at most data.tokenizer.max_sentences lines) into the
    cache first."""
    tok = cfg.data.tokenizer
    shared = isinstance(cfg.model, TransformerConfig) and cfg.model.share_embeddings
    code = code_digest(TOKENIZER_CODE), spm.__version__
    # sampling settings decide the training segmentation, not the model: not in the key
    settings = {k: v for k, v in flatten(tok).items() if k not in SAMPLING_KEYS}
    # language tags (data.corpora) are reserved pieces: in the key only when there are some, so
    # the key of a run without them stays what it was
    symbols = corpora.tag_symbols(cfg.data)
    key = digest(
        source, settings, shared and tok.prune_unseen, *code, *([symbols] if symbols else [])
    )
    entry = cache / "tokenizers" / key
    if not entry.is_dir():
        log.info("training the tokenizer into %s, once for this corpus and setting", entry)
        if cfg.data.corpora:
            src, tgt = corpora.CorporaText(cfg.data, 0), corpora.CorporaText(cfg.data, 1)
        else:
            src, tgt = SplitText(cfg.data, Split.train, 0), SplitText(cfg.data, Split.train, 1)
        with building(entry) as tmp:
            vocabs = train_vocabs(src, tgt, tmp, tok, symbols)
            if tok.prune_unseen:
                prune_vocabs(vocabs, src, tgt, tmp, shared, symbols)
    for name in (JOINT_FILE, SRC_FILE, TGT_FILE, *KEPT_FILES.values()):
        (run_dir / name).unlink(missing_ok=True)  # an earlier run's, in this directory
    copy_files(entry, run_dir)


def _check_run_dir(cfg: TrainRunConfig) -> Path:
    """Refuse to clobber an existing run unless asked; returns the checkpoint root. Read-only, so
    every rank can run it and fail the same way."""
    run_dir = Path(cfg.run_dir)
    root = run_dir / "checkpoints"
    has_run = (root / "last").exists()
    if cfg.train.resume and not has_run:
        raise NMTError(f"train.resume=true but {root}/last does not exist")
    if has_run and not cfg.train.resume and not cfg.train.overwrite:
        raise NMTError(
            f"{run_dir} already holds a run: pass train.resume=true to continue it, "
            "train.overwrite=true to start over, or another run_dir"
        )
    return root


def _reset_run_dir(cfg: TrainRunConfig, root: Path) -> None:
    """train.overwrite: remove the old checkpoints and log (rank 0 only)."""
    if (root / "last").exists() and not cfg.train.resume:
        shutil.rmtree(root)
        remove_logs(Path(cfg.run_dir))
    Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)
