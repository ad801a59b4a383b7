"""A model trained with target tags (tests/test_corpora.py's toy one-to-many model, here a small
Transformer) keeps its target language wherever a text is translated or scored: the exported
runtimes (TorchScript and CTranslate2, through the manifest's target_tags), nmt-score, the
reranker (with banned phrases and constraints) and scripts/rerank_tune.py. Each gives what the
Translator gives with the same tgt_lang, and names the model's languages when given one it lacks,
or none."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from test_corpora import BASE, BB, TAGGED, TAGS, write_toy

from nmt.checkpoint import load_checkpoint
from nmt.cli import main as cli
from nmt.config import DecodeConfig, Strategy
from nmt.errors import NMTError
from nmt.export.exporter import export_checkpoint
from nmt.export.runtime import ExportedTranslator, read_manifest
from nmt.run_config import ExportFormat
from nmt.translation.request import Request
from nmt.translation.rerank import Reranker
from nmt.translation.translator import Translator

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["ka lo mi", "nu pe ra si", "tu ka"]
LANGS = ("aa", "bb")
BEAM = DecodeConfig(strategy=Strategy.beam, beam_size=4, n_best=2)
TRANSFORMER = [
    "model=transformer_small", "model.d_model=32", "model.heads=2", "model.ff_size=64",
    "model.encoder_layers=1", "model.decoder_layers=1", "model.dropout=0.0",
]  # fmt: skip


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    return write_toy(tmp_path_factory.mktemp("toy"))


@pytest.fixture(scope="module")
def tagged(toy, tmp_path_factory) -> Path:
    """xx -> aa and bb, each asked for by its tag: a small Transformer (about 4 s on 2 cores)."""
    run = tmp_path_factory.mktemp("tagged")
    data = [arg for arg in BASE if not arg.startswith("model")]
    steps = ["train.max_steps=200", "train.valid_every=200", "train.lr=0.003"]
    args = [*data, *TRANSFORMER, f"data.local_dir={toy}", f"run_dir={run}", TAGGED, *steps]
    assert cli.train(args) == 0
    return run / "checkpoints" / "best"


@pytest.fixture(scope="module")
def translator(tagged) -> Translator:
    return Translator.from_checkpoint(tagged, DecodeConfig(), device="cpu")


def test_translations_into_each_language_differ(translator):
    out = {lang: translator.translate(SOURCES, tgt_lang=lang) for lang in LANGS}
    assert out["aa"] != out["bb"]
    assert sum(w in BB for text in out["bb"] for w in text.split()) >= 3  # it learned bb


@pytest.mark.parametrize("fmt", ["torchscript", "ctranslate2"])
def test_the_exported_runtimes_translate_into_the_language_asked_for(
    fmt, tagged, translator, tmp_path
):
    """The manifest carries the tags; each runtime puts the language's tag before every source,
    as the Translator does, and names the languages for one it lacks or none."""
    if fmt == "ctranslate2":
        pytest.importorskip("ctranslate2")
        from nmt.export.ct2 import CT2Translator as Runtime
    else:
        Runtime = ExportedTranslator  # noqa: N806
    out = export_checkpoint(load_checkpoint(tagged), ExportFormat(fmt), tmp_path / fmt)
    assert read_manifest(out)["target_tags"] == TAGS
    runtime = Runtime(out, DecodeConfig(), threads=1)
    for lang in LANGS:
        assert runtime.translate(SOURCES, tgt_lang=lang) == translator.translate(
            SOURCES, tgt_lang=lang
        ), lang
    with pytest.raises(NMTError, match="tgt_lang='cs': this model translates into aa, bb"):
        runtime.translate(SOURCES, tgt_lang="cs")
    with pytest.raises(NMTError, match="say which with tgt_lang"):
        runtime.translate(SOURCES)


def test_nmt_score_takes_tgt_lang(tagged, translator, tmp_path, capsys):
    src, hyp = tmp_path / "src.xx", tmp_path / "hyp.bb"
    src.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    texts = translator.translate(SOURCES, tgt_lang="bb")
    hyp.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    args = [f"ckpt={tagged}", f"src={src}", f"hyp={hyp}", "device=cpu"]
    capsys.readouterr()
    assert cli.score([*args, "tgt_lang=bb"]) == 0
    lines = capsys.readouterr().out.splitlines()
    want = translator.score(SOURCES, texts, tgt_lang="bb")
    assert [float(line.split("\t")[0]) for line in lines] == pytest.approx(
        [s.score for s in want], abs=1e-5
    )
    assert [s.score for s in want] != pytest.approx(
        [s.score for s in translator.score(SOURCES, texts, tgt_lang="aa")], abs=1e-3
    )
    assert cli.score(args) != 0
    assert "say which with tgt_lang" in capsys.readouterr().err


def test_the_reranker_searches_and_scores_into_the_language_with_every_option(
    tagged, translator, toy, tmp_path
):
    """Banned phrases, constraints and tgt_lang reach the main model's search; the rerank models
    score each hypothesis into tgt_lang; a rerank model without that language is named."""
    free = translator.translate(SOURCES, tgt_lang="bb")
    banned = sorted({w for text in free for w in text.split()} - {"baum", "mond"})[:1]
    request = Request(
        SOURCES, BEAM, banned=banned, constraints=[["baum"], [], ["mond"]], tgt_lang="bb"
    )
    found = Reranker(translator, [translator], [0.5, 0.5]).candidates(request)
    searched = translator.run(translator.prepare(request))
    assert [c.texts for c in found] == [[t for t, _ in r.nbest] for r in searched]
    for c, wanted in zip(found, [["baum"], [], ["mond"]]):
        for text in c.texts:
            assert not set(banned) & set(text.split()), text
            assert all(w in text.split() for w in wanted), text
        scored = translator.score([c.source] * len(c.texts), c.texts, decode=BEAM, tgt_lang="bb")
        per_piece = [s.score / len(s.piece_scores) for s in scored]
        assert [f[1] for f in c.features] == pytest.approx(per_piece, abs=1e-4)
    plain = tmp_path / "plain"  # xx -> aa only: no tags, one language
    data = [arg for arg in BASE if not arg.startswith("model")]
    args = [*data, *TRANSFORMER, f"data.local_dir={toy}", f"run_dir={plain}"]
    assert cli.train([*args, "train.max_steps=20", "train.valid_every=20"]) == 0
    other = Translator.from_checkpoint(plain / "checkpoints" / "best", device="cpu")
    with pytest.raises(NMTError, match="rerank model 1: tgt_lang='bb': this model translates"):
        Reranker(translator, [other]).candidates(request)


def test_rerank_tune_reads_tgt_lang(tagged, toy):
    spec = importlib.util.spec_from_file_location("rerank_tune", ROOT / "scripts/rerank_tune.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    files = ["--src", str(toy / "valid.xx"), "--ref", str(toy / "valid.bb")]
    args = ["--ckpt", str(tagged), "--rerank", str(tagged), *files, "--n-best", "2"]
    args += ["--step", "0.5", "--device", "cpu"]
    report = script.main([*args, "tgt_lang=bb"])
    assert report["valid"]["bleu_main"] > 20  # the bb references, translated into bb
    with pytest.raises(NMTError, match="say which with tgt_lang"):
        script.main(args)
