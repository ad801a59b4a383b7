"""The training split tokenized once into memory-mapped Arrow, so that the corpus's size costs disk,
not memory.

The first run on a corpus streams it into an Arrow table (Hugging Face `datasets`), tokenizes it
in `data.num_proc` processes (`Dataset.map`) into columns of token ids (uint16 where the
vocabulary fits, else int32) and their lengths, and moves the Arrow files `map` wrote (one per
process) into the cache
(`nmt.data.cache`), under a digest of the corpus (`nmt.data.splits.split_digest`), the tokenizer
files and the source of the code that encodes (ENCODING_CODE): a changed corpus, split, tokenizer or
encoding code is never read from a stale entry, and a run killed while tokenizing leaves only a
temporary directory that nothing reads. Every run then scans the entry's Arrow files once
(`TokenizedCorpus`, which its owner closes): the two length columns select the pairs within
`data.max_len` and plan the batches (`nmt.data.batches`), and a batch's rows are read from disk only
when it is trained on. An entry's files are plain Arrow IPC streams, `data-00000-of-0000N.arrow`
in row order (`datasets.Dataset.from_file` opens each). They are moved, not copied: a copy
(`save_to_disk`) would read the whole table through a memory map, whose pages count in the
process's resident memory (5.6 GB of them at 5M pairs with n-best lists).

Hub datasets take the same path: `datasets` already holds them as Arrow, and `map` reads them.

With subword regularization on (data.tokenizer.sample_alpha > 0), the entry also holds each
text's `sample_nbest` best segmentations (NBEST_COLUMNS; another entry, since the key holds the
n-best size): sentencepiece finds them once per corpus, in the tokenizing processes, and a
training batch draws one per pair and epoch as it is read (`nmt.data.batches.EpochSampling`), with
no sentencepiece call in training. They are read as the ids are, one pread per pair and side, so
memory stays flat (16 more bytes a pair: where each side's candidates lie, and how many ids).
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import sentencepiece as spm
import torch

from nmt import tokenizer
from nmt.config import DataConfig, Split
from nmt.data import splits as data_module
from nmt.data import tmx
from nmt.data.batches import Batch, Candidates, EpochSampling, pad_flat, prepend
from nmt.data.cache import building, code_digest, digest, file_digest
from nmt.data.splits import load_hub_split, local_files, pair_from_record, raw_pairs
from nmt.errors import NMTError
from nmt.tokenizer import BOS, EOS, Vocab, Vocabs, clean, load_vocabs

log = logging.getLogger(__name__)

DATA = "data"  # the directory of an entry's Arrow files
MIN_PAIRS_PER_PROCESS = 50_000  # fewer pairs than this per process tokenize faster in one
QUIET_BELOW = 100_000  # pairs under which tokenizing shows no progress bars
# per pair and side, its n best segmentations packed as [count, each one's length.., their ids..]
NBEST_COLUMNS = ("src_nbest", "tgt_nbest")
LENGTHS_CHUNK = 4096  # examples whose n-best lists are read at a time to plan a sampled epoch


def nbest_size(cfg: DataConfig) -> int:
    """Segmentations per text the entry holds for subword sampling; 0 when sampling is off."""
    tok = cfg.tokenizer
    return tok.sample_nbest if tok.sample_alpha > 0 else 0


class TokenizedCorpus:
    """The training pairs as token ids on disk; in memory only the lengths of the pairs kept
    (both sides non-empty and within `max_len` pieces), their row numbers, where each pair's ids
    start in its record batch, and where each record batch's id columns lie in the Arrow files.

    A batch reads each of its pairs' ids with one plain file read (pread) per side, at the byte
    offset of the row: Arrow keeps a column's ids in one buffer per record batch, and `datasets`
    writes its files uncompressed, so a row's ids are a contiguous range of the file. Reading
    whole record batches instead costs a thousand rows' decoding for each row a shuffled batch
    needs; reading through a memory map would make resident memory grow to the corpus's size on
    disk, since the random batches of training touch every page. Read this way it stays flat (the
    kernel's page cache keeps the file, shared and reclaimable).

    Sources end with EOS, targets carry neither BOS nor EOS, as in `nmt.data.splits.Encoded`;
    example i is the i-th pair kept. The entry holds the best segmentation; with `sampling` (subword
    regularization), a training batch of a given epoch is resegmented as it is read."""

    def __init__(
        self,
        path: Path,
        max_len: int,
        sampling: EpochSampling | None = None,
        prefixes: tuple[list[int], list[int]] = ([], []),
    ) -> None:
        """`prefixes`: the ids put before each source and each target (a model's language
        codes: `nmt.data.languages`), counted in `lengths`; `max_len` bounds the pairs without."""
        self.path, self.sampling = path, sampling
        self.prefixes = tuple(np.asarray(p, dtype=np.int64) for p in prefixes)
        self._epoch_lengths: tuple[int, np.ndarray, np.ndarray] | None = None
        files = sorted((path / DATA).glob("data-*.arrow"))  # save_to_disk's shards, in order
        if not files:
            raise NMTError(f"{path / DATA} holds no tokenized data: remove it to rebuild")
        self._fds: list[int] = []
        try:
            self._fds = [os.open(f, os.O_RDONLY) for f in files]
            self._scan(files, max_len)
            if sampling is not None and not self.has_nbest:
                raise NMTError(f"{path} holds no n-best segmentations to sample from")
        except BaseException:
            self.close()
            raise

    def _scan(self, files: list[Path], max_len: int) -> None:
        file_of, firsts, src_len, tgt_len = [], [], [], []
        # per record batch: the file offset of each list column's id buffer; per row: where its
        # ids start in that buffer (in ids), and for the n-best columns how many there are
        names = ("src", "tgt", *NBEST_COLUMNS)
        bases: dict[str, list[int]] = {name: [] for name in names}
        starts: dict[str, list[np.ndarray]] = {name: [] for name in names}
        sizes: dict[str, list[np.ndarray]] = {name: [] for name in NBEST_COLUMNS}
        dtypes: dict[str, np.dtype] = {}
        rows = 0
        for number, file in enumerate(files):
            for body_at, body, batch in _record_batches(file):
                file_of.append(number)
                firsts.append(rows)
                rows += batch.num_rows
                # copies: a view would keep the whole record batch in memory
                src_len.append(batch.column("src_len").to_numpy().astype(np.int32))
                tgt_len.append(batch.column("tgt_len").to_numpy().astype(np.int32))
                for name in names:
                    if name not in batch.schema.names:  # an entry without n-best lists
                        continue
                    column = batch.column(name)
                    base, offsets = _ids_layout(column, body, body_at, file)
                    bases[name].append(base)
                    starts[name].append(offsets[:-1].astype(np.int32))
                    if name in sizes:
                        sizes[name].append(np.diff(offsets).astype(np.int32))
                    dtypes[name] = np.dtype(column.type.value_type.to_pandas_dtype())
        self._file_of = np.array(file_of, dtype=np.int64)  # file of each record batch
        self._first = np.array(firsts, dtype=np.int64)  # first row of each record batch
        src, tgt = np.concatenate(src_len), np.concatenate(tgt_len)
        keep = (src > 1) & (src <= max_len + 1) & (tgt > 0) & (tgt <= max_len)
        # what stays in memory: 4 bytes a pair for the row, 2 + 2 for the lengths (int16 holds
        # any max_len a model trains on), 4 + 4 for where its ids start
        self.rows = np.flatnonzero(keep).astype(np.int32 if rows < 2**31 else np.int64)
        small = np.int16 if max_len < 2**15 - 1 else np.int32
        self.src_lens, self.tgt_lens = src[self.rows].astype(small), tgt[self.rows].astype(small)
        # with n-best lists, 4 + 4 more for where each side's start and 4 + 4 for their sizes
        present = [name for name in names if starts[name]]
        self._bases = {name: np.array(bases[name], dtype=np.int64) for name in present}
        self._starts = {name: np.concatenate(starts[name])[self.rows] for name in present}
        self._sizes = {name: np.concatenate(s)[self.rows] for name, s in sizes.items() if s}
        self._dtypes = dtypes
        self.has_nbest = all(name in present for name in NBEST_COLUMNS)
        # what `lengths` gives: the same arrays when there is no prefix
        self._lens = tuple(
            lens + len(p) if len(p) else lens
            for lens, p in zip((self.src_lens, self.tgt_lens), self.prefixes)
        )

    def __len__(self) -> int:
        return len(self.rows)

    def target_tokens(self, batches: list[list[int]], epoch: int | None = None) -> int:
        """Target tokens of these batches, EOS included, in `epoch`'s segmentation (see
        `lengths`): what the loss is normalised by. Every rank knows it without reading a row."""
        index = np.concatenate([np.asarray(b, dtype=np.int64) for b in batches])
        return int(self.lengths(epoch)[1][index].sum()) + len(index)

    def lengths(self, epoch: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(source, target) lengths of every example, sources with their EOS: the stored (best)
        segmentation's, or, given the training `epoch` of a corpus with `sampling`, that epoch's
        draws, which `batch(index, epoch)` will give (what an epoch is planned from). Computed
        once per epoch, reading every pair's n-best lists: 4 bytes a pair in memory."""
        if self.sampling is None or epoch is None:
            return self._lens[0], self._lens[1]
        if self._epoch_lengths is None or self._epoch_lengths[0] != epoch:
            self._epoch_lengths = None  # the last epoch's go first
            src, tgt = np.empty_like(self.src_lens), np.empty_like(self.tgt_lens)
            for first in range(0, len(self), LENGTHS_CHUNK):
                index = np.arange(first, min(first + LENGTHS_CHUNK, len(self)), dtype=np.int64)
                best = (self.src_lens[index], self.tgt_lens[index])
                drawn = self.sampling.lengths(
                    self.candidates(index, self.sampling.sampled), best, index, epoch
                )
                src[index] = drawn[0] + len(self.prefixes[0])
                tgt[index] = drawn[1] + len(self.prefixes[1])
            self._epoch_lengths = (epoch, src, tgt)
        return self._epoch_lengths[1], self._epoch_lengths[2]

    def batch(self, index: list[int], epoch: int | None = None) -> Batch:
        """The padded batch of examples `index`, read from disk now: in the best segmentation,
        or, given the training `epoch` of a corpus with `sampling`, in that epoch's sampled one.
        `n_tgt_tokens` counts the pieces the batch holds."""
        examples = np.asarray(index, dtype=np.int64)
        src, src_lens, tgt, tgt_lens = self._flat(examples)
        if self.sampling is not None and epoch is not None:
            arrays = (src, src_lens, tgt, tgt_lens)
            candidates = self.candidates(examples, self.sampling.sampled)
            src, src_lens, tgt, tgt_lens = self.sampling.resegment(
                arrays, candidates, examples, epoch
            )
        src, src_lens = prepend(src, src_lens, self.prefixes[0])
        tgt, tgt_lens = prepend(tgt, tgt_lens, self.prefixes[1])
        tgt_in, tgt_out = pad_flat(tgt, tgt_lens, before=BOS), pad_flat(tgt, tgt_lens, after=EOS)
        tokens = int(tgt_lens.sum()) + len(index)
        lens = torch.from_numpy(src_lens)
        return Batch(pad_flat(src, src_lens), lens, tgt_in, tgt_out, list(index), tokens)

    def flat(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(source ids, source lengths, target ids, target lengths) of examples `index`, in that
        order, each side one flat int64 array: what a batch is padded from and the lexicon learned
        from, with their prefixes. One pread per example and side."""
        src, src_lens, tgt, tgt_lens = self._flat(index)
        src, src_lens = prepend(src, src_lens, self.prefixes[0])
        tgt, tgt_lens = prepend(tgt, tgt_lens, self.prefixes[1])
        return src, src_lens, tgt, tgt_lens

    def _flat(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """`flat` without the prefixes: the ids as stored."""
        batch, fds = self._where(index)
        out = []
        for side, lens in (("src", self.src_lens), ("tgt", self.tgt_lens)):
            counts = lens[index].astype(np.int64)
            out += [self._read(side, index, batch, fds, counts), counts]
        return out[0], out[1], out[2], out[3]

    def candidates(
        self, index: np.ndarray, sides: tuple[bool, bool] = (True, True)
    ) -> tuple[Candidates, Candidates]:
        """Per side, the n best segmentations of examples `index` (an entry built with subword
        sampling on): (count per example, length of each, their ids flat), without EOS. One
        pread per example and side; a side not in `sides` is not read (no candidates)."""
        batch, fds = self._where(index)
        out = []
        for name, wanted in zip(NBEST_COLUMNS, sides):
            if not wanted:
                none = np.zeros(0, dtype=np.int64)
                out.append((np.zeros(len(index), dtype=np.int64), none, none))
                continue
            sizes = self._sizes[name][index].astype(np.int64)
            out.append(_unpack(self._read(name, index, batch, fds, sizes), sizes))
        return out[0], out[1]

    def _where(self, index: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """The record batch of each of examples `index`, and the file it is in."""
        rows = self.rows[index].astype(np.int64)
        batch = np.searchsorted(self._first, rows, side="right") - 1
        return batch, [self._fds[number] for number in self._file_of[batch].tolist()]

    def _read(
        self, name: str, index: np.ndarray, batch: np.ndarray, fds: list[int], counts: np.ndarray
    ) -> np.ndarray:
        """The `counts` ids of each of examples `index` in list column `name`, flat, as int64."""
        dtype = self._dtypes[name]
        at = (self._bases[name][batch] + dtype.itemsize * self._starts[name][index]).tolist()
        sizes = (counts * dtype.itemsize).tolist()
        ids = b"".join([os.pread(fd, n, offset) for fd, n, offset in zip(fds, sizes, at)])
        return np.frombuffer(ids, dtype=dtype).astype(np.int64)

    def close(self, _close: Callable[[int], None] = os.close) -> None:
        """Close the shard files (idempotent); the corpus reads nothing after. (`os.close` is
        bound at definition: a `__del__` at interpreter exit may find the module `os` gone.)"""
        fds, self._fds = getattr(self, "_fds", []), []
        for fd in fds:
            _close(fd)

    def __enter__(self) -> TokenizedCorpus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a safety net for an owner that forgot `close`, not the way
        self.close()


def _unpack(packed: np.ndarray, sizes: np.ndarray) -> Candidates:
    """Rows packed as `_pack` writes them, one after the other in `packed` (row i `sizes[i]`
    long) -> (count per row, length of each segmentation, their ids flat)."""
    starts = np.cumsum(sizes) - sizes
    counts = packed[starts]
    # each row's lengths follow its count: their positions, row after row
    heads = np.repeat(starts + 1 - (np.cumsum(counts) - counts), counts) + np.arange(counts.sum())
    ids = np.ones(len(packed), dtype=bool)
    ids[starts], ids[heads] = False, False
    return counts, packed[heads], packed[ids]


def _ids_layout(
    column: pa.ListArray, body: pa.Buffer, body_at: int, file: Path
) -> tuple[int, np.ndarray]:
    """(file offset of the ids buffer, the list offsets: row i's ids are [offsets[i],
    offsets[i + 1]) in it) of one id column of a record batch read from `file`, whose message
    body (`body`) starts at byte `body_at`."""
    ids = column.buffers()[3]  # list validity, list offsets, id validity, ids
    inside = body.address <= ids.address and ids.address + ids.size <= body.address + body.size
    if not inside or column.offset != 0 or column.values.offset != 0:
        raise NMTError(
            f"{file} is not the uncompressed Arrow stream nmt writes: remove "
            f"{file.parent.parent} to tokenize the corpus again"
        )
    return body_at + (ids.address - body.address), column.offsets.to_numpy().astype(np.int64)


def _record_batches(path: Path) -> Iterator[tuple[int, pa.Buffer, pa.RecordBatch]]:
    """(file offset of the message body, the body, the batch) of each record batch of an Arrow
    IPC stream file, read once in order with plain reads (a batch at a time in memory)."""
    with pa.OSFile(str(path)) as f:
        schema = pa.ipc.read_schema(pa.ipc.read_message(f))
        while True:
            try:
                message = pa.ipc.read_message(f)
            except EOFError:  # the stream's end marker
                return
            body = message.body
            yield f.tell() - body.size, body, pa.ipc.read_record_batch(message, schema)


def encoding_digest() -> str:
    """The digest of ENCODING_CODE's source (at the end of this module) and the sentencepiece
    version, computed once."""
    return digest(code_digest(ENCODING_CODE), spm.__version__)


def tokenizer_digest(vocabs: Vocabs) -> str:
    """What decides the ids a tokenizer gives: each side's model and pruned list, by name (a
    side's role) and content."""
    sides = (vocabs.src, vocabs.tgt)
    return digest(*([path.name, file_digest([path])] for side in sides for path in side.files()))


