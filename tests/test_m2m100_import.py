"""nmt-import of an NLLB-200 / M2M-100 model (model_type m2m_100) in the Hugging Face layout,
offline: an M2M100ForConditionalGeneration built by `transformers` from a small M2M100Config, with
an NLLB tokenizer (or M2M-100's) over a sentencepiece model trained on the demo corpus and three
language codes, trained briefly there so that translations depend on the source, saved with
save_pretrained. nmt's tokenization, logits and greedy and beam output must equal Hugging Face's
(`generate` with forced_bos_token_id) on the same files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sentencepiece as spm
import torch
from conftest import demo_pairs, fairseq_spm, train_hf

from nmt.checkpoint import load_checkpoint
from nmt.cli import main as cli
from nmt.config import DecodeConfig, LengthPenalty, Strategy
from nmt.errors import NMTError
from nmt.models import restore_model
from nmt.pretrained.importer import import_model
from nmt.pretrained.m2m100 import import_m2m100
from nmt.tokenizer import BOS, EOS, M2M_FILES
from nmt.translation.request import Request
from nmt.translation.translator import Translator

transformers = pytest.importorskip("transformers")

CODES = ["deu_Latn", "eng_Latn", "fra_Latn"]
ODD = ["", "   ", "Ein Hund läuft ✓ 漢字 über die Straße.", "zwei " * 200,
       "Er zählt\tdrei\u00a0Vögel.", ">>fra<< Ich sehe zwei Vögel."]  # fmt: skip


def write_m2m100(
    out: Path, demo_dir: Path, steps: int = 300, nllb: bool = True, **overrides
) -> Path:
    """A small M2M-100 model in the Hugging Face layout, with NLLB's tokenizer (tokenizer.json,
    FLORES codes) or M2M-100's (vocab.json, "__de__" codes)."""
    out.mkdir(parents=True)
    src, tgt = demo_pairs(demo_dir)
    fairseq_spm(out, demo_dir, "bpe")
    if nllb:
        tokenizer = transformers.NllbTokenizer.from_pretrained(
            str(out), src_lang="deu_Latn", tgt_lang="eng_Latn", additional_special_tokens=CODES
        )
    else:
        sp = spm.SentencePieceProcessor(model_file=str(out / M2M_FILES["spm"]))
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
        for i in range(3, sp.GetPieceSize()):
            vocab.setdefault(sp.IdToPiece(i), len(vocab))
        (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), "utf-8")
        tokenizer = transformers.M2M100Tokenizer(
            str(out / "vocab.json"), str(out / M2M_FILES["spm"]), src_lang="de", tgt_lang="en"
        )
    # M2M-100's table: vocab.json's pieces, its 100 language codes, 8 made-up words
    size = len(tokenizer) if nllb else len(vocab) + 100 + 8
    settings = dict(
        vocab_size=size, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=256, pad_token_id=1, eos_token_id=2,
        bos_token_id=0, decoder_start_token_id=2, scale_embedding=True, dropout=0.1,
        forced_eos_token_id=None,
    )  # fmt: skip
    settings.update(overrides)
    torch.manual_seed(0)
    model = transformers.M2M100ForConditionalGeneration(transformers.M2M100Config(**settings))
    train_hf(model, tokenizer, src, tgt, steps)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def nllb(tmp_path_factory, demo_dir) -> tuple[Path, Path]:
    """(the Hugging Face directory, its nmt import)."""
    root = tmp_path_factory.mktemp("nllb")
    hf = write_m2m100(root / "hf", demo_dir)
    return hf, import_model(str(hf), root / "nmt")


def hf_tokenizer(directory: Path, src_lang: str = "deu_Latn"):
    return transformers.AutoTokenizer.from_pretrained(directory, src_lang=src_lang)


def hf_model(directory: Path):
    return transformers.M2M100ForConditionalGeneration.from_pretrained(directory).eval()


def sentences(demo_dir: Path) -> list[str]:
    texts = (demo_dir / "test.de").read_text("utf-8").splitlines()[:100]
    return texts + (demo_dir / "valid.de").read_text("utf-8").splitlines()[:100]


def pieces_of(ours: Path) -> list[str]:
    return json.loads((ours / M2M_FILES["pieces"]).read_text("utf-8"))["pieces"]


