"""Behavioural tests for reading, cleaning, encoding and batching parallel data
(nmt.data.splits)."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
import torch

from nmt.config import DataConfig, DataFormat, Split, SplitNames, TokenizerConfig
from nmt.data.batches import collate, epoch_batches, token_batches
from nmt.data.splits import (
    Corpus,
    Encoded,
    encode,
    filter_length,
    read_lines,
    read_split,
    split_digest,
)
from nmt.demo import generate_pairs
from nmt.errors import NMTError
from nmt.tokenizer import BOS, EOS, PAD, clean, train_vocabs

# Raw pairs with messy whitespace; CLEAN is what every reader must return for them.
RAW = [
    ("Hallo  Welt !", "Hello \u3000 world !"),
    ("  Ein\u00a0Haus. ", "A house."),
    ("Größe: 3 × 4", "Size: 3 × 4"),
    ('Er sagt "ja".', 'He says "yes".'),
]
CLEAN = Corpus([clean(s) for s, _ in RAW], [clean(t) for _, t in RAW])


def lengths(data: Encoded) -> tuple[list[int], list[int]]:
    return [len(s) for s in data.src], [len(t) for t in data.tgt]


def _local(directory: Path, **kw) -> DataConfig:
    return DataConfig(name="toy", src_lang="de", tgt_lang="en", local_dir=str(directory), **kw)


def _write_text(d: Path, stem: str = "train", pairs=RAW) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{stem}.de").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (d / f"{stem}.en").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")


def _write_tsv(d: Path, stem: str = "train") -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{stem}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in RAW), encoding="utf-8")


def _write_jsonl(d: Path, records: list[dict], stem: str = "train") -> None:
    d.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    (d / f"{stem}.jsonl").write_text(text, encoding="utf-8")


FLAT = [{"de": s, "en": t} for s, t in RAW]
WMT = [{"translation": {"de": s, "en": t}} for s, t in RAW]


# --------------------------------------------------------------------------------------------
# Local formats


def test_clean_collapses_all_whitespace():
    assert clean("  a \t b\u00a0\u2028c\r\n ") == "a b c"
    assert clean("\u3000") == ""


@pytest.mark.parametrize("layout", ["text", "tsv", "jsonl_flat", "jsonl_wmt"])
@pytest.mark.parametrize("explicit", [False, True])
def test_local_formats_give_the_same_corpus(tmp_path, layout, explicit):
    writer = {
        "text": _write_text,
        "tsv": _write_tsv,
        "jsonl_flat": lambda d: _write_jsonl(d, FLAT),
        "jsonl_wmt": lambda d: _write_jsonl(d, WMT),
    }[layout]
    writer(tmp_path)
    fmt = DataFormat(layout.split("_")[0]) if explicit else DataFormat.auto
    corpus = read_split(_local(tmp_path, format=fmt), Split.train)
    assert corpus == CLEAN
    assert len(corpus) == len(RAW)


def test_auto_prefers_text_files_and_uses_the_split_stem(tmp_path):
    _write_text(tmp_path)
    _write_jsonl(tmp_path, [{"de": "anders", "en": "other"}])
    assert read_split(_local(tmp_path), Split.train) == CLEAN
    # Explicit format overrides the detection.
    jsonl = read_split(_local(tmp_path, format=DataFormat.jsonl), Split.train)
    assert jsonl == Corpus(["anders"], ["other"])
    # Local valid split is called "valid" by default, and the stem can be renamed.
    _write_text(tmp_path, "valid", [("v", "w")])
    _write_text(tmp_path, "dev", [("d", "e")])
    assert read_split(_local(tmp_path), Split.valid) == Corpus(["v"], ["w"])
    renamed = _local(tmp_path, local_splits=SplitNames(valid="dev"))
    assert read_split(renamed, Split.valid) == Corpus(["d"], ["e"])


def test_a_local_split_digest_follows_what_is_read_not_the_names(tmp_path):
    """The key of a local split (its tokenizer's and its tokenized corpus's) holds what decides
    the pairs: the files' contents and the direction. A stem (data.local_splits) only chooses
    the files: the same text under another name shares the entry, other text does not."""
    _write_text(tmp_path)
    _write_text(tmp_path, "copy")
    _write_text(tmp_path, "other", RAW[:3])
    key, pairs = split_digest(_local(tmp_path), Split.train)
    assert pairs == len(RAW)
    renamed = _local(tmp_path, local_splits=SplitNames(train="copy"))
    assert split_digest(renamed, Split.train) == (key, pairs)
    other = split_digest(_local(tmp_path, local_splits=SplitNames(train="other")), Split.train)
    assert other[0] != key and other[1] == 3
    _write_jsonl(tmp_path / "j", FLAT)  # one file for both sides: only the languages say which
    forward = split_digest(_local(tmp_path / "j"), Split.train)[0]
    back = DataConfig(name="toy", src_lang="en", tgt_lang="de", local_dir=str(tmp_path / "j"))
    assert split_digest(back, Split.train)[0] != forward


def test_jsonl_mixed_records_and_blank_lines(tmp_path):
    text = (
        json.dumps(FLAT[0]) + "\n\n" + json.dumps(WMT[1]) + "\n   \n" + json.dumps(FLAT[2]) + "\n"
    )
    (tmp_path / "train.jsonl").write_text(text, encoding="utf-8")
    corpus = read_split(_local(tmp_path), Split.train)
    assert corpus.src == CLEAN.src[:3] and corpus.tgt == CLEAN.tgt[:3]


def test_jsonl_bad_record_names_the_line(tmp_path):
    (tmp_path / "train.jsonl").write_text(
        json.dumps(FLAT[0]) + "\n" + json.dumps({"de": "x", "fr": "y"}) + "\n", encoding="utf-8"
    )
    with pytest.raises(NMTError, match=r"train\.jsonl: line 2: .*'en'"):
        read_split(_local(tmp_path), Split.train)
    (tmp_path / "train.jsonl").write_text('{"de": "x", "en": \n', encoding="utf-8")
    with pytest.raises(NMTError, match=r"line 1"):
        read_split(_local(tmp_path), Split.train)


def test_tsv_without_tab_names_the_line(tmp_path):
    (tmp_path / "train.tsv").write_text("a\tb\nno tab here\n", encoding="utf-8")
    with pytest.raises(NMTError, match=r"line 2 does not have exactly 2 tab-separated fields"):
        read_split(_local(tmp_path), Split.train)


# --------------------------------------------------------------------------------------------
# Line splitting


# Characters that str.splitlines() treats as line breaks but a corpus file must not.
STRAY = ["\r", "\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]


def test_read_lines_splits_on_newline_only(tmp_path):
    lines = [f"satz{c}nummer {i}  mit\t tab" for i, c in enumerate(STRAY)] + ["", "letzte"]
    raw = "\n".join(lines) + "\n"
    path = tmp_path / "x.de"
    path.write_bytes(raw.encode("utf-8"))  # bytes: no newline translation on write
    got = read_lines(path)
    assert len(got) == raw.count("\n") == len(lines)
    assert got[0] == "satz nummer 0 mit tab"
    assert all(line == f"satz nummer {i} mit tab" for i, line in enumerate(got[: len(STRAY)]))
    assert got[-2:] == ["", "letzte"]


@pytest.mark.parametrize("layout", ["text", "tsv", "jsonl"])
def test_stray_breaks_keep_pairs_aligned(tmp_path, layout):
    src = ["eins\rzwei", "drei\u2028vier", "fünf"]
    tgt = ["one\u2029two", "three\x85four", "five\r"]
    if layout == "text":
        (tmp_path / "train.de").write_bytes(("\n".join(src) + "\n").encode())
        (tmp_path / "train.en").write_bytes(("\n".join(tgt) + "\n").encode())
    elif layout == "tsv":
        rows = "".join(f"{s}\t{t}\r\n" for s, t in zip(src, tgt))  # CRLF endings too
        (tmp_path / "train.tsv").write_bytes(rows.encode())
    else:
        rows = "".join(
            json.dumps({"de": s, "en": t}, ensure_ascii=False) + "\n" for s, t in zip(src, tgt)
        )
        (tmp_path / "train.jsonl").write_bytes(rows.encode())
    corpus = read_split(_local(tmp_path), Split.train)
    assert corpus.src == ["eins zwei", "drei vier", "fünf"]
    assert corpus.tgt == ["one two", "three four", "five"]


# --------------------------------------------------------------------------------------------
# Errors of local data


def test_misaligned_text_pairs_name_both_counts(tmp_path):
    (tmp_path / "train.de").write_text("a\nb\nc\n", encoding="utf-8")
    (tmp_path / "train.en").write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(NMTError) as info:
        read_split(_local(tmp_path), Split.train)
    message = str(info.value)
    assert "train.de has 3 lines" in message and "train.en has 2" in message


def test_missing_local_dir_names_the_path(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(NMTError, match="local_dir") as info:
        read_split(_local(missing), Split.train)
    assert str(missing) in str(info.value)


def test_missing_split_file_names_the_path(tmp_path):
    _write_text(tmp_path)  # train only
    with pytest.raises(NMTError) as info:
        read_split(_local(tmp_path), Split.test)
    assert str(tmp_path) in str(info.value) and "test" in str(info.value)
    # Only the source side present: the missing target file is named.
    (tmp_path / "valid.de").write_text("x\n", encoding="utf-8")
    with pytest.raises(NMTError, match="not found") as info:
        read_split(_local(tmp_path), Split.valid)
    assert str(tmp_path / "valid.en") in str(info.value)
    # An explicit format whose file is absent.
    with pytest.raises(NMTError) as info:
        read_split(_local(tmp_path, format=DataFormat.tsv), Split.train)
    assert str(tmp_path / "train.tsv") in str(info.value)


def test_data_config_needs_a_source():
    with pytest.raises(NMTError, match="hub_id or data.local_dir"):
        DataConfig(name="toy", src_lang="de", tgt_lang="en")


# --------------------------------------------------------------------------------------------
# The Hugging Face `datasets` path, against local dataset directories


def _hub_dir(root: Path, records_of) -> Path:
    d = root / "hub_ds"
    for split, n in (("train", 5), ("validation", 7), ("test", 3)):
        _write_jsonl(d, [records_of(split, i) for i in range(n)], stem=split)
    return d


def _hub(hub_id: Path | str, **kw) -> DataConfig:
    return DataConfig(name="x", src_lang="de", tgt_lang="en", hub_id=str(hub_id), **kw)


def test_hub_path_reads_validation_rows_in_order(tmp_path, hf_sandbox):
    d = _hub_dir(tmp_path, lambda s, i: {"de": f" {s}  satz {i}", "en": f"{s} sentence\t{i}"})
    corpus = read_split(_hub(d), Split.valid)
    assert corpus.src == [f"validation satz {i}" for i in range(7)]
    assert corpus.tgt == [f"validation sentence {i}" for i in range(7)]
    assert read_split(_hub(d), Split.test).src == [f"test satz {i}" for i in range(3)]
    assert hf_sandbox.is_dir()  # the cache went to the sandbox


def test_hub_path_reads_wmt_style_translation_column(tmp_path, hf_sandbox):
    d = _hub_dir(tmp_path, lambda s, i: {"translation": {"de": f"{s} {i}", "en": f"{s} en {i}"}})
    corpus = read_split(_hub(d), Split.train)
    assert corpus == Corpus([f"train {i}" for i in range(5)], [f"train en {i}" for i in range(5)])


def test_hub_columns_without_the_language_name_the_columns(tmp_path, hf_sandbox):
    d = _hub_dir(tmp_path, lambda s, i: {"source": "a", "target": "b"})
    with pytest.raises(NMTError) as info:
        read_split(_hub(d), Split.valid)
    message = str(info.value)
    assert "'de'" in message and "source" in message and "target" in message


def test_hub_missing_split_is_an_nmt_error(tmp_path, hf_sandbox):
    d = tmp_path / "only_train"
    _write_jsonl(d, FLAT, stem="train")
    with pytest.raises(NMTError, match="validation"):
        read_split(_hub(d), Split.valid)


def test_hub_malformed_file_is_an_nmt_error(tmp_path, hf_sandbox):
    d = _hub_dir(tmp_path, lambda s, i: {"de": "a", "en": "b"})
    with open(d / "validation.jsonl", "a", encoding="utf-8") as f:
        f.write('{"de": "broken", "en": \n')
    with pytest.raises(NMTError, match="cannot load dataset"):
        read_split(_hub(d), Split.valid)


def test_unknown_hub_id_fails_fast_and_suggests_local_dir(hf_sandbox):
    start = time.monotonic()
    with pytest.raises(NMTError) as info:
        read_split(_hub("no-such-user/no-such-dataset-xyz"), Split.valid)
    assert time.monotonic() - start < 10
    message = str(info.value)
    assert "no-such-user/no-such-dataset-xyz" in message
    assert "data.local_dir" in message


# --------------------------------------------------------------------------------------------
# Batching


def _lengths(n: int, seed: int) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    src = [rng.randint(1, 40) for _ in range(n)]
    tgt = [rng.randint(1, 40) for _ in range(n)]
    src[3], tgt[5] = 120, 150  # longer than the smallest budgets below
    return src, tgt


def _cost(batch: list[int], src: list[int], tgt: list[int]) -> int:
    return len(batch) * max(max(src[i] for i in batch), max(tgt[i] + 1 for i in batch))


@pytest.mark.parametrize("batch_tokens", [1, 50, 160, 1000, 100_000])
@pytest.mark.parametrize("shuffled", [False, True])
def test_token_batches_partition_and_budget(batch_tokens, shuffled):
    src, tgt = _lengths(300, seed=batch_tokens)
    generator = torch.Generator().manual_seed(7) if shuffled else None
    batches = token_batches(src, tgt, batch_tokens, generator)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(300))  # every index exactly once
    assert all(batches)
    for batch in batches:
        assert len(batch) == 1 or _cost(batch, src, tgt) <= batch_tokens
    if batch_tokens >= 100_000:
        assert len(batches) == 1


def test_token_batches_without_generator_is_sorted_and_deterministic():
    src, tgt = _lengths(200, seed=1)
    batches = token_batches(src, tgt, 400)
    assert batches == token_batches(src, tgt, 400)
    flat = [i for b in batches for i in b]
    assert flat == sorted(range(200), key=lambda i: (tgt[i], src[i]))
    # Greedy packing: a batch stops only when the next example would break the budget.
    for batch, following in zip(batches, batches[1:]):
        assert _cost(batch + following[:1], src, tgt) > 400


def test_token_batches_with_generator_buckets_and_shuffles():
    src, tgt = _lengths(300, seed=2)
    sorted_batches = token_batches(src, tgt, 400)
    shuffled = token_batches(src, tgt, 400, torch.Generator().manual_seed(3))
    assert shuffled != sorted_batches
    # Still length-bucketed: inside a batch the examples are in (target, source) length order.
    for batch in shuffled:
        keys = [(tgt[i], src[i]) for i in batch]
        assert keys == sorted(keys)


def test_epoch_batches_is_a_function_of_seed_and_epoch():
    pairs = generate_pairs(120, seed=5)
    data = Encoded(
        [[4] * (len(s.split()) + 1) for s, _ in pairs], [[4] * len(t.split()) for _, t in pairs]
    )
    first = epoch_batches(*lengths(data), 60, seed=11, epoch=0)
    assert first == epoch_batches(*lengths(data), 60, seed=11, epoch=0)
    assert first != epoch_batches(*lengths(data), 60, seed=11, epoch=1)
    assert first != epoch_batches(*lengths(data), 60, seed=12, epoch=0)
    for epoch in range(3):
        batches = epoch_batches(*lengths(data), 60, seed=11, epoch=epoch)
        assert sorted(i for b in batches for i in b) == list(range(120))


def test_filter_length_drops_long_and_empty_pairs():
    data = Encoded(
        src=[[5, EOS], [5, 6, 7, EOS], [EOS], [5, 6, 7, 8, EOS], [5, EOS], [5, 6, EOS]],
        tgt=[[9], [9, 9, 9], [9], [9], [], [9, 9, 9, 9]],
    )
    kept = filter_length(data, max_len=3)
    # keep: 0 (short), 1 (exactly max_len on both sides); drop: empty src, long src,
    # empty tgt, long tgt.
    assert kept.src == [[5, EOS], [5, 6, 7, EOS]]
    assert kept.tgt == [[9], [9, 9, 9]]


def test_collate_builds_shifted_targets():
    src = [[10, 11, EOS], [12, EOS], [13, 14, 15, 16, EOS]]
    tgt = [[20, 21], [22, 23, 24], [25]]
    batch = collate([2, 0], src, tgt)
    assert batch.index == [2, 0]
    assert batch.src.tolist() == [[13, 14, 15, 16, EOS], [10, 11, EOS, PAD, PAD]]
    assert batch.src_lens.tolist() == [5, 3]
    assert batch.tgt_in.tolist() == [[BOS, 25, PAD], [BOS, 20, 21]]
    assert batch.tgt_out.tolist() == [[25, EOS, PAD], [20, 21, EOS]]
    assert (batch.tgt_in[:, 0] == BOS).all()
    assert batch.n_tgt_tokens == 2 + 3
    assert batch.src.dtype == torch.long and batch.tgt_in.shape == batch.tgt_out.shape

    no_target = collate([1], src, None)
    assert no_target.tgt_in is None and no_target.tgt_out is None
    assert no_target.src.tolist() == [[12, EOS]] and no_target.n_tgt_tokens == 0


def test_encode_appends_eos_to_sources_only(tmp_path):
    pairs = generate_pairs(60, seed=3)
    vocabs = train_vocabs(
        [s for s, _ in pairs], [t for _, t in pairs], tmp_path, TokenizerConfig(vocab_size=400)
    )
    corpus = Corpus([s for s, _ in pairs[:5]], [t for _, t in pairs[:5]])
    enc = encode(corpus, vocabs)
    assert len(enc) == 5
    for ids, text in zip(enc.src, corpus.src):
        assert ids[-1] == EOS and EOS not in ids[:-1]
        assert vocabs.src.decode([ids[:-1]])[0] == text
    for ids, text in zip(enc.tgt, corpus.tgt):
        assert BOS not in ids and EOS not in ids
        assert vocabs.tgt.decode([ids])[0] == text


def test_unreachable_hub_fails_fast_with_advice(monkeypatch):
    import socket

    def no_dns(*args, **kwargs):
        raise socket.gaierror("Name or service not known")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    cfg = DataConfig(name="m", src_lang="de", tgt_lang="en", hub_id="bentrevett/multi30k")
    with pytest.raises(NMTError, match="cannot reach huggingface.co.*data.local_dir"):
        read_split(cfg, Split.train)
