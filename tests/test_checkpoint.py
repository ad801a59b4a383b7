"""Behavioural tests for checkpoint directories (nmt.checkpoint): round trip, links, pruning,
crash safety and the errors a damaged checkpoint gives."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import nmt.checkpoint as checkpoint_module
from nmt.checkpoint import (
    CKPT_FILE,
    CONFIG_FILE,
    load_checkpoint,
    point,
    prune,
    save_checkpoint,
    step_name,
)
from nmt.config import (
    AttentionType,
    Cell,
    DataConfig,
    DecoderStyle,
    RNNConfig,
    TokenizerConfig,
    TransformerConfig,
)
from nmt.data.batches import collate
from nmt.data.splits import Corpus, encode
from nmt.demo import generate_pairs
from nmt.errors import NMTError
from nmt.models import build_model, restore_model
from nmt.run_config import TrainRunConfig
from nmt.tokenizer import JOINT_FILE, Vocabs, train_vocabs

PAIRS = generate_pairs(60, seed=4)
CPU = torch.device("cpu")


def _vocabs(directory: Path, joint: bool = True, vocab_size: int = 400) -> Vocabs:
    cfg = TokenizerConfig(joint=joint, vocab_size=vocab_size)
    return train_vocabs([s for s, _ in PAIRS], [t for _, t in PAIRS], directory, cfg)


def _config(tmp_path: Path, **model) -> TrainRunConfig:
    model_cfg = RNNConfig(**{"emb_size": 16, "hidden_size": 16, "dropout": 0.0, **model})
    data = DataConfig(name="toy", src_lang="de", tgt_lang="en", local_dir=str(tmp_path / "data"))
    return TrainRunConfig(data=data, model=model_cfg, run_dir=str(tmp_path / "run"), device="cpu")


def _model(cfg: TrainRunConfig, vocabs: Vocabs, seed: int = 0):
    torch.manual_seed(seed)
    return build_model(cfg.model, len(vocabs.src), len(vocabs.tgt)).eval()


def _batch(vocabs: Vocabs):
    corpus = Corpus([s for s, _ in PAIRS[:5]], [t for _, t in PAIRS[:5]])
    enc = encode(corpus, vocabs)
    return collate(list(range(5)), enc.src, enc.tgt)


def _logits(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return model(batch.src, batch.src_lens, batch.tgt_in)[0]


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models: extra intra-op threads only contend with each other on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def setup(tmp_path):
    vocabs = _vocabs(tmp_path / "vocab")
    cfg = _config(tmp_path)
    return tmp_path / "checkpoints", cfg, vocabs


def _save(root: Path, step: int, cfg: TrainRunConfig, vocabs: Vocabs, seed: int = 0) -> Path:
    model = _model(cfg, vocabs, seed)
    return save_checkpoint(root, step, {"model": model.state_dict()}, cfg, vocabs)


def _visible(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


# --------------------------------------------------------------------------------------------
# Round trip


MODELS = [
    pytest.param({}, True, id="gru-additive-bahdanau-joint"),
    pytest.param(
        {"cell": Cell.lstm, "attention": AttentionType.dot, "decoder": DecoderStyle.luong},
        False,
        id="lstm-dot-luong-separate",
    ),
    pytest.param(
        {"attention": AttentionType.multihead, "heads": 4, "encoder_layers": 2},
        True,
        id="gru-multihead-2layer-joint",
    ),
]


@pytest.mark.parametrize(("model_kw", "joint"), MODELS)
def test_round_trip_gives_identical_logits(tmp_path, model_kw, joint):
    vocabs = _vocabs(tmp_path / "vocab", joint=joint)
    cfg = _config(tmp_path, **model_kw)
    model = _model(cfg, vocabs, seed=3)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch = _batch(vocabs)
    model.train()
    model(batch.src, batch.src_lens, batch.tgt_in)[0].logsumexp(-1).mean().backward()
    optimizer.step()  # a real optimizer state (tensors per parameter) goes into the payload
    model.eval()
    payload = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "progress": {"step": 7, "epoch": 1, "position": 3, "best": None, "bad_validations": 0},
        "rng": {"torch": torch.get_rng_state(), "cuda": []},
        "metrics": {"bleu": 12.5, "loss": 3.25},
    }
    root = tmp_path / "checkpoints"
    path = save_checkpoint(root, 7, payload, cfg, vocabs)

    assert path == root / step_name(7) == root / "step-00000007"
    expected_files = {CKPT_FILE, CONFIG_FILE} | {p.name for p in vocabs.files()}
    assert set(_visible(path)) == expected_files
    assert _visible(root) == ["step-00000007"]  # no temporary directories left behind

    # A plain, safe torch.load works: the checkpoint holds only primitives and tensors.
    raw = torch.load(path / CKPT_FILE, weights_only=True)
    assert raw["step"] == 7 and raw["metrics"] == {"bleu": 12.5, "loss": 3.25}

    ckpt = load_checkpoint(path)
    assert ckpt.config == cfg
    assert ckpt.vocabs.joint is joint
    assert ckpt.payload["progress"]["position"] == 3
    restored = restore_model(ckpt, CPU)
    assert not restored.training
    assert torch.equal(_logits(restored, batch), _logits(model, batch))
    state = ckpt.payload["optimizer"]["state"]
    assert state and all(torch.is_tensor(s["exp_avg"]) for s in state.values())

    # The ckpt.pt path and a `last` link load the same checkpoint.
    point(root, "last", path)
    for alias in (path / CKPT_FILE, root / "last"):
        again = restore_model(load_checkpoint(alias), CPU)
        assert torch.equal(_logits(again, batch), _logits(model, batch))


@pytest.mark.parametrize("family", ["gru-tied", "transformer"])
def test_a_restored_model_shares_what_the_built_one_shares_and_takes_tensors_only_when_told(
    tmp_path, family
):
    """restore_model builds on the meta device and loads the saved tensors as the parameters:
    tied weights are one parameter again (a GRU's output layer and target embedding; the
    Transformer's one table for both sides), the sinusoids are computed, the logits are the
    saved model's; the model copies the checkpoint's tensors unless it is told to take them
    (and then the checkpoint lets them go)."""
    vocabs = _vocabs(tmp_path / "vocab")
    cfg = _config(tmp_path, tie_embeddings=True)
    if family == "transformer":
        model_cfg = TransformerConfig(d_model=16, heads=2, ff_size=32, encoder_layers=1,
                                      decoder_layers=1, dropout=0.0)  # fmt: skip
        cfg = replace(cfg, model=model_cfg)
    torch.manual_seed(4)
    model = build_model(cfg.model, len(vocabs.src), len(vocabs.tgt), vocabs.joint).eval()
    path = save_checkpoint(tmp_path / "ckpts", 1, {"model": model.state_dict()}, cfg, vocabs)
    ckpt = load_checkpoint(path)
    batch = _batch(vocabs)
    for take in (False, True):
        saved = {t.data_ptr() for t in ckpt.payload["model"].values()}
        restored = restore_model(ckpt, CPU, take)
        assert len(list(restored.parameters())) == len(list(model.parameters()))
        assert torch.equal(_logits(restored, batch), _logits(model, batch))
        held = {p.data_ptr() for p in restored.parameters()}
        assert (held <= saved) if take else not (held & saved)
    assert ckpt.payload["model"] == {}  # taken: the checkpoint holds the tensors no more
    if family == "gru-tied":
        assert restored.decoder.out.weight is restored.decoder.embed.weight
    else:
        assert restored.encoder.embed.table is restored.decoder.embed.table
        assert not restored.decoder.embed.fixed.is_meta


def test_resaving_a_step_writes_a_new_directory_and_never_touches_the_old(setup):
    root, cfg, vocabs = setup
    old = _save(root, 5, cfg, vocabs, seed=1)
    before = (old / "ckpt.pt").read_bytes()
    path = _save(root, 5, cfg, vocabs, seed=2)
    assert _visible(root) == ["step-00000005", "step-00000005-1"]
    assert (old / "ckpt.pt").read_bytes() == before
    expected = _model(cfg, vocabs, seed=2)
    batch = _batch(vocabs)
    restored = restore_model(load_checkpoint(path), CPU)
    assert torch.equal(_logits(restored, batch), _logits(expected, batch))


# --------------------------------------------------------------------------------------------
# Links and pruning


def test_point_makes_relative_symlinks(setup):
    root, cfg, vocabs = setup
    first = _save(root, 1, cfg, vocabs)
    second = _save(root, 2, cfg, vocabs)
    point(root, "last", first)
    assert (root / "last").is_symlink()
    assert os.readlink(root / "last") == first.name  # relative: the run dir can move
    point(root, "last", second)  # replaced in place
    assert (root / "last").resolve() == second.resolve()
    point(root, "best", first)
    assert _visible(root) == ["best", "last", "step-00000001", "step-00000002"]
    moved = root.parent / "moved"
    shutil.move(str(root), moved)
    assert load_checkpoint(moved / "best").path == moved / "best"
    assert (moved / "best").resolve() == (moved / first.name).resolve()


@pytest.mark.parametrize(
    ("keep_last", "kept"),
    [(2, [2, 4, 5]), (0, [2, 5]), (1, [2, 5]), (3, [2, 3, 4, 5]), (10, [1, 2, 3, 4, 5])],
)
def test_prune_keeps_newest_and_linked(setup, keep_last, kept):
    root, cfg, vocabs = setup
    paths = {step: _save(root, step, cfg, vocabs) for step in range(1, 6)}
    point(root, "best", paths[2])
    point(root, "last", paths[5])
    stray = root / ".step-00000009.tmp-1"
    stray.mkdir()
    prune(root, keep_last)
    assert sorted(p.name for p in root.glob("step-*")) == [step_name(s) for s in kept]
    assert stray.is_dir()  # only step directories are pruned
    assert load_checkpoint(root / "best").payload["step"] == 2
    assert load_checkpoint(root / "last").payload["step"] == 5


def test_prune_orders_steps_numerically(setup):
    root, cfg, vocabs = setup
    for step in (9, 10, 100, 1000):  # zero-padded names sort like numbers
        _save(root, step, cfg, vocabs)
    prune(root, 2)
    assert sorted(p.name for p in root.glob("step-*")) == [step_name(100), step_name(1000)]


# --------------------------------------------------------------------------------------------
# Crash safety


def _crashing_save(obj, f, *args, **kwargs):
    f.write(b"PK\x03\x04 half a checkpoint")
    f.flush()
    raise OSError("simulated crash: disk full")


@pytest.mark.parametrize("same_step", [False, True])
def test_crash_during_save_keeps_previous_checkpoint(setup, monkeypatch, same_step):
    root, cfg, vocabs = setup
    good = _save(root, 1, cfg, vocabs, seed=1)
    point(root, "last", good)
    before = {p.name: p.read_bytes() for p in good.iterdir()}
    model = _model(cfg, vocabs, seed=1)

    monkeypatch.setattr(checkpoint_module.torch, "save", _crashing_save)
    with pytest.raises(NMTError, match="simulated crash.*intact"):
        _save(root, 1 if same_step else 2, cfg, vocabs, seed=2)
    monkeypatch.undo()

    assert sorted(p.name for p in root.glob("step-*")) == ["step-00000001"]
    assert {p.name: p.read_bytes() for p in good.iterdir()} == before
    assert os.readlink(root / "last") == good.name
    batch = _batch(vocabs)
    last = load_checkpoint(root / "last")
    assert last.payload["step"] == 1
    assert torch.equal(_logits(restore_model(last, CPU), batch), _logits(model, batch))

    # Retrying the failed save works, and clears away the half-written attempt.
    step = 1 if same_step else 2
    path = _save(root, step, cfg, vocabs, seed=2)
    assert load_checkpoint(path).payload["step"] == step
    assert not list(root.glob(".*tmp*"))


def test_crash_while_copying_tokenizer_keeps_previous_checkpoint(setup, monkeypatch):
    root, cfg, vocabs = setup
    good = _save(root, 1, cfg, vocabs)
    point(root, "last", good)

    def crash(*args, **kwargs):
        raise OSError("simulated crash in copy")

    monkeypatch.setattr(checkpoint_module.shutil, "copy2", crash)
    with pytest.raises(NMTError):
        _save(root, 2, cfg, vocabs)
    monkeypatch.undo()
    assert not (root / step_name(2)).exists()
    assert load_checkpoint(root / "last").payload["step"] == 1


def test_crash_while_resaving_a_step_keeps_the_old_one_and_last(setup, monkeypatch):
    root, cfg, vocabs = setup
    good = _save(root, 3, cfg, vocabs)
    point(root, "last", good)
    before = (good / "ckpt.pt").read_bytes()

    def rename(src, dst):
        raise OSError("simulated crash at the final rename")

    monkeypatch.setattr(checkpoint_module.os, "rename", rename)
    with pytest.raises(NMTError):
        _save(root, 3, cfg, vocabs, seed=2)
    monkeypatch.undo()
    assert (good / "ckpt.pt").read_bytes() == before
    assert load_checkpoint(root / "last").payload["step"] == 3
    assert _visible(root) == ["last", good.name]
    assert not [p for p in root.iterdir() if ".tmp-" in p.name]  # nothing half-written left


# --------------------------------------------------------------------------------------------
# Errors


def test_missing_path(tmp_path):
    missing = tmp_path / "no" / "such" / "ckpt"
    with pytest.raises(NMTError, match="checkpoint not found") as info:
        load_checkpoint(missing)
    assert str(missing) in str(info.value)


def test_directory_without_ckpt(setup):
    root, cfg, vocabs = setup
    root.mkdir()
    with pytest.raises(NMTError, match=r"not a checkpoint directory \(no ckpt\.pt"):
        load_checkpoint(root)
    # The parent of the step directories is not a checkpoint either.
    _save(root, 1, cfg, vocabs)
    with pytest.raises(NMTError, match="not a checkpoint directory"):
        load_checkpoint(root)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_ckpt(setup, damage):
    root, cfg, vocabs = setup
    path = _save(root, 1, cfg, vocabs)
    data = (path / CKPT_FILE).read_bytes()
    damaged = {"truncate": data[: len(data) // 2], "garbage": b"\x00junk" * 50, "empty": b""}
    (path / CKPT_FILE).write_bytes(damaged[damage])
    with pytest.raises(NMTError, match="corrupt or truncated") as info:
        load_checkpoint(path)
    assert str(path / CKPT_FILE) in str(info.value)


def test_foreign_payload(setup):
    root, cfg, vocabs = setup
    path = _save(root, 1, cfg, vocabs)
    torch.save({"state_dict": {}}, path / CKPT_FILE)  # e.g. another toolkit's checkpoint
    with pytest.raises(NMTError, match="not an nmt checkpoint of format 1"):
        load_checkpoint(path)
    torch.save([1, 2, 3], path / CKPT_FILE)
    with pytest.raises(NMTError, match="not an nmt checkpoint"):
        load_checkpoint(path)


def test_unsafe_pickle_is_refused(setup):
    root, cfg, vocabs = setup
    path = _save(root, 1, cfg, vocabs)
    payload = torch.load(path / CKPT_FILE, weights_only=True)
    payload["extra"] = Path("/etc/passwd")  # an arbitrary Python object: not weights-only
    torch.save(payload, path / CKPT_FILE)
    with pytest.raises(NMTError, match="cannot read"):
        load_checkpoint(path)


def test_replaced_tokenizer_is_detected(setup, tmp_path):
    root, cfg, vocabs = setup
    path = _save(root, 1, cfg, vocabs)
    other = _vocabs(tmp_path / "other", vocab_size=330)
    assert len(other.src) != len(vocabs.src)
    shutil.copy2(other.src.path, path / JOINT_FILE)
    with pytest.raises(NMTError, match=r"tokenizer .* is not the one .*different vocabulary"):
        load_checkpoint(path)
    (path / JOINT_FILE).unlink()
    with pytest.raises(NMTError, match="no tokenizer"):
        load_checkpoint(path)


def test_same_size_retrained_tokenizer_is_detected(setup, tmp_path):
    root, cfg, vocabs = setup
    path = _save(root, 1, cfg, vocabs)
    pairs = generate_pairs(60, seed=5)  # other sentences: same vocabulary size, other pieces
    src, tgt = [s for s, _ in pairs], [t for _, t in pairs]
    other = train_vocabs(src, tgt, tmp_path / "other", TokenizerConfig(vocab_size=400))
    assert len(other.src) == len(vocabs.src)
    assert other.src.id_to_piece(list(range(len(other.src)))) != vocabs.src.id_to_piece(
        list(range(len(vocabs.src)))
    )
    shutil.copy2(other.src.path, path / JOINT_FILE)
    with pytest.raises(NMTError, match="different vocabulary"):
        load_checkpoint(path)


def test_config_problems(setup):
    root, cfg, vocabs = setup
    path = _save(root, 1, cfg, vocabs)
    text = (path / CONFIG_FILE).read_text(encoding="utf-8")

    (path / CONFIG_FILE).write_text(text.replace("cell: gru", "cell: transformer"))
    with pytest.raises(NMTError, match="does not match the config schema"):
        load_checkpoint(path)

    (path / CONFIG_FILE).write_text(text.replace("arch: rnn", "arch: cnn"))
    with pytest.raises(NMTError, match="unknown model.arch 'cnn'"):
        load_checkpoint(path)

    (path / CONFIG_FILE).unlink()
    with pytest.raises(NMTError, match="has no config.yaml"):
        load_checkpoint(path)


def test_an_interpolation_in_a_checkpoints_config_is_refused_not_resolved(setup, monkeypatch):
    """A checkpoint's config is data: `${oc.env:NAME}` in it would put the reader's environment
    variable into the config (nmt-serve's /info shows data.name), and is refused by name, in
    config.yaml as in an import's decode options, before any work."""
    from nmt.cli.compose import checkpoint_options

    root, cfg, vocabs = setup
    path = _save(root, 1, cfg, vocabs)
    monkeypatch.setenv("NMT_TEST_SECRET_KEY", "s3cret")
    text = (path / CONFIG_FILE).read_text(encoding="utf-8")
    assert "name: toy" in text
    (path / CONFIG_FILE).write_text(
        text.replace("name: toy", "name: ${oc.env:NMT_TEST_SECRET_KEY}")
    )
    with pytest.raises(NMTError, match=r"data\.name is '\$\{oc.env:NMT_TEST_SECRET_KEY\}'") as err:
        load_checkpoint(path)
    assert "s3cret" not in str(err.value)
    (path / CONFIG_FILE).write_text(text)
    assert load_checkpoint(path).config.data.name == "toy"
    (path / "decode").mkdir()
    (path / "decode" / "imported.yaml").write_text("beam_size: 4\nbanned: ['${oc.env:HOME}']\n")
    with pytest.raises(NMTError, match=r"banned\[0\] is .*an interpolation"):
        checkpoint_options("translate", [f"ckpt={path}"])


def test_weights_that_do_not_fit_the_config(setup):
    root, cfg, vocabs = setup
    path = _save(root, 1, cfg, vocabs)
    bigger = replace(cfg, model=replace(cfg.model, hidden_size=32))
    (path / CONFIG_FILE).unlink()
    checkpoint_module.save_run_config(bigger, path / CONFIG_FILE)
    ckpt = load_checkpoint(path)
    with pytest.raises(NMTError, match="do not fit its config/vocabulary"):
        restore_model(ckpt, CPU)
