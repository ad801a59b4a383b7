"""nmt-import of a T5-family model (model_type t5 / mt5: T5 v1.1, mT5, MADLAD-400) in the Hugging
Face layout, offline: a T5ForConditionalGeneration built by `transformers` from a small T5Config
(gated-GELU, an output layer of its own, T5's relative positions and RMSNorm), with a
sentencepiece model trained on the demo corpus that holds MADLAD-400's `<2xx>` language pieces,
trained briefly on German "<2en> X" -> English so that translations depend on the source
(`conftest.write_t5`). nmt's tokenization, logits and greedy and beam output must equal Hugging
Face's (`generate`) on the same files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import write_t5

from nmt.checkpoint import load_checkpoint
from nmt.config import DecodeConfig, LengthPenalty, Strategy
from nmt.errors import NMTError
from nmt.models import restore_model
from nmt.pretrained.importer import import_model
from nmt.tokenizer import BOS, EOS, T5_FILES
from nmt.translation.request import Request
from nmt.translation.translator import Translator

transformers = pytest.importorskip("transformers")


def hf_model(directory: Path):
    return transformers.T5ForConditionalGeneration.from_pretrained(directory).eval()


def hf_tokenizer(directory: Path):
    return transformers.AutoTokenizer.from_pretrained(directory)


def sentences(demo_dir: Path, lang: str = "de") -> list[str]:
    texts = (demo_dir / f"test.{lang}").read_text("utf-8").splitlines()[:100]
    return texts + (demo_dir / f"valid.{lang}").read_text("utf-8").splitlines()[:100]


def pieces_of(ours: Path) -> list[str]:
    return json.loads((ours / T5_FILES["pieces"]).read_text("utf-8"))["pieces"]


def to_nmt(ours: Path, hf_dir: Path) -> dict[int, int]:
    """Hugging Face id -> nmt id (pad: PAD, not BOS)."""
    tokenizer = hf_tokenizer(hf_dir)
    mapping = {}
    for ours_id, piece in enumerate(pieces_of(ours)):
        if ours_id == BOS:
            continue
        if piece.startswith("<unused_"):  # a row no piece names: its own id
            mapping[int(piece[len("<unused_") : -1])] = ours_id
            continue
        theirs = tokenizer.convert_tokens_to_ids(piece)
        if theirs is not None and theirs != tokenizer.unk_token_id or piece == "<unk>":
            mapping[theirs] = ours_id
    return mapping


def test_tokenization_equals_the_t5_tokenizer(madlad, demo_dir):
    """A source is what T5Tokenizer gives for "<2en> X": the code as sentencepiece spells it
    ("▁", "<2en>"), then the pieces and </s>; no target code is forced; decoding leaves the
    codes and the sentinels out, as skip_special_tokens does."""
    hf_dir, ours = madlad
    translator = Translator.from_checkpoint(ours, device="cpu")
    tokenizer, pieces = hf_tokenizer(hf_dir), pieces_of(ours)
    texts = sentences(demo_dir)[:50] + ["Ein Hund läuft ✓ 漢字 über die Straße.", "a\tb\u00a0c"]
    for tgt_lang, code in (("en", "<2en>"), ("de", "<2de>")):
        for text in texts:
            [prepared] = translator.prepare(
                Request([text], translator.decode, tgt_lang=tgt_lang)
            ).texts
            want = tokenizer.convert_ids_to_tokens(tokenizer(f"{code} {text}")["input_ids"])
            assert [pieces[i] for i in prepared.src] == want, text
            assert prepared.prefix == [] and prepared.free == 0
    vocab = load_checkpoint(ours).vocabs.tgt
    targets = (demo_dir / "test.en").read_text("utf-8").splitlines()[:50]
    hidden = [pieces.index("<2en>"), pieces.index("<extra_id_0>")]
    ids = [[*hidden, *line, EOS] for line in vocab.encode(targets)]
    assert vocab.decode(ids) == targets


def test_logits_equal_hugging_face(madlad, demo_dir):
    hf_dir, ours = madlad
    model, reference = restore_model(load_checkpoint(ours), torch.device("cpu")), hf_model(hf_dir)
    tokenizer = hf_tokenizer(hf_dir)
    texts = [f"<2en> {t}" for t in sentences(demo_dir)[:8]]
    targets = (demo_dir / "test.en").read_text("utf-8").splitlines()[:8]
    batch = tokenizer(texts, text_target=targets, padding=True, return_tensors="pt")
    labels = batch.pop("labels")
    decoder_in = torch.cat([torch.zeros(len(texts), 1, dtype=torch.long), labels[:, :-1]], dim=1)
    mapping = to_nmt(ours, hf_dir)
    with torch.no_grad():
        want = reference(**batch, decoder_input_ids=decoder_in).logits
        src = batch["input_ids"].clone().apply_(lambda i: mapping[i])
        tgt_in = decoder_in.clone().apply_(lambda i: mapping[i])
        tgt_in[:, 0] = BOS
        got = model(src, batch["attention_mask"].sum(1), tgt_in)[0]
    index = torch.tensor([mapping[i] for i in range(len(mapping))])
    mask = decoder_in != 0
    mask[:, 0] = True
    assert (got[..., index] - want)[mask].abs().max() <= 1e-4


@pytest.mark.parametrize(
    "beams, early_stopping, length_penalty",
    [(1, True, 1.0), (4, True, 1.0), (4, False, 0.6)],
)
def test_output_equals_generate(madlad, demo_dir, beams, early_stopping, length_penalty):
    """Greedy and beam search on 200 sentences each way: `generate` on "<2xx> X" gives the same
    texts, and the code chooses the language."""
    hf_dir, ours = madlad
    reference, tokenizer = hf_model(hf_dir), hf_tokenizer(hf_dir)
    decode = DecodeConfig(
        strategy=Strategy.beam if beams > 1 else Strategy.greedy, beam_size=beams,
        length_penalty=LengthPenalty.power, alpha=length_penalty, early_stopping=early_stopping,
        max_len_a=0.0, max_len_b=40,
    )  # fmt: skip
    translator = Translator.from_checkpoint(ours, decode, "cpu")
    seen = []
    for lang, tgt_lang in (("de", "en"), ("en", "de")):
        texts = sentences(demo_dir, lang)
        prompts = [f"<2{tgt_lang}> {t}" for t in texts]
        with torch.no_grad():
            out = reference.generate(
                **tokenizer(prompts, padding=True, return_tensors="pt"), num_beams=beams,
                max_new_tokens=40, do_sample=False, length_penalty=length_penalty,
                early_stopping=early_stopping,
            )  # fmt: skip
        # nmt's outputs hold no run of spaces (`nmt.tokenizer.clean`); this small model writes
        # runs of "▁", which transformers' decoder keeps
        want = [" ".join(t.split()) for t in tokenizer.batch_decode(out, skip_special_tokens=True)]
        assert translator.translate(texts, tgt_lang=tgt_lang) == want, (lang, tgt_lang)
        seen.append(set(want))
    # translations of their own, not one string for all (the model learnt German -> English);
    # the code is read
    assert len(seen[0]) > 40 and seen[0] != seen[1]


def test_the_original_t5_ties_and_scales_its_output(tmp_path, demo_dir):
    """The original T5 (ReLU, no gate, the output layer tied to the embeddings and fed the
    decoder's output times d_model^-0.5) and mT5-shaped configs: the same logits."""
    hf_dir = write_t5(
        tmp_path / "hf", demo_dir, steps=30, feed_forward_proj="relu", tie_word_embeddings=True
    )
    ours = import_model(str(hf_dir), tmp_path / "nmt")
    ckpt = load_checkpoint(ours)
    assert ckpt.config.model.tie_output and not ckpt.config.model.gated
    model, reference = restore_model(ckpt, torch.device("cpu")), hf_model(hf_dir)
    tokenizer = hf_tokenizer(hf_dir)
    batch = tokenizer([f"<2en> {t}" for t in sentences(demo_dir)[:4]], padding=True,
                      return_tensors="pt")  # fmt: skip
    mapping = to_nmt(ours, hf_dir)
    decoder_in = torch.tensor([[0, 5, 9, 12]] * 4)
    with torch.no_grad():
        want = reference(**batch, decoder_input_ids=decoder_in).logits
        src = batch["input_ids"].clone().apply_(lambda i: mapping[i])
        tgt_in = decoder_in.clone().apply_(lambda i: mapping[i])
        tgt_in[:, 0] = BOS
        got = model(src, batch["attention_mask"].sum(1), tgt_in)[0]
    index = torch.tensor([mapping[i] for i in range(len(mapping))])
    assert (got[..., index] - want).abs().max() <= 1e-4


def test_what_nmt_cannot_run_is_refused_by_name(tmp_path, demo_dir, madlad):
    hf_dir, _ = madlad
    config = json.loads((hf_dir / "config.json").read_text("utf-8"))
    for key, value, named in (
        ("feed_forward_proj", "gated-tanhshrink", "feed_forward_proj='gated-tanhshrink'"),
        ("decoder_start_token_id", 5, "decoder_start_token_id"),
    ):
        bad = tmp_path / key
        bad.mkdir()
        for f in hf_dir.iterdir():
            (bad / f.name).symlink_to(f)
        (bad / "config.json").unlink()
        (bad / "config.json").write_text(json.dumps({**config, key: value}), "utf-8")
        with pytest.raises(NMTError, match=named):
            import_model(str(bad), tmp_path / f"{key}.nmt")
