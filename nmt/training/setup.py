"""Everything a training run needs before its first update: the run directory, the corpora, the
tokenizer and the lexicon (learned by rank 0, read by the others), the model, and the checkpoint
to resume from.

`prepare_run` is separate from the loop (nmt/training/trainer.py) so that benchmarks and tests can
build a run exactly as `nmt-train` does and then drive `Trainer` themselves.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from nmt.checkpoint import Checkpoint, load_resume_point
from nmt.config import Split, TransformerConfig
from nmt.data import Encoded, encode, filter_length, read_split
from nmt.errors import NMTError
from nmt.lexicon import LEXICON_FILE, Lexicon, load_lexicon
from nmt.models import build_model
from nmt.models.seq2seq import Seq2Seq
from nmt.run_config import TrainRunConfig
from nmt.tokenizer import Vocabs, load_vocabs, prune_vocabs, train_vocabs
from nmt.training.distributed import SINGLE, Dist, barrier
from nmt.training.lexicon import learn_lexicon
from nmt.training.resume import check_resume, load_init
from nmt.training.run_log import remove_logs


@dataclass
class RunData:
    """What a run trains and validates on: the tokenizer and the encoded corpora."""

    vocabs: Vocabs
    train: Encoded
    valid: Encoded
    valid_references: list[str]  # raw target side of the validation split, for BLEU
    lexicon: Lexicon  # saved with every checkpoint, for decode.shortlist (nmt/lexicon.py)


def prepare_run(
    cfg: TrainRunConfig, where: Dist = SINGLE
) -> tuple[RunData, Seq2Seq, Checkpoint | None]:
    """The run's data, its model, and the checkpoint to resume from (or None).

    Every rank builds the same model from `cfg.seed`; DistributedDataParallel then makes sure of it
    by broadcasting rank 0's weights.
    """
    root = _check_run_dir(cfg)
    if where.main:
        _reset_run_dir(cfg, root)
    barrier(where)
    torch.manual_seed(cfg.seed)
    run_dir = Path(cfg.run_dir)
    train_corpus = read_split(cfg.data, Split.train)
    valid_corpus = read_split(cfg.data, Split.valid)
    resume = load_resume_point(root) if cfg.train.resume else None
    init = load_init(cfg) if cfg.train.init_from else None
    if resume is not None:
        check_resume(cfg, resume)
        vocabs = resume.vocabs
    elif init is not None:
        vocabs = init.vocabs
    else:
        if where.main:
            tok = cfg.data.tokenizer
            vocabs = train_vocabs(train_corpus.src, train_corpus.tgt, run_dir, tok)
            if tok.prune_unseen:
                shared = isinstance(cfg.model, TransformerConfig) and cfg.model.share_embeddings
                prune_vocabs(vocabs, train_corpus.src, train_corpus.tgt, run_dir, shared)
        barrier(where)  # the others read what rank 0 wrote
        vocabs = load_vocabs(run_dir)
    train_data = filter_length(encode(train_corpus, vocabs), cfg.data.max_len)
    if len(train_data) == 0:
        raise NMTError("no training pairs left after length filtering (data.max_len)")
    # a resumed run keeps its lexicon; a new one (or a run from before lexicons) learns it
    if where.main and (resume is None or not (run_dir / LEXICON_FILE).is_file()):
        learn_lexicon(train_data, len(vocabs.src), len(vocabs.tgt)).save(run_dir / LEXICON_FILE)
    barrier(where)
    lexicon = load_lexicon(run_dir)
    if lexicon is None:
        raise NMTError(f"{run_dir / LEXICON_FILE} is missing: rank 0 wrote it to another disk?")
    data = RunData(vocabs, train_data, encode(valid_corpus, vocabs), valid_corpus.tgt, lexicon)
    model = build_model(cfg.model, len(vocabs.src), len(vocabs.tgt), vocabs.joint)
    if init is not None:
        model.load_state_dict(init.payload["model"])
    return data, model, resume


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