def test_tokenization_equals_the_nllb_tokenizer(nllb, demo_dir):
    """Sources as [src_lang] X </s> (transformers' non-legacy form), the same pieces; decoding
    leaves the codes and specials out as skip_special_tokens does."""
    hf_dir, ours = nllb
    translator = Translator.from_checkpoint(ours, device="cpu")
    tokenizer, pieces = hf_tokenizer(hf_dir), pieces_of(ours)
    texts = sentences(demo_dir)[:50] + [t for t in ODD if t.strip()]
    for text in texts:
        [prepared] = translator.prepare(Request([text], translator.decode)).texts
        want = tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"])
        if len(want) > 256:  # cut to the model's positions, the code included
            want = want[:255] + want[-1:]
        assert [pieces[i] for i in prepared.src] == want, text
        assert prepared.prefix == [pieces.index("eng_Latn")] and prepared.free == 1
    vocab = load_checkpoint(ours).vocabs.tgt
    targets = (demo_dir / "test.en").read_text("utf-8").splitlines()[:50]
    ids = [[pieces.index("eng_Latn"), *line, EOS] for line in vocab.encode(targets)]
    assert vocab.decode(ids) == targets


def test_logits_equal_hugging_face(nllb, demo_dir):
    hf_dir, ours = nllb
    model, reference = restore_model(load_checkpoint(ours), torch.device("cpu")), hf_model(hf_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        hf_dir, src_lang="deu_Latn", tgt_lang="eng_Latn"
    )
    texts = sentences(demo_dir)[:8]
    targets = (demo_dir / "test.en").read_text("utf-8").splitlines()[:8]
    batch = tokenizer(texts, text_target=targets, padding=True, return_tensors="pt")
    labels = batch.pop("labels")  # [eng_Latn] Y </s>
    decoder_in = torch.cat([torch.full((len(texts), 1), 2), labels[:, :-1]], dim=1)
    order = _order(ours, hf_dir)
    to_ours = {theirs: i for i, theirs in enumerate(order) if i != BOS}
    with torch.no_grad():
        want = reference(**batch, decoder_input_ids=decoder_in).logits
        src = batch["input_ids"].clone().apply_(lambda i: to_ours[i])
        tgt_in = decoder_in.clone().apply_(lambda i: to_ours[i])
        tgt_in[:, 0] = BOS
        got = model(src, batch["attention_mask"].sum(1), tgt_in)[0]
    index = [0] * len(order[:BOS] + order[BOS + 1 :])  # per Hugging Face id, its nmt id
    for i, theirs in enumerate(order):
        if i != BOS:
            index[theirs] = i
    mask = decoder_in != 1
    assert (got[..., index] - want)[mask].abs().max() <= 1e-4


def _order(ours: Path, hf_dir: Path) -> list[int]:
    """Per nmt id, the Hugging Face id of its row (BOS: </s>'s)."""
    table = json.loads((hf_dir / "tokenizer.json").read_text("utf-8"))
    ids = dict(table["model"]["vocab"]) | {t["content"]: t["id"] for t in table["added_tokens"]}
    return [1, 3, 2, 2] + [ids[p] for p in pieces_of(ours)[EOS + 1 :]]


@pytest.mark.parametrize(
    "beams, early_stopping, length_penalty",
    [(1, True, 1.0), (5, True, 1.0), (5, False, 1.0), (4, False, 0.6)],
)
def test_output_equals_generate(nllb, demo_dir, beams, early_stopping, length_penalty):
    """Greedy and beam search on 200 sentences: `generate` with forced_bos_token_id (the target
    code forced as the first piece, scored 0, counted in the length) gives the same texts."""
    hf_dir, ours = nllb
    texts = sentences(demo_dir)
    reference, tokenizer = hf_model(hf_dir), hf_tokenizer(hf_dir)
    with torch.no_grad():
        out = reference.generate(
            **tokenizer(texts, padding=True, return_tensors="pt"), num_beams=beams,
            max_new_tokens=40, do_sample=False, length_penalty=length_penalty,
            early_stopping=early_stopping,
            forced_bos_token_id=tokenizer.convert_tokens_to_ids("eng_Latn"),
        )  # fmt: skip
    want = tokenizer.batch_decode(out, skip_special_tokens=True)
    decode = DecodeConfig(
        strategy=Strategy.beam if beams > 1 else Strategy.greedy, beam_size=beams,
        length_penalty=LengthPenalty.power, alpha=length_penalty, early_stopping=early_stopping,
        max_len_a=0.0, max_len_b=40,
    )  # fmt: skip
    translator = Translator.from_checkpoint(ours, decode, "cpu")
    assert translator.translate(texts, tgt_lang="eng_Latn") == want
    assert len(set(want)) > 150  # translations of their own, not one string for all


