"""Scoring given translations (nmt/translation/scoring.py, `Translator.score`, nmt-score): the score
of the search's own output is the score the search reported, for every model family and strategy,
with and without a shortlist; output does not depend on the batch size; N lines in, N out; bad input
fails before the model loads."""

import json
import logging
import math
from dataclasses import replace

import pytest
import torch
from test_search import CPU, FAMILIES, V, random_model, random_sources

from nmt.cli import main as cli
from nmt.config import SHORTLIST_MAX, DecodeConfig, LengthPenalty, Precision, Strategy
from nmt.errors import NMTError
from nmt.lexicon import SPECIALS, Lexicon
from nmt.tokenizer import EOS
from nmt.translation.scoring import score_ids
from nmt.translation.search import decode_all
from nmt.translation.translator import Translator

# The search adds float32 log-probabilities one step at a time; scoring adds the same numbers
# (from a teacher-forced pass, whose matrix products may round differently) in float64. Over a
# few dozen pieces of magnitude < 20 each, float32 (2^-24 relative) leaves well under 1e-4.
TOL = {"abs": 1e-4, "rel": 1e-5}

STRATEGIES = {
    "greedy": DecodeConfig(length_penalty=LengthPenalty.gnmt),
    "beam": DecodeConfig(strategy=Strategy.beam, beam_size=4, n_best=4,
                         length_penalty=LengthPenalty.gnmt),
    "sample": DecodeConfig(strategy=Strategy.sample, n_best=3, temperature=1.5),
}  # fmt: skip


def ending_model(family: str) -> torch.nn.Module:
    """A random model of the family whose EOS is likely enough that most hypotheses end (with
    decode.min_len_b=3, after 3 pieces or more: the blocked EOS is the search's constraint, not
    the model's probability, and leaves the other pieces' scores alone)."""
    model = random_model(family)
    with torch.no_grad():
        model.decoder.output_layer()[1][EOS] += 1.0
    return model


def check_against_search(model, sources, cfg, lexicon=None) -> int:
    """Score every hypothesis the search returns; assert its score is the search's. Returns
    how many hypotheses ended with EOS (the others stopped at the length limit: their score
    has no EOS in it)."""
    nbests = decode_all(model, sources, cfg, CPU, lexicon=lexicon)
    pairs = [(src, hyp) for src, nbest in zip(sources, nbests) for hyp in nbest]
    scored = score_ids(
        model, [s for s, _ in pairs], [h.tokens for _, h in pairs], cfg, CPU, lexicon
    )
    assert len(scored) == len(pairs)
    for (_, hyp), values in zip(pairs, scored):
        assert len(values) == len(hyp.tokens) + 1  # the pieces, then EOS
        total = math.fsum(values if hyp.ended else values[:-1])
        assert total == pytest.approx(hyp.score, **TOL)
        if hyp.ended:
            length = len(values)
            assert cfg.normalize(total, length) == pytest.approx(hyp.normalized, **TOL)
    return sum(hyp.ended for _, hyp in pairs)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_score_of_the_searchs_output_is_the_score_it_reported(family, strategy):
    model = ending_model(family)
    sources = random_sources(3, 12)
    cfg = replace(STRATEGIES[strategy], max_len_a=1.0, max_len_b=6, min_len_b=3, batch_size=5)
    assert check_against_search(model, sources, cfg) > 0


def random_lexicon(seed: int = 0) -> Lexicon:
    g = torch.Generator().manual_seed(seed)
    translations = torch.randint(SPECIALS, V, (V, SHORTLIST_MAX), generator=g)
    translations[:SPECIALS] = -1  # as a learned table: PAD (batch padding) and EOS add nothing
    return Lexicon(translations, torch.randperm(V, generator=g))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_with_a_shortlist_too(family, strategy):
    """The softmax runs over each sentence's shortlist, as in the search; a piece outside the
    list scores -inf."""
    model, lexicon = ending_model(family), random_lexicon()
    sources = random_sources(4, 10)
    cfg = replace(STRATEGIES[strategy], shortlist=2, shortlist_frequent=3, max_len_a=1.0,
                  max_len_b=6, min_len_b=3, batch_size=4)  # fmt: skip
    assert check_against_search(model, sources, cfg, lexicon) > 0
    full = score_ids(model, sources, [[]] * len(sources), replace(cfg, shortlist=0), CPU)
    listed = score_ids(model, sources, [[]] * len(sources), cfg, CPU, lexicon)
    assert all(a[0] < b[0] for a, b in zip(full, listed))  # EOS: the same logit, fewer rivals
    shortlist = lexicon.shortlist(torch.tensor([sources[0]]), 2, 3)
    outside = next(i for i in range(4, V) if not shortlist.allowed[0, shortlist.ids == i].any())
    [values] = score_ids(model, sources[:1], [[outside]], cfg, CPU, lexicon)
    assert values[0] == -math.inf and math.isfinite(values[1])
    with pytest.raises(NMTError, match="lexicon"):
        score_ids(model, sources, [[]] * len(sources), cfg, CPU, None)