def tokenize(cfg: DataConfig, vocabs: Vocabs, root: Path, source: str, pairs: int) -> Path:
    """The cache entry of the training split `source` (its digest) tokenized with `vocabs`,
    built now if it is not there; its path."""
    vocab_key = tokenizer_digest(vocabs)
    nbest = nbest_size(cfg)
    key = digest(source, vocab_key, encoding_digest(), *([{"nbest": nbest}] if nbest else []))
    final = root / "corpora" / key
    if (final / DATA).is_dir():
        return final
    procs = min(cfg.num_proc or os.cpu_count() or 1, max(1, pairs // MIN_PAIRS_PER_PROCESS))
    log.info(
        "tokenizing %d training pairs into %s with %d process(es), once for this corpus and "
        "tokenizer", pairs, final, procs,
    )  # fmt: skip
    import datasets

    quiet = pairs < QUIET_BELOW and datasets.is_progress_bar_enabled()
    if quiet:  # a small corpus takes seconds: no progress bars
        datasets.disable_progress_bars()
    try:
        with building(final) as tmp:
            _build(cfg, vocabs, vocab_key, tmp, procs, key)
    finally:
        if quiet:
            datasets.enable_progress_bars()
    return final


def _build(
    cfg: DataConfig, vocabs: Vocabs, vocab_key: str, out: Path, procs: int, key: str
) -> None:
    import datasets

    work = out / "work"
    if cfg.local_dir:
        fmt, files = local_files(cfg, Split.train)
        text = datasets.Features({"src": datasets.Value("string"), "tgt": datasets.Value("string")})
        try:
            raw = datasets.Dataset.from_generator(
                _raw_rows, features=text, cache_dir=str(work / "raw"), fingerprint=f"raw-{key}",
                # a tuple: datasets would read a list as shards of the generator's input
                gen_kwargs={"fmt": fmt, "files": tuple(files), "cfg": cfg},
            )  # fmt: skip
        except Exception as err:  # datasets wraps the generator's errors
            raise _nmt_error(err) or err from None
        fields = ("src", "tgt", False)
    else:
        raw = load_hub_split(cfg, Split.train)
        nested = "translation" in raw.column_names and cfg.src_lang not in raw.column_names
        fields = (cfg.src_lang, cfg.tgt_lang, nested)
    ids = "uint16" if max(len(vocabs.src), len(vocabs.tgt)) <= 2**16 else "int32"
    features = datasets.Features({
        "src": datasets.Sequence(datasets.Value(ids)),
        "tgt": datasets.Sequence(datasets.Value(ids)),
        "src_len": datasets.Value("int32"),
        "tgt_len": datasets.Value("int32"),
    })  # fmt: skip
    nbest = nbest_size(cfg)
    for name in NBEST_COLUMNS if nbest else ():  # the packed counts and lengths fit the id type
        features[name] = datasets.Sequence(datasets.Value(ids))
    encoded = raw.map(
        _encode, batched=True, num_proc=procs if procs > 1 else None, features=features,
        remove_columns=raw.column_names, cache_file_name=str(work / "encoded.arrow"),
        new_fingerprint=key, desc="tokenizing",
        fn_kwargs={
            "fields": fields, "vocab_dir": str(vocabs.src.path.parent), "vocab_key": vocab_key,
            "data": cfg, "nbest": nbest, "bound": 2**16 - 1 if ids == "uint16" else 2**31 - 1,
        },
    )  # fmt: skip
    files = [Path(f["filename"]) for f in encoded.cache_files]  # map's, in row order
    del raw, encoded  # their memory maps
    (out / DATA).mkdir()
    for number, file in enumerate(files):
        file.rename(out / DATA / f"data-{number:05d}-of-{len(files):05d}.arrow")
    import shutil

    shutil.rmtree(work, ignore_errors=True)


def _raw_rows(fmt, files: tuple[Path, ...], cfg: DataConfig):  # noqa: ANN001, ANN201 - a generator
    for src, tgt in raw_pairs(fmt, list(files), cfg):
        yield {"src": src, "tgt": tgt}


# Per process, the tokenizer last loaded, keyed by the digest of its files as well as its
# directory: each worker of `map` loads the models once, and a tokenizer rewritten in the same
# directory (a second run in one process) is another key, never the old models.
_VOCABS: dict[tuple[str, str], Vocabs] = {}


def _vocabs(vocab_dir: str, vocab_key: str) -> Vocabs:
    """The tokenizer in `vocab_dir`, which must be the one whose files digest to `vocab_key`
    (what the entry's key holds)."""
    vocabs = _VOCABS.get((vocab_dir, vocab_key))
    if vocabs is None:
        vocabs = load_vocabs(Path(vocab_dir))
        if tokenizer_digest(vocabs) != vocab_key:
            raise NMTError(f"the tokenizer in {vocab_dir} changed while tokenizing: run again")
        _VOCABS.clear()  # one tokenizer at a time
        _VOCABS[vocab_dir, vocab_key] = vocabs
    return vocabs


def _encode(
    batch: dict,
    fields: tuple[str, str, bool],
    vocab_dir: str,
    vocab_key: str,
    data: DataConfig,
    nbest: int,
    bound: int,
) -> dict:
    """A batch of raw pairs -> cleaned, tokenized ids and lengths, and with `nbest` each text's
    n best segmentations packed (in a worker of `map`)."""
    vocabs = _vocabs(vocab_dir, vocab_key)
    src_key, tgt_key, nested = fields
    if nested:
        pairs = [pair_from_record(record, data) for record in batch["translation"]]
        src_text, tgt_text = [s for s, _ in pairs], [t for _, t in pairs]
    else:
        src_text, tgt_text = batch[src_key], batch[tgt_key]
    src_text, tgt_text = [clean(s or "") for s in src_text], [clean(t or "") for t in tgt_text]
    src = [ids + [EOS] for ids in vocabs.src.encode(src_text)]
    tgt = vocabs.tgt.encode(tgt_text)
    out = {
        "src": src, "tgt": tgt, "src_len": [len(s) for s in src], "tgt_len": [len(t) for t in tgt]
    }  # fmt: skip
    if nbest:
        sides = zip(NBEST_COLUMNS, (vocabs.src, vocabs.tgt), (src_text, tgt_text))
        for name, vocab, texts in sides:
            out[name] = [_pack(segs, bound) for segs in vocab.nbest(texts, nbest)]
    return out


def _pack(segmentations: list[list[int]], bound: int) -> list[int]:
    """One text's segmentations as one list: [count, each one's length.., their ids..]. Those
    longer than `bound` (the id type's largest value) are left out: no model trains on them."""
    kept = [seg for seg in segmentations if len(seg) <= bound][:bound]
    return [len(kept), *map(len, kept), *itertools.chain.from_iterable(kept)]


def _nmt_error(err: BaseException) -> NMTError | None:
    """The NMTError behind an exception that another library wrapped, if any."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, NMTError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


# The code that decides what an entry holds, beyond the corpus and the tokenizer files: the
# source of these is digested into the key (`encoding_digest`), so that an edit to any of them is
# another entry, never a stale one. Keep the list whole when that code moves or grows:
# - `_build`: which rows are read, the columns, the id dtype; `_raw_rows`,
# `nmt.data.splits.raw_pairs`   and `nmt.data.splits._lines`: the text of a local row (BOM, UTF-8,
# TSV fields, JSONL records); `nmt.data.tmx.tmx_pairs`, `xliff_pairs`, `_xliff_pair`,
# `segment_text`, `_side`: a TMX's or an XLIFF file's units;
# `nmt.data.splits.pair_from_record`: the text of a JSONL or hub record;
# - `_vocabs`: the tokenizer a worker encodes with; `_encode`, `nmt.tokenizer.clean` and its
#   pattern: the cleaning, the EOS, the lengths; `_pack`: how n-best lists are stored;
# - `nmt.tokenizer.load_vocabs`, `Vocab.__init__`, `Vocab.encode`, `Vocab.nbest`, `_read_kept`:
#   which model and pruned list encode which side, and how a pruned id is mapped.
# The sentencepiece version joins them in the key (its encoder decides the pieces). What reads an
# entry (`TokenizedCorpus`) is not in the list: it refuses a layout it does not know.
ENCODING_CODE: tuple[object, ...] = (
    _build, _raw_rows, _vocabs, _encode, _pack,
    data_module.raw_pairs, data_module._lines, data_module.pair_from_record,
    tmx.tmx_pairs, tmx.xliff_pairs, tmx._xliff_pair, tmx.segment_text, tmx._side,
    tokenizer.clean, tokenizer._SPACE,
    tokenizer.load_vocabs, Vocab.__init__, Vocab.encode, Vocab.nbest, tokenizer._read_kept,
)  # fmt: skip
