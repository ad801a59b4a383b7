"""Training batches in a few fixed shapes (train.length_step): the plan, the padding, and that the
filler changes nothing the model learns from."""

from __future__ import annotations

import logging
import random

import pytest
import torch
from test_train import SMALL_TRANSFORMER, losses, train

from nmt.cli import main as cli
from nmt.config import AttentionType, RNNConfig, TransformerConfig
from nmt.data.batches import collate, epoch_batches, fixed_shape
from nmt.errors import NMTError
from nmt.models import build_model
from nmt.tokenizer import EOS
from nmt.training import trainer as train_module
from nmt.training.loss import batch_loss

V = 29


def corpus(n: int, seed: int) -> tuple[list[list[int]], list[list[int]]]:
    """Random sources (ending in EOS) and bare targets of lengths 1..40."""
    rng = random.Random(seed)
    src = [[rng.randrange(4, V) for _ in range(rng.randint(0, 39))] + [EOS] for _ in range(n)]
    tgt = [[rng.randrange(4, V) for _ in range(rng.randint(1, 40))] for _ in range(n)]
    return src, tgt


@pytest.mark.parametrize("batch_tokens, step", [(600, 8), (1000, 16), (30, 8)])
def test_batches_come_in_one_shape_per_length_and_keep_every_example(batch_tokens, step):
    src, tgt = corpus(400, seed=step)
    src_lens, tgt_lens = [len(s) for s in src], [len(t) for t in tgt]
    plan = epoch_batches(src_lens, tgt_lens, batch_tokens, seed=1, epoch=0, length_step=step)
    assert sorted(i for b in plan for i in b) == list(range(400))
    shapes = set()
    for index in plan:
        batch = fixed_shape(collate(index, src, tgt), batch_tokens, step)
        rows, width = batch.src.shape
        assert batch.tgt_in.shape == batch.tgt_out.shape == (rows, width)
        assert width % step == 0
        # the rows fill the budget, and only an example longer than it gets a batch alone
        assert rows == max(batch_tokens // width, 1)
        assert len(index) <= rows and (len(index) == 1 or rows * width <= batch_tokens)
        assert batch.n_tgt_tokens == sum(len(tgt[i]) + 1 for i in index)
        shapes.add((rows, width))
    widths = {w for _, w in shapes}
    assert len(shapes) == len(widths) <= -(-41 // step)  # one shape per length
    if batch_tokens == 600:
        assert len(plan) > 3 * len(shapes)  # so the shapes repeat


FAMILIES = {
    "gru-bahdanau": RNNConfig(emb_size=16, hidden_size=16, attention=AttentionType.additive),
    "lstm-luong-feeding": RNNConfig(
        emb_size=16, hidden_size=16, cell="lstm", decoder="luong", input_feeding=True
    ),
    "transformer": TransformerConfig(d_model=16, heads=2, ff_size=32, encoder_layers=2),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_filler_rows_change_neither_the_loss_nor_the_gradients(family):
    torch.manual_seed(0)
    model = build_model(FAMILIES[family], V, V, shared_vocab=True).eval()  # no dropout: compare
    src, tgt = corpus(6, seed=3)
    plain = collate(list(range(6)), src, tgt)
    fixed = fixed_shape(plain, batch_tokens=500, length_step=16)
    assert fixed.src.size(0) > plain.src.size(0) and fixed.src.size(1) > plain.src.size(1)
    results = []
    for batch in (plain, fixed):
        model.zero_grad()
        loss, nll = batch_loss(model, batch, smoothing=0.1)
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        results.append((loss.detach(), nll.detach(), grads))
    (loss_a, nll_a, grads_a), (loss_b, nll_b, grads_b) = results
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(nll_b, nll_a, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads_a, grads_b, strict=True):
        assert torch.isfinite(b).all()
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_training_sees_only_the_fixed_shapes(tmp_path, demo_dir, monkeypatch):
    real, shapes = train_module.batch_loss, []

    def recorded(model, batch, smoothing, guide=None):
        shapes.append((tuple(batch.src.shape), tuple(batch.tgt_in.shape)))
        return real(model, batch, smoothing, guide)

    monkeypatch.setattr(train_module, "batch_loss", recorded)
    extra = ["train.max_steps=12", "train.valid_every=12", "train.length_step=8"]
    train(tmp_path / "run", demo_dir, *extra, model=["model=transformer_small", *SMALL_TRANSFORMER])
    assert len(shapes) == 12
    for (rows, width), tgt_shape in shapes:
        assert tgt_shape == (rows, width) and width % 8 == 0 and rows == 600 // width


def test_cuda_graphs_need_compile():
    with pytest.raises(NMTError, match="train.compile=true"):
        cli.compose_config("train", ["train.cuda_graphs=true"])


@pytest.mark.slow  # two torch.compile runs: minutes on 2 CPU cores
def test_cuda_graphs_on_the_cpu_warn_and_leave_the_losses_as_compiled(tmp_path, demo_dir, caplog):
    """On the CPU train.cuda_graphs=true is accepted (with its fixed shapes) and changes nothing
    but a warning: the losses of a compiled run, within float tolerance (two compilations may
    order float sums differently: 2e-7 apart where measured). train.length_step=64 puts every
    demo batch in one shape (9 rows of 64), so each run compiles once."""
    common = [
        "train.compile=true", "train.length_step=64", "train.max_steps=3", "train.log_every=1",
        "train.valid_every=3", "train.valid_bleu=false", "train.metric=loss",
    ]  # fmt: skip
    model = ["model=transformer_small", *SMALL_TRANSFORMER, "model.dropout=0.0"]
    model += ["model.attention_dropout=0.0"]
    train(tmp_path / "compiled", demo_dir, *common, model=model)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        train(tmp_path / "graphs", demo_dir, *common, "train.cuda_graphs=true", model=model)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "train.cuda_graphs has no effect on cpu: the step runs compiled" in warnings
    compiled, graphs = losses(tmp_path / "compiled"), losses(tmp_path / "graphs")
    assert sorted(graphs) == [1, 2, 3]
    assert graphs == pytest.approx(compiled, rel=1e-5)
