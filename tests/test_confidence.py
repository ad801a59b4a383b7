"""Confidence: the calibration fitted at the end of training lowers the pieces' calibration error
on held-out data, flags fire on degenerate outputs and not on clean ones, and every surface
carries the fields (nmt-translate's columns and review file, nmt-evaluate's report, the HTTP
answer)."""

import json
from dataclasses import replace

import pytest
import torch
from starlette.testclient import TestClient

from nmt.cli import main as cli
from nmt.config import Strategy
from nmt.data.splits import read_lines
from nmt.run_config import ServeRunConfig
from nmt.serving.app import load_app
from nmt.translation.confidence import (
    CALIBRATION_FILE,
    Calibration,
    Confidence,
    combine,
    expected_calibration_error,
    judge,
    measure,
    spearman,
    token_eces,
)  # fmt: skip
from nmt.translation.flags import Flagger, copies, repeats
from nmt.translation.request import Request
from nmt.translation.translator import Translator


@pytest.fixture(scope="module")
def ckpt(train_small):
    """A GRU whose run ended by fitting its calibration on the valid split."""
    return train_small("gru", "train.calibrate=true")


def test_the_run_stores_a_calibration_that_lowers_the_pieces_ece_on_test(ckpt, demo_dir):
    calibration = Calibration.load(ckpt)
    assert calibration is not None and calibration.fitted["split"] == "valid"
    translator = Translator.from_checkpoint(ckpt, device="cpu")
    src = read_lines(demo_dir / "test.de")
    ref = read_lines(demo_dir / "test.en")
    out = translator.translate(src)
    before, after = token_eces(translator, src, out, ref, calibration)
    assert after < before / 2, (before, after)  # measured: 0.25 -> 0.05
    found = measure(translator, src, out, calibration)
    assert len(found) == len(src)
    for c, text in zip(found, out):
        assert 0.0 <= c.sentence <= 1.0
        assert len(c.words) == len(text.split())
        assert all(0.0 <= p <= 1.0 for p in c.pieces)


def test_the_logistic_fit_recovers_the_map_that_made_the_labels():
    """Platt scaling's fit (`_logistic`): labels drawn from sigmoid(2 x + 1) give back 2 and 1."""
    from nmt.translation.confidence import _logistic

    generator = torch.Generator().manual_seed(0)
    x = torch.rand(20_000, generator=generator) * 6 - 5
    y = (torch.rand(20_000, generator=generator) < torch.sigmoid(2 * x + 1)).float()
    a, b = _logistic(x, y)
    assert a == pytest.approx(2.0, abs=0.15) and b == pytest.approx(1.0, abs=0.15)
    calibration = Calibration(token_scale=a, token_shift=b)
    assert calibration.piece_probability(-0.5) == pytest.approx(float(torch.sigmoid(
        torch.tensor(a * -0.5 + b))), abs=1e-6)  # fmt: skip
    assert Calibration().piece_probability(-0.5) == pytest.approx(0.6065, abs=1e-4)


@pytest.mark.parametrize(
    "settings",
    [
        {"strategy": Strategy.greedy},
        {"strategy": Strategy.beam, "beam_size": 4},
        {"strategy": Strategy.beam, "beam_size": 3, "early_stopping": False, "n_best": 2},
    ],
    ids=["greedy", "beam", "beam-no-early-stop"],
)
@pytest.mark.parametrize("temperature", [None, 1.7], ids=["fitted", "t1.7"])
def test_confidence_read_off_the_search_is_the_teacher_forced_one(ckpt, demo_dir, settings,
                                                                   temperature):  # fmt: skip
    """What every surface shows (`judge`, from the search's own steps) is what `measure`
    computes by teacher forcing the same pieces: the search's statistics follow its beam."""
    calibration = Calibration.load(ckpt)
    if temperature is not None:
        calibration = replace(calibration, temperature=temperature)
    translator = Translator.from_checkpoint(ckpt, device="cpu")
    decode = replace(translator.decode, **settings)
    src = read_lines(demo_dir / "test.de")[:60]
    request = Request(src, decode, statistics=calibration.temperature)
    done = translator.run(translator.prepare(request))
    taught = measure(translator, src, [t.text for t in done], calibration, decode=decode)
    vocab, compared, ended = translator.vocabs.tgt, 0, 0
    for t, theirs in zip(done, taught):
        ours = judge(t, calibration)
        assert ours.flags == theirs.flags
        pieces = t.tgt_pieces[:-1] if t.tgt_pieces[-1:] == ["</s>"] else t.tgt_pieces
        if vocab.id_to_piece(vocab.encode([t.text])[0]) != pieces:
            continue  # teacher forcing reads other pieces of the same text
        compared += 1
        if pieces == t.tgt_pieces:  # ended by the length limit: teacher forcing adds an EOS
            assert ours.pieces == pytest.approx(theirs.pieces[:-1], abs=1e-5)
            continue
        ended += 1
        assert ours.pieces == pytest.approx(theirs.pieces, abs=1e-5)
        assert ours.words == pytest.approx(theirs.words, abs=1e-5)
        assert ours.features == pytest.approx(theirs.features, abs=1e-5)
        assert ours.sentence == pytest.approx(theirs.sentence, abs=1e-5)
    assert compared >= 55 and ended >= 25, (compared, ended)


def test_measures_are_what_their_names_say():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2], [5, 5, 6]) == pytest.approx(1.0)  # ties share a rank
    right = torch.tensor([1.0, 1.0, 0.0, 0.0])
    assert expected_calibration_error(torch.tensor([0.95, 0.95, 0.05, 0.05]), right) == (
        pytest.approx(0.05)
    )
    assert expected_calibration_error(torch.tensor([0.5, 0.5, 0.5, 0.5]), right) == 0.0