@pytest.mark.parametrize("family", FAMILIES)
def test_scores_do_not_depend_on_the_batch_size(family):
    model = random_model(family)
    sources = random_sources(6, 13)
    targets = [s[:-1][::-1] for s in random_sources(7, 13, max_len=20)]  # any pieces, any length
    cfg = DecodeConfig()
    reference = score_ids(model, sources, targets, replace(cfg, batch_size=1), CPU)
    for size in (4, 13):
        scored = score_ids(model, sources, targets, replace(cfg, batch_size=size), CPU)
        assert [len(v) for v in scored] == [len(t) + 1 for t in targets]
        for a, b in zip(scored, reference):
            assert a == pytest.approx(b, abs=1e-5)


# ---- Translator.score and nmt-score on trained models ----------------------------------------

SOURCES = [  # the demo corpus's language (nmt/demo.py)
    "Du kaufst sechshundertsieben Häuser.",
    "Er weiß, dass sie neunhundertdreiundfünfzig neue Häuser hat.",
    "Ich glaube, dass sie zwei kleine Autos hat.",
    "Wir sehen vierzig alte Häuser.",
]


@pytest.mark.parametrize("family", ["gru", "transformer"])
def test_translator_scores_its_own_translations(train_small, family):
    """`Translator.score` of `translate_full`'s output (text in, text out) is the score and the
    normalised score the search reported, wherever the text's pieces are the searched ones."""
    translator = Translator.from_checkpoint(train_small(family), device="cpu")
    decode = DecodeConfig(strategy=Strategy.beam, beam_size=4, n_best=3,
                          length_penalty=LengthPenalty.gnmt, alpha=1.0)  # fmt: skip
    results = translator.translate_full(SOURCES, True, decode=decode)
    sources = [r.source for r in results for _ in r.nbest]
    texts = [text for r in results for text, _ in r.nbest]
    scored = translator.score(sources, texts, decode=decode)
    searched = [(r.nbest_maps[k][0], r.nbest[k][1]) for r in results for k in range(len(r.nbest))]
    checked = 0
    for s, (pieces, normalized) in zip(scored, searched):
        if s.pieces != pieces:  # the search's pieces are not how the text tokenizes
            continue
        assert s.normalized == pytest.approx(normalized, **TOL)
        assert s.pieces[-1] == "</s>" and len(s.piece_scores) == len(s.pieces)
        checked += 1
    assert checked >= len(SOURCES), checked
    best = translator.score(SOURCES, [r.text for r in results], decode=decode)
    same = [(s, r) for s, r in zip(best, results) if s.pieces == r.tgt_pieces]
    assert len(same) >= len(SOURCES) // 2, (checked, len(same))
    for s, r in same:
        assert s.score == pytest.approx(r.score, **TOL)


