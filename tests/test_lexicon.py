"""The lexical table (IBM Model 1) and decoding with shortlists: what the table learns, what a
shortlist allows, that a shortlist allowing everything is exact search, that a restricted one
keeps beam 1 = greedy, batch-size independence and scores that stepping confirms, and the
checkpoint round trip (trained with one, learned for one without)."""

import shutil
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from nmt.checkpoint import load_checkpoint
from nmt.cli import main as cli
from nmt.config import SHORTLIST_MAX, DecodeConfig, Strategy
from nmt.data.splits import Encoded
from nmt.errors import NMTError
from nmt.lexicon import LEXICON_FILE, SPECIALS, Lexicon, load_lexicon
from nmt.tokenizer import BOS, EOS, PAD
from nmt.training.lexicon import learn_lexicon
from nmt.translation.search import decode_all
from nmt.translation.translator import Translator
from tests.test_search import CPU, FAMILIES, V, batch_of, random_model, random_sources

WORDS = range(SPECIALS, 12)  # source word w translates to target word w + 8
THE = 20  # a target word in every sentence that no source word stands for


def toy_corpus(sentences: int = 400) -> Encoded:
    g = torch.Generator().manual_seed(0)
    src, tgt = [], []
    for _ in range(sentences):
        n = int(torch.randint(1, 6, (1,), generator=g))
        words = torch.randint(WORDS.start, WORDS.stop, (n,), generator=g).tolist()
        shuffled = [words[i] + 8 for i in torch.randperm(n, generator=g).tolist()]
        src.append(words + [EOS])
        tgt.append([THE, *shuffled])  # reordered, with an unaligned word in front
    return Encoded(src, tgt)


def test_model_one_finds_the_translation_of_every_word():
    lexicon = learn_lexicon(toy_corpus(), 12, V)
    assert lexicon.translations.shape == (12, SHORTLIST_MAX)
    for w in WORDS:
        assert lexicon.translations[w, 0] == w + 8  # not THE, though THE co-occurs just as often
    # PAD never occurs and EOS is NULL: neither has translations
    assert (lexicon.translations[[PAD, EOS]] == -1).all()
    assert lexicon.frequent[0] == THE
    assert sorted(lexicon.frequent.tolist()) == list(range(V))


def test_a_shortlist_holds_the_specials_the_frequent_and_each_sentences_translations():
    lexicon = learn_lexicon(toy_corpus(), 12, V)
    src = torch.tensor([[4, 5, EOS], [9, EOS, PAD]])
    shortlist = lexicon.shortlist(src, per_source=1, frequent=1)
    ids = shortlist.ids.tolist()
    assert ids == sorted(ids) and ids[:SPECIALS] == list(range(SPECIALS))
    allowed = [{ids[c] for c in row.nonzero().squeeze(1).tolist()} for row in shortlist.allowed]
    base = set(range(SPECIALS)) | {THE}
    assert allowed == [base | {12, 13}, base | {17}]
    # a sentence's list does not depend on the batch it is in
    alone = lexicon.shortlist(src[1:, :2], per_source=1, frequent=1)
    assert {alone.ids[c].item() for c in alone.allowed[0].nonzero().squeeze(1)} == allowed[1]


def test_the_lexicon_file_round_trips(tmp_path):
    lexicon = learn_lexicon(toy_corpus(), 12, V)
    lexicon.save(tmp_path / LEXICON_FILE)
    loaded = load_lexicon(tmp_path)
    assert torch.equal(loaded.translations, lexicon.translations)
    assert torch.equal(loaded.frequent, lexicon.frequent)
    assert load_lexicon(tmp_path / "elsewhere") is None
    (tmp_path / LEXICON_FILE).write_bytes(b"not a lexicon")
    with pytest.raises(NMTError, match="cannot read the lexicon"):
        load_lexicon(tmp_path)


def random_lexicon(per_source: int, seed: int = 3) -> Lexicon:
    """Random translations for the random models of test_search (V pieces on both sides)."""
    g = torch.Generator().manual_seed(seed)
    table = torch.full((V, SHORTLIST_MAX), -1, dtype=torch.long)
    for s in range(SPECIALS, V):
        table[s, :per_source] = torch.randperm(V - SPECIALS, generator=g)[:per_source] + SPECIALS
    return Lexicon(table, torch.randperm(V, generator=g))