CLEAN = [
    ("Ein Mann fährt Fahrrad.", "A man is riding a bike."),
    ("Zwei Hunde spielen im Schnee.", "Two dogs are playing in the snow."),
    ("Ein Mann und ein Mann sitzen.", "A man and a man are sitting."),
    ("Eine Frau in Blau, ein Mann in Blau.", "A woman in blue, a man in blue."),
    ("Berlin ist in Berlin.", "Berlin is in Berlin."),
]


@pytest.mark.parametrize("source, text", CLEAN)
def test_clean_translations_are_not_flagged(source, text):
    assert Flagger(0.5, 2.0).check(source, text, 8, 9) == []


def test_degenerate_translations_are_flagged_with_their_reason():
    flagger = Flagger(0.5, 2.0)
    assert flagger.check("Ein Hund.", "a dog a dog a dog a dog", 6, 9) == ["repeats"]
    assert repeats("the player with the number the number the number the number 10")
    assert repeats("wooden wooden wooden poles")
    source = "Eine Gruppe von Menschen steht vor einem großen Gebäude."
    assert flagger.check(source, source, 12, 12) == ["copies the source"]
    assert copies(source, "Eine Gruppe von Menschen steht vor einem Gebäude.")
    assert flagger.check(source, "A group.", 12, 4) == ["too short"]
    long = "A dog is running across a very long and wide field of green grass in the sun."
    assert flagger.check("Ein Hund.", long, 4, 30) == ["too long"]
    assert flagger.check(source, "", 12, 1) == ["too short"]


def test_a_paragraphs_confidence_is_its_weakest_sentence():
    a = Confidence(0.9, [0.9, 0.8], [0.9, 0.8, 0.9], [], 70.0, [0.0])
    b = Confidence(0.4, [0.5], [0.5, 0.9], ["too short"], 30.0, [1.0])
    both = combine([a, b])
    assert both.sentence == 0.4 and both.words == [0.9, 0.8, 0.5] and both.flags == ["too short"]
    assert combine([]).sentence == 1.0


def test_nmt_translate_writes_confidence_columns_and_a_review_file(ckpt, demo_dir, tmp_path):
    src = tmp_path / "in.de"
    lines = read_lines(demo_dir / "test.de")[:20]
    src.write_text("\n".join(lines[:10] + [""] + lines[10:]) + "\n", encoding="utf-8")
    out, review = tmp_path / "out.tsv", tmp_path / "review.tsv"
    args = [f"ckpt={ckpt}", f"input={src}", f"output={out}", "device=cpu", "confidence=true",
            f"review={review}", "retry_flagged=true"]  # fmt: skip
    assert cli.translate(args) == 0
    rows = out.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(rows) == 21  # N lines in, N out
    for row, line in zip(rows, lines[:10] + [""] + lines[10:]):
        text, p, flags, words = row.split("\t")
        assert 0.0 <= float(p) <= 1.0 and flags
        assert len(words.split()) == len(text.split())
        assert (text == "") == (line == "")
    for entry in review.read_text(encoding="utf-8").splitlines():
        n, p, flags, source, text = entry.split("\t")
        assert float(p) < 0.5 or flags != "-"
        assert rows[int(n) - 1].startswith(text)


def test_confidence_columns_go_with_plain_lines_only(ckpt, capsys):
    assert cli.translate([f"ckpt={ckpt}", "device=cpu", "confidence=true", "nbest_tsv=true"]) == 2
    assert "confidence=true with nbest_tsv=true" in capsys.readouterr().err
    assert cli.translate([f"ckpt={ckpt}", "device=cpu", "review=r.tsv"]) == 2
    assert "give input=FILE" in capsys.readouterr().err


def test_nmt_evaluate_reports_correlation_and_calibration(ckpt, demo_dir, tmp_path, capsys):
    args = [f"ckpt={ckpt}", "split=test", "device=cpu", "confidence=true",
            f"out_dir={tmp_path}"]  # fmt: skip
    assert cli.evaluate(args) == 0
    printed = capsys.readouterr().out
    assert "confidence (good: sentence chrF >= 50" in printed and "Spearman" in printed
    record = json.loads((tmp_path / "test.scores.json").read_text())
    for key in ("spearman", "spearman_tp", "ece", "token_ece", "token_ece_t1", "flagged"):
        assert key in record["confidence"], key


def test_the_http_answer_carries_confidence_when_asked(ckpt):
    assert (ckpt / CALIBRATION_FILE).is_file()
    with TestClient(load_app(ServeRunConfig(ckpt=str(ckpt), device="cpu"))) as c:
        plain = c.post("/translate", json={"text": "Ich sehe rote Äpfel."}).json()
        assert "confidence" not in plain["translations"][0]
        body = {"texts": ["Ich sehe rote Äpfel.", "Ich sehe rote Äpfel. Wir kaufen Bücher."],
                "confidence": True}  # fmt: skip
        got = c.post("/translate", json=body).json()["translations"]
        for t in got:
            c_ = t["confidence"]
            assert 0 <= c_["sentence"] <= 1 and isinstance(c_["flags"], list)
            assert len(c_["words"]) == len(t["text"].split())
        assert "confidence" in got[1]["sentences"][0]
        bad = c.post("/translate", json={"text": "a", "confidence": "yes"})
        assert bad.status_code == 422
        assert '"confidence" must be true or false' in bad.json()["error"]
