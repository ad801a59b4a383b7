"""nmt-export of a T5-family import (MADLAD-400-style: `conftest.madlad`): the CTranslate2 model
(relative attention biases, the gated feed-forward, RMSNorm, unscaled attention, heads of their own
width, an output layer of its own) translates as nmt does, greedy and beam, for either target
language (its code first on the source, nothing forced); int8 runs; an import trimmed with
keep_text exports as well; the ONNX and TorchScript graphs decode greedily as nmt does; each
export's README says how to ask for a language."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from nmt.checkpoint import load_checkpoint, save_checkpoint
from nmt.cli import main as cli
from nmt.config import Activation, DecodeConfig, Strategy, TransformerConfig
from nmt.export.graphs import export_graphs
from nmt.export.runtime import greedy, read_manifest
from nmt.models import build_model
from nmt.pretrained.importer import import_model
from nmt.tokenizer import EOS, clean
from nmt.translation.search import decode_all
from nmt.translation.translator import Translator

LANGS = ("en", "de")


def sentences(demo_dir: Path, n: int = 40, lang: str = "de") -> list[str]:
    return (demo_dir / f"test.{lang}").read_text("utf-8").splitlines()[:n]


def decode_of(strategy: Strategy) -> DecodeConfig:
    return DecodeConfig(strategy=strategy, beam_size=4, max_len_a=0.0, max_len_b=40)


def translations(ckpt: Path, decode: DecodeConfig, texts: list[str]) -> dict[str, list[str]]:
    """nmt's translations into each of LANGS; they differ (the code is read)."""
    translator = Translator.from_checkpoint(ckpt, decode, "cpu")
    out = {lang: translator.translate(texts, tgt_lang=lang) for lang in LANGS}
    assert out["en"] != out["de"]
    return out


@pytest.fixture(scope="module")
def ct2_export(madlad, tmp_path_factory) -> Path:
    pytest.importorskip("ctranslate2")
    out = tmp_path_factory.mktemp("t5-ct2") / "ct2"
    assert cli.export([f"ckpt={madlad[1]}", "format=ctranslate2", f"out={out}"]) == 0
    return out


@pytest.mark.parametrize("strategy", [Strategy.greedy, Strategy.beam])
def test_ctranslate2_translates_as_nmt(madlad, demo_dir, ct2_export, strategy):
    """CTranslate2 reads the target's code pieces first on the source and starts from BOS (T5's
    <pad> row) with nothing forced, and writes what nmt writes, with nmt's scores."""
    from nmt.export.ct2 import CT2Translator
    from nmt.translation.request import Request

    texts, decode = sentences(demo_dir), decode_of(strategy)
    want = translations(madlad[1], decode, texts)
    exported = CT2Translator(ct2_export, decode, threads=1)
    for lang in LANGS:
        assert exported.translate(texts, tgt_lang=lang) == want[lang], lang
    ours = Translator.from_checkpoint(madlad[1], decode, "cpu").translate_full(
        texts[:8], False, tgt_lang="de"
    )
    theirs = exported.hypotheses(Request(texts[:8], decode, tgt_lang="de"))
    assert [nbest[0][1] for nbest in theirs] == pytest.approx([t.nbest[0][1] for t in ours],
                                                              abs=1e-4)  # fmt: skip


def test_the_readme_recipe_translates_as_nmt(madlad, demo_dir, ct2_export):
    """By hand, as the README says: the manifest's code pieces before the source pieces, no
    target_prefix; the spec holds T5's options."""
    import ctranslate2

    from nmt.export.ct2 import decode_options

    manifest = read_manifest(ct2_export)
    readme = (ct2_export / "README.md").read_text("utf-8")
    assert manifest["code_style"] == "target_on_source" and manifest["tokenizer"]["kind"] == "t5"
    assert manifest["code_pieces"]["de"] == ["▁", "<2de>"]
    assert "['▁', '<2en>', *pieces[0]]" in readme and "without target_prefix" in readme
    assert "tgt_lang='en'" in readme and "spiece.model" in readme
    config = json.loads((ct2_export / "config.json").read_text("utf-8"))
    assert config["decoder_start_token"] == "<s>" and config["layer_norm_epsilon"] == 1e-6

    texts, decode = sentences(demo_dir, 12), decode_of(Strategy.greedy)
    want = Translator.from_checkpoint(madlad[1], decode, "cpu").translate(texts, tgt_lang="de")
    vocab = load_checkpoint(madlad[1]).vocabs.src
    pieces = [manifest["code_pieces"]["de"] + vocab.sp.Encode(t, out_type=str) for t in texts]
    translator = ctranslate2.Translator(str(ct2_export), device="cpu", intra_threads=1)
    got = []
    for source in pieces:  # one at a time: each its own length limit
        options = decode_options(decode, [len(source) + 1])
        tokens = translator.translate_batch([source], **options)[0].hypotheses[0]
        ids = [vocab.piece_to_id(p) for p in tokens if p != "</s>"]
        got.append(clean(vocab.decode([ids])[0]))
    assert got == want


def test_ctranslate2_int8_runs(madlad, demo_dir, ct2_export, tmp_path):
    """quantization=int8 at export, and compute_type=int8 at run time, both translate."""
    from nmt.export.ct2 import CT2Translator

    texts, decode = sentences(demo_dir, 12), decode_of(Strategy.beam)
    out = tmp_path / "int8"
    args = [f"ckpt={madlad[1]}", "format=ctranslate2", f"out={out}", "quantization=int8"]
    assert cli.export(args) == 0
    assert read_manifest(out)["ctranslate2"]["quantization"] == "int8"
    for directory, compute_type in ((out, "default"), (ct2_export, "int8")):
        got = CT2Translator(directory, decode, threads=1, compute_type=compute_type).translate(
            texts, tgt_lang="de"
        )
        assert len(got) == len(texts) and sum(map(bool, got)) >= len(texts) // 2


