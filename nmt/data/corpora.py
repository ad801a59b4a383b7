"""Several corpora or language pairs trained as one (`data.corpora`): a multilingual model, a small
in-domain corpus mixed with a big general one, tagged back-translated data.

Each entry is a corpus of its own, read and tokenized into its own cache entry as a single corpus
is (`nmt.data.tokenized`); `MixedCorpus` puts them together behind the interface the trainer reads
(`lengths(epoch)`, `batch(index, epoch)`, `target_tokens(batches, epoch)`), so batching, sharding
under torchrun and exact resume work on it unchanged.

Mixing. An epoch holds as many pairs as all corpora together (N = sum of n_i, the pairs each
keeps within data.max_len). Corpus i gets round(N * p_i) of them (largest remainders), with

    p_i = w_i * (n_i / N)^(1 / T) / sum_j w_j * (n_j / N)^(1 / T)

w_i its `weight`, T `data.temperature` (as multilingual NMT samples languages: T = 1 keeps the
sizes' shares, T -> infinity makes them equal). A corpus given fewer pairs than it holds gives a
random subset each epoch; one given more repeats all of its pairs as often as they fit, then a
random subset: copy k of a pair is another example to subword sampling (its draw is keyed by the
copy), so repeats are segmented differently. Which pairs an epoch holds is a pure function of
(seed, epoch), like the batches planned from their lengths. Memory: 8 bytes a pair of the epoch
(which corpus, pair and copy) besides the lengths.

Tags. A tag is a reserved piece of the tokenizer (sentencepiece `user_defined_symbols`, one piece,
never split, held by no text: `nmt.tokenizer`). It is put before the source as an id, after any
subword sampling of the pair, so sampling never touches it: the target tag first (Johnson et al.
2017, "<2fr> ..."), then the source tag. Translation inserts the target tag for `tgt_lang`
(`nmt.translation.Translator`); the config stored with every checkpoint says which tags exist and
which language each asks for (`DataConfig.target_tags`).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from nmt.config import CorpusConfig, DataConfig, Split
from nmt.data.batches import Batch, EpochSampling, pad_flat, prepend
from nmt.data.languages import code_prefixes
from nmt.data.splits import Corpus, Encoded, SplitText, encode, read_split, split_digest
from nmt.data.tokenized import TokenizedCorpus
from nmt.errors import NMTError
from nmt.tokenizer import BOS, EOS, UNK, Vocab, Vocabs

log = logging.getLogger(__name__)

LENGTHS_CHUNK = 4096  # pairs whose n-best lists are read at a time to plan a sampled epoch


def corpus_data(cfg: DataConfig, corpus: CorpusConfig) -> DataConfig:
    """The data config of one entry: its own keys, `cfg`'s where it leaves one null (its files:
    both local_dir and hub_id, unless it names one of them)."""
    src, tgt = cfg.languages(corpus)
    own_files = corpus.local_dir is not None or corpus.hub_id is not None
    return dataclasses.replace(
        cfg, name=corpus.name or f"{src}-{tgt}", src_lang=src, tgt_lang=tgt,
        local_dir=corpus.local_dir if own_files else cfg.local_dir,
        hub_id=corpus.hub_id if own_files else cfg.hub_id,
        hub_config=corpus.hub_config if own_files else cfg.hub_config,
        format=corpus.format or cfg.format,
        local_splits=corpus.local_splits or cfg.local_splits,
        hub_splits=corpus.hub_splits or cfg.hub_splits,
        corpora=[],
    )  # fmt: skip


def tag_symbols(cfg: DataConfig) -> list[str]:
    """Every tag of the corpora, target tags first, each once: the tokenizer's reserved pieces."""
    tags = [c.tgt_tag for c in cfg.corpora] + [c.src_tag for c in cfg.corpora]
    return list(dict.fromkeys(t for t in tags if t is not None))


