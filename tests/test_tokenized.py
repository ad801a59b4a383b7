"""The training split tokenized once into memory-mapped Arrow (nmt.data.tokenized) and the cache it
lives in (nmt.data.cache): the same batches as the id lists it replaced, local files and the hub
alike, a cache that is read again only for the same inputs, and bad corpora refused before any
work."""

import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from nmt.config import DataConfig, Split, SplitNames, TokenizerConfig
from nmt.data import tokenized
from nmt.data.batches import collate, epoch_batches
from nmt.data.cache import building
from nmt.data.splits import (
    encode,
    filter_length,
    pair_from_record,
    raw_pairs,
    read_split,
    split_digest,
)
from nmt.data.tokenized import TokenizedCorpus, tokenize
from nmt.errors import NMTError
from nmt.tokenizer import Vocab, _sample, clean, train_vocabs
from nmt.training import lexicon as lexicon_module
from nmt.training.lexicon import learn_from_arrays, learn_lexicon

MAX_LEN = 12  # small enough that the demo corpus has pairs to drop


def files_config(directory: Path, cache: Path) -> DataConfig:
    return DataConfig(
        name="files", src_lang="de", tgt_lang="en", local_dir=str(directory), max_len=MAX_LEN,
        cache_dir=str(cache), tokenizer=TokenizerConfig(vocab_size=400),
    )  # fmt: skip


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, demo_dir):
    """The demo corpus's first 400 training pairs, its tokenizer, and its tokenized entry."""
    directory = tmp_path_factory.mktemp("small")
    for split in ("train", "valid", "test"):
        for lang in ("de", "en"):
            lines = (demo_dir / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
            (directory / f"{split}.{lang}").write_text("\n".join(lines[:400]) + "\n", "utf-8")
    cfg = files_config(directory, tmp_path_factory.mktemp("cache"))
    raw = read_split(cfg, Split.train)
    vocabs = train_vocabs(raw.src, raw.tgt, tmp_path_factory.mktemp("spm"), cfg.tokenizer)
    source, pairs = split_digest(cfg, Split.train)
    entry = tokenize(cfg, vocabs, Path(cfg.cache_dir), source, pairs)
    return cfg, vocabs, entry


def test_the_arrow_corpus_batches_as_the_id_lists_did(corpus, request):
    cfg, vocabs, entry = corpus
    arrow = TokenizedCorpus(entry, MAX_LEN)
    request.addfinalizer(arrow.close)
    lists = filter_length(encode(read_split(cfg, Split.train), vocabs), MAX_LEN)
    assert 0 < len(arrow) == len(lists) < 400  # some pairs were too long
    assert arrow.src_lens.tolist() == [len(s) for s in lists.src]
    assert arrow.tgt_lens.tolist() == [len(t) for t in lists.tgt]
    plan = epoch_batches(arrow.src_lens, arrow.tgt_lens, 300, seed=5, epoch=2)
    lengths = ([len(s) for s in lists.src], [len(t) for t in lists.tgt])
    assert plan == epoch_batches(*lengths, 300, seed=5, epoch=2)
    for index in plan[:5]:
        ours, theirs = arrow.batch(index), collate(index, lists.src, lists.tgt)
        for name in ("src", "src_lens", "tgt_in", "tgt_out"):
            assert torch.equal(getattr(ours, name), getattr(theirs, name)), name
        assert ours.n_tgt_tokens == theirs.n_tgt_tokens == arrow.target_tokens([index])


def test_every_pair_reads_back_from_a_corpus_of_several_record_batches(tmp_path, demo_dir):
    """Each pair is read at its own byte offset in the Arrow file (one pread per side): every
    pair of a 3,000-pair corpus (three record batches of datasets' 1,000 rows) reads back as the
    id lists encode it, in any order asked."""
    cfg = files_config(demo_dir, tmp_path / "cache")
    cfg.max_len = 100
    raw = read_split(cfg, Split.train)
    vocabs = train_vocabs(raw.src, raw.tgt, tmp_path / "spm", cfg.tokenizer)
    source, pairs = split_digest(cfg, Split.train)
    with TokenizedCorpus(tokenize(cfg, vocabs, Path(cfg.cache_dir), source, pairs), 100) as arrow:
        lists = filter_length(encode(raw, vocabs), 100)
        assert len(arrow._first) >= 3 and len(arrow) == len(lists)
        index = np.random.default_rng(0).permutation(len(arrow))
        src, src_lens, tgt, tgt_lens = arrow.flat(index)
    assert src_lens.tolist() == [len(lists.src[i]) for i in index]
    assert tgt_lens.tolist() == [len(lists.tgt[i]) for i in index]
    assert src.tolist() == [t for i in index for t in lists.src[i]]
    assert tgt.tolist() == [t for i in index for t in lists.tgt[i]]


def read_back(entry: Path, max_len: int = 1000) -> tuple[list[list[int]], list[list[int]]]:
    """Every pair of an entry (within `max_len`) as id lists, in order; its files closed after."""
    with TokenizedCorpus(entry, max_len) as arrow:
        src, src_lens, tgt, tgt_lens = arrow.flat(np.arange(len(arrow)))
    src_rows = np.split(src, np.cumsum(src_lens)[:-1])
    tgt_rows = np.split(tgt, np.cumsum(tgt_lens)[:-1])
    return [row.tolist() for row in src_rows], [row.tolist() for row in tgt_rows]


def encoded(cfg: DataConfig, vocabs, max_len: int = 1000) -> tuple[list, list]:
    """What the id-list path makes of the same split: what an entry must read back as."""
    lists = filter_length(encode(read_split(cfg, Split.train), vocabs), max_len)
    return lists.src, lists.tgt


def test_a_second_start_reads_the_entry_and_another_corpus_gets_its_own(
    corpus, tmp_path, monkeypatch
):
    cfg, vocabs, entry = corpus
    source, pairs = split_digest(cfg, Split.train)

    def must_not_build(*args, **kwargs):
        raise AssertionError("tokenized again")

    with monkeypatch.context() as patch:
        patch.setattr(tokenized, "_build", must_not_build)
        assert tokenize(cfg, vocabs, Path(cfg.cache_dir), source, pairs) == entry
    other_dir = tmp_path / "other"  # the same corpus with one word of one line changed
    shutil.copytree(cfg.local_dir, other_dir)
    text = (other_dir / "train.en").read_text("utf-8")
    assert "apples" in text
    (other_dir / "train.en").write_text(text.replace("apples", "pears", 1), "utf-8")
    other_cfg = files_config(other_dir, Path(cfg.cache_dir))
    other, other_pairs = split_digest(other_cfg, Split.train)
    assert other != source  # a changed file is another corpus: never the stale entry
    second = tokenize(other_cfg, vocabs, Path(cfg.cache_dir), other, other_pairs)
    assert second != entry and (entry / tokenized.DATA).is_dir()
    assert sorted((Path(cfg.cache_dir) / "corpora").iterdir()) == sorted([entry, second])
    assert read_back(entry) == encoded(cfg, vocabs) != encoded(other_cfg, vocabs)
    assert read_back(second) == encoded(other_cfg, vocabs)


def test_two_processes_tokenize_the_table_one_does(corpus, tmp_path, monkeypatch):
    """data.num_proc=2 on a corpus big enough for two (MIN_PAIRS_PER_PROCESS lowered): two
    workers each load the tokenizer once, and the table is the one-process table, row for row."""
    import multiprocess

    if multiprocess.get_start_method() != "fork":
        pytest.skip("the workers' process ids are recorded through a patched, forked module")
    cfg, vocabs, entry = corpus
    cfg = dataclasses.replace(cfg, num_proc=2, cache_dir=str(tmp_path / "cache"))
    monkeypatch.setattr(tokenized, "MIN_PAIRS_PER_PROCESS", 100)  # 400 pairs: 2 processes
    loads = tmp_path / "loads"
    loads.mkdir()
    real = tokenized.load_vocabs

    def load_vocabs(directory):  # runs in the workers: one file per load
        (loads / f"{os.getpid()}-{len(list(loads.iterdir()))}").touch()
        return real(directory)

    monkeypatch.setattr(tokenized, "load_vocabs", load_vocabs)
    monkeypatch.setattr(tokenized, "_VOCABS", {})  # else the workers inherit the fixture's
    source, pairs = split_digest(cfg, Split.train)
    two = tokenize(cfg, vocabs, tmp_path / "cache", source, pairs)
    workers = [name.split("-")[0] for name in os.listdir(loads)]
    assert len(set(workers)) == len(workers) == 2 and str(os.getpid()) not in workers
    assert two.name == entry.name  # the number of processes is not in the key: the same table
    assert read_back(two) == read_back(entry) == encoded(cfg, vocabs)


def test_every_pair_reads_back_across_several_files(corpus, tmp_path, monkeypatch):
    """Three tokenizing processes write three Arrow files, moved into the entry in row order."""
    cfg, vocabs, _ = corpus
    cfg = dataclasses.replace(cfg, num_proc=3)
    monkeypatch.setattr(tokenized, "MIN_PAIRS_PER_PROCESS", 100)  # 400 pairs: 3 processes
    source, pairs = split_digest(cfg, Split.train)
    entry = tokenize(cfg, vocabs, tmp_path / "cache", source, pairs)
    files = sorted(p.name for p in (entry / tokenized.DATA).iterdir())
    assert files == [f"data-0000{i}-of-00003.arrow" for i in range(3)]
    assert not (entry / "work").exists()
    import datasets  # each file is a dataset of its own

    assert sum(len(datasets.Dataset.from_file(str(entry / "data" / f))) for f in files) == pairs
    src, tgt = encoded(cfg, vocabs)
    with TokenizedCorpus(entry, 1000) as arrow:
        assert len(arrow) == len(src) == pairs
        index = np.random.default_rng(0).permutation(len(arrow))
        got_src, src_lens, got_tgt, tgt_lens = arrow.flat(index)
    assert src_lens.tolist() == [len(src[i]) for i in index]
    assert got_src.tolist() == [t for i in index for t in src[i]]
    assert tgt_lens.tolist() == [len(tgt[i]) for i in index]
    assert got_tgt.tolist() == [t for i in index for t in tgt[i]]


def test_a_tokenizer_rewritten_in_its_directory_encodes_with_its_new_models(corpus, tmp_path):
    """Two runs in one process, the second after the tokenizer in the same directory was trained
    again: the second entry holds the new tokenizer's ids (a cache of models by directory would
    have encoded it with the old ones, under the new key)."""
    cfg, _, _ = corpus
    raw = read_split(cfg, Split.train)
    spm_dir, cache = tmp_path / "spm", tmp_path / "cache"
    source, pairs = split_digest(cfg, Split.train)
    entries = []
    for size in (400, 330):
        vocabs = train_vocabs(raw.src, raw.tgt, spm_dir, TokenizerConfig(vocab_size=size))
        entries.append(tokenize(cfg, vocabs, cache, source, pairs))
        assert read_back(entries[-1]) == encoded(cfg, vocabs)
    assert entries[0] != entries[1] and read_back(entries[0]) != read_back(entries[1])
    with pytest.raises(NMTError, match="changed while tokenizing"):
        tokenized._vocabs(str(spm_dir), tokenized.tokenizer_digest(vocabs)[::-1])


def test_another_hub_split_spec_direction_or_dataset_is_another_entry(corpus, tmp_path, hf_sandbox):
    """data.hub_splits.train="train[:50%]" reads the cache files "train" does; the key holds
    the spec, the direction (which column is the source) and the dataset's build directory."""
    cfg, vocabs, _ = corpus
    raw = read_split(cfg, Split.train)
    hub_dir = tmp_path / "hub_ds"
    hub_dir.mkdir()
    rows = "".join(json.dumps({"de": s, "en": t}) + "\n" for s, t in zip(raw.src, raw.tgt))
    (hub_dir / "train.jsonl").write_text(rows, encoding="utf-8")
    hub = DataConfig(
        name="hub", src_lang="de", tgt_lang="en", hub_id=str(hub_dir), cache_dir=str(tmp_path)
    )
    half = dataclasses.replace(hub, hub_splits=SplitNames(train="train[:50%]"))
    back = dataclasses.replace(hub, src_lang="en", tgt_lang="de")
    (whole, n_whole), (halved, n_half), (reverse, _) = (
        split_digest(c, Split.train) for c in (hub, half, back)
    )
    assert len({whole, halved, reverse}) == 3 and (n_whole, n_half) == (400, 200)
    entry = tokenize(half, vocabs, tmp_path / "cache", halved, n_half)
    src, tgt = encoded(cfg, vocabs)
    assert read_back(entry) == (src[:200], tgt[:200])  # (no pair of the 400 is over 1000 pieces)
    # the same dataset edited, its size unchanged: `datasets` builds it into another directory
    (hub_dir / "train.jsonl").write_text(rows.replace("apples", "pearss", 1), encoding="utf-8")
    later = os.stat(hub_dir / "train.jsonl").st_mtime_ns + 10**9
    os.utime(hub_dir / "train.jsonl", ns=(later, later))
    edited, n_edited = split_digest(hub, Split.train)
    assert n_edited == n_whole and edited != whole


def _encode_edited(batch, **kwargs):  # another source for the same behaviour
    return tokenized._encode(batch, **kwargs)


def test_an_edit_to_the_encoding_code_is_another_entry(corpus, tmp_path, monkeypatch):
    cfg, vocabs, entry = corpus
    for function in (tokenized._encode, clean, pair_from_record, raw_pairs, Vocab.encode):
        assert function in tokenized.ENCODING_CODE, function.__name__
    source, pairs = split_digest(cfg, Split.train)
    before = tokenized.encoding_digest()
    code = tuple(_encode_edited if f is tokenized._encode else f for f in tokenized.ENCODING_CODE)
    monkeypatch.setattr(tokenized, "ENCODING_CODE", code)
    assert tokenized.encoding_digest() != before
    edited = tokenize(cfg, vocabs, Path(cfg.cache_dir), source, pairs)
    assert edited != entry and (edited / tokenized.DATA).is_dir()
    monkeypatch.undo()
    assert tokenized.encoding_digest() == before
    assert tokenize(cfg, vocabs, Path(cfg.cache_dir), source, pairs) == entry


def test_the_shard_files_are_closed(corpus, monkeypatch):
    _, _, entry = corpus
    with TokenizedCorpus(entry, MAX_LEN) as arrow:
        fds = list(arrow._fds)
        assert fds and len(arrow.flat(np.arange(3))[0]) > 0
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)
    arrow.close()  # twice is harmless
    dropped = TokenizedCorpus(entry, MAX_LEN)
    fds = list(dropped._fds)
    del dropped  # the safety net for an owner that forgot to close
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)
    open_fds = len(os.listdir("/proc/self/fd")) if Path("/proc/self/fd").is_dir() else None

    def bad_layout(*args):
        raise NMTError("not the stream nmt writes")

    monkeypatch.setattr(tokenized, "_ids_layout", bad_layout)
    monkeypatch.setattr(TokenizedCorpus, "__del__", lambda self: None)  # not the safety net
    with pytest.raises(NMTError, match="not the stream"):
        TokenizedCorpus(entry, MAX_LEN)
    if open_fds is not None:  # a corpus that fails to open leaves no file open
        assert len(os.listdir("/proc/self/fd")) == open_fds


