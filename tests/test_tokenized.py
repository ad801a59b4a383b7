"""The training split tokenized once into memory-mapped Arrow (nmt.tokenized) and the cache it
lives in (nmt.cache): the same batches as the id lists it replaced, local files and the hub alike,
a cache that is read again only for the same inputs, and bad corpora refused before any work."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from nmt import tokenized
from nmt.batches import collate, epoch_batches
from nmt.cache import building
from nmt.config import DataConfig, Split, TokenizerConfig
from nmt.data import encode, filter_length, read_split, split_digest
from nmt.errors import NMTError
from nmt.tokenized import TokenizedCorpus, tokenize
from nmt.tokenizer import _sample, train_vocabs
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


def test_the_arrow_corpus_batches_as_the_id_lists_did(corpus):
    cfg, vocabs, entry = corpus
    arrow = TokenizedCorpus(entry, MAX_LEN)
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
    arrow = TokenizedCorpus(tokenize(cfg, vocabs, Path(cfg.cache_dir), source, pairs), 100)
    lists = filter_length(encode(raw, vocabs), 100)
    assert len(arrow._first) >= 3 and len(arrow) == len(lists)
    index = np.random.default_rng(0).permutation(len(arrow))
    src, src_lens, tgt, tgt_lens = arrow.flat(index)
    assert src_lens.tolist() == [len(lists.src[i]) for i in index]
    assert tgt_lens.tolist() == [len(lists.tgt[i]) for i in index]
    assert src.tolist() == [t for i in index for t in lists.src[i]]
    assert tgt.tolist() == [t for i in index for t in lists.tgt[i]]


def test_a_second_start_reads_the_entry_and_another_corpus_gets_its_own(corpus, monkeypatch):
    cfg, vocabs, entry = corpus
    source, pairs = split_digest(cfg, Split.train)

    def must_not_build(*args, **kwargs):
        raise AssertionError("tokenized again")

    with monkeypatch.context() as patch:
        patch.setattr(tokenized, "_build", must_not_build)
        assert tokenize(cfg, vocabs, Path(cfg.cache_dir), source, pairs) == entry
    changed = Path(cfg.local_dir) / "train.en"
    saved = changed.read_bytes()
    try:
        changed.write_bytes(saved.replace(b"apples", b"pears", 1))
        other, _ = split_digest(cfg, Split.train)
        assert other != source  # a changed file is another corpus: never the stale entry
    finally:
        changed.write_bytes(saved)


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
    assert len(TokenizedCorpus(entry, MAX_LEN)) > 0


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
    from_hub = TokenizedCorpus(tokenize(hub, vocabs, tmp_path / "cache", source, pairs), MAX_LEN)
    from_files = TokenizedCorpus(entry, MAX_LEN)
    index = list(range(len(from_files)))
    assert torch.equal(from_hub.batch(index).src, from_files.batch(index).src)
    assert torch.equal(from_hub.batch(index).tgt_out, from_files.batch(index).tgt_out)


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
