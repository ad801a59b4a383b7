"""Parallel corpora: read a split from local files or the Hugging Face hub, as lists (the small
validation and test splits) or as a stream that is never held in memory whole (the training split,
which `nmt.data.tokenized` turns into memory-mapped Arrow), and encode pairs into ids.

Local files come as text pairs (`train.de` + `train.en`), TSV, JSONL, TMX (a translation
memory's units in the two languages, `nmt.data.tmx`) or XLIFF (its translated units). Every
problem with them is one NMTError that names the file, and the line where there is one: a
missing split, files of different line counts, a line that is not UTF-8, a TSV line without two
fields, a JSONL line that is not a record of both languages, a TMX or XLIFF file that is not XML
or has no unit in both languages.
"""

from __future__ import annotations

import codecs
import hashlib
import itertools
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from nmt.config import DataConfig, DataFormat, Split
from nmt.data.cache import CHUNK, digest
from nmt.data.tmx import Tally, describe, tmx_pairs, xliff_pairs
from nmt.errors import NMTError
from nmt.tokenizer import EOS, Vocabs, clean

BOM = b"\xef\xbb\xbf"  # a byte-order mark some editors put at the start of a UTF-8 file


@dataclass
class Corpus:
    """Raw, cleaned sentence pairs of one split, in file order."""

    src: list[str]
    tgt: list[str]

    def __len__(self) -> int:
        return len(self.src)


def read_lines(path: Path) -> list[str]:
    """The cleaned lines of a text file, one per '\\n' (a stray '\\r' adds none), blank ones kept
    (alignment matters); bytes that are not UTF-8 are replaced (files to translate or score)."""
    if not path.is_file():
        raise NMTError(f"data file not found: {path}")
    with open(path, encoding="utf-8-sig", errors="replace", newline="\n") as f:
        return [clean(line.rstrip("\n")) for line in f]