def test_an_interrupted_build_leaves_nothing_a_later_run_reads(corpus, tmp_path, monkeypatch):
    cfg, vocabs, _ = corpus
    cfg = files_config(Path(cfg.local_dir), tmp_path / "cache")
    source, pairs = split_digest(cfg, Split.train)
    calls = {"n": 0}
    real = tokenized._encode

    def dies(batch, **kwargs):
        calls["n"] += 1
        raise KeyboardInterrupt  # Ctrl-C in the middle of tokenizing

    monkeypatch.setattr(tokenized, "_encode", dies)
    with pytest.raises(KeyboardInterrupt):
        tokenize(cfg, vocabs, tmp_path / "cache", source, pairs)
    assert calls["n"] and list((tmp_path / "cache" / "corpora").iterdir()) == []
    monkeypatch.setattr(tokenized, "_encode", real)
    # a run killed outright leaves its temporary directory; the next build removes it
    killed = tmp_path / "cache" / "corpora" / ".abc.tmp-999999999"
    killed.mkdir()
    entry = tokenize(cfg, vocabs, tmp_path / "cache", source, pairs)
    assert (entry / tokenized.DATA).is_dir() and not killed.exists()
    with TokenizedCorpus(entry, MAX_LEN) as arrow:
        assert len(arrow) > 0


