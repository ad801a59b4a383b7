"""Confidence: the calibration fitted at the end of training lowers the pieces' calibration error
on held-out data, flags fire on degenerate outputs and not on clean ones, and every surface
carries the fields (nmt-translate's columns and review file, nmt-evaluate's report, the HTTP
answer)."""

import json
import math
from dataclasses import replace

import pytest
import torch
from starlette.testclient import TestClient

from nmt.cli import main as cli
from nmt.config import SHORTLIST_MAX, DecodeConfig, Strategy
from nmt.data.splits import read_lines
from nmt.lexicon import Lexicon
from nmt.run_config import ServeRunConfig
from nmt.serving.app import load_app
from nmt.tokenizer import EOS
from nmt.translation import agreement as agreement_module
from nmt.translation.agreement import FREQUENT, UNLISTED, agreement
from nmt.translation.calibrators import isotonic, isotonic_at, logistic
from nmt.translation.confidence import (
    CALIBRATION_FILE,
    Calibration,
    Confidence,
    combine,
    expected_calibration_error,
    judge_all,
    measure,
    search_kind,
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
    translator = Translator.from_checkpoint(ckpt, device="cpu")
    calibration = Calibration.load(ckpt, search_kind(translator.decode))  # greedy's
    assert calibration is not None and calibration.fitted["split"] == "valid"
    assert calibration.fitted["search"] == "greedy"
    beam = Calibration.load(ckpt, "beam")
    assert beam is not None and beam.fitted["search"] == "beam" and beam != calibration
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
    """The logistic map of P(good): labels drawn from sigmoid(2 x + 1) give back 2 and 1."""
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(20_000, generator=generator) * 6 - 5
    y = (torch.rand(20_000, generator=generator) < torch.sigmoid(2 * x + 1)).float()
    a, b = logistic(x, y)
    assert a == pytest.approx(2.0, abs=0.15) and b == pytest.approx(1.0, abs=0.15)


def test_the_isotonic_map_recovers_a_rising_probability_and_holds_enough_labels_a_step():
    """The pieces' map: labels drawn with P(right | x) = x^2 on [0, 1] are fitted by a rising
    step function close to it, each step resting on at least `least` labels."""
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(20_000, generator=generator)
    y = (torch.rand(20_000, generator=generator) < x**2).float()
    knots, values = isotonic(x, y, least=200)
    assert knots == sorted(knots) and values == sorted(values)
    assert len(knots) <= 20_000 // 200
    for at in (0.1, 0.3, 0.5, 0.7, 0.9):
        assert isotonic_at(knots, values, at) == pytest.approx(at**2, abs=0.06)
    assert isotonic_at(knots, values, -5.0) == values[0]
    assert isotonic_at(knots, values, 5.0) == values[-1]
    calibration = Calibration(token_knots=knots, token_values=values)
    assert calibration.piece_probability(math.log(0.5)) == isotonic_at(knots, values, math.log(0.5))
    assert Calibration().piece_probability(-0.5) == pytest.approx(math.exp(-0.5))
    # pooled: labels falling with x give one step, their mean
    assert isotonic(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 1.0, 0.0]), least=1)[1] == [
        pytest.approx(2 / 3)
    ]
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
    calibration = Calibration.load(ckpt, search_kind(DecodeConfig(**settings)))
    if temperature is not None:
        calibration = replace(calibration, temperature=temperature)
    translator = Translator.from_checkpoint(ckpt, device="cpu")
    decode = replace(translator.decode, **settings)
    src = read_lines(demo_dir / "test.de")[:60]
    request = Request(src, decode, statistics=calibration.temperature)
    done = translator.run(translator.prepare(request))
    taught = measure(translator, src, [t.text for t in done], calibration, decode=decode)
    vocab, compared, ended = translator.vocabs.tgt, 0, 0
    for t, ours, theirs in zip(done, judge_all(translator, done, calibration), taught):
        assert ours.features[4:] == pytest.approx(theirs.features[4:], abs=1e-6)  # lexical
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
    # a server whose default lists alternatives holds a calibration for each kind of search, and
    # a request for the other kind is judged with that kind's
    beam3 = DecodeConfig(strategy=Strategy.beam, n_best=3)
    with TestClient(load_app(ServeRunConfig(ckpt=str(ckpt), device="cpu", decode=beam3))) as c:
        for strategy in ("beam", "greedy"):
            body = {"text": "Ich sehe rote Äpfel.", "confidence": True,
                    "decode": {"strategy": strategy, "n_best": 1}}  # fmt: skip
            answer = c.post("/translate", json=body)
            assert answer.status_code == 200, answer.text
            assert 0 <= answer.json()["translations"][0]["confidence"]["sentence"] <= 1


def test_lexical_agreement_ranks_added_and_dropped_words(monkeypatch):
    """Precision: how far down the source pieces' translation lists each target piece is;
    recall: how far down each source piece's list the translation reaches (log(1 + rank),
    UNLISTED where none), function words (the most frequent targets) left out of precision."""
    translations = torch.full((40, SHORTLIST_MAX), -1)
    translations[10, :2] = torch.tensor([60, 61])
    translations[11, 0] = 62
    frequent = torch.tensor([*range(4, 4 + FREQUENT), *range(4 + FREQUENT, 100)])  # 30 in it
    lexicon = Lexicon(translations, frequent)
    source = [10, 11, EOS]
    cases = {
        (60, 62): (0.0, 0.0),
        (61, 62): (math.log(2) / 2, math.log(2) / 2),  # a second choice
        (60, 62, 70): (math.log1p(UNLISTED) / 3, 0.0),  # a word the source does not hold
        (60,): (0.0, math.log1p(UNLISTED) / 2),  # a word left out
        (60, 62, 30): (0.0, 0.0),  # a function word
        (): (0.0, math.log1p(UNLISTED)),
    }
    targets = [[*t, EOS] for t in cases]
    found = agreement(lexicon, [source] * len(targets), targets)
    for got, want in zip(found, cases.values()):
        assert got == pytest.approx(want, abs=1e-6)
    assert agreement(None, [source], [[60, EOS]]) == [(0.0, 0.0)]
    # a big target vocabulary is read a few pairs at a time, each pair's answer the same
    monkeypatch.setattr(agreement_module, "CELLS", 2 * frequent.numel())
    assert agreement(lexicon, [source] * len(targets), targets) == found
