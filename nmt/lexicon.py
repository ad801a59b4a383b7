"""A lexical translation table learned from the training corpus, and the shortlists it gives.

The output layer is the largest product of a recurrent decoder's step: (R, H) x (H, V), and the
softmax and top-k after it run over all V target pieces too. A sentence needs few of them.
`Lexicon` keeps, for every source piece, the target pieces most likely to translate it (IBM Model
1, Brown et al. 1993, trained by EM on the training pairs), and the target pieces by frequency.
`decode.shortlist=N` then scores only, per sentence, the N best translations of each of its
source pieces, the `decode.shortlist_frequent` most frequent target pieces and the special ones:
Marian's lexical shortlists and CTranslate2's vocabulary maps work the same way. It is an
approximation (a piece outside the list cannot be produced, and the softmax is taken over the
list), so it is off by default; docs/benchmarks.md measures what it costs in BLEU and gains in
speed.

The table is learned by `nmt-train` before the first update (`nmt/training/lexicon.py`, seconds)
and travels with every checkpoint as lexicon.pt. For a checkpoint written without one:
`python -m nmt.cli.lexicon CKPT_DIR`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from nmt.errors import NMTError
from nmt.tokenizer import EOS

LEXICON_FILE = "lexicon.pt"
NO_LEXICON = (
    "decode.shortlist needs the checkpoint's lexicon.pt, and this checkpoint has none (written "
    "before nmt learned one): python -m nmt.cli.lexicon CKPT_DIR learns it"
)
SPECIALS = EOS + 1  # PAD, UNK, BOS, EOS: ids 0..3 on both sides, always scored


@dataclass
class Shortlist:
    """The target pieces one batch scores. ids (C,) ascending, so the specials come first and
    keep their ids (EOS is column EOS); allowed (B, C): which of them each sentence may produce.
    The table knows no model: the search takes the output layer's rows for `ids` once per batch
    (`nmt.translation.search.batch`)."""

    ids: Tensor
    allowed: Tensor


@dataclass(eq=False)  # compared and hashed by identity: a cache may key on it
class Lexicon:
    translations: Tensor  # (V_src, SHORTLIST_MAX) target ids, best first; -1 where there are fewer
    frequent: Tensor  # (V_tgt,) every target id, the most frequent in training first

    @property
    def shape(self) -> tuple[int, int]:
        """(source, target) vocabulary sizes the table was learned for."""
        return self.translations.size(0), self.frequent.numel()

    def shortlist(
        self,
        src: Tensor,
        per_source: int,
        frequent: int,
        columns: int = 0,
        prefix: Tensor | None = None,
    ) -> Shortlist:
        """The pieces a batch of sources src (B, S) may produce, on src's device. The batch
        scores at least `columns` pieces (the most frequent fill up the union, allowed to no
        sentence), so that a beam's 2K candidates always exist, however short the lists. A
        sentence may always produce the pieces of its forced prefix (B, P), -1 past its end."""
        device = src.device
        if self.translations.device != device:  # once per device: later batches find it there
            self.translations = self.translations.to(device)
            self.frequent = self.frequent.to(device)
        batch, vocab = src.size(0), self.frequent.numel()
        allowed = torch.zeros((batch, vocab), dtype=torch.bool, device=device)
        allowed[:, :SPECIALS] = True
        allowed[:, self.frequent[:frequent]] = True
        candidates = self.translations[src, :per_source]  # (B, S, n); PAD and EOS rows are -1
        sentence = torch.arange(batch, device=device).view(-1, 1, 1).expand_as(candidates)
        found = candidates >= 0
        allowed[sentence[found], candidates[found]] = True
        if prefix is not None:
            forced = prefix >= 0
            rows = torch.arange(batch, device=device).unsqueeze(1).expand_as(prefix)
            allowed[rows[forced], prefix[forced]] = True
        scored = allowed.any(dim=0)
        scored[self.frequent[:columns]] = True
        ids = scored.nonzero().squeeze(1)
        return Shortlist(ids, allowed[:, ids])

    def save(self, path: Path) -> None:
        table = {"translations": self.translations.int(), "frequent": self.frequent.int()}
        torch.save({k: v.cpu() for k, v in table.items()}, path)


def check_lexicon(lexicon: Lexicon | None, src_size: int, tgt_size: int) -> None:
    """Raise NMTError unless `lexicon` exists and was learned for vocabularies of these sizes
    (what decode.shortlist needs of a checkpoint)."""
    if lexicon is None:
        raise NMTError(NO_LEXICON)
    if lexicon.shape != (src_size, tgt_size):
        raise NMTError(
            "the checkpoint's lexicon.pt was learned for another vocabulary: "
            "python -m nmt.cli.lexicon CKPT_DIR learns it again"
        )


def load_lexicon(directory: Path) -> Lexicon | None:
    """The lexicon of a run or checkpoint directory, None when it has none."""
    return read_lexicon(Path(directory) / LEXICON_FILE)


def read_lexicon(path: Path) -> Lexicon | None:
    """The lexicon in file `path`, None when there is no such file."""
    if not path.is_file():
        return None
    try:
        table = torch.load(path, map_location="cpu", weights_only=True)
        return Lexicon(table["translations"].long(), table["frequent"].long())
    except Exception as err:  # a damaged file: say which
        raise NMTError(f"cannot read the lexicon {path}: {err}") from err