def test_translator_score_edges(train_small, caplog):
    translator = Translator.from_checkpoint(train_small("gru"), device="cpu")
    with pytest.raises(NMTError, match="2 sources but 1 translations"):
        translator.score(["a", "b"], ["x"])
    assert translator.score([], []) == []
    with pytest.raises(NMTError, match="decode.precision=fp16 needs a CUDA device"):
        translator.score(["a"], ["x"], decode=DecodeConfig(precision=Precision.fp16))
    # an empty translation is the EOS alone; a blank source is the empty sentence
    empty, blank = translator.score([SOURCES[0], ""], ["", "You buy."])
    assert empty.pieces == ["</s>"] and empty.score == empty.piece_scores[0] < 0
    assert blank.score < 0 and blank.pieces[-1] == "</s>"
    # a source past decode.max_src_pieces is cut as translate cuts it, with a warning
    cut = DecodeConfig(max_src_pieces=4)
    with caplog.at_level(logging.WARNING, logger="nmt"):
        [long] = translator.score([SOURCES[0]], ["You buy."], decode=cut, first_line=7)
        assert "line 7" in caplog.text and "max_src_pieces=4" in caplog.text
        caplog.clear()
        _, unknown = translator.score(SOURCES[:2], ["You buy.", "You buy \u263a."])
        assert "line 2: the translation has characters" in caplog.text
    assert "<unk>" in unknown.pieces
    [short] = translator.score([SOURCES[0]], ["You buy."])
    ids = translator.vocabs.src.encode([SOURCES[0]])[0][:3] + [EOS]
    tgt = translator.vocabs.tgt.encode(["You buy."])
    [direct] = score_ids(translator.model, [ids], tgt, cut, translator.device)
    assert long.piece_scores == pytest.approx(direct, abs=1e-6) and long.score != short.score


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_nmt_score_end_to_end(train_small, tmp_path, capsys, monkeypatch):
    ckpt = train_small("gru")
    translator = Translator.from_checkpoint(ckpt, device="cpu")
    hyps = ["You buy six hundred seven houses.", "", "I think that she has two cars.", "We see."]
    src, hyp = write(tmp_path / "s.de", SOURCES), write(tmp_path / "h.en", hyps)
    beam = cli.compose_config("score", ["ckpt=x"]).decode  # configs/score.yaml's decode
    expected = translator.score(SOURCES, hyps, decode=beam)

    assert cli.score([f"ckpt={ckpt}", f"src={src}", f"hyp={hyp}", "device=cpu"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == len(SOURCES) and all(len(r) == 2 for r in rows)
    for row, e in zip(rows, expected):
        assert float(row[0]) == pytest.approx(e.score, abs=1e-6)
        assert float(row[1]) == pytest.approx(e.normalized, abs=1e-6)

    tsv = write(tmp_path / "pairs.tsv", [f"{s}\t{h}" for s, h in zip(SOURCES, hyps)])
    args = [f"ckpt={ckpt}", "pieces=true", "device=cpu"]
    assert cli.score([*args, f"tsv={tsv}", "format=jsonl"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(records) == len(SOURCES)
    for r, e in zip(records, expected):
        assert r["pieces"] == e.pieces and r["score"] == pytest.approx(e.score, abs=1e-6)
        assert r["piece_scores"] == pytest.approx(e.piece_scores, abs=1e-6)

    monkeypatch.setattr("sys.stdin", open(tsv, encoding="utf-8"))  # noqa: SIM115
    assert cli.score(args) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [r[2].split() for r in rows] == [e.pieces for e in expected]
    assert [float(x) for x in rows[0][3].split()] == pytest.approx(
        expected[0].piece_scores, abs=1e-6
    )


def one_line_error(argv, capsys) -> str:
    assert cli.score(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and err.count("\n") == 0, err
    return err


def test_bad_input_fails_before_the_model_loads(tmp_path, capsys):
    """The checkpoint does not exist: each error is found before it would be loaded."""
    src = write(tmp_path / "s", ["a", "b", "c"])
    hyp = write(tmp_path / "h", ["x", "y"])
    nowhere = f"ckpt={tmp_path / 'none'}"
    err = one_line_error([nowhere, f"src={src}", f"hyp={hyp}"], capsys)
    assert "has 3 lines but hyp=" in err and "has 2" in err
    err = one_line_error([nowhere, f"src={src}", f"hyp={tmp_path / 'missing'}"], capsys)
    assert "hyp=" in err and "missing: no such file" in err
    tsv = write(tmp_path / "t.tsv", ["a\tx", "b without a tab"])
    assert "line 2 has no tab" in one_line_error([nowhere, f"tsv={tsv}"], capsys)
    assert "give both src=FILE and hyp=FILE" in one_line_error([nowhere, f"src={src}"], capsys)
    err = one_line_error([nowhere, f"src={src}", f"hyp={hyp}", f"tsv={tsv}"], capsys)
    assert "not both" in err


def test_help(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.score(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: nmt-score") and "src=test.de hyp=test.hyp" in out
    assert "decode:" in out and "ScoreRunConfig" in out
