"""nmt-import of a Marian model (OPUS-MT's architecture) in the Hugging Face layout, offline: a
MarianMTModel built by `transformers` from a small MarianConfig, its two sentencepiece models
trained on the demo corpus, its weights trained briefly there too, saved with save_pretrained.
nmt's logits, greedy and beam output and tokenization must equal Hugging Face's on the same
files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sentencepiece as spm
import torch
from conftest import train_hf

from nmt.checkpoint import load_checkpoint
from nmt.cli import main as cli
from nmt.config import DecodeConfig, LengthPenalty, Strategy
from nmt.errors import NMTError
from nmt.models import restore_model
from nmt.pretrained.marian import BLOCKED, import_marian
from nmt.tokenizer import BOS, EOS, PAD
from nmt.translation.translator import Translator

transformers = pytest.importorskip("transformers")
# MarianTokenizer recommends sacremoses for a normaliser its tokenization does not call
pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")

ODD = ["", "   ", "Ein Hund läuft ✓ 漢字 über die Straße.", ">>fra<< Ich sehe zwei Vögel.",
       "zwei " * 200, "Er zählt\tdrei\u00a0Vögel."]  # fmt: skip


def _spm(lines: list[str], prefix: Path) -> Path:
    spm.SentencePieceTrainer.Train(
        sentence_iterator=iter(lines), model_prefix=str(prefix), vocab_size=200,
        model_type="unigram", character_coverage=1.0, num_threads=1, minloglevel=2,
        hard_vocab_limit=False,
    )  # fmt: skip
    return Path(f"{prefix}.model")


def write_marian(
    out: Path, demo_dir: Path, seed: int = 0, bad_pad: bool = False, steps: int = 300, **overrides
) -> Path:
    """A random-weight Marian model in the Hugging Face layout (what OPUS-MT publishes)."""
    out.mkdir(parents=True)
    src = (demo_dir / "train.de").read_text("utf-8").splitlines()
    tgt = (demo_dir / "train.en").read_text("utf-8").splitlines()
    source = _spm(src, out / "src")
    target = _spm(tgt, out / "tgt")
    source.rename(out / "source.spm")
    target.rename(out / "target.spm")
    pieces = []
    for path in (out / "source.spm", out / "target.spm"):
        sp = spm.SentencePieceProcessor(model_file=str(path))
        pieces += [sp.IdToPiece(i) for i in range(sp.GetPieceSize()) if not sp.IsControl(i)]
    vocab = {"</s>": 0, "<unk>": 1}
    for piece in [*pieces, ">>fra<<"]:
        vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), "utf-8")
    settings = dict(
        vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=32, encoder_layers=2,
        decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=64, decoder_ffn_dim=64, activation_function="swish",
        max_position_embeddings=256, pad_token_id=vocab["<pad>"], eos_token_id=0,
        decoder_start_token_id=vocab["<pad>"], forced_eos_token_id=None, scale_embedding=True,
        share_encoder_decoder_embeddings=True, dropout=0.1,
    )  # fmt: skip
    settings.update(overrides)
    config = transformers.MarianConfig(**settings)
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config)
    if bad_pad:  # as OPUS-MT's models are configured
        model.generation_config.bad_words_ids = [[vocab["<pad>"]]]
    # what OPUS-MT's generation configs say (num_beams 4 or 6, max_length 512, no early_stopping:
    # Hugging Face's default, false), with a shorter limit for the tests' sake
    model.generation_config.num_beams = 4
    model.generation_config.max_length = 48
    tokenizer = transformers.MarianTokenizer(
        str(out / "source.spm"), str(out / "target.spm"), str(out / "vocab.json"),
        source_lang="de", target_lang="en",
    )  # fmt: skip
    # random weights translate every sentence alike; a few hundred updates on the demo corpus
    # give translations that differ, end with </s> and make a tie between beams unlikely
    train_hf(model, tokenizer, src, tgt, steps)
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 0.1)  # a bias of its own, imported too
        if not bad_pad:  # PAD never produced, as bad_words_ids does (module notes of marian.py)
            model.final_logits_bias[0, vocab["<pad>"]] = BLOCKED
    model.eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def marian(tmp_path_factory, demo_dir) -> tuple[Path, Path]:
    """(the Hugging Face directory, its nmt import)."""
    root = tmp_path_factory.mktemp("marian")
    hf = write_marian(root / "hf", demo_dir)
    return hf, import_marian(str(hf), root / "nmt")


def hf_model(directory: Path):
    return transformers.MarianMTModel.from_pretrained(directory).eval()


def hf_tokenizer(directory: Path):
    return transformers.MarianTokenizer.from_pretrained(directory)


def sentences(demo_dir: Path, n: int) -> list[str]:
    return (demo_dir / "test.de").read_text("utf-8").splitlines()[:n]


def test_tokenization_equals_marian_tokenizer(marian, demo_dir):
    hf_dir, ours = marian
    vocabs = load_checkpoint(ours).vocabs
    tokenizer = hf_tokenizer(hf_dir)
    pieces = json.loads((ours / "pieces.marian.json").read_text("utf-8"))
    texts = sentences(demo_dir, 50) + ODD
    for text, ids in zip(texts, vocabs.src.encode(texts)):
        want = tokenizer(text)["input_ids"]  # ends with </s>
        got = [pieces[i] for i in ids + [EOS]]
        assert got == tokenizer.convert_ids_to_tokens(want), text
    # decoding: the target side's pieces back to text, specials left out
    targets = (demo_dir / "test.en").read_text("utf-8").splitlines()[:50] + ODD
    hf_ids = [tokenizer(text_target=t)["input_ids"] for t in targets]
    ours_ids = vocabs.tgt.encode(targets)
    assert [[pieces[i] for i in ids + [EOS]] for ids in ours_ids] == [
        tokenizer.convert_ids_to_tokens(ids) for ids in hf_ids
    ]
    assert vocabs.tgt.decode(ours_ids) == tokenizer.batch_decode(
        hf_ids, skip_special_tokens=True, use_source_tokenizer=False
    )


def test_logits_equal_hugging_face(marian, demo_dir):
    hf_dir, ours = marian
    ckpt = load_checkpoint(ours)
    model, reference = restore_model(ckpt, torch.device("cpu")), hf_model(hf_dir)
    tokenizer = hf_tokenizer(hf_dir)
    texts = sentences(demo_dir, 8)
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    labels = tokenizer(text_target=texts, padding=True, return_tensors="pt")["input_ids"]
    start = torch.full((len(texts), 1), reference.config.decoder_start_token_id)
    decoder_in = torch.cat([start, labels[:, :-1]], dim=1)
    with torch.no_grad():
        want = reference(**batch, decoder_input_ids=decoder_in).logits
        # nmt's ids: the same pieces (`id_order`): map Hugging Face's ids through the list
        order = _order(ours, hf_dir)
        to_ours = {m: i for i, m in enumerate(order) if i != BOS}
        src = batch["input_ids"].apply_(lambda i: to_ours[i])
        tgt_in = decoder_in.clone().apply_(lambda i: to_ours[i])
        tgt_in[:, 0] = BOS
        src_lens = batch["attention_mask"].sum(1)
        got = model(src, src_lens, tgt_in)[0]
    mask = decoder_in != reference.config.pad_token_id
    mask[:, 0] = True
    got = got[..., order_index(order)]  # back into Hugging Face's order
    # 1e-4, and float32's rounding of the largest logits: some are of the order of 1e4 here,
    # kept to steps of 1e-3, and two kernels may round them apart (seen on an AMX Xeon)
    torch.testing.assert_close(got[mask], want[mask], rtol=1e-6, atol=1e-4)


def _order(ours: Path, hf_dir: Path) -> list[int]:
    vocab = json.loads((hf_dir / "vocab.json").read_text("utf-8"))
    pieces = json.loads((ours / "pieces.marian.json").read_text("utf-8"))
    pad = vocab["<pad>"]
    return [pad, vocab["<unk>"], pad, vocab["</s>"]] + [vocab[p] for p in pieces[EOS + 1 :]]


def order_index(order: list[int]) -> list[int]:
    """Per Hugging Face id, the nmt id whose logit it is (BOS left out: it is not Marian's)."""
    index = [0] * len(order[:BOS] + order[BOS + 1 :])
    for ours, theirs in enumerate(order):
        if ours != BOS:
            index[theirs] = ours
    return index


@pytest.mark.parametrize(
    "beams, early_stopping, length_penalty",
    [(1, True, 1.0), (5, True, 1.0), (5, False, 1.0), (4, False, 0.6)],
)
def test_output_equals_generate(marian, demo_dir, beams, early_stopping, length_penalty):
    """Greedy and beam search on the same 200 sentences: the same translations. With
    `early_stopping=True` a sentence ends once it has beam-size finished hypotheses; with False
    (Hugging Face's default) it goes on while its best live hypothesis, ranked at its current
    length, could still beat the worst of them: nmt's decode.early_stopping. Length penalty:
    score / length ** lp, nmt's `power` with alpha lp (`average` for 1.0)."""
    hf_dir, ours = marian
    texts = sentences(demo_dir, 100) + (demo_dir / "valid.de").read_text("utf-8").splitlines()
    assert len(texts) == 200
    reference, tokenizer = hf_model(hf_dir), hf_tokenizer(hf_dir)
    with torch.no_grad():
        batch = tokenizer(texts, padding=True, return_tensors="pt")
        out = reference.generate(
            **batch, num_beams=beams, max_new_tokens=40, do_sample=False,
            length_penalty=length_penalty, early_stopping=early_stopping,
        )  # fmt: skip
    want = tokenizer.batch_decode(out, skip_special_tokens=True)
    strategy = Strategy.beam if beams > 1 else Strategy.greedy
    decode = DecodeConfig(
        strategy=strategy, beam_size=beams, length_penalty=LengthPenalty.power,
        alpha=length_penalty, early_stopping=early_stopping, max_len_a=0.0, max_len_b=40,
    )  # fmt: skip
    translator = Translator.from_checkpoint(ours, decode, "cpu")
    assert translator.translate(texts) == want
    assert len(set(want)) > 180  # translations of their own, not one string for all


def test_bad_words_pad_is_blocked(tmp_path, demo_dir):
    hf = write_marian(tmp_path / "hf", demo_dir, bad_pad=True, steps=0)
    ckpt = load_checkpoint(import_marian(str(hf), tmp_path / "nmt"))
    bias = ckpt.payload["model"]["decoder.out.bias"]
    assert bias[PAD] == BLOCKED and bias[BOS] == BLOCKED and (bias[EOS + 1 :] > BLOCKED).all()


def test_the_command_imports_and_translates(marian, tmp_path, capsys):
    hf_dir, _ = marian
    out = tmp_path / "imported"
    assert cli.import_model([f"source={hf_dir}", f"out={out}"]) == 0
    assert (out / "ckpt.pt").is_file() and str(out) in capsys.readouterr().out
    # the same directory again: refused, nothing touched
    assert cli.import_model([f"source={hf_dir}", f"out={out}"]) == 2
    assert "exists" in capsys.readouterr().err


def test_an_import_keeps_the_start_words_and_edges_of_a_text_it_is_given(
    marian, demo_dir, tmp_path, capsys
):
    """sentence_text=[...]: what a run of nmt-train learns from its sources, for splitting
    paragraphs and checking for skipped sentences (nmt.documents); a file that cannot be read
    fails before the import."""
    hf_dir, _ = marian
    out, text = tmp_path / "with_text", demo_dir / "train.de"
    assert cli.import_model([f"source={hf_dir}", f"out={out}", f"sentence_text=[{text}]"]) == 0
    translator = Translator.from_checkpoint(out, device="cpu")
    assert {"Ich", "Wir"} <= translator.facts.starts
    assert translator.facts.edges.start_share("Ich") > 0.9
    assert not Translator.from_checkpoint(marian[1], device="cpu").facts.edges  # without
    missing = tmp_path / "nowhere.de"
    args = [f"source={hf_dir}", f"out={tmp_path / 'x'}", f"sentence_text=[{missing}]"]
    assert cli.import_model(args) == 2
    assert "nowhere.de" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_what_nmt_cannot_run_is_refused_by_name(tmp_path, demo_dir):
    bart = tmp_path / "bart"
    bart.mkdir()
    (bart / "config.json").write_text(json.dumps({"model_type": "m2m_100"}))
    with pytest.raises(NMTError, match="m2m_100.*Marian"):
        import_marian(str(bart), tmp_path / "out")
    odd = write_marian(tmp_path / "odd", demo_dir, steps=0, decoder_ffn_dim=128)
    with pytest.raises(NMTError, match="decoder_ffn_dim=128"):
        import_marian(str(odd), tmp_path / "out2")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out2").exists()


def test_the_commands_decode_as_the_authors_ship_it(marian, demo_dir, tmp_path):
    """nmt-translate with no decode setting decodes the import with its generation config
    (beam 4, Hugging Face's early_stopping=False and length penalty 1.0, max_length 48): the
    translations `generate` gives with no argument, on 200 sentences; a decode.KEY=VALUE changes
    that key alone, decode=beam is nmt's beam. The library's default is the same; the source cap
    is the model's positions."""
    hf_dir, ours = marian
    texts = sentences(demo_dir, 100) + (demo_dir / "valid.de").read_text("utf-8").splitlines()
    reference, tokenizer = hf_model(hf_dir), hf_tokenizer(hf_dir)
    with torch.no_grad():
        out = reference.generate(**tokenizer(texts, padding=True, return_tensors="pt"))
    want = tokenizer.batch_decode(out, skip_special_tokens=True)
    source = tmp_path / "in.de"
    source.write_text("".join(t + "\n" for t in texts), "utf-8")
    target = tmp_path / "out.en"
    args = [f"ckpt={ours}", f"input={source}", f"output={target}", "device=cpu"]
    assert cli.translate(args) == 0
    assert target.read_text("utf-8").splitlines() == want
    assert len(set(want)) > 180
    cfg = cli.compose_config("translate", [f"ckpt={ours}", "decode.precision=int8"])
    assert (cfg.decode.beam_size, cfg.decode.early_stopping) == (4, False)
    assert cfg.decode.precision.value == "int8" and cfg.decode.max_len_cap == 47
    nmt_beam = cli.compose_config("translate", [f"ckpt={ours}", "decode=beam"]).decode
    assert (nmt_beam.beam_size, nmt_beam.length_penalty.value) == (5, "gnmt")
    library = Translator.from_checkpoint(ours, device="cpu")
    assert library.decode == cfg.decode.__class__(**{**vars(cfg.decode), "precision": "fp32"})
    assert library.decode.max_src_pieces == 256  # the model's max_position_embeddings


def test_fine_tuning_the_import_with_nmt_train_improves_it(marian, tmp_path, demo_dir):
    """nmt-train train.init_from=OUT: the imported architecture (taken from the checkpoint: no
    model=... needed) and tokenizer, trained on; valid BLEU rises."""
    import sacrebleu

    _, ours = marian
    run = tmp_path / "tuned"
    args = [
        f"train.init_from={ours}", "data=demo", f"data.local_dir={demo_dir}", f"run_dir={run}",
        "train.max_steps=100", "train.valid_every=100", "train.lr=0.001",
        "train.batch_tokens=1000",
    ]  # fmt: skip
    assert cli.train(args) == 0
    src = (demo_dir / "valid.de").read_text("utf-8").splitlines()
    ref = (demo_dir / "valid.en").read_text("utf-8").splitlines()
    greedy = DecodeConfig(strategy=Strategy.greedy)

    def bleu(ckpt: Path) -> float:
        hyps = Translator.from_checkpoint(ckpt, greedy, "cpu").translate(src)
        return sacrebleu.corpus_bleu(hyps, [ref]).score

    before, after = bleu(ours), bleu(run / "checkpoints" / "last")
    assert after > before + 1.0, (before, after)


def test_every_tool_takes_the_imported_model(marian, demo_dir, tmp_path, capsys):
    """nmt-serve (page info, attention, search tree, prefix: the explorer's requests), constraints,
    banned phrases, an ensemble with a model of the same tokenizer, nmt-score, nmt-evaluate, int8
    and the CTranslate2 export, on the imported checkpoint."""
    from starlette.testclient import TestClient

    from nmt.run_config import ServeRunConfig
    from nmt.serving.app import load_app

    _, ours = marian
    texts = sentences(demo_dir, 4)
    beam = DecodeConfig(strategy=Strategy.beam, beam_size=4)
    translator = Translator.from_checkpoint(ours, beam, "cpu")
    plain = translator.translate(texts)
    serve = ServeRunConfig(ckpt=str(ours), decode=beam, device="cpu")
    with TestClient(load_app(serve)) as client:
        assert client.get("/info").status_code == 200
        body = {"text": texts[0], "attention": True, "beam_tree": True, "prefix": "I see"}
        answer = client.post("/translate", json=body)
        assert answer.status_code == 200, answer.text
        [result] = answer.json()["translations"]
        assert result["text"].startswith("I see") and result["beam_tree"]["nodes"]
        assert len(result["attention"]) > 0
    # a constraint appears, a banned word does not
    [forced] = translator.translate([texts[0]], constraints=[["birds"]])
    assert "birds" in forced
    banned = translator.translate(texts, banned=["I"])
    assert all(not t.startswith("I ") for t in banned)
    # an ensemble of the import with itself translates as the import alone
    assert Translator.from_checkpoints([ours, ours], beam, "cpu").translate(texts) == plain
    # int8: a setting of the same model
    int8 = DecodeConfig(strategy=Strategy.beam, beam_size=4, precision="int8")
    assert len(Translator.from_checkpoint(ours, int8, "cpu").translate(texts)) == len(texts)
    # nmt-score and nmt-evaluate
    src, hyp = tmp_path / "src.de", tmp_path / "hyp.en"
    src.write_text("\n".join(texts) + "\n", "utf-8")
    hyp.write_text("\n".join(plain) + "\n", "utf-8")
    assert cli.score([f"ckpt={ours}", f"src={src}", f"hyp={hyp}"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(texts)
    args = [f"ckpt={ours}", "data=demo", f"data.local_dir={demo_dir}", "split=test"]
    assert cli.evaluate([*args, "decode=greedy"]) == 0
    assert "BLEU" in capsys.readouterr().out
    # CTranslate2 reads the export and writes what nmt writes (greedy)
    pytest.importorskip("ctranslate2")
    from nmt.export.ct2 import CT2Translator

    out = tmp_path / "ct2"
    assert cli.export([f"ckpt={ours}", "format=ctranslate2", f"out={out}"]) == 0
    greedy = DecodeConfig(strategy=Strategy.greedy)
    want = Translator.from_checkpoint(ours, greedy, "cpu").translate(texts)
    assert CT2Translator(out, greedy).translate(texts) == want


def test_frozen_parts_stay_as_they_were(marian, tmp_path, demo_dir):
    """train.freeze=[encoder] (the shared table with it) trains the decoder alone;
    train.freeze=[embeddings] leaves the table and trains the rest."""
    _, ours = marian
    start = load_checkpoint(ours).payload["model"]
    for parts, frozen in (("[encoder]", ("encoder.",)), ("[embeddings]", ("encoder.embed.",))):
        run = tmp_path / parts.strip("[]")
        args = [
            "--config-dir", str(ours), "model=imported", f"train.init_from={ours}", "data=demo",
            f"data.local_dir={demo_dir}", f"run_dir={run}", "train.max_steps=5",
            "train.valid_every=5", f"train.freeze={parts}",
        ]  # fmt: skip
        assert cli.train(args) == 0
        tuned = load_checkpoint(run / "checkpoints" / "last").payload["model"]
        for key, value in start.items():
            same = torch.equal(tuned[key], value)
            if key.startswith(frozen) or key == "decoder.embed.table.weight":
                assert same, key
            elif key.endswith(".weight") and "norm" not in key:
                assert not same, key


def test_a_hub_id_is_fetched_and_an_offline_hub_is_one_clear_error(marian, tmp_path, monkeypatch):
    """source=OWNER/NAME goes through huggingface_hub's snapshot_download (here answering with
    the local directory, the hub being out of reach); its failure is one NMTError naming the id."""
    import huggingface_hub

    hf_dir, _ = marian
    asked = []

    def snapshot(repo_id, allow_patterns):
        asked.append((repo_id, allow_patterns))
        return str(hf_dir)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot)
    out = import_marian("Helsinki-NLP/opus-mt-de-en", tmp_path / "from_hub")
    assert (out / "ckpt.pt").is_file() and asked[0][0] == "Helsinki-NLP/opus-mt-de-en"
    assert "config.json" in asked[0][1] and not any(p.endswith(".py") for p in asked[0][1])

    def offline(repo_id, allow_patterns):
        raise OSError("the hub cannot be reached")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(NMTError, match="cannot fetch Helsinki-NLP/x .*cannot be reached"):
        import_marian("Helsinki-NLP/x", tmp_path / "offline")
    with pytest.raises(NMTError, match="not a directory, nor a hub id"):
        import_marian("no/such/dir", tmp_path / "nowhere")
    assert not (tmp_path / "offline").exists()


def test_trimming_keeps_the_translations_of_kept_text(marian, demo_dir, tmp_path):
    """keep_text on a Marian import: each file cut by both sentencepiece models; the table holds
    those pieces and the specials, and greedy search translates as the untrimmed model wherever
    that model's translation uses kept pieces only."""
    hf_dir, ours = marian
    src = (demo_dir / "valid.de").read_text("utf-8").splitlines()[:40]
    tgt = (demo_dir / "valid.en").read_text("utf-8").splitlines()[:40]
    keep = tmp_path / "keep.txt"
    keep.write_text("\n".join(src + tgt) + "\n", "utf-8")
    trimmed = import_marian(str(hf_dir), tmp_path / "trimmed", keep_text=[str(keep)])
    kept = json.loads((trimmed / "pieces.marian.json").read_text("utf-8"))
    assert len(kept) < 0.8 * len(json.loads((ours / "pieces.marian.json").read_text("utf-8")))
    untrimmed = Translator.from_checkpoint(ours, DecodeConfig(), "cpu").translate_full(src)
    again = Translator.from_checkpoint(trimmed, DecodeConfig(), "cpu").translate(src)
    covered = [i for i, t in enumerate(untrimmed) if set(t.tgt_pieces) <= set(kept)]
    assert len(covered) >= 30
    assert [again[i] for i in covered] == [untrimmed[i].text for i in covered]
