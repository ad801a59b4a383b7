"""SentencePiece tokenizers: trained on the training split, stored beside the model.

The special ids are defined here once; every other module imports them.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from nmt.config import TokenizerConfig
from nmt.errors import NMTError

PAD, UNK, BOS, EOS = 0, 1, 2, 3

JOINT_FILE = "spm.model"
SRC_FILE = "spm.src.model"
TGT_FILE = "spm.tgt.model"


class Vocab:
    """One sentencepiece model: raw text <-> ids."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise NMTError(f"tokenizer model not found: {self.path}")
        self.sp = spm.SentencePieceProcessor()
        try:
            self.sp.Load(str(self.path))
        except (OSError, RuntimeError) as err:
            raise NMTError(f"cannot read tokenizer model {self.path}: {err}") from err
        if (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id()) != (
            PAD,
            UNK,
            BOS,
            EOS,
        ):
            raise NMTError(f"{self.path} was not trained by nmt (special ids differ)")

    def __len__(self) -> int:
        return self.sp.GetPieceSize()

    def encode(self, texts: list[str]) -> list[list[int]]:
        return self.sp.Encode(texts, out_type=int)

    def pieces(self, text: str) -> list[str]:
        return self.sp.Encode(text, out_type=str)

    def id_to_piece(self, ids: list[int]) -> list[str]:
        return [self.sp.IdToPiece(i) for i in ids]

    def decode(self, ids: list[list[int]]) -> list[str]:
        return self.sp.Decode(ids)

    def digest(self) -> str:
        """A fingerprint of the model file, stored in checkpoints to catch a swapped vocabulary."""
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


@dataclass
class Vocabs:
    src: Vocab
    tgt: Vocab

    @property
    def joint(self) -> bool:
        return self.src.path == self.tgt.path

    def files(self) -> list[Path]:
        return sorted({self.src.path, self.tgt.path})


def train_piece_model(lines: Iterable[str], prefix: Path, cfg: TokenizerConfig) -> Path:
    """Train one sentencepiece model on `lines`; returns the path of ``prefix``.model."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    try:
        _train(lines, prefix, cfg)
    except RuntimeError as err:  # e.g. a vocabulary smaller than the character set
        reason = str(err).split("]")[-1].strip() or str(err).strip()
        raise NMTError(f"sentencepiece training failed: {reason}") from err
    Path(f"{prefix}.vocab").unlink(missing_ok=True)  # human-readable copy; not needed
    return Path(f"{prefix}.model")


def _train(lines: Iterable[str], prefix: Path, cfg: TokenizerConfig) -> None:
    lines = [line for line in lines if line]
    if len(lines) > cfg.max_sentences:
        # sample here with a fixed seed: sentencepiece's own sampling is seeded per process
        keep = sorted(random.Random(0).sample(range(len(lines)), cfg.max_sentences))
        lines = [lines[i] for i in keep]
    spm.SentencePieceTrainer.Train(
        sentence_iterator=iter(lines),
        model_prefix=str(prefix),
        model_type=cfg.model_type.value,
        vocab_size=cfg.vocab_size,
        byte_fallback=cfg.byte_fallback,
        character_coverage=cfg.character_coverage,
        input_sentence_size=0,  # all of `lines`: the sampling above is reproducible
        hard_vocab_limit=False,  # tiny corpora (tests, the demo) may not fill the vocabulary
        pad_id=PAD,
        unk_id=UNK,
        bos_id=BOS,
        eos_id=EOS,
        num_threads=1,  # multi-threaded training is not bit-reproducible
        minloglevel=2,
    )


def train_vocabs(
    src_lines: list[str], tgt_lines: list[str], out_dir: Path, cfg: TokenizerConfig
) -> Vocabs:
    """Train joint or separate models on the training split and write them into `out_dir`."""
    if cfg.joint:
        path = train_piece_model(
            src_lines + tgt_lines, out_dir / JOINT_FILE.removesuffix(".model"), cfg
        )
        vocab = Vocab(path)
        return Vocabs(vocab, vocab)
    src = train_piece_model(src_lines, out_dir / SRC_FILE.removesuffix(".model"), cfg)
    tgt = train_piece_model(tgt_lines, out_dir / TGT_FILE.removesuffix(".model"), cfg)
    return Vocabs(Vocab(src), Vocab(tgt))


def load_vocabs(directory: Path) -> Vocabs:
    """Load the models written by `train_vocabs` (from a run or a checkpoint directory)."""
    if (directory / JOINT_FILE).is_file():
        vocab = Vocab(directory / JOINT_FILE)
        return Vocabs(vocab, vocab)
    if (directory / SRC_FILE).is_file():
        return Vocabs(Vocab(directory / SRC_FILE), Vocab(directory / TGT_FILE))
    raise NMTError(f"no tokenizer ({JOINT_FILE} or {SRC_FILE}) in {directory}")