def directions(cfg: DataConfig) -> dict[str, tuple[DataConfig, CorpusConfig | None]]:
    """ "src-tgt" -> (the data config that reads its splits, its entry): the first entry with those
    languages, or the run's own data without corpora."""
    if not cfg.corpora:
        return {f"{cfg.src_lang}-{cfg.tgt_lang}": (cfg, None)}
    out: dict[str, tuple[DataConfig, CorpusConfig | None]] = {}
    for corpus in cfg.corpora:
        out.setdefault(cfg.direction(corpus), (corpus_data(cfg, corpus), corpus))
    return out


def check_tags(vocab: Vocab, tags: list[str]) -> dict[str, int]:
    """tag -> its id in the source vocabulary, each a piece of its own, or an NMTError."""
    ids = {}
    for tag in tags:
        i = vocab.piece_to_id(tag)
        if i == UNK or vocab.id_to_piece([i]) != [tag]:
            raise NMTError(
                f"the tokenizer ({vocab.path}) has no piece {tag!r} for the tag of "
                "data.corpora: a tokenizer trained on these corpora reserves it; one from "
                "train.init_from or an older run does not (start a new run without init_from)"
            )
        ids[tag] = i
    return ids


def source_prefix(corpus: CorpusConfig, ids: dict[str, int]) -> list[int]:
    """The ids put before each source of `corpus`: its target tag, then its source tag."""
    return [ids[t] for t in (corpus.tgt_tag, corpus.src_tag) if t is not None]