def test_building_publishes_only_a_complete_entry(tmp_path):
    final = tmp_path / "entry"
    with pytest.raises(RuntimeError), building(final) as tmp:
        (tmp / "half").write_text("x")
        raise RuntimeError("disk full")
    assert not final.exists() and list(tmp_path.iterdir()) == []
    with building(final) as tmp:
        (tmp / "whole").write_text("x")
    assert (final / "whole").is_file() and len(list(tmp_path.iterdir())) == 1


def test_the_hub_and_local_files_give_the_same_table(corpus, tmp_path, hf_sandbox):
    cfg, vocabs, entry = corpus
    raw = read_split(cfg, Split.train)
    hub_dir = tmp_path / "hub_ds"  # a dataset directory `datasets.load_dataset` reads
    hub_dir.mkdir()
    rows = "".join(json.dumps({"de": s, "en": t}) + "\n" for s, t in zip(raw.src, raw.tgt))
    for name in ("train", "validation", "test"):
        (hub_dir / f"{name}.jsonl").write_text(rows, encoding="utf-8")
    hub = DataConfig(
        name="hub", src_lang="de", tgt_lang="en", hub_id=str(hub_dir), max_len=MAX_LEN,
        cache_dir=str(tmp_path / "cache"),
    )  # fmt: skip
    source, pairs = split_digest(hub, Split.train)
    hub_entry = tokenize(hub, vocabs, tmp_path / "cache", source, pairs)
    with TokenizedCorpus(hub_entry, MAX_LEN) as from_hub, TokenizedCorpus(entry, MAX_LEN) as ours:
        index = list(range(len(ours)))
        assert torch.equal(from_hub.batch(index).src, ours.batch(index).src)
        assert torch.equal(from_hub.batch(index).tgt_out, ours.batch(index).tgt_out)