STRATEGIES = [Strategy.greedy, Strategy.beam]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_shortlist_of_every_piece_is_exact_search(family, strategy):
    model = random_model(family)
    sources = random_sources(2, 9)
    cfg = DecodeConfig(strategy=strategy, beam_size=3, max_len_a=1.0, max_len_b=4, batch_size=4)
    exact = decode_all(model, sources, cfg, CPU, attention=True)
    listed = decode_all(
        model, sources, replace(cfg, shortlist=1, shortlist_frequent=V), CPU, True,
        random_lexicon(1),
    )  # fmt: skip
    for [a], [b] in zip(exact, listed):
        assert (a.tokens, a.ended) == (b.tokens, b.ended)
        assert a.score == pytest.approx(b.score, abs=1e-5)
        torch.testing.assert_close(a.attention, b.attention)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_restricted_shortlist_keeps_beam_one_equal_to_greedy(family):
    model, lexicon = random_model(family), random_lexicon(3)
    sources = random_sources(4, 9)
    cfg = DecodeConfig(max_len_a=1.0, max_len_b=4, batch_size=4, shortlist=3, shortlist_frequent=2)
    greedy_out = decode_all(model, sources, cfg, CPU, False, lexicon)
    beam = replace(cfg, strategy=Strategy.beam, beam_size=1)
    for [g], [b] in zip(greedy_out, decode_all(model, sources, beam, CPU, False, lexicon)):
        assert (g.tokens, g.ended) == (b.tokens, b.ended)
        assert g.score == pytest.approx(b.score, abs=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_restricted_shortlist_is_kept_and_independent_of_the_batch(family, strategy):
    """Only listed pieces come out, each score is the log-probability renormalised over the
    sentence's list (as stepping through the hypothesis computes it), and the batch size changes
    nothing."""
    model, lexicon = random_model(family), random_lexicon(3)
    sources = random_sources(6, 11)
    cfg = DecodeConfig(strategy=strategy, beam_size=3, n_best=2 if strategy == Strategy.beam else 1,
                       max_len_a=1.0, max_len_b=3, shortlist=3, shortlist_frequent=2)  # fmt: skip
    results = {n: decode_all(model, sources, replace(cfg, batch_size=n), CPU, False, lexicon)
               for n in (1, 4, 11)}  # fmt: skip
    for n in (4, 11):
        for nbest, reference in zip(results[n], results[1]):
            assert [h.tokens for h in nbest] == [h.tokens for h in reference]
            assert [h.score for h in nbest] == pytest.approx([h.score for h in reference], abs=1e-4)
    for source, nbest in zip(sources, results[1]):
        batch = batch_of([source])
        shortlist = lexicon.shortlist(batch.src, 3, 2)
        listed = shortlist.ids[shortlist.allowed[0]]
        for hyp in nbest:
            produced = hyp.tokens + [EOS] * hyp.ended
            assert set(produced) <= set(listed.tolist())
            with torch.no_grad():
                state = model.init_state(model.encode(batch.src, batch.src_lens))
                score = 0.0
                for prev, token in zip([BOS] + produced, produced):
                    logits, _, state = model.decode_step(torch.tensor([prev]), state)
                    log_probs = logits[0, listed].log_softmax(-1)
                    score += float(log_probs[listed.tolist().index(token)])
            assert hyp.score == pytest.approx(score, abs=1e-4)


def test_training_saves_the_lexicon_and_translate_uses_it(train_small, tmp_path, capsys):
    """Every checkpoint of a run carries lexicon.pt; a checkpoint without one refuses
    decode.shortlist with the command that learns it, and that command makes it work."""
    best = train_small("gru")
    assert (best / LEXICON_FILE).is_file()
    ckpt = load_checkpoint(best)
    assert ckpt.lexicon is not None
    sentences = ["ein mann fährt rad .", "", "zwei hunde spielen im schnee ."]
    shortlisted = DecodeConfig(strategy=Strategy.beam, shortlist=10, shortlist_frequent=50)
    out = Translator.from_checkpoint(best, shortlisted, "cpu").translate(sentences)
    assert len(out) == 3 and out[1] == "" and out[0] and out[2]

    bare = tmp_path / "bare"
    shutil.copytree(best, bare)
    (bare / LEXICON_FILE).unlink()
    with pytest.raises(NMTError, match="python -m nmt.cli.lexicon"):
        Translator.from_checkpoint(bare, shortlisted, "cpu")
    assert cli.translate([f"ckpt={bare}", "decode=beam", "decode.shortlist=10"]) == 2
    assert "python -m nmt.cli.lexicon" in capsys.readouterr().err
    done = subprocess.run(
        [sys.executable, "-m", "nmt.cli.lexicon", str(bare)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert torch.equal(load_lexicon(bare).translations, ckpt.lexicon.translations)
    assert Translator.from_checkpoint(bare, shortlisted, "cpu").translate(sentences) == out

    # a lexicon of another vocabulary (copied from another run) is refused, not trusted
    Lexicon(ckpt.lexicon.translations[:-1], ckpt.lexicon.frequent).save(bare / LEXICON_FILE)
    with pytest.raises(NMTError, match="another vocabulary"):
        Translator.from_checkpoint(bare, shortlisted, "cpu")


def test_a_shortlist_out_of_range_is_a_config_error():
    with pytest.raises(NMTError, match="decode.shortlist must be in 0..64"):
        DecodeConfig(shortlist=SHORTLIST_MAX + 1)
    with pytest.raises(NMTError, match="shortlist_frequent >= 0"):
        DecodeConfig(shortlist_frequent=-1)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_beam_wider_than_a_sentences_list_still_ends_every_sentence(family):
    """Six pieces may be all a sentence allows (four specials, one frequent, one translation):
    a beam of 8 then carries hypotheses of probability 0, which never finish; every sentence
    still ends, with finite scores, and only listed pieces."""
    model, lexicon = random_model(family), random_lexicon(1)
    sources = random_sources(9, 6)
    cfg = DecodeConfig(strategy=Strategy.beam, beam_size=8, n_best=3, max_len_a=1.0, max_len_b=3,
                       shortlist=1, shortlist_frequent=1)  # fmt: skip
    results = decode_all(model, sources, cfg, CPU, False, lexicon)
    alone = decode_all(model, sources, replace(cfg, batch_size=1), CPU, False, lexicon)
    assert [[h.tokens for h in n] for n in alone] == [[h.tokens for h in n] for n in results]
    for source, nbest in zip(sources, results):
        assert 1 <= len(nbest) <= 3
        assert all(h.score > float("-inf") for h in nbest)
        shortlist = lexicon.shortlist(batch_of([source]).src, 1, 1)
        listed = set(shortlist.ids[shortlist.allowed[0]].tolist())
        assert all(set(h.tokens) <= listed for h in nbest)
