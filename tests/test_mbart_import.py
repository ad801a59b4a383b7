"""nmt-import of an mBART-50 model (model_type mbart), offline: an MBartForConditionalGeneration
built by `transformers` from a small MBartConfig, with MBart50Tokenizer over a sentencepiece model
of the demo corpus, trained briefly there and saved with save_pretrained. mBART-50 is M2M-100's
machinery (`nmt.pretrained.m2m100`) with learned positions from row 2, a LayerNorm on the
embeddings and GELU: nmt's logits and greedy and beam output must equal Hugging Face's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import demo_pairs, fairseq_spm, train_hf

from nmt.checkpoint import load_checkpoint
from nmt.config import DecodeConfig, LengthPenalty, Strategy
from nmt.errors import NMTError
from nmt.models import restore_model
from nmt.pretrained.importer import import_model
from nmt.tokenizer import BOS, EOS, M2M_FILES, clean
from nmt.translation.translator import Translator

transformers = pytest.importorskip("transformers")


def write_mbart(out: Path, demo_dir: Path, steps: int = 200) -> Path:
    """A small mBART-50 model in the Hugging Face layout; its sentencepiece model is a unigram
    one, as mBART's is (MBart50Tokenizer reads the pieces into a unigram tokenizer)."""
    out.mkdir(parents=True)
    fairseq_spm(out, demo_dir, "unigram")
    tokenizer = transformers.MBart50Tokenizer.from_pretrained(
        str(out), src_lang="de_DE", tgt_lang="en_XX"
    )
    config = transformers.MBartConfig(
        vocab_size=len(tokenizer), d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=256, pad_token_id=1, eos_token_id=2,
        bos_token_id=0, decoder_start_token_id=2, scale_embedding=True, dropout=0.1,
        forced_eos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.MBartForConditionalGeneration(config)
    train_hf(model, tokenizer, *demo_pairs(demo_dir), steps)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def mbart(tmp_path_factory, demo_dir) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("mbart")
    hf = write_mbart(root / "hf", demo_dir)
    return hf, import_model(str(hf), root / "nmt")


def _hf(directory: Path):
    model = transformers.MBartForConditionalGeneration.from_pretrained(directory).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        directory, src_lang="de_DE", tgt_lang="en_XX"
    )
    return model, tokenizer


def _sentences(demo_dir: Path) -> list[str]:
    return (demo_dir / "test.de").read_text("utf-8").splitlines()[:100]


def test_logits_equal_hugging_face(mbart, demo_dir):
    hf_dir, ours = mbart
    ckpt = load_checkpoint(ours)
    assert ckpt.payload["imported"]["format"] == "mbart"
    assert ckpt.config.model.embed_norm and ckpt.config.data.language_codes["en_XX"] == "en_XX"
    model = restore_model(ckpt, torch.device("cpu"))
    reference, tokenizer = _hf(hf_dir)
    texts = _sentences(demo_dir)[:8]
    targets = (demo_dir / "test.en").read_text("utf-8").splitlines()[:8]
    batch = tokenizer(texts, text_target=targets, padding=True, return_tensors="pt")
    labels = batch.pop("labels")  # [en_XX] Y </s>
    decoder_in = torch.cat([torch.full((len(texts), 1), 2), labels[:, :-1]], dim=1)
    pieces = json.loads((ours / M2M_FILES["pieces"]).read_text("utf-8"))["pieces"]
    vocab = tokenizer.get_vocab()
    order = [1, 3, 2, 2] + [vocab[p] for p in pieces[EOS + 1 :]]
    to_ours = {theirs: i for i, theirs in enumerate(order) if i != BOS}
    with torch.no_grad():
        want = reference(**batch, decoder_input_ids=decoder_in).logits
        src = batch["input_ids"].clone().apply_(lambda i: to_ours[i])
        tgt_in = decoder_in.clone().apply_(lambda i: to_ours[i])
        tgt_in[:, 0] = BOS
        got = model(src, batch["attention_mask"].sum(1), tgt_in)[0]
    index = [0] * (len(order) - 1)  # per Hugging Face id, its nmt id
    for i, theirs in enumerate(order):
        if i != BOS:
            index[theirs] = i
    mask = decoder_in != 1
    assert (got[..., index] - want)[mask].abs().max() <= 1e-4