def test_bad_training_files_are_refused_before_any_work(tmp_path):
    cfg = files_config(tmp_path, tmp_path / "cache")
    (tmp_path / "train.de").write_text("a\nb\nc\n", encoding="utf-8")
    (tmp_path / "train.en").write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(NMTError, match=r"train\.de has 3 lines but .*train\.en has 2"):
        split_digest(cfg, Split.train)
    (tmp_path / "train.en").write_bytes(b"a\nb \xff\xfe c\nc\n")
    with pytest.raises(NMTError, match=r"train\.en: line 2 is not valid UTF-8"):
        split_digest(cfg, Split.train)
    (tmp_path / "train.de").unlink()
    with pytest.raises(NMTError, match="no data for split 'train'"):
        split_digest(cfg, Split.train)
    assert not (tmp_path / "cache").exists()


def test_the_tokenizer_sample_is_bounded_and_reproducible():
    sides = [[f"de {i}" for i in range(50)] + [""], [f"en {i}" for i in range(50)]]
    assert list(_sample(sides, 1000)) == [line for side in sides for line in side if line]
    drawn = list(_sample(sides, 30))
    assert len(drawn) == 30 and drawn == list(_sample(sides, 30))
    assert any(line.startswith("de") for line in drawn) and any(
        line.startswith("en") for line in drawn
    )
    with pytest.raises(NMTError, match="no text"):
        list(_sample([[""], []], 10))


def test_the_lexicon_learned_in_chunks_equals_one_pass(corpus, monkeypatch):
    cfg, vocabs, _ = corpus
    data = filter_length(encode(read_split(cfg, Split.train), vocabs), MAX_LEN)
    whole = learn_lexicon(data, len(vocabs.src), len(vocabs.tgt))
    monkeypatch.setattr(lexicon_module, "CHUNK_PAIRS", 500)  # dozens of chunks
    chunked = learn_lexicon(data, len(vocabs.src), len(vocabs.tgt))
    assert torch.equal(whole.frequent, chunked.frequent)
    # float sums in another order may swap two translations whose probabilities tie
    same = (whole.translations == chunked.translations).float().mean().item()
    assert same > 0.99, same
    flat = learn_from_arrays(
        np.concatenate([np.array(s) for s in data.src]), np.array([len(s) for s in data.src]),
        np.concatenate([np.array(t) for t in data.tgt]), np.array([len(t) for t in data.tgt]),
        len(vocabs.src), len(vocabs.tgt),
    )  # fmt: skip
    assert torch.equal(flat.translations, chunked.translations)