def mix_counts(sizes: np.ndarray, weights: list[float], temperature: float) -> np.ndarray:
    """Pairs of each corpus in an epoch of sum(sizes) pairs (see the module's notes)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(sizes.sum())
    share = np.zeros(len(sizes))
    has = sizes > 0
    share[has] = (sizes[has] / total) ** (1.0 / temperature) * np.asarray(weights)[has]
    if not share.sum() > 0:
        raise NMTError(
            f"data.corpora: the corpora with a positive weight keep no pair (sizes {sizes.tolist()}"
            f", weights {weights}): raise data.max_len or a weight"
        )
    exact = share / share.sum() * total
    counts = np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[: total - int(counts.sum())]] += 1
    return counts


class CorporaText:
    """One side (0 source, 1 target) of the training split of every corpus, one after the other,
    each text read once however many entries share it: what the tokenizer is trained on."""

    def __init__(self, cfg: DataConfig, side: int) -> None:
        texts = {}
        for corpus in cfg.corpora:
            data = corpus_data(cfg, corpus)
            lang = (data.src_lang, data.tgt_lang)[side]
            key = (data.local_dir, data.hub_id, data.hub_config, data.format, lang,
                   data.local_splits.train, data.hub_splits.train)  # fmt: skip
            texts.setdefault(key, SplitText(data, Split.train, side))
        self.texts = list(texts.values())

    def __iter__(self) -> Iterator[str]:
        return itertools.chain.from_iterable(self.texts)


def train_digests(cfg: DataConfig) -> list[tuple[str, int]]:
    """(digest, pairs) of each corpus's training split, checked before any work as
    `nmt.data.splits.split_digest` checks one."""
    return [split_digest(corpus_data(cfg, c), Split.train) for c in cfg.corpora]


def valid_splits(cfg: DataConfig) -> list[tuple[str, CorpusConfig, Corpus]]:
    """The validation split of every corpus, each once (read before any work: small), with its
    direction ("de-en")."""
    seen, out = set(), []
    for corpus in cfg.corpora:
        data = corpus_data(cfg, corpus)
        key = (repr(dataclasses.replace(data, name="")), corpus.tgt_tag, corpus.src_tag)
        if key not in seen:
            seen.add(key)
            out.append((cfg.direction(corpus), corpus, read_split(data, Split.valid)))
    return out


def encode_valid(
    splits: list[tuple[str, CorpusConfig, Corpus]],
    vocabs: Vocabs,
    ids: dict[str, int],
    cfg: DataConfig,
) -> tuple[Encoded, list[str], dict[str, range]]:
    """The validation splits as one, tags (and language codes) before the sources, codes before
    the targets, and the references: validation scores the mixture of directions. Also, per
    direction, the rows of its first split: the split nmt-evaluate scores that direction on
    (`directions`), which validation scores alone."""
    src, tgt, refs, rows, forced = [], [], [], {}, 0
    for direction, corpus, raw in splits:
        codes = code_prefixes(cfg, *cfg.languages(corpus), vocabs.src)
        forced = len(codes[1])  # the same for every corpus: codes for all, or for none
        prefix = source_prefix(corpus, ids) + codes[0]
        encoded = encode(raw, vocabs)
        rows.setdefault(direction, range(len(src), len(src) + len(encoded)))
        src += [prefix + s for s in encoded.src]
        tgt += [codes[1] + t for t in encoded.tgt]
        refs += raw.tgt
    return Encoded(src, tgt, forced), refs, rows


class MixedCorpus:
    """The training pairs of several tokenized corpora as one (see the module's notes). Example
    i of an epoch is the i-th pair that epoch's mix holds; `epoch=None` means every pair once, in
    corpus order (what `len` counts and the lexicon reads). Sources carry their corpus's tags."""

    def __init__(
        self,
        parts: list[TokenizedCorpus],
        prefixes: list[list[int]],
        weights: list[float],
        temperature: float,
        seed: int,
        sampling: EpochSampling | None,
        path: Path,
        tgt_prefixes: list[list[int]] | None = None,
    ) -> None:
        """`prefixes`: per corpus, the ids before each of its sources (its tags, its source
        language's code); `tgt_prefixes`, before each of its targets (its target language's
        code, for a model with language codes: `nmt.data.languages`)."""
        self.parts, self.sampling, self.path, self.seed = parts, sampling, path, seed
        self.prefixes = [np.asarray(p, dtype=np.int64) for p in prefixes]
        targets = tgt_prefixes or [[]] * len(parts)
        self.tgt_prefixes = [np.asarray(p, dtype=np.int64) for p in targets]
        for part in parts if sampling is not None else []:
            if not part.has_nbest:
                raise NMTError(f"{part.path} holds no n-best segmentations to sample from")
        self.sizes = np.array([len(p) for p in parts], dtype=np.int64)
        self.total = int(self.sizes.sum())
        self.offsets = np.cumsum(self.sizes) - self.sizes  # first example of each corpus
        self.counts = mix_counts(self.sizes, weights, temperature)
        self._epoch: tuple[int | None, np.ndarray, np.ndarray, np.ndarray] | None = None
        log.info(
            "mixing %s: pairs kept %s, an epoch takes %s",
            ", ".join(str(p.path.name)[:8] for p in parts), self.sizes.tolist(),
            self.counts.tolist(),
        )  # fmt: skip

    def __len__(self) -> int:
        return self.total

    def plan(self, epoch: int | None) -> np.ndarray:
        """The examples of `epoch` as keys: copy * N + (the pair's place among all corpora's)."""
        if epoch is None:
            return np.arange(self.total, dtype=np.int64)
        out = []
        for c, (n, m) in enumerate(zip(self.sizes.tolist(), self.counts.tolist())):
            if m == 0:
                continue
            copies, rest = divmod(m, n)
            local = [np.tile(np.arange(n, dtype=np.int64), copies)]
            copy = [np.repeat(np.arange(copies, dtype=np.int64), n)]
            if rest:  # a random subset, drawn from (seed, epoch, corpus) alone
                rng = np.random.default_rng([self.seed % 2**63, epoch, c])
                local.append(np.sort(rng.choice(n, size=rest, replace=False)).astype(np.int64))
                copy.append(np.full(rest, copies, dtype=np.int64))
            out.append(np.concatenate(copy) * self.total + self.offsets[c] + np.concatenate(local))
        return np.concatenate(out)

    def _where(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(corpus, pair within it) of each example key."""
        flat = keys % self.total
        corpus = np.searchsorted(self.offsets, flat, side="right") - 1
        return corpus, flat - self.offsets[corpus]

    def _state(self, epoch: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(keys, source lengths, target lengths) of `epoch`'s examples, computed once per epoch."""
        if self._epoch is None or self._epoch[0] != epoch:
            self._epoch = None  # the last epoch's go first
            keys = self.plan(epoch)
            corpus, local = self._where(keys)
            src, tgt = np.empty(len(keys), np.int32), np.empty(len(keys), np.int32)
            for c, part in enumerate(self.parts):
                rows = np.flatnonzero(corpus == c)
                for first in range(0, len(rows), LENGTHS_CHUNK):
                    chunk = rows[first : first + LENGTHS_CHUNK]
                    index = local[chunk]
                    best = (part.src_lens[index], part.tgt_lens[index])
                    if self.sampling is not None and epoch is not None:
                        cands = part.candidates(index, self.sampling.sampled)
                        best = self.sampling.lengths(cands, best, keys[chunk], epoch)
                    src[chunk] = best[0].astype(np.int32) + len(self.prefixes[c])
                    tgt[chunk] = best[1].astype(np.int32) + len(self.tgt_prefixes[c])
            self._epoch = (epoch, keys, src, tgt)
        return self._epoch[1], self._epoch[2], self._epoch[3]

    def lengths(self, epoch: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(source, target) lengths of `epoch`'s examples, sources with their tags and EOS, in
        that epoch's segmentation under subword sampling: what the epoch is planned from."""
        _, src, tgt = self._state(epoch)
        return src, tgt

    def target_tokens(self, batches: list[list[int]], epoch: int | None = None) -> int:
        """Target tokens of these batches of `epoch`, EOS included (the loss's normaliser)."""
        index = np.concatenate([np.asarray(b, dtype=np.int64) for b in batches])
        return int(self.lengths(epoch)[1][index].sum()) + len(index)

    def _rows(self, keys: np.ndarray, epoch: int | None) -> tuple[np.ndarray, list[np.ndarray]]:
        """(the order of the rows, grouped by corpus; [source ids, lengths, target ids, lengths]
        flat in that order, with their prefixes) of the examples with `keys`."""
        corpus, local = self._where(keys)
        order = np.argsort(corpus, kind="stable")
        out: list[list[np.ndarray]] = [[], [], [], []]
        for c in np.unique(corpus).tolist():
            rows = order[corpus[order] == c]
            part, index = self.parts[c], local[rows]
            arrays = part.flat(index)
            if self.sampling is not None and epoch is not None:
                arrays = self.sampling.resegment(
                    arrays, part.candidates(index, self.sampling.sampled), keys[rows], epoch
                )
            src, src_lens = prepend(arrays[0], arrays[1], self.prefixes[c])
            tgt, tgt_lens = prepend(arrays[2], arrays[3], self.tgt_prefixes[c])
            for k, a in enumerate((src, src_lens, tgt, tgt_lens)):
                out[k].append(np.asarray(a, dtype=np.int64))
        return order, [np.concatenate(a) for a in out]

    def batch(self, index: list[int], epoch: int | None = None) -> Batch:
        """The padded batch of `epoch`'s examples `index`, read now; its rows grouped by corpus
        (`Batch.index` says which example each row is)."""
        keys = self._state(epoch)[0][np.asarray(index, dtype=np.int64)]
        order, (src, src_lens, tgt, tgt_lens) = self._rows(keys, epoch)
        tgt_in, tgt_out = pad_flat(tgt, tgt_lens, before=BOS), pad_flat(tgt, tgt_lens, after=EOS)
        tokens = int(tgt_lens.sum()) + len(index)
        rows = [index[k] for k in order.tolist()]
        lens = torch.from_numpy(src_lens)
        return Batch(pad_flat(src, src_lens), lens, tgt_in, tgt_out, rows, tokens)

    def flat(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(source ids, lengths, target ids, lengths) of pairs `index` in corpus order (every
        pair once, best segmentation, tagged sources; rows grouped by corpus): the lexicon's."""
        _, arrays = self._rows(np.asarray(index, dtype=np.int64), None)
        return arrays[0], arrays[1], arrays[2], arrays[3]

    def close(self) -> None:
        for part in self.parts:
            part.close()

    def __enter__(self) -> MixedCorpus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