def test_languages_are_chosen_per_call_and_refused_by_name(nllb, demo_dir, tmp_path, capsys):
    """tgt_lang picks the forced code (default: the tokenizer's tgt_lang), src_lang the source's;
    an unknown code fails before any work, naming the model's codes."""
    hf_dir, ours = nllb
    texts = sentences(demo_dir)[:20]
    reference, greedy = hf_model(hf_dir), DecodeConfig(strategy=Strategy.greedy, max_len_b=40,
                                                        max_len_a=0.0)  # fmt: skip
    for src_lang, tgt_lang in (("deu_Latn", "fra_Latn"), ("fra_Latn", "eng_Latn")):
        tokenizer = hf_tokenizer(hf_dir, src_lang)
        with torch.no_grad():
            out = reference.generate(
                **tokenizer(texts, padding=True, return_tensors="pt"), num_beams=1,
                max_new_tokens=40, forced_bos_token_id=tokenizer.convert_tokens_to_ids(tgt_lang),
            )  # fmt: skip
        want = tokenizer.batch_decode(out, skip_special_tokens=True)
        translator = Translator.from_checkpoint(ours, greedy, "cpu", src_lang=src_lang)
        assert translator.translate(texts, tgt_lang=tgt_lang) == want
    default = Translator.from_checkpoint(ours, greedy, "cpu")
    assert default.translate(texts) == default.translate(texts, tgt_lang="eng_Latn")
    with pytest.raises(NMTError, match="tgt_lang='xx_Latn'.*deu_Latn"):
        default.translate(texts, tgt_lang="xx_Latn")
    with pytest.raises(NMTError, match="src_lang='xx'.*deu_Latn"):
        Translator.from_checkpoint(ours, greedy, "cpu", src_lang="xx")
    # the command: src_lang= and tgt_lang=, N lines in, N out
    source, target = tmp_path / "in.de", tmp_path / "out.fr"
    source.write_text("".join(t + "\n" for t in texts), "utf-8")
    args = [f"ckpt={ours}", f"input={source}", f"output={target}", "device=cpu",
            "src_lang=fra_Latn", "tgt_lang=eng_Latn", "decode=greedy"]  # fmt: skip
    assert cli.translate(args) == 0
    lines = target.read_text("utf-8").splitlines()
    assert lines == Translator.from_checkpoint(ours, greedy, "cpu", "fra_Latn").translate(
        texts, tgt_lang="eng_Latn", decode=DecodeConfig(strategy=Strategy.greedy)
    )
    assert cli.translate([*args[:3], "tgt_lang=klingon"]) == 2
    assert "tgt_lang='klingon'" in capsys.readouterr().err


def test_the_languages_are_asked_for_by_any_code(nllb, demo_dir, tmp_path):
    """ISO 639-1 (`de`, `en`: a user's, LibreTranslate's) and DeepL's `FR`, `EN-US` reach the
    model's FLORES codes (`nmt.language_codes`): the translations are those of deu_Latn,
    eng_Latn, fra_Latn, by the library (at load and per call) and by the command."""
    _, ours = nllb
    texts = sentences(demo_dir)[:20]
    greedy = DecodeConfig(strategy=Strategy.greedy, max_len_a=0.0, max_len_b=40)
    seen = []
    for (src, tgt), (own_src, own_tgt) in (
        (("en", "de"), ("eng_Latn", "deu_Latn")),
        (("FR", "EN-US"), ("fra_Latn", "eng_Latn")),
    ):
        want = Translator.from_checkpoint(ours, greedy, "cpu", src_lang=own_src).translate(
            texts, tgt_lang=own_tgt
        )
        translator = Translator.from_checkpoint(ours, greedy, "cpu", src_lang=src)
        assert translator.translate(texts, tgt_lang=tgt) == want, (src, tgt)
        per_call = Request(texts, greedy, tgt_lang=tgt, src_lang=src)
        default = Translator.from_checkpoint(ours, greedy, "cpu")  # reads deu_Latn
        assert [t.text for t in default.run(default.prepare(per_call))] == want
        assert want not in seen  # the codes are read: each pair translates its own way
        seen.append(want)
        source, target = tmp_path / f"{src}.txt", tmp_path / f"{tgt}.txt"
        source.write_text("".join(t + "\n" for t in texts), "utf-8")
        args = [f"ckpt={ours}", f"input={source}", f"output={target}", "device=cpu",
                f"src_lang={src}", f"tgt_lang={tgt}", "decode=greedy", "decode.max_len_a=0",
                "decode.max_len_b=40"]  # fmt: skip
        assert cli.translate(args) == 0
        assert target.read_text("utf-8").splitlines() == want