def test_a_trimmed_import_exports_as_it_translates(madlad, demo_dir, tmp_path):
    """nmt-import keep_text=[FILE], then format=ctranslate2: greedy and beam as nmt's of it."""
    pytest.importorskip("ctranslate2")
    from nmt.export.ct2 import CT2Translator

    texts = sentences(demo_dir)
    keep = tmp_path / "keep.txt"
    keep.write_text("\n".join(texts + sentences(demo_dir, lang="en")) + "\n", "utf-8")
    trimmed = import_model(str(madlad[0]), tmp_path / "trimmed", keep_text=[str(keep)])
    assert len(load_checkpoint(trimmed).vocabs.tgt) < len(load_checkpoint(madlad[1]).vocabs.tgt)
    out = tmp_path / "ct2"
    assert cli.export([f"ckpt={trimmed}", "format=ctranslate2", f"out={out}"]) == 0
    for strategy in (Strategy.greedy, Strategy.beam):
        decode = decode_of(strategy)
        want = translations(trimmed, decode, texts)
        exported = CT2Translator(out, decode, threads=1)
        for lang in LANGS:
            assert exported.translate(texts, tgt_lang=lang) == want[lang], (strategy, lang)


def test_a_tied_ungated_variant_exports_as_it_translates(madlad, demo_dir, tmp_path):
    """The original T5's shape (the output layer tied to the embeddings, ReLU without a gate),
    made from the twin's weights: CTranslate2 still writes what nmt writes."""
    pytest.importorskip("ctranslate2")
    from nmt.export.ct2 import CT2Translator

    base = load_checkpoint(madlad[1])
    model = replace(base.config.model, tie_output=True, gated=False, activation=Activation.relu)
    state = dict(base.payload["model"])
    del state["decoder.out.weight"]
    for key in [k for k in state if k.endswith("feed_forward.0.weight")]:
        state[key] = state[key][: model.ff_size].clone()  # the gate's half alone
    ckpt = save_checkpoint(tmp_path / "tied", 0, {"model": state},
                           replace(base.config, model=model), base.vocabs)  # fmt: skip
    out = tmp_path / "ct2"
    assert cli.export([f"ckpt={ckpt}", "format=ctranslate2", f"out={out}"]) == 0
    texts = sentences(demo_dir, 24)
    for strategy in (Strategy.greedy, Strategy.beam):
        decode = decode_of(strategy)
        want = Translator.from_checkpoint(ckpt, decode, "cpu").translate(texts, tgt_lang="de")
        assert CT2Translator(out, decode, threads=1).translate(texts, tgt_lang="de") == want


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_exported_graphs_translate_as_nmt(madlad, demo_dir, tmp_path, fmt):
    """format=onnx|torchscript: the step graph reads its position from the caches' length for
    the decoder's relative biases; greedy output equals nmt's for either target language, and
    the README says how to ask for one."""
    pytest.importorskip("onnxruntime" if fmt == "onnx" else "torch")
    from nmt.export.runtime import ExportedTranslator

    out = tmp_path / fmt
    assert cli.export([f"ckpt={madlad[1]}", f"format={fmt}", f"out={out}"]) == 0
    readme = (out / "README.md").read_text("utf-8")
    assert "tgt_lang='en'" in readme and "['▁', '<2en>']" in readme
    assert read_manifest(out)["decoder_step"]["inputs"][1]["shape"][-1] == 16  # head_size
    texts, decode = sentences(demo_dir), decode_of(Strategy.greedy)
    want = translations(madlad[1], decode, texts)
    exported = ExportedTranslator(out, decode, threads=1)
    for lang in LANGS:
        assert exported.translate(texts, tgt_lang=lang) == want[lang], lang


# ---- the graphs of random models with T5's options (no export: milliseconds) --------------------

T5_LIKE = dict(
    d_model=16, heads=4, ff_size=24, encoder_layers=2, decoder_layers=2, head_size=6,
    positions="relative", relative_buckets=8, relative_max_distance=6, norm_type="rms",
    norm_eps=1e-6, gated=True, activation="gelu_tanh", bias=False, scale_attention=False,
    scale_embeddings=False,
)  # fmt: skip
VARIANTS = {
    "t5-untied": TransformerConfig(**T5_LIKE, tie_output=False),
    "t5-tied-relu-ungated": TransformerConfig(
        **{**T5_LIKE, "gated": False, "activation": "relu", "head_size": None}
    ),
    "rms-gated-sinusoidal-biased": TransformerConfig(
        d_model=16, heads=4, ff_size=24, encoder_layers=2, decoder_layers=2, norm_type="rms",
        gated=True, activation="swish",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_the_graphs_decode_as_the_model(name):
    """Greedy decoding through the two graphs gives the tokens and scores of nmt's greedy search,
    for padded batches of random sources longer than the biases' max distance."""
    vocab = 23
    torch.manual_seed(0)
    model = build_model(VARIANTS[name], vocab, vocab, shared_vocab=True).eval()
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 14, (9,), generator=g).tolist()
    src_ids = [torch.randint(4, vocab, (n,), generator=g).tolist() + [EOS] for n in lengths]
    decode = DecodeConfig(max_len_b=14, min_len_b=2)
    expected = decode_all(model, src_ids, decode, torch.device("cpu"))
    graphs = export_graphs(model)
    got = greedy(graphs, graphs.spec.to_json(), src_ids, replace(decode, batch_size=4))
    assert [g.tokens for g in got] == [h[0].tokens for h in expected]
    torch.testing.assert_close(
        torch.tensor([g.score for g in got]), torch.tensor([h[0].score for h in expected])
    )