def _lines(path: Path) -> Iterator[str]:
    """The lines of a corpus file, strictly UTF-8: a bad byte is an NMTError naming its line."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            if number == 1:
                raw = raw.removeprefix(BOM)
            try:
                yield raw.rstrip(b"\n").decode("utf-8")
            except UnicodeDecodeError as err:
                raise NMTError(f"{path}: line {number} is not valid UTF-8 ({err.reason})") from None


def scan(path: Path) -> tuple[str, int]:
    """(sha256, line count) of a corpus file in one pass, checking it is UTF-8 on the way."""
    if not path.is_file():
        raise NMTError(f"data file not found: {path}")
    sha, lines, last = hashlib.sha256(), 0, b"\n"
    decoder = codecs.getincrementaldecoder("utf-8")()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            sha.update(block)
            lines += block.count(b"\n")
            last = block[-1:]
            try:
                decoder.decode(block)
            except UnicodeDecodeError:
                list(_lines(path))  # finds the line and raises
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        list(_lines(path))
    return sha.hexdigest(), lines + (last != b"\n")


def _detect_format(directory: Path, stem: str, cfg: DataConfig) -> DataFormat:
    if cfg.format != DataFormat.auto:
        return cfg.format
    if (directory / f"{stem}.{cfg.src_lang}").is_file():
        return DataFormat.text
    for fmt in (DataFormat.tsv, DataFormat.jsonl, DataFormat.tmx, DataFormat.xliff):
        if (directory / f"{stem}.{fmt.value}").is_file():
            return fmt
    raise NMTError(
        f"no data for split {stem!r} in {directory}: expected {stem}.{cfg.src_lang} + "
        f"{stem}.{cfg.tgt_lang}, {stem}.tsv, {stem}.jsonl, {stem}.tmx or {stem}.xliff"
    )


def local_files(cfg: DataConfig, split: Split) -> tuple[DataFormat, list[Path]]:
    """The format and files of a local split (one file, or source and target for text)."""
    directory = Path(cfg.local_dir)
    if not directory.is_dir():
        hint = " (make it with: python -m nmt.demo --out data/demo)" if cfg.name == "demo" else ""
        raise NMTError(f"data.local_dir not found: {directory.resolve()}{hint}")
    stem = getattr(cfg.local_splits, split.value)
    fmt = _detect_format(directory, stem, cfg)
    if fmt == DataFormat.text:
        return fmt, [directory / f"{stem}.{cfg.src_lang}", directory / f"{stem}.{cfg.tgt_lang}"]
    return fmt, [directory / f"{stem}.{fmt.value}"]


def raw_pairs(fmt: DataFormat, files: list[Path], cfg: DataConfig) -> Iterator[tuple[str, str]]:
    """The (source, target) lines of local files as read, not yet cleaned; a stream."""
    match fmt:
        case DataFormat.text:
            src_path, tgt_path = files
            src, tgt = _lines(src_path), _lines(tgt_path)
            count = 0
            for s, t in itertools.zip_longest(src, tgt):
                if s is None or t is None:  # one side ended: count the rest of the other
                    n_src = count + (s is not None) + sum(1 for _ in src)
                    n_tgt = count + (t is not None) + sum(1 for _ in tgt)
                    raise NMTError(
                        f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}: the two "
                        "sides of a corpus must be line-aligned"
                    )
                count += 1  # noqa: SIM113 - also counts after the loop
                yield s, t
        case DataFormat.tsv:
            for number, line in enumerate(_lines(files[0]), 1):
                if not line.strip():
                    continue
                fields = line.split("\t")
                if len(fields) != 2:
                    raise NMTError(
                        f"{files[0]}: line {number} does not have exactly 2 tab-separated fields"
                    )
                yield fields[0], fields[1]
        case DataFormat.jsonl:
            for number, line in enumerate(_lines(files[0]), 1):
                if not line.strip():
                    continue
                try:
                    yield pair_from_record(json.loads(line), cfg)
                except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
                    raise NMTError(f"{files[0]}: line {number}: {err!r}") from err
        case DataFormat.tmx:
            yield from tmx_pairs(files[0], cfg.src_lang, cfg.tgt_lang)
        case DataFormat.xliff:
            yield from xliff_pairs(files[0], cfg.src_lang, cfg.tgt_lang)
        case _:
            raise AssertionError(f"unknown format {fmt}")


def pair_from_record(record: dict, cfg: DataConfig) -> tuple[str, str]:
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


def load_hub_split(cfg: DataConfig, split: Split):  # noqa: ANN201 - a datasets.Dataset
    """The split as the hub's Arrow dataset (cached by `datasets`), its fields checked."""
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
    nested = "translation" in ds.column_names and cfg.src_lang not in ds.column_names
    if not nested and {cfg.src_lang, cfg.tgt_lang} - set(ds.column_names):
        raise NMTError(
            f"dataset {cfg.hub_id!r} has no field {cfg.src_lang!r} or {cfg.tgt_lang!r} "
            f"(columns: {ds.column_names})"
        )
    return ds


def _read_hub(cfg: DataConfig, split: Split) -> Corpus:
    ds = load_hub_split(cfg, split)
    pairs = [pair_from_record(row, cfg) for row in ds]
    return Corpus([clean(s) for s, _ in pairs], [clean(t) for _, t in pairs])


def read_split(cfg: DataConfig, split: Split) -> Corpus:
    """The cleaned pairs of one split, from local files if `local_dir` is set, else the hub, as
    lists: for the validation and test splits (the training split is read by
    `nmt.data.tokenized`)."""
    if not cfg.local_dir:
        return _read_hub(cfg, split)
    fmt, files = local_files(cfg, split)
    for path in files:
        if not path.is_file():
            raise NMTError(f"data file not found: {path}")
    pairs = list(raw_pairs(fmt, files, cfg))
    return Corpus([clean(s) for s, _ in pairs], [clean(t) for _, t in pairs])


