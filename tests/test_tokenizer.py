"""Behavioural tests for the sentencepiece tokenizers (nmt.tokenizer)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sentencepiece as spm

from nmt.config import PieceModel, TokenizerConfig
from nmt.demo import generate_pairs
from nmt.errors import NMTError
from nmt.tokenizer import (
    BOS,
    EOS,
    JOINT_FILE,
    KEPT_FILES,
    ONE_BY_ONE,
    PAD,
    SRC_FILE,
    TGT_FILE,
    UNK,
    Vocab,
    Vocabs,
    clean,
    load_vocabs,
    prune_vocabs,
    train_vocabs,
)

PAIRS = generate_pairs(150, seed=9)
SRC = [s for s, _ in PAIRS]
TGT = [t for _, t in PAIRS]

# Never seen in training: Greek, CJK, an emoji, odd symbols and whitespace
# (all NFKC-stable, since sentencepiece normalises with nmt_nfkc).
UNSEEN = [
    "Ω漢字🙂",
    "  Größe:\t3 × 4  \u00a0 Grüße ",
    "Ein 🙂 sagt mehr als tausend Wörter — 真的!",
    "Čas ∑ ⟨x⟩ \\ {json: [1, 2]} <unk> </s> <pad> _",
]

KINDS = [
    pytest.param(True, PieceModel.unigram, id="joint-unigram"),
    pytest.param(False, PieceModel.unigram, id="separate-unigram"),
    pytest.param(True, PieceModel.bpe, id="joint-bpe"),
    pytest.param(False, PieceModel.bpe, id="separate-bpe"),
]


def _cfg(joint: bool, model_type: PieceModel, **kw) -> TokenizerConfig:
    return TokenizerConfig(joint=joint, model_type=model_type, vocab_size=400, **kw)


def _pieces(vocab: Vocab) -> list[str]:
    return vocab.id_to_piece(list(range(len(vocab))))


@pytest.mark.parametrize(("joint", "model_type"), KINDS)
def test_round_trip_is_exact_with_byte_fallback(tmp_path, joint, model_type):
    vocabs = train_vocabs(SRC, TGT, tmp_path, _cfg(joint, model_type))
    assert vocabs.joint is joint
    for vocab, seen in ((vocabs.src, SRC[:20]), (vocabs.tgt, TGT[:20])):
        texts = seen + UNSEEN
        ids = vocab.encode(texts)
        assert all(UNK not in row for row in ids), "byte fallback must avoid <unk>"
        assert all(0 <= i < len(vocab) for row in ids for i in row)
        assert vocab.decode(ids) == [clean(t) for t in texts]
    # Unseen characters really are spelled in bytes.
    assert any(p.startswith("<0x") for p in vocabs.src.pieces("漢"))


def test_a_few_texts_and_many_encode_and_decode_alike(tmp_path):
    """A few texts go to sentencepiece one at a time (its list calls start threads), more as one
    list: the same ids and texts either way, at any count, none included."""
    vocab = train_vocabs(SRC, TGT, tmp_path, _cfg(True, PieceModel.unigram)).src
    texts = (SRC + UNSEEN)[: 2 * ONE_BY_ONE + 3]
    alone = [vocab.encode([text])[0] for text in texts]
    for n in (0, 1, ONE_BY_ONE, ONE_BY_ONE + 1, len(texts)):
        assert vocab.encode(texts[:n]) == alone[:n]
        assert vocab.decode(alone[:n]) == [vocab.decode([ids])[0] for ids in alone[:n]]
    assert vocab.decode([[]]) == [""] and vocab.decode([]) == []
    assert vocab.decode(alone) == [clean(t) for t in texts]


@pytest.mark.parametrize(("joint", "model_type"), KINDS)
def test_special_ids_and_files(tmp_path, joint, model_type):
    vocabs = train_vocabs(SRC, TGT, tmp_path, _cfg(joint, model_type))
    assert (PAD, UNK, BOS, EOS) == (0, 1, 2, 3)
    for vocab in (vocabs.src, vocabs.tgt):
        sp = vocab.sp
        assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, 2, 3)
        assert vocab.id_to_piece([0, 1, 2, 3]) == ["<pad>", "<unk>", "<s>", "</s>"]
        assert len(vocab) <= 400
        # Special ids are never produced by encoding text.
        assert not {PAD, BOS, EOS} & {i for row in vocab.encode(SRC + TGT) for i in row}
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ([JOINT_FILE] if joint else sorted([SRC_FILE, TGT_FILE]))
    assert [p.name for p in vocabs.files()] == names
    if not joint:
        # Separate models learn their own language: umlauts occur only on the German side.
        assert any("ä" in p for p in _pieces(vocabs.src))
        assert not any("ä" in p for p in _pieces(vocabs.tgt))


@pytest.mark.parametrize(("joint", "model_type"), KINDS)
def test_load_vocabs_reloads_the_same_model(tmp_path, joint, model_type):
    trained = train_vocabs(SRC, TGT, tmp_path / "run", _cfg(joint, model_type))
    copy = tmp_path / "ckpt"
    copy.mkdir()
    for path in trained.files():
        shutil.copy2(path, copy / path.name)
    loaded = load_vocabs(copy)
    assert isinstance(loaded, Vocabs) and loaded.joint is joint
    for old, new in ((trained.src, loaded.src), (trained.tgt, loaded.tgt)):
        assert len(new) == len(old)
        assert _pieces(new) == _pieces(old)
        assert new.digest() == old.digest()
        texts = SRC[:10] + TGT[:10] + UNSEEN
        assert new.encode(texts) == old.encode(texts)


def test_training_is_deterministic(tmp_path):
    for joint, model_type in ((True, PieceModel.unigram), (False, PieceModel.bpe)):
        out = tmp_path / f"{joint}-{model_type.value}"
        first = train_vocabs(SRC, TGT, out, _cfg(joint, model_type))
        before = {p.name: p.read_bytes() for p in first.files()}
        second = train_vocabs(SRC, TGT, out, _cfg(joint, model_type))
        assert {p.name: p.read_bytes() for p in second.files()} == before
        # Elsewhere the file records another model_prefix, but the model itself is the same.
        other = train_vocabs(SRC, TGT, tmp_path / "elsewhere" / out.name, _cfg(joint, model_type))
        assert _pieces(other.src) == _pieces(first.src)
        assert _pieces(other.tgt) == _pieces(first.tgt)
        assert [other.src.sp.GetScore(i) for i in range(len(other.src))] == [
            first.src.sp.GetScore(i) for i in range(len(first.src))
        ]


_SAMPLED_TRAINING = """
import sys
from pathlib import Path
from nmt.config import TokenizerConfig
from nmt.demo import generate_pairs
from nmt.tokenizer import train_vocabs
lines = [s for s, _ in generate_pairs(400, seed=1)]
train_vocabs(lines, lines, Path(sys.argv[1]), TokenizerConfig(vocab_size=400, max_sentences=150))
"""


def test_training_with_sampling_is_deterministic_across_processes(tmp_path):
    models = []
    for _ in range(3):
        subprocess.run(
            [sys.executable, "-c", _SAMPLED_TRAINING, str(tmp_path)], check=True, timeout=60
        )
        models.append((tmp_path / JOINT_FILE).read_bytes())
    assert models[0] == models[1] == models[2]


def test_byte_fallback_off_gives_unk(tmp_path):
    vocabs = train_vocabs(SRC, TGT, tmp_path, _cfg(True, PieceModel.unigram, byte_fallback=False))
    assert UNK in vocabs.src.encode(["Ω漢字🙂"])[0]
    assert not any(p.startswith("<0x") for p in _pieces(vocabs.src))


def test_vocab_size_floor():
    with pytest.raises(NMTError, match="vocab_size=100 must be at least 261"):
        TokenizerConfig(vocab_size=100)
    assert TokenizerConfig(vocab_size=100, byte_fallback=False).vocab_size == 100


def test_too_small_vocabulary_for_the_characters_is_an_nmt_error(tmp_path):
    # 261 passes the config floor, but the corpus has more characters than fit besides bytes.
    with pytest.raises(NMTError, match="sentencepiece training failed: Vocabulary size"):
        train_vocabs(SRC, TGT, tmp_path, TokenizerConfig(vocab_size=261))


def test_max_sentences_samples_and_is_validated(tmp_path):
    with pytest.raises(NMTError, match="max_sentences"):
        TokenizerConfig(vocab_size=400, max_sentences=0)
    vocabs = train_vocabs(SRC, TGT, tmp_path, TokenizerConfig(vocab_size=400, max_sentences=50))
    assert len(vocabs.src) > 0


def test_bad_tokenizer_files(tmp_path):
    with pytest.raises(NMTError, match="no tokenizer"):
        load_vocabs(tmp_path)
    with pytest.raises(NMTError, match="not found"):
        Vocab(tmp_path / "missing.model")
    garbage = tmp_path / "garbage.model"
    garbage.write_bytes(b"this is not a sentencepiece model")
    with pytest.raises(NMTError, match="cannot read tokenizer model"):
        Vocab(garbage)
    # A model trained with sentencepiece's own special ids (unk=0, bos=1, eos=2, no pad).
    spm.SentencePieceTrainer.Train(
        sentence_iterator=iter(SRC),
        model_prefix=str(tmp_path / "foreign"),
        vocab_size=100,
        minloglevel=2,
        num_threads=1,
    )
    with pytest.raises(NMTError, match="not trained by nmt"):
        Vocab(tmp_path / "foreign.model")
    # A directory whose separate models are incomplete (no target model).
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy2(
        train_vocabs(SRC, TGT, tmp_path / "sep", _cfg(False, PieceModel.bpe)).src.path, lone
    )
    with pytest.raises(NMTError, match=TGT_FILE.replace(".", r"\.")):
        load_vocabs(lone)


def test_joint_model_encodes_both_sides_alike(tmp_path):
    vocabs = train_vocabs(SRC, TGT, tmp_path, _cfg(True, PieceModel.unigram))
    assert vocabs.src is vocabs.tgt
    assert vocabs.src.encode(TGT[:5]) == vocabs.tgt.encode(TGT[:5])
    assert Path(vocabs.src.path).name == JOINT_FILE


@pytest.mark.parametrize("joint", [True, False], ids=["joint", "separate"])
def test_pruned_target_keeps_exactly_the_pieces_of_its_training_text(tmp_path, joint):
    full = train_vocabs(SRC, TGT, tmp_path, _cfg(joint, PieceModel.unigram))
    used = {i for row in full.tgt.encode(TGT) for i in row}
    vocabs = prune_vocabs(full, SRC, TGT, tmp_path, shared=False)
    assert len(vocabs.tgt) == len(used | {PAD, UNK, BOS, EOS}) < len(full.tgt)
    assert len(vocabs.src) == len(full.src)  # the source side is untouched
    assert vocabs.joint is False and (tmp_path / KEPT_FILES["tgt"]).is_file()
    # the specials keep their ids; the training text round-trips through the smaller id space
    assert vocabs.tgt.id_to_piece([PAD, UNK, BOS, EOS]) == full.tgt.id_to_piece([0, 1, 2, 3])
    ids = vocabs.tgt.encode(TGT)
    assert all(0 <= i < len(vocabs.tgt) and i != UNK for row in ids for i in row)
    assert vocabs.tgt.decode(ids) == [clean(t) for t in TGT]
    assert [vocabs.tgt.id_to_piece(row) for row in ids] == [full.tgt.pieces(t) for t in TGT]
    assert vocabs.tgt.piece_to_id(full.tgt.pieces(TGT[0])[0]) == ids[0][0]
    # a piece the target text never used is <unk>, not a silently different piece
    assert UNK in vocabs.tgt.encode(["漢"])[0]
    # load_vocabs finds the list again; the digest tells pruned from full
    loaded = load_vocabs(tmp_path)
    assert loaded.tgt.kept == vocabs.tgt.kept and loaded.src.kept is None
    assert loaded.tgt.digest() != full.tgt.digest() and loaded.src.digest() == full.src.digest()
    assert {p.name for p in loaded.files()} >= {KEPT_FILES["tgt"]}
    # a new tokenizer in the same directory drops the old list
    train_vocabs(SRC, TGT, tmp_path, _cfg(joint, PieceModel.unigram))
    assert load_vocabs(tmp_path).tgt.kept is None


def test_shared_embeddings_prune_to_one_id_space_with_the_target_first(tmp_path):
    full = train_vocabs(SRC, TGT, tmp_path, _cfg(True, PieceModel.unigram))
    vocabs = prune_vocabs(full, SRC, TGT, tmp_path, shared=True)
    specials = {PAD, UNK, BOS, EOS}
    used_src = {i for row in full.src.encode(SRC) for i in row}
    used_tgt = {i for row in full.tgt.encode(TGT) for i in row}
    assert used_src - used_tgt, "the test needs source-only pieces"
    # the source keeps the union; the target its own pieces, which are the first source ids
    assert len(vocabs.src) == len(used_src | used_tgt | specials) < len(full.src)
    assert len(vocabs.tgt) == len(used_tgt | specials) < len(vocabs.src)
    assert vocabs.src.kept[: len(vocabs.tgt)] == vocabs.tgt.kept and vocabs.joint
    # a target sentence has the same ids on both sides, all of them inside the target's range
    ids = vocabs.src.encode(TGT[:5])
    assert ids == vocabs.tgt.encode(TGT[:5])
    assert max(i for row in ids for i in row) < len(vocabs.tgt)
    assert vocabs.tgt.decode(ids) == TGT[:5]
    # reloaded from the files, the same vocabularies
    again = load_vocabs(tmp_path)
    assert again.joint and (again.src.kept, again.tgt.kept) == (vocabs.src.kept, vocabs.tgt.kept)


def test_separate_models_are_not_one_id_space(tmp_path):
    full = train_vocabs(SRC, TGT, tmp_path, _cfg(False, PieceModel.unigram))
    assert not full.joint
    assert not prune_vocabs(full, SRC, TGT, tmp_path, shared=False).joint


def test_a_damaged_pruned_list_is_refused(tmp_path):
    full = train_vocabs(SRC, TGT, tmp_path, _cfg(True, PieceModel.unigram))
    prune_vocabs(full, SRC, TGT, tmp_path, shared=False)
    (tmp_path / KEPT_FILES["tgt"]).write_text("7\tx\n3\ty\n")
    with pytest.raises(NMTError, match="not a pruned vocabulary"):
        load_vocabs(tmp_path)
