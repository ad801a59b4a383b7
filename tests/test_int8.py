"""decode.precision=int8 (nmt/models/int8.py): int8 products within their rounding of fp32 ones,
every family and an ensemble searched on an int8 copy (the fp32 model untouched), the copy made
once per version of the weights, the same outputs on an AVX2-only CPU, a trained model's BLEU
within a stated bound of fp32, and every place int8 cannot run refuses it by name. Named
"precision" so that `make test-avx2` runs them again with torch limited to AVX2."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from sacrebleu.metrics import BLEU
from test_search import FAMILIES, V, random_model, random_sources

from nmt.config import DecodeConfig, Precision, Strategy
from nmt.device import check_precision
from nmt.errors import NMTError
from nmt.models.ensemble import Ensemble
from nmt.models.int8 import Int8Linear, Int8Product, int8_copy, quantize
from nmt.translation.search import decode_all
from nmt.translation.translator import Translator

CPU = torch.device("cpu")
INT8 = DecodeConfig(precision=Precision.int8, max_len_a=1.0, max_len_b=4)
BEAM = replace(INT8, strategy=Strategy.beam, beam_size=3, n_best=2)


def test_precision_int8_products_are_within_their_rounding_of_fp32():
    """Per-row weight scales and per-row input scales, 7 bits each: a weight is off by at most
    half a step, its row's largest magnitude / 126, an input by its row's largest / 126, so
    each output is off by at most sum_i |x_i| dw + |w_i| dx + dx dw."""
    g = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(40, 24, generator=g), torch.randn(40, generator=g)
    x = torch.randn(7, 5, 24, generator=g)
    exact = x @ weight.t() + bias
    got = Int8Product(weight, bias)(x)
    assert got.shape == exact.shape == (7, 5, 40)
    dw = weight.abs().amax(dim=1) / 126  # (40,)
    dx = x.abs().amax(dim=-1, keepdim=True) / 126  # (7, 5, 1)
    bound = x.abs().sum(-1, keepdim=True) * dw + dx * weight.abs().sum(1) + 24 * dx * dw
    assert bool(((got - exact).abs() <= bound * 1.0001).all())
    assert not torch.equal(got, exact)  # it is int8 arithmetic, not a copy of fp32


@pytest.mark.parametrize("family", FAMILIES)
def test_precision_int8_searches_an_int8_copy_and_leaves_the_model_fp32(family):
    model, sources = random_model(family), random_sources(3, 6)
    fp32 = decode_all(model, sources, replace(BEAM, precision=Precision.fp32), CPU)
    int8_beam = decode_all(model, sources, BEAM, CPU)
    assert all(nbest for nbest in int8_beam)
    # greedy, one sentence a batch, as it is stepped through below: the same shapes, the same
    # numbers (a beam's other rows would move the fp32 parts by a last bit, and quantization
    # can turn that into a step of its own)
    int8 = decode_all(model, sources, replace(INT8, batch_size=1), CPU)
    copy = int8_copy(model)
    assert any(isinstance(m, Int8Linear) for m in copy.modules())
    assert not any(isinstance(m, Int8Linear) for m in model.modules())
    # the copy holds the model's fp32 tensors, not copies of them: int8 adds int8 weights only
    held = {t.data_ptr() for t in (*model.parameters(), *model.buffers())}
    assert {t.data_ptr() for t in (*copy.parameters(), *copy.buffers())} == held
    assert decode_all(model, sources, replace(BEAM, precision=Precision.fp32), CPU) == fp32
    # the int8 search is the int8 model's: its scores are the sum of the copy's own steps
    for source, nbest in zip(sources, int8):
        for hyp in nbest:
            produced = hyp.tokens + [3] * hyp.ended  # EOS
            with torch.inference_mode():
                src = torch.tensor([source])
                state = copy.init_state(copy.encode(src, torch.tensor([len(source)])))
                score = 0.0
                for prev, token in zip([2, *produced], produced):  # BOS
                    logits, _, state = copy.decode_step(torch.tensor([prev]), state)
                    score += float(logits.log_softmax(-1)[0, token])
            assert hyp.score == pytest.approx(score, abs=1e-4)


def test_precision_int8_a_rows_product_does_not_depend_on_its_batch():
    """Each input row is quantized by its own magnitude (`Int8Product`): a row's product is the
    same numbers alone or beside rows a hundred times larger (a scale shared by the batch would
    coarsen it). A translation can still move with its batch, as in fp32 by a last bit of the
    fp32 parts (attention, layer norms), which a quantization step may turn into 1/63 of a row's
    magnitude: int8 is measured by BLEU, not by equal bytes."""
    g = torch.Generator().manual_seed(1)
    weight, x = torch.randn(30, 16, generator=g), torch.randn(5, 16, generator=g)
    product = Int8Product(weight, torch.randn(30, generator=g))
    assert torch.equal(product(x)[:1], product(x[:1]))
    assert torch.equal(product(x * 3)[2], product(torch.stack([x[2] * 3, x[0] * 100]))[0])
    assert torch.equal(product(torch.zeros(2, 16)), product.bias.expand(2, 30))


def test_precision_int8_a_shortlists_rows_are_the_products_rows():
    """A shortlist's output rows are the int8 columns and scales of the output layer as they
    are: the same numbers as quantizing those fp32 rows afresh, without reading them."""
    g = torch.Generator().manual_seed(1)
    weight, bias = torch.randn(50, 16, generator=g), torch.randn(50, generator=g)
    x, ids = torch.randn(6, 16, generator=g), torch.tensor([0, 5, 17, 49])
    rows = Int8Product(weight, bias).rows(ids)
    assert torch.equal(rows(x), Int8Product(weight[ids], bias[ids])(x))
    assert rows(x).shape == (6, 4)


def test_precision_int8_only_holds_no_fp32_product_weights_and_translates_as_the_copy(
    train_small, demo_dir
):
    """A checkpoint loaded from its directory with decode.precision=int8 is held in int8
    instead of fp32 (a Transformer's): no fp32 weight in its products, and the same translations
    and scores as the int8 copy made beside the fp32 weights, with and without a shortlist; a
    call in fp32 is refused by name. A recurrent model keeps its fp32 weights (its piece tables
    are built from them)."""
    from nmt.checkpoint import load_checkpoint

    path = train_small("transformer")
    beam = DecodeConfig(strategy=Strategy.beam, beam_size=3, precision=Precision.int8)
    only = Translator.from_checkpoint(path, beam, "cpu")
    beside = Translator.from_checkpoint(load_checkpoint(path), beam, "cpu")
    assert only.int8_only and not beside.int8_only
    products = [m for m in only.model.modules() if isinstance(m, Int8Linear)]
    assert products and all(m.weight is None for m in products)
    fp32_bytes = sum(p.numel() * p.element_size() for p in beside.model.parameters())
    assert sum(p.numel() * p.element_size() for p in only.model.parameters()) < fp32_bytes
    lines = (demo_dir / "test.de").read_text(encoding="utf-8").splitlines()[:40]
    for decode in (beam, replace(beam, strategy=Strategy.greedy), replace(beam, shortlist=30)):
        assert only.translate(lines, decode=decode) == beside.translate(lines, decode=decode)
    greedy = replace(beam, strategy=Strategy.greedy)
    found = only.translate_full(lines, decode=greedy)
    scored = only.score(lines, [t.text for t in found])
    assert [s.score for s in scored] == [
        s.score for s in beside.score(lines, [t.text for t in found])
    ]
    # teacher forcing runs the search's int8 products: the search's own score, but where a
    # last bit of fp32 upstream moves a rounding to int8
    assert [s.score for s in scored] == pytest.approx([t.score for t in found], abs=0.05)
    with pytest.raises(NMTError, match="holds int8 weights only; load it with decode.precision"):
        only.translate(lines[:1], decode=replace(beam, precision=Precision.fp32))
    assert not Translator.from_checkpoint(train_small("gru"), beam, "cpu").int8_only


def test_precision_int8_copy_is_made_once_per_version_of_the_weights():
    model = random_model("gru-bahdanau")
    first = int8_copy(model)
    assert int8_copy(model) is first
    with torch.no_grad():
        model.decoder.out.bias.add_(1.0)
    assert int8_copy(model) is not first


def test_precision_int8_ensembles_and_shortlists_run_on_int8_members():
    from test_ensemble import random_lexicon

    ensemble = Ensemble([random_model("gru-bahdanau"), random_model("transformer")])
    sources = random_sources(5, 5)
    out = decode_all(ensemble, sources, replace(BEAM, shortlist=2), CPU, lexicon=random_lexicon(1))
    assert all(nbest for nbest in out)
    members = list(int8_copy(ensemble).members)
    assert all(any(isinstance(m, Int8Linear) for m in member.modules()) for member in members)


def test_precision_int8_products_are_the_same_on_an_avx2_only_cpu():
    """oneDNN has AVX2, AVX-512 and VNNI int8 kernels; with 7 bits on both sides all of them
    sum the same integers, so an int8 product gives the same numbers where torch may use AVX2
    alone (the fp32 parts of a model keep fp32's own agreement across kernels). 8-bit weights
    fail this test: AVX2's int16 sums saturate."""
    script = (
        "import sys, torch; from nmt.models.int8 import Int8Product; "
        "g = torch.Generator().manual_seed(3); w = torch.randn(300, 64, generator=g); "
        "x = torch.randn(40, 64, generator=g); b = torch.randn(300, generator=g); "
        "sys.stdout.write(Int8Product(w, b)(x).numpy().tobytes().hex())"
    )
    runs = {}
    for isa in ("default", "avx2"):
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        if isa == "avx2":
            env.update(ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2")
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, check=True)  # fmt: skip
        runs[isa] = done.stdout
    assert runs["avx2"] == runs["default"] and len(runs["default"]) == 40 * 300 * 8


def test_precision_int8_keeps_a_trained_models_bleu(train_small, demo_dir):
    """The demo GRU and Transformer (150 updates), beam 4, 200 demo test sentences: int8 BLEU
    within 1.0 of fp32 (docs/benchmarks.md measures Multi30k models)."""
    lines = (demo_dir / "test.de").read_text(encoding="utf-8").splitlines()[:200]
    refs = (demo_dir / "test.en").read_text(encoding="utf-8").splitlines()[:200]
    beam = DecodeConfig(strategy=Strategy.beam, beam_size=4)
    for family in ("gru", "transformer"):
        translator = Translator.from_checkpoint(train_small(family), beam, "cpu")
        fp32 = BLEU().corpus_score(translator.translate(lines), [refs]).score
        int8 = translator.translate(lines, decode=replace(beam, precision=Precision.int8))
        assert abs(BLEU().corpus_score(int8, [refs]).score - fp32) <= 1.0, family


def test_precision_int8_is_refused_where_it_cannot_run():
    from nmt.config import TrainConfig
    from nmt.export.runtime import check_greedy

    with pytest.raises(NMTError, match="train.precision=int8: int8 is a decoding setting"):
        check_precision(CPU, Precision.int8)
    with pytest.raises(NMTError, match="train.precision=int8: int8 is a decoding setting"):
        TrainConfig(precision=Precision.int8)
    with pytest.raises(NMTError, match="decode.precision=int8 runs on the CPU"):
        check_precision(torch.device("cuda"), Precision.int8, "decode.precision")
    with pytest.raises(NMTError, match="decode.precision=int8 is not supported"):
        check_greedy(DecodeConfig(precision=Precision.int8))
    with pytest.raises(NMTError, match="decode.precision=int8 scores a Transformer only"):
        from nmt.translation.scoring import score_ids

        score_ids(random_model("gru-bahdanau"), [[4, 3]], [[5]], INT8, CPU)
    with pytest.raises(NMTError, match="runs on the CPU"):
        quantize(torch.nn.Linear(2, 2).to("meta"))
    assert V > 0