def split_digest(cfg: DataConfig, split: Split) -> tuple[str, int]:
    """(digest of what a split is read from, number of pairs), checked before any work.

    Local files: their contents (line counts compared, UTF-8 checked), the format and the
    languages; the split's name (`data.local_splits`) only chooses the files, so it is in the
    digest through their contents. The hub: the dataset, its config, the split's spec as given
    to `load_dataset` (`data.hub_splits`: "train[:10%]" reads the same cache files as "train"),
    the languages (which columns are the source), the columns, and the cache files by the
    directory `datasets` names by a hash of the data it was built from, name and size."""
    if cfg.local_dir:
        fmt, files = local_files(cfg, split)
        if fmt in (DataFormat.tmx, DataFormat.xliff):
            return _tmx_digest(files[0], cfg, fmt)
        scanned = [scan(path) for path in files]
        if fmt == DataFormat.text and scanned[0][1] != scanned[1][1]:
            raise NMTError(
                f"{files[0]} has {scanned[0][1]} lines but {files[1]} has {scanned[1][1]}: "
                "the two sides of a corpus must be line-aligned"
            )
        parts = [fmt.value, cfg.src_lang, cfg.tgt_lang, [sha for sha, _ in scanned]]
        return digest(*parts), scanned[0][1]
    ds = load_hub_split(cfg, split)
    spec = getattr(cfg.hub_splits, split.value)
    files = [_cache_file(Path(f["filename"])) for f in ds.cache_files]
    parts = [cfg.hub_id, cfg.hub_config, split.value, spec, cfg.src_lang, cfg.tgt_lang]
    return digest(*parts, files, ds.column_names), len(ds)


def _tmx_digest(path: Path, cfg: DataConfig, fmt: DataFormat = DataFormat.tmx) -> tuple[str, int]:
    """(digest, pairs) of a TMX split: its bytes (a TMX may be UTF-16, so not `scan`'s lines) and
    its pairs counted by reading it; one with none in both languages is an NMTError naming them."""
    if not path.is_file():
        raise NMTError(f"data file not found: {path}")
    tally = Tally()
    read = tmx_pairs if fmt == DataFormat.tmx else xliff_pairs
    for _ in read(path, cfg.src_lang, cfg.tgt_lang, tally):
        pass
    if tally.pairs == 0:
        raise NMTError(
            f"{path}: no unit with both {cfg.src_lang} and {cfg.tgt_lang} ({tally.units} units; "
            f"languages: {describe(tally)})"
        )
    with open(path, "rb") as f:
        sha = hashlib.file_digest(f, "sha256").hexdigest()
    return digest(fmt.value, cfg.src_lang, cfg.tgt_lang, [sha]), tally.pairs


def _cache_file(path: Path) -> tuple[str, str, int]:
    """A hub cache file as (its directory, name, size): `datasets` names the directory by a hash
    of the data files it was built from, so an edited dataset of the same size is another entry;
    the path above it (the user's cache root) does not matter."""
    return path.parent.name, path.name, os.path.getsize(path)


@dataclass
class Encoded:
    """Token ids of a corpus; sources end with EOS, targets carry neither BOS nor EOS. For a
    model with language codes each target starts with its language's code, which translation
    forces: `forced` says how many pieces that is (`nmt.data.languages`)."""

    src: list[list[int]]
    tgt: list[list[int]]
    forced: int = 0

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


class SplitText:
    """One side (0 source, 1 target) of a split as cleaned lines, read afresh from the files or
    the hub dataset each time it is iterated: a text that can be walked twice (to count, then to
    sample) without being held in memory."""

    def __init__(self, cfg: DataConfig, split: Split, side: int) -> None:
        self.cfg, self.split, self.side = cfg, split, side

    def __iter__(self) -> Iterator[str]:
        cfg = self.cfg
        if cfg.local_dir:
            fmt, files = local_files(cfg, self.split)
            if fmt == DataFormat.text:  # this side's file alone (`split_digest` aligned them)
                yield from (clean(line) for line in _lines(files[self.side]))
                return
            for pair in raw_pairs(fmt, files, cfg):
                yield clean(pair[self.side])
            return
        ds = load_hub_split(cfg, self.split)
        nested = "translation" in ds.column_names and cfg.src_lang not in ds.column_names
        lang = (cfg.src_lang, cfg.tgt_lang)[self.side]
        for batch in ds.iter(batch_size=1000):
            if nested:
                texts = (pair_from_record(r, cfg)[self.side] for r in batch["translation"])
            else:
                texts = batch[lang]
            for text in texts:
                yield clean(text or "")
