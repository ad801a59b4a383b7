"""Guided alignment (Marian's, after Garg et al. 2019): the decoder's cross-attention is taught to
follow a statistical aligner's links, so that the word alignments read off it when translating
(`nmt.documents.alignment`: where inline tags and protected spans go back) are an aligner's, not
whatever a model's attention settled on. A recurrent decoder's one attention is taught; in a
Transformer, one head of one decoder layer (`train.guided_alignment.layer` and `.head`).

The links: eflomal (Östling & Tiedemann 2016; a Bayesian HMM aligner with fertility, `pip
install 'nmt[align]'`) aligns the training pairs' pieces both ways, and grow-diag-final-and
symmetrises the two (Koehn et al. 2005). It runs once per corpus (Multi30k's 29,000 pairs: 12 s)
and its links are kept beside the tokenized corpus in the cache, as the lexicon is.

The loss, per batch: for every target position with links, the cross-entropy between its links,
spread evenly over the source pieces they name, and the taught attention; the end of the target
is linked to the end of the source. Summed over positions, times `weight`, it is added to the
summed translation loss, so that the trainer's normalisation by target tokens covers both.

    links = corpus_links(corpus, max_len)           # (once; cached)
    guide = Guide(links, cfg.train.guided_alignment, corpus.prefixes)
    loss = translation_loss + guide.loss(attention, batch)
"""

from __future__ import annotations

import importlib.util
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from nmt.config import AttentionType, GuidedAlignmentConfig, TransformerConfig
from nmt.data.batches import Batch
from nmt.data.cache import code_digest, digest
from nmt.errors import NMTError
from nmt.run_config import TrainRunConfig
from nmt.tokenizer import PAD

log = logging.getLogger(__name__)

NO_ALIGNER = (
    "train.guided_alignment needs the eflomal aligner: pip install 'nmt[align]' (or pip install "
    "eflomal)"
)
# grow-diag-final-and's neighbours of a link: the four sides, then the diagonals
NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))
EPS = 1e-9  # the smallest attention weight the log reads


@dataclass
class Links:
    """Each training pair's links between its pieces: pair i's are src[offsets[i]:offsets[i+1]]
    (positions in its source, without prefix or EOS) and tgt[...] (positions in its target)."""

    offsets: np.ndarray  # (N + 1,) int64
    src: np.ndarray  # (M,) int32
    tgt: np.ndarray  # (M,) int32

    def save(self, path: Path) -> None:
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}.npz")
        np.savez(tmp, offsets=self.offsets, src=self.src, tgt=self.tgt)
        os.replace(tmp, path)  # a reader sees the whole file or none

    @classmethod
    def load(cls, path: Path) -> Links | None:
        if not path.is_file():
            return None
        with np.load(path) as table:
            return cls(table["offsets"], table["src"], table["tgt"])


def check_aligner() -> None:
    """Raise NMTError, before any work, where eflomal is not installed."""
    if importlib.util.find_spec("eflomal") is None:
        raise NMTError(NO_ALIGNER)


def check_guided(cfg: TrainRunConfig) -> None:
    """Raise NMTError, before any work, where train.guided_alignment cannot run: no aligner, a
    model without attention, a layer or head it lacks, or training data whose pieces change
    (subword sampling) or that mixes corpora."""
    guided = cfg.train.guided_alignment
    if not guided.weight:
        return
    check_aligner()
    model = cfg.model
    if isinstance(model, TransformerConfig):
        layers, heads = model.decoder_layers, model.heads
        if not -layers <= guided.layer < layers:
            raise NMTError(
                f"train.guided_alignment.layer={guided.layer}: the decoder has {layers} layers "
                f"(0..{layers - 1}, or -{layers}..-1 from the top)"
            )
    elif model.attention == AttentionType.none:
        raise NMTError("train.guided_alignment needs attention: model.attention=none has none")
    else:
        heads = model.heads if model.attention == AttentionType.multihead else 1
    if guided.head >= heads:
        raise NMTError(f"train.guided_alignment.head={guided.head}: the attention has {heads}")
    if cfg.data.tokenizer.sample_alpha > 0:
        raise NMTError(
            "train.guided_alignment aligns the pieces of the stored segmentation; subword "
            "sampling (data.tokenizer.sample_alpha > 0) changes them every epoch: turn one off"
        )
    if cfg.data.corpora:
        raise NMTError("train.guided_alignment takes one corpus, not data.corpora")


def corpus_links(corpus, max_len: int) -> Links:  # noqa: ANN001 - a TokenizedCorpus
    """The links of every pair of a tokenized training corpus within `max_len`, aligned once and
    kept beside it in the cache (the key digests the code that makes them)."""
    code = code_digest((align_pairs, symmetrise, _moses))
    path = corpus.path / f"links-{digest(max_len, code)}.npz"
    links = Links.load(path)
    if links is None:
        log.info("aligning %d training pairs with eflomal (once for this corpus)", len(corpus))
        src, src_lens, tgt, tgt_lens = corpus.flat(np.arange(len(corpus)))
        src_pre, tgt_pre = (len(p) for p in corpus.prefixes)
        sources = _split(src, src_lens, src_pre, 1)  # without prefix and EOS
        targets = _split(tgt, tgt_lens, tgt_pre, 0)
        links = align_pairs(sources, targets)
        links.save(path)
    return links