def test_m2m100_tokenizer_and_codes(tmp_path, demo_dir):
    """M2M-100's own layout (vocab.json, "__de__" codes after it, made-up words last): the
    languages are "de", "en", ...; the output equals `generate`'s."""
    hf = write_m2m100(tmp_path / "hf", demo_dir, steps=150, nllb=False)
    ours = import_model(str(hf), tmp_path / "nmt")
    config = load_checkpoint(ours).config.data
    assert config.language_codes["de"] == "__de__" and len(config.language_codes) == 100
    assert (config.src_lang, config.tgt_lang) == ("de", "en")
    texts = sentences(demo_dir)[:50]
    tokenizer = transformers.M2M100Tokenizer.from_pretrained(hf, src_lang="de")
    with torch.no_grad():
        out = hf_model(hf).generate(
            **tokenizer(texts, padding=True, return_tensors="pt"), num_beams=4, max_new_tokens=30,
            forced_bos_token_id=tokenizer.get_lang_id("en"),
        )  # fmt: skip
    # without the codes, which a tokenizer built by hand does not count as special (nmt's
    # decoding leaves them out wherever the model puts one)
    codes = set(tokenizer.lang_code_to_id.values())
    want = tokenizer.batch_decode([[i for i in row if i not in codes] for row in out.tolist()],
                                  skip_special_tokens=True)  # fmt: skip
    decode = DecodeConfig(strategy=Strategy.beam, beam_size=4, length_penalty=LengthPenalty.power,
                          alpha=1.0, max_len_a=0.0, max_len_b=30)  # fmt: skip
    translator = Translator.from_checkpoint(ours, decode, "cpu")
    assert translator.translate(texts, tgt_lang="en") == want
    assert translator.translate(texts, tgt_lang="eng_Latn") == want  # NLLB's code for it


