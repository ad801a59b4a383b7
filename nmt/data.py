"""Parallel data: read a split (hub or local files), encode it, and cut it into padded batches.

Batching is by token count with length bucketing: sentences of similar length share a batch, so
little compute is spent on padding. The order is a pure function of (seed, epoch), which is what
makes a resumed run see exactly the batches the uninterrupted run would have seen.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch

from nmt.config import DataConfig, DataFormat, Split
from nmt.errors import NMTError
from nmt.inputs import clean
from nmt.tokenizer import BOS, EOS, PAD, Vocabs


@dataclass
class Corpus:
    """Raw, cleaned sentence pairs of one split, in file order."""

    src: list[str]
    tgt: list[str]

    def __len__(self) -> int:
        return len(self.src)


def _raw_lines(path: Path) -> list[str]:
    """Lines of a UTF-8 text file, split on '\\n' only (a stray '\\r' must not add a line)."""
    if not path.is_file():
        raise NMTError(f"data file not found: {path}")
    with open(path, encoding="utf-8-sig", errors="replace", newline="\n") as f:
        return [line.rstrip("\n") for line in f]


def read_lines(path: Path) -> list[str]:
    """The cleaned lines of a text file, one per '\\n', blank ones kept (alignment matters)."""
    return [clean(line) for line in _raw_lines(path)]


def _detect_format(directory: Path, stem: str, cfg: DataConfig) -> DataFormat:
    if cfg.format != DataFormat.auto:
        return cfg.format
    if (directory / f"{stem}.{cfg.src_lang}").is_file():
        return DataFormat.text
    for fmt in (DataFormat.tsv, DataFormat.jsonl):
        if (directory / f"{stem}.{fmt.value}").is_file():
            return fmt
    raise NMTError(
        f"no data for split {stem!r} in {directory}: expected {stem}.{cfg.src_lang} + "
        f"{stem}.{cfg.tgt_lang}, {stem}.tsv or {stem}.jsonl"
    )


def _read_local(cfg: DataConfig, split: Split) -> Corpus:
    directory = Path(cfg.local_dir)
    if not directory.is_dir():
        hint = " (make it with: python -m nmt.demo --out data/demo)" if cfg.name == "demo" else ""
        raise NMTError(f"data.local_dir not found: {directory.resolve()}{hint}")
    stem = getattr(cfg.local_splits, split.value)
    match _detect_format(directory, stem, cfg):
        case DataFormat.text:
            src = read_lines(directory / f"{stem}.{cfg.src_lang}")
            tgt = read_lines(directory / f"{stem}.{cfg.tgt_lang}")
            if len(src) != len(tgt):
                raise NMTError(
                    f"{directory}/{stem}: {len(src)} {cfg.src_lang} lines but "
                    f"{len(tgt)} {cfg.tgt_lang} lines"
                )
            return Corpus(src, tgt)
        case DataFormat.tsv:
            path = directory / f"{stem}.tsv"
            rows = [line.split("\t") for line in _raw_lines(path) if line.strip()]
            if bad := [i + 1 for i, row in enumerate(rows) if len(row) != 2]:
                raise NMTError(
                    f"{path}: line {bad[0]} does not have exactly 2 tab-separated fields"
                )
            return Corpus([clean(r[0]) for r in rows], [clean(r[1]) for r in rows])
        case DataFormat.jsonl:
            path = directory / f"{stem}.jsonl"
            pairs = []
            for i, line in enumerate(x for x in _raw_lines(path) if x.strip()):
                try:
                    obj = json.loads(line)
                    pairs.append(_pair_from_record(obj, cfg))
                except (json.JSONDecodeError, KeyError, TypeError) as err:
                    raise NMTError(f"{path}: line {i + 1}: {err}") from err
            return Corpus([clean(s) for s, _ in pairs], [clean(t) for _, t in pairs])
    raise AssertionError("unreachable")


def _pair_from_record(record: dict, cfg: DataConfig) -> tuple[str, str]:
    """A pair from a flat record ({"de": .., "en": ..}) or a WMT-style {"translation": {...}}."""
    if "translation" in record and cfg.src_lang not in record:
        record = record["translation"]
    src, tgt = record[cfg.src_lang], record[cfg.tgt_lang]
    return ("" if src is None else str(src)), ("" if tgt is None else str(tgt))


def _check_hub_reachable(hub_id: str) -> None:
    """Fail at once when the hub's host does not resolve, instead of after ~30 s of retries.

    Skipped for local dataset directories and when HF_HUB_OFFLINE is set (a cached copy is used).
    """
    if Path(hub_id).exists() or os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        return
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or ""
    try:
        socket.getaddrinfo(host, 443)
    except OSError as err:
        raise NMTError(
            f"cannot reach {host} to load dataset {hub_id!r} (offline?); use data.local_dir=DIR "
            "with plain files, or HF_HUB_OFFLINE=1 to use a cached copy"
        ) from err


def _read_hub(cfg: DataConfig, split: Split) -> Corpus:
    import datasets  # heavy import; only the hub path needs it

    _check_hub_reachable(cfg.hub_id)
    name = getattr(cfg.hub_splits, split.value)
    try:
        ds = datasets.load_dataset(cfg.hub_id, cfg.hub_config, split=name)
    except Exception as err:  # datasets raises many types (network, missing split, bad file)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise NMTError(
            f"cannot load dataset {cfg.hub_id!r} split {name!r} ({first}); offline? "
            f"use data.local_dir=DIR with plain files instead"
        ) from err
    try:
        pairs = [_pair_from_record(row, cfg) for row in ds]
    except KeyError as err:
        raise NMTError(
            f"dataset {cfg.hub_id!r} has no field {err} (columns: {ds.column_names})"
        ) from err
    return Corpus([clean(s) for s, _ in pairs], [clean(t) for _, t in pairs])


def read_split(cfg: DataConfig, split: Split) -> Corpus:
    """The cleaned pairs of one split, from local files if `local_dir` is set, else the hub."""
    return _read_local(cfg, split) if cfg.local_dir else _read_hub(cfg, split)


@dataclass
class Encoded:
    """Token ids of a corpus; sources end with EOS, targets carry neither BOS nor EOS."""

    src: list[list[int]]
    tgt: list[list[int]]

    def __len__(self) -> int:
        return len(self.src)


def encode(corpus: Corpus, vocabs: Vocabs) -> Encoded:
    src = [ids + [EOS] for ids in vocabs.src.encode(corpus.src)]
    tgt = vocabs.tgt.encode(corpus.tgt)
    return Encoded(src, tgt)


def filter_length(data: Encoded, max_len: int) -> Encoded:
    """Drop pairs with an empty side or a side longer than `max_len` pieces."""
    keep = [
        i
        for i, (s, t) in enumerate(zip(data.src, data.tgt))
        if 1 < len(s) <= max_len + 1 and 0 < len(t) <= max_len
    ]
    return Encoded([data.src[i] for i in keep], [data.tgt[i] for i in keep])


def token_batches(
    src_lens: list[int],
    tgt_lens: list[int],
    batch_tokens: int,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """Group example indices into batches of at most `batch_tokens` padded tokens.

    Examples are sorted by target length, then source length (bucketing), so each batch's padding
    is small. Target first: the decoder is where the time goes (the recurrent decoder steps over
    every padded position and the output layer is the largest matmul), while the packed recurrent
    encoder skips source padding. On Multi30k at 2,048 tokens, 99.8% of the target positions are
    real tokens this way against 91.9% sorted by source first. With a generator,
    ties are broken at random and the batch order is shuffled; without one, the order is fixed.
    A batch costs rows * longest side (+1 for BOS/EOS); a single over-long example still gets
    a batch of its own.
    """
    n = len(src_lens)
    order = torch.randperm(n, generator=generator).tolist() if generator else list(range(n))
    order.sort(key=lambda i: (tgt_lens[i], src_lens[i]))  # stable: ties keep the random order
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        size = max(src_lens[i], tgt_lens[i] + 1)
        if current and (len(current) + 1) * max(longest, size) > batch_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, size)
    if current:
        batches.append(current)
    if generator is not None:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator)]
    return batches


def epoch_batches(
    data: Encoded, batch_tokens: int, seed: int, epoch: int, world: int = 1
) -> list[list[int]]:
    """The training batches of one epoch: a pure function of (data, seed, epoch). For `world`
    processes the list is cut to a multiple of `world` (at most world - 1 batches of an epoch are
    left out, different ones each epoch since the order is shuffled), so that dealing batch i to
    process i % world gives every process the same number of batches."""
    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    batches = token_batches(
        [len(s) for s in data.src], [len(t) for t in data.tgt], batch_tokens, generator
    )
    if len(batches) < world:
        raise NMTError(
            f"an epoch has {len(batches)} batches for {world} processes: lower "
            "train.batch_tokens or use fewer processes"
        )
    return batches[: len(batches) - len(batches) % world]


@dataclass
class Batch:
    """A padded batch. Shapes: src (B, S), src_lens (B,) on CPU, tgt_in / tgt_out (B, T).

    `src_lens` stays on the CPU (sequence packing wants it there, and search reads it as Python
    numbers); `n_tgt_tokens` is counted here, before any copy, so that nobody waits on the device
    to learn how many tokens a batch has.
    """

    src: torch.Tensor
    src_lens: torch.Tensor
    tgt_in: torch.Tensor | None  # BOS y_1 .. y_n
    tgt_out: torch.Tensor | None  # y_1 .. y_n EOS
    index: list[int]  # positions of the rows in the corpus, to restore the original order
    n_tgt_tokens: int = 0  # target tokens, EOS included (what the loss is normalised by)

    def to(self, device: torch.device) -> Batch:
        """The batch on `device`; host memory is page-locked first so the copies are async."""
        cuda = device.type == "cuda"

        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            if t is None:
                return None
            return (t.pin_memory() if cuda else t).to(device, non_blocking=cuda)

        return Batch(
            move(self.src), self.src_lens, move(self.tgt_in), move(self.tgt_out), self.index,
            self.n_tgt_tokens,
        )  # fmt: skip


def pad(seqs: list[list[int]]) -> torch.Tensor:
    out = torch.full((len(seqs), max(len(s) for s in seqs)), PAD, dtype=torch.long)
    for row, seq in enumerate(seqs):
        out[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    return out


def collate(index: list[int], src: list[list[int]], tgt: list[list[int]] | None) -> Batch:
    rows = [src[i] for i in index]
    lens = torch.tensor([len(r) for r in rows], dtype=torch.long)
    if tgt is None:
        return Batch(pad(rows), lens, None, None, index)
    targets = [tgt[i] for i in index]
    tgt_in = pad([[BOS] + t for t in targets])
    tgt_out = pad([t + [EOS] for t in targets])
    return Batch(pad(rows), lens, tgt_in, tgt_out, index, sum(len(t) + 1 for t in targets))