def align_pairs(sources: list[np.ndarray], targets: list[np.ndarray]) -> Links:
    """eflomal's links of each (source, target) pair of id arrays, both ways, symmetrised."""
    check_aligner()
    import eflomal

    def lines(side: list[np.ndarray]) -> list[str]:
        return [" ".join(map(str, ids.tolist())) for ids in side]

    with tempfile.TemporaryDirectory() as scratch:
        forward, backward = Path(scratch) / "forward", Path(scratch) / "backward"
        eflomal.Aligner().align(
            lines(sources), lines(targets), links_filename_fwd=str(forward),
            links_filename_rev=str(backward), quiet=True,
        )  # fmt: skip
        pairs = zip(forward.read_text().split("\n"), backward.read_text().split("\n"))
        found = [symmetrise(_moses(f), _moses(b)) for f, b in pairs][: len(sources)]
    counts = np.array([0] + [len(links) for links in found], dtype=np.int64)
    flat = [link for links in found for link in links]
    both = np.array(flat, dtype=np.int32).reshape(-1, 2)
    return Links(np.cumsum(counts), both[:, 0].copy(), both[:, 1].copy())


def symmetrise(forward: set[tuple[int, int]], backward: set[tuple[int, int]]) -> list:
    """grow-diag-final-and of two directions' (source, target) links, sorted: their
    intersection, grown by the union's neighbouring links that align a word not yet aligned,
    then the links of either direction between two words neither aligned."""
    union, kept = forward | backward, forward & backward
    src_done, tgt_done = {i for i, _ in kept}, {j for _, j in kept}
    grown = True
    while grown:
        grown = False
        for i, j in sorted(kept):
            for di, dj in NEIGHBOURS:
                link = (i + di, j + dj)
                if (
                    link in union
                    and link not in kept
                    and (link[0] not in src_done or link[1] not in tgt_done)
                ):
                    kept.add(link)
                    src_done.add(link[0])
                    tgt_done.add(link[1])
                    grown = True
    for direction in (forward, backward):
        for i, j in sorted(direction):
            if i not in src_done and j not in tgt_done:
                kept.add((i, j))
                src_done.add(i)
                tgt_done.add(j)
    return sorted(kept)


class Guide:
    """The guided-alignment term of a batch's loss (see the module's notes). `prefixes`: how
    many pieces the corpus puts before each source and each target (language codes), which the
    links do not count."""

    def __init__(
        self, links: Links, cfg: GuidedAlignmentConfig, prefixes: tuple[int, int] = (0, 0)
    ) -> None:
        self.links, self.cfg, self.prefixes = links, cfg, prefixes

    @property
    def layer(self) -> int:
        return self.cfg.layer

    def targets(self, batch: Batch) -> Tensor:
        """(B, T, S) on the batch's device: each target position's links to source positions,
        each row summing to 1 or (no link: a position the loss leaves out) 0."""
        src_len, tgt_len = batch.src.size(1), batch.tgt_out.size(1)
        index = np.asarray(batch.index, dtype=np.int64)
        first, last = self.links.offsets[index], self.links.offsets[index + 1]
        counts = last - first
        rows = np.repeat(np.arange(len(index)), counts)
        at = np.repeat(first - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        dense = torch.zeros(len(index), tgt_len, src_len)
        src_pre, tgt_pre = self.prefixes
        dense[
            torch.from_numpy(rows),
            torch.from_numpy(self.links.tgt[at].astype(np.int64) + tgt_pre),
            torch.from_numpy(self.links.src[at].astype(np.int64) + src_pre),
        ] = 1.0
        # the end of the target attends to the end of the source
        ends = (batch.tgt_out != PAD).sum(1).cpu() - 1  # (B,)
        dense[torch.arange(len(index)), ends, batch.src_lens.cpu() - 1] = 1.0
        dense /= dense.sum(-1, keepdim=True).clamp_min(1.0)
        return dense.to(batch.src.device)

    def loss(self, attention: Tensor | None, batch: Batch) -> Tensor:
        """weight x the summed cross-entropy of the links against `attention` (B, T, L, h, S):
        the model's (L = 1: its taught layer's alone) of one teacher-forced batch."""
        if attention is None:
            raise NMTError("the model returned no attention weights to guide")
        weights = attention[:, :, -1, self.cfg.head].float()  # (B, T, S)
        targets = self.targets(batch)
        return -self.cfg.weight * (targets * weights.clamp_min(EPS).log()).sum()


def _split(flat: np.ndarray, lens: np.ndarray, skip: int, drop_last: int) -> list[np.ndarray]:
    """Each example's ids from one flat array, less its first `skip` and last `drop_last`."""
    parts = np.split(flat, np.cumsum(lens)[:-1])
    return [p[skip : len(p) - drop_last] for p in parts]


def _moses(line: str) -> set[tuple[int, int]]:
    """Links written "i-j i-j ..." as a set of (i, j)."""
    return {(int(i), int(j)) for i, j in (link.split("-") for link in line.split())}