def test_what_nmt_cannot_run_is_refused_by_name(tmp_path, demo_dir):
    odd = write_m2m100(tmp_path / "odd", demo_dir, steps=0, decoder_ffn_dim=128)
    with pytest.raises(NMTError, match="decoder_ffn_dim=128"):
        import_m2m100(str(odd), tmp_path / "out")
    config = json.loads((odd / "config.json").read_text())
    (odd / "config.json").write_text(json.dumps({**config, "decoder_ffn_dim": 64,
                                                 "num_experts": 4}))  # fmt: skip
    with pytest.raises(NMTError, match="mixture-of-experts"):
        import_m2m100(str(odd), tmp_path / "out")
    (odd / M2M_FILES["spm"]).unlink()
    (odd / "config.json").write_text(json.dumps({**config, "decoder_ffn_dim": 64}))
    with pytest.raises(NMTError, match="sentencepiece.bpe.model"):
        import_m2m100(str(odd), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_every_tool_takes_the_import(nllb, demo_dir, tmp_path, capsys):
    """nmt-score gives the search's own score (the code unscored, counted in the length),
    constraints, banned phrases, an ensemble of the import with itself, int8, nmt-serve with
    tgt_lang, nmt-evaluate."""
    from starlette.testclient import TestClient

    from nmt.run_config import ServeRunConfig
    from nmt.serving.app import load_app

    _, ours = nllb
    texts = sentences(demo_dir)[:6]
    beam = DecodeConfig(strategy=Strategy.beam, beam_size=4, max_len_a=0.0, max_len_b=40)
    translator = Translator.from_checkpoint(ours, beam, "cpu")
    full = translator.translate_full(texts, attention=False)
    scored = translator.score(texts, [t.text for t in full])
    for result, score in zip(full, scored):
        assert score.score == pytest.approx(result.score, abs=1e-4)
        assert score.normalized == pytest.approx(result.nbest[0][1], abs=1e-4)
        assert result.tgt_pieces[0] == "eng_Latn" and result.prefix_score is None
    plain = [t.text for t in full]
    # confidence read off the search (the forced code's row left out) = by teacher forcing
    from nmt.translation.confidence import Calibration, judge, measure

    calibration = Calibration(temperature=1.3)
    request = Request(texts, beam, tgt_lang="eng_Latn", statistics=calibration.temperature)
    searched = translator.run(translator.prepare(request))
    taught = measure(translator, texts, plain, calibration, "eng_Latn")
    for t, theirs in zip(searched, taught):
        assert t.statistics.size(0) == len(t.tgt_pieces) - 1  # the code's row dropped
        assert judge(t, calibration).pieces == pytest.approx(theirs.pieces, abs=1e-5)
    assert Translator.from_checkpoints([ours, ours], beam, "cpu").translate(texts) == plain
    [forced] = translator.translate([texts[0]], constraints=[["birds"]])
    assert "birds" in forced
    assert all(not t.startswith("I ") for t in translator.translate(texts, banned=["I"]))
    [prefixed] = translator.translate([texts[0]], prefixes=["I see"])
    assert prefixed.startswith("I see")
    int8 = DecodeConfig(strategy=Strategy.beam, beam_size=4, precision="int8")
    assert len(Translator.from_checkpoint(ours, int8, "cpu").translate(texts)) == len(texts)
    serve = ServeRunConfig(ckpt=str(ours), decode=beam, device="cpu")
    with TestClient(load_app(serve)) as client:
        answer = client.post("/translate", json={"text": texts[0], "tgt_lang": "eng_Latn"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["translations"][0]["text"] == plain[0]
        refused = client.post("/translate", json={"text": texts[0], "tgt_lang": "xx"})
        assert refused.status_code == 422 and "xx" in refused.text
        # the source's language per request: what a translator reading fra_Latn gives, with
        # its confidence, beside a request from deu_Latn in the same batch of the server
        info = client.get("/info").json()
        assert (
            info["source_codes"] == info["target_languages"] and "fra_Latn" in info["source_codes"]
        )
        french = Translator.from_checkpoint(ours, beam, "cpu", src_lang="fra_Latn")
        want = french.translate(texts, tgt_lang="eng_Latn")
        body = {"texts": texts, "src_lang": "fra_Latn", "tgt_lang": "eng_Latn",
                "confidence": True}  # fmt: skip
        answer = client.post("/translate", json=body)
        assert answer.status_code == 200, answer.text
        assert [t["text"] for t in answer.json()["translations"]] == want
        assert want != plain  # the code is read: translations differ
        refused = client.post("/translate", json={"text": texts[0], "src_lang": "xx_Latn"})
        assert refused.status_code == 422 and "src_lang='xx_Latn'" in refused.text
        # /score reads the texts with the request's code: what a translator reading fra_Latn
        # scores, not what the server's deu_Latn does
        body = {"texts": texts[:3], "translations": want[:3], "src_lang": "fra_Latn",
                "tgt_lang": "eng_Latn"}  # fmt: skip
        answer = client.post("/score", json=body)
        assert answer.status_code == 200, answer.text
        scores = [s["score"] for s in answer.json()["scores"]]
        french_scores = french.score(texts[:3], want[:3], tgt_lang="eng_Latn")
        assert scores == pytest.approx([s.score for s in french_scores], abs=1e-4)
        german = client.post("/score", json={**body, "src_lang": None}).json()["scores"]
        assert [s["score"] for s in german] != pytest.approx(scores, abs=1e-4)
        refused = client.post("/score", json={**body, "src_lang": "xx_Latn"})
        assert refused.status_code == 422 and "src_lang='xx_Latn'" in refused.text
    args = [f"ckpt={ours}", "data=demo", f"data.local_dir={demo_dir}", "split=test",
            "decode=greedy", "tgt_lang=eng_Latn"]  # fmt: skip
    assert cli.evaluate(args) == 0
    assert "BLEU" in capsys.readouterr().out


@pytest.mark.parametrize("strategy", [Strategy.greedy, Strategy.beam])
def test_ctranslate2_export_translates_as_nmt(nllb, demo_dir, tmp_path, strategy):
    """nmt-export format=ctranslate2 of an NLLB-shaped import: CTranslate2 reads each source
    with its language's code before it and starts each translation from BOS (the `</s>` row,
    which the import names `<s>` as Hugging Face's own `<s>` is named) with the target's code
    forced, and writes what nmt writes, for the default source language and another (greedy
    writes the code unforced too: beam search is what fails without it)."""
    pytest.importorskip("ctranslate2")
    from nmt.export.ct2 import CT2Translator

    _, ours = nllb
    out = tmp_path / "ct2"
    assert cli.export([f"ckpt={ours}", "format=ctranslate2", f"out={out}"]) == 0
    texts = sentences(demo_dir)[:60]
    decode = DecodeConfig(strategy=strategy, beam_size=4, max_len_a=0.0, max_len_b=40)
    for src_lang in (None, "fra_Latn"):
        want = Translator.from_checkpoint(ours, decode, "cpu", src_lang=src_lang).translate(
            texts, tgt_lang="eng_Latn"
        )
        got = CT2Translator(out, decode, src_lang=src_lang).translate(texts, tgt_lang="eng_Latn")
        assert got == want, src_lang
    assert want != Translator.from_checkpoint(ours, decode, "cpu").translate(texts)  # read


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_exported_graphs_translate_as_nmt(nllb, demo_dir, tmp_path, fmt):
    """nmt-export format=onnx|torchscript of an NLLB-shaped import: the exported runtime puts
    the source's code before each source and forces the target's first, and writes what nmt's
    greedy search writes, for the default source language and another; the export's README
    says how."""
    pytest.importorskip("onnxruntime" if fmt == "onnx" else "torch")
    from nmt.export.runtime import ExportedTranslator

    _, ours = nllb
    out = tmp_path / fmt
    assert cli.export([f"ckpt={ours}", f"format={fmt}", f"out={out}"]) == 0
    assert "src_lang=" in (out / "README.md").read_text(encoding="utf-8")
    texts = sentences(demo_dir)[:60]
    decode = DecodeConfig(max_len_a=0.0, max_len_b=40)
    seen = []
    # into French too: a code this model does not write unforced, so the forcing is seen
    for src_lang, tgt_lang in ((None, "eng_Latn"), ("fra_Latn", "eng_Latn"), (None, "fra_Latn")):
        ours_now = Translator.from_checkpoint(ours, decode, "cpu", src_lang=src_lang)
        want = ours_now.translate(texts, tgt_lang=tgt_lang)
        exported = ExportedTranslator(out, decode, threads=1, src_lang=src_lang)
        assert exported.translate(texts, tgt_lang=tgt_lang) == want, (src_lang, tgt_lang)
        assert want not in seen  # each language read or forced changes what is written
        seen.append(want)
    with pytest.raises(NMTError, match="xx_Latn"):
        ExportedTranslator(out, decode, threads=1).translate(texts[:1], tgt_lang="xx_Latn")


def _fine_tune_args(ours: Path, demo_dir: Path, run: Path, *extra: str) -> list[str]:
    return [
        "--config-dir", str(ours), "model=imported", f"train.init_from={ours}", "data=demo",
        f"data.local_dir={demo_dir}", f"run_dir={run}", "train.batch_tokens=600",
        "train.calibrate=false", *extra,
    ]  # fmt: skip


def test_fine_tuning_carries_the_language_codes(nllb, demo_dir, tmp_path, capsys, monkeypatch):
    """nmt-train on data=demo (de -> en) from the import: the run takes the import's codes, its
    data's de and en find theirs (deu_Latn, eng_Latn: `nmt.language_codes`; a language the model
    lacks is refused, naming codes to map it to), and each pair is laid out as Hugging Face trains
    NLLB: `deu_Latn X </s>` into `</s> eng_Latn Y` -> `eng_Latn Y </s>`, so nmt's loss on a batch
    is transformers' loss on the same pairs. LoRA training lowers the validation loss, and the
    tuned checkpoint translates from de by its name."""
    from nmt.cli.compose import compose_config
    from nmt.data.batches import collate
    from nmt.metrics import bleu
    from nmt.training import validation
    from nmt.training.loss import batch_loss
    from nmt.training.setup import prepare_run
    from nmt.translation import search

    cpu = torch.device("cpu")
    hf_dir, ours = nllb
    klingon = tmp_path / "klingon"  # the demo corpus, its English side named Klingon
    klingon.mkdir()
    for split in ("train", "valid", "test"):
        (klingon / f"{split}.de").symlink_to(demo_dir / f"{split}.de")
        (klingon / f"{split}.tlh").symlink_to(demo_dir / f"{split}.en")
    args = _fine_tune_args(ours, klingon, tmp_path / "no_codes", "data.tgt_lang=tlh")
    assert cli.train(args) == 2
    err = capsys.readouterr().err
    assert "data.language_codes.tlh=CODE" in err and "deu_Latn" in err

    # no data.language_codes: the table finds the codes of de and en
    args = _fine_tune_args(ours, demo_dir, tmp_path / "run")
    cfg = compose_config("train", args[2:], config_dir=str(ours))
    data, model, _ = prepare_run(cfg)
    assert cfg.data.language_codes["de"] == "deu_Latn"
    assert cfg.data.language_codes["en"] == "eng_Latn"
    codes = ["+data.language_codes.de=deu_Latn", "+data.language_codes.en=eng_Latn"]
    with data.train:
        batch = data.train.batch(list(range(8)))
    src_code, tgt_code = (data.vocabs.src.piece_to_id(c) for c in ("deu_Latn", "eng_Latn"))
    assert (batch.src[:, 0] == src_code).all() and (batch.tgt_in[:, 1] == tgt_code).all()
    assert (batch.tgt_in[:, 0] == BOS).all() and (batch.tgt_out[:, 0] == tgt_code).all()
    assert data.valid.src[0][0] == src_code and data.valid.tgt[0][0] == tgt_code
    assert data.valid.forced == 1
    src = (demo_dir / "valid.de").read_text("utf-8").splitlines()[:8]
    tgt = (demo_dir / "valid.en").read_text("utf-8").splitlines()[:8]
    valid = collate(list(range(8)), data.valid.src[:8], data.valid.tgt[:8])
    model.eval()
    with torch.no_grad():
        nll, tokens = batch_loss(model, valid, 0.0)
        hf_batch = hf_tokenizer(hf_dir)(src, text_target=tgt, padding=True, return_tensors="pt")
        labels = hf_batch["labels"].masked_fill(hf_batch["labels"] == 1, -100)
        hf_loss = hf_model(hf_dir)(**{**hf_batch, "labels": labels}).loss
    assert (nll / valid.n_tgt_tokens).item() == pytest.approx(hf_loss.item(), abs=1e-4)
    # validation decodes as nmt-translate does: the code forced and scored 0
    asked = []

    def decode_all(*args, **kwargs):
        asked.append(kwargs)
        return search.decode_all(*args, **kwargs)

    monkeypatch.setattr(validation, "decode_all", decode_all)
    metrics = validation.validate(model, data.valid, data.valid_references, data.vocabs, cfg, cpu)
    assert asked[0]["free_prefix"] == 1 and asked[0]["prefixes"][0] == [tgt_code]
    sources = (demo_dir / "valid.de").read_text("utf-8").splitlines()
    hypotheses = Translator.from_checkpoint(ours, cfg.decode, "cpu").translate(sources)
    assert metrics["bleu"] == pytest.approx(bleu(hypotheses, data.valid_references))

    # the import knows de -> en alone: LoRA on en -> de teaches it a direction
    back = [*codes, "data.src_lang=en", "data.tgt_lang=de"]
    probe = compose_config("train", _fine_tune_args(ours, demo_dir, tmp_path / "probe", *back)[2:],
                           config_dir=str(ours))  # fmt: skip
    reverse, base, _ = prepare_run(probe)
    reverse.train.close()
    reverse_valid = collate(list(range(32)), reverse.valid.src[:32], reverse.valid.tgt[:32])
    before = (ours / "ckpt.pt").read_bytes()
    run = tmp_path / "lora"
    tuned = _fine_tune_args(ours, demo_dir, run, *back, "train.lora.rank=4", "train.lr=0.01",
                            "train.max_steps=40", "train.valid_every=40")  # fmt: skip
    assert cli.train(tuned) == 0
    assert (ours / "ckpt.pt").read_bytes() == before
    last = load_checkpoint(run / "checkpoints" / "last")
    assert last.config.data.language_codes["de"] == "deu_Latn"
    with torch.no_grad():
        base_nll, _ = batch_loss(base.eval(), reverse_valid, 0.0)
        tuned_nll, _ = batch_loss(restore_model(last, cpu), reverse_valid, 0.0)
    assert tuned_nll < 0.8 * base_nll
    translator = Translator.from_checkpoint(run / "checkpoints" / "last", DecodeConfig(), "cpu")
    [result] = translator.translate_full([tgt[0]], attention=False)
    assert result.tgt_pieces[0] == "deu_Latn" and result.text


def test_trimming_keeps_the_translations_of_kept_text(nllb, demo_dir, tmp_path, capsys):
    """nmt-import keep_text=[FILE]: the table holds the pieces the file needs (with the specials
    and codes); a kept piece's logits are the untrimmed model's, so greedy search gives the same
    translation wherever the untrimmed one uses kept pieces only; a missing file is refused."""
    hf_dir, ours = nllb
    src = (demo_dir / "valid.de").read_text("utf-8").splitlines()[:40]
    tgt = (demo_dir / "valid.en").read_text("utf-8").splitlines()[:40]
    keep = tmp_path / "keep.txt"
    keep.write_text("\n".join(src + tgt) + "\n", "utf-8")
    trimmed = tmp_path / "trimmed"
    assert cli.import_model([f"source={hf_dir}", f"out={trimmed}", f"keep_text=[{keep}]"]) == 0
    full_pieces, kept_pieces = pieces_of(ours), pieces_of(trimmed)
    assert len(kept_pieces) < 0.8 * len(full_pieces) and set(CODES) <= set(kept_pieces)
    assert load_checkpoint(trimmed).payload["imported"]["pieces"].startswith(f"{len(kept_pieces)} ")
    full_id = {p: i for i, p in enumerate(full_pieces)}
    to_full = list(range(EOS + 1)) + [full_id[p] for p in kept_pieces[EOS + 1 :]]

    cpu = torch.device("cpu")
    models = [restore_model(load_checkpoint(d), cpu) for d in (ours, trimmed)]
    vocabs = [load_checkpoint(d).vocabs for d in (ours, trimmed)]
    with torch.no_grad():
        logits = []
        for model, vocab in zip(models, vocabs):
            ids = vocab.src.encode(src[:1])[0] + [EOS]
            tgt_in = [BOS, *vocab.tgt.encode(tgt[:1])[0]]
            logits.append(model(torch.tensor([ids]), torch.tensor([len(ids)]),
                                torch.tensor([tgt_in]))[0])  # fmt: skip
    assert (logits[1] - logits[0][..., to_full]).abs().max() <= 1e-5

    untrimmed = Translator.from_checkpoint(ours, DecodeConfig(), "cpu").translate_full(src)
    again = Translator.from_checkpoint(trimmed, DecodeConfig(), "cpu").translate(src)
    kept = set(kept_pieces)
    covered = [i for i, t in enumerate(untrimmed) if set(t.tgt_pieces) <= kept]
    assert len(covered) >= 30
    assert [again[i] for i in covered] == [untrimmed[i].text for i in covered]

    assert cli.import_model([f"source={hf_dir}", f"out={tmp_path / 'x'}", "keep_text=[nope]"]) == 2
    assert "nope" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_a_language_is_added_from_a_related_one_or_the_mean(nllb, demo_dir, tmp_path, capsys):
    """add_languages: a new code copied from deu_Latn's row reads a source as deu_Latn does
    (the same translations); one from the mean of the codes has that row; each is
    a language of the import, for fine-tuning; a code the model has, or a malformed one, is
    refused."""
    hf_dir, ours = nllb
    added = tmp_path / "added"
    new = ["+add_languages.gsw_Latn=deu_Latn", "+add_languages.xho_Latn=mean"]
    assert cli.import_model([f"source={hf_dir}", f"out={added}", *new]) == 0
    ckpt = load_checkpoint(added)
    codes = ckpt.config.data.language_codes
    assert codes["gsw_Latn"] == "gsw_Latn" and codes["xho_Latn"] == "xho_Latn"
    table = ckpt.payload["model"]["encoder.embed.table.weight"]
    pieces = pieces_of(added)
    row = {p: table[i] for i, p in enumerate(pieces)}
    assert torch.equal(row["gsw_Latn"], row["deu_Latn"])
    assert torch.allclose(row["xho_Latn"], torch.stack([row[c] for c in CODES]).mean(0))
    texts = sentences(demo_dir)[:20]
    beam = DecodeConfig(strategy=Strategy.beam, beam_size=4)
    want = Translator.from_checkpoint(ours, beam, "cpu").translate_full(texts, attention=False)
    got = Translator.from_checkpoint(added, beam, "cpu", src_lang="gsw_Latn").translate_full(
        texts, attention=False
    )
    # the same texts (the scores move a little: the softmax has two more rows)
    assert [g.text for g in got] == [w.text for w in want]
    for wrong, named in (("deu_Latn=mean", "deu_Latn"), ("klingon=mean", "klingon"),
                         ("yor_Latn=klingon", "klingon")):  # fmt: skip
        out = tmp_path / named
        assert cli.import_model([f"source={hf_dir}", f"out={out}", f"+add_languages.{wrong}"]) == 2
        assert named in capsys.readouterr().err and not out.exists()