def test_tokenization_equals_mbart50_tokenizer(mbart, demo_dir):
    hf_dir, ours = mbart
    _, tokenizer = _hf(hf_dir)
    vocab = load_checkpoint(ours).vocabs.src
    texts = _sentences(demo_dir)
    want = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(texts)["input_ids"]]
    got = [["de_DE", *vocab.id_to_piece(ids), "</s>"] for ids in vocab.encode(texts)]
    assert got == want


@pytest.mark.parametrize("beams", [1, 4])
def test_output_equals_generate(mbart, demo_dir, beams):
    hf_dir, ours = mbart
    texts = _sentences(demo_dir)
    reference, tokenizer = _hf(hf_dir)
    with torch.no_grad():
        out = reference.generate(
            **tokenizer(texts, padding=True, return_tensors="pt"), num_beams=beams,
            max_new_tokens=40, do_sample=False, length_penalty=1.0, early_stopping=True,
            forced_bos_token_id=tokenizer.convert_tokens_to_ids("en_XX"),
        )  # fmt: skip
    # nmt writes every output with single spaces and no space at the ends (`clean`), where a
    # translation cut at the length limit after a lone "▁" ends with one in Hugging Face's
    want = [clean(t) for t in tokenizer.batch_decode(out, skip_special_tokens=True)]
    decode = DecodeConfig(
        strategy=Strategy.beam if beams > 1 else Strategy.greedy, beam_size=beams,
        length_penalty=LengthPenalty.power, alpha=1.0, early_stopping=True, max_len_a=0.0,
        max_len_b=40,
    )  # fmt: skip
    translator = Translator.from_checkpoint(ours, decode, "cpu", src_lang="de_DE")
    assert translator.translate(texts, tgt_lang="en_XX") == want
    assert len(set(want)) > 60


@pytest.mark.parametrize("strategy", [Strategy.greedy, Strategy.beam])
def test_ctranslate2_export_translates_as_nmt(mbart, demo_dir, tmp_path, strategy):
    """nmt-export format=ctranslate2 of an mBART-50 import: the embeddings' LayerNorm
    (layernorm_embedding), learned positions and the language codes carried over, CTranslate2
    writes what nmt writes on 60 sentences (the export fails without the LayerNorm's weights)."""
    pytest.importorskip("ctranslate2")
    from nmt.cli import main as cli
    from nmt.export.ct2 import CT2Translator

    _, ours = mbart
    out = tmp_path / "ct2"
    assert cli.export([f"ckpt={ours}", "format=ctranslate2", f"out={out}"]) == 0
    texts = _sentences(demo_dir)[:60]
    decode = DecodeConfig(strategy=strategy, beam_size=4, max_len_a=0.0, max_len_b=40)
    want = Translator.from_checkpoint(ours, decode, "cpu", src_lang="de_DE").translate(
        texts, tgt_lang="en_XX"
    )
    got = CT2Translator(out, decode, src_lang="de_DE").translate(texts, tgt_lang="en_XX")
    assert got == want and len(set(want)) > 30


def test_mbart_cc25_layout_is_refused(mbart, tmp_path):
    hf_dir, _ = mbart
    odd = tmp_path / "cc25"
    odd.mkdir()
    for item in hf_dir.iterdir():
        (odd / item.name).symlink_to(item)
    (odd / "tokenizer_config.json").unlink()
    (odd / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "MBartTokenizer"}))
    with pytest.raises(NMTError, match="mBART-cc25"):
        import_model(str(odd), tmp_path / "out")
