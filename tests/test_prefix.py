"""Forced prefixes and the recorded search tree: a prefix the search would have chosen changes
nothing, a prefix it would not is scored by the model and continued from; the tree holds every
hypothesis kept, with each returned one as a path; recording changes no output."""

import json
import math
from dataclasses import replace

import pytest
import torch
from test_search import (
    CPU,
    FAMILIES,
    TREE,
    A,
    B,
    C,
    ToyModel,
    batch_of,
    one_source,
    random_model,
    random_sources,
    search_batch,
)

from nmt.cli.lines import LineFormat, translate_stream
from nmt.cli.prompt import format_tree, repl
from nmt.config import DecodeConfig, Strategy
from nmt.errors import NMTError
from nmt.run_config import TranslateRunConfig
from nmt.tokenizer import BOS, EOS
from nmt.translation.request import Request
from nmt.translation.search import SearchJob, beam_search, decode_all, greedy, search_all
from nmt.translation.translator import Translator

LONG = dict(max_len_a=1.0, max_len_b=4)


def log(p: float) -> float:
    return float(torch.tensor(p).log())


def model_score(model, source: list[int], produced: list[int], upto: int | None = None) -> float:
    """Sum of the model's log-probabilities of `produced[:upto]` after BOS, stepping by hand."""
    batch = batch_of([source])
    with torch.no_grad():
        state = model.init_state(model.encode(batch.src, batch.src_lens))
        score = 0.0
        for prev, token in list(zip([BOS] + produced, produced))[:upto]:
            logits, _, state = model.decode_step(torch.tensor([prev]), state)
            score += float(logits.log_softmax(-1)[0, token])
    return score


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_from_its_own_first_pieces_is_greedy(family):
    model = random_model(family)
    sources = random_sources(3, 8)
    cfg = DecodeConfig(**LONG)
    free = decode_all(model, sources, cfg, CPU)
    for k in (1, 2, 3):
        prefixes = [h.tokens[:k] for [h] in free]
        forced = decode_all(model, sources, cfg, CPU, prefixes=prefixes)
        for source, [f], [g], prefix in zip(sources, forced, free, prefixes):
            assert (f.tokens, f.ended) == (g.tokens, g.ended)
            assert f.score == pytest.approx(g.score, abs=1e-5)
            assert f.prefix_score == pytest.approx(
                model_score(model, source, g.tokens, len(prefix)), abs=1e-4
            )


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("strategy", [Strategy.greedy, Strategy.beam])
def test_a_forced_prefix_starts_every_hypothesis_and_is_scored_by_the_model(family, strategy):
    model = random_model(family)
    sources = random_sources(4, 6)
    prefixes = [[9, 9, 4], [], [5], [17, 6], [4, 4, 4, 4], [12]]  # mostly unlikely pieces
    cfg = DecodeConfig(strategy=strategy, beam_size=3, n_best=3 if strategy == Strategy.beam else 1,
                       no_repeat_ngram=2, **LONG)  # fmt: skip
    results = decode_all(model, sources, cfg, CPU, prefixes=prefixes)
    for source, nbest, prefix in zip(sources, results, prefixes):
        assert nbest, "every sentence keeps a hypothesis"
        for hyp in nbest:
            assert hyp.tokens[: len(prefix)] == prefix  # the n-gram ban does not undo a prefix
            produced = hyp.tokens + [EOS] * hyp.ended
            assert hyp.score == pytest.approx(model_score(model, source, produced), abs=1e-4)
            expected = model_score(model, source, produced, len(prefix))
            assert hyp.prefix_score == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("strategy", [Strategy.greedy, Strategy.beam])
def test_prefixes_do_not_depend_on_batch_size(strategy):
    model = random_model("transformer")
    sources = random_sources(5, 9)
    prefixes = [[], [7], [8, 9], [], [10, 11, 12], [4], [], [5, 5], [6]]
    cfg = DecodeConfig(strategy=strategy, beam_size=4, **LONG)
    one = decode_all(model, sources, replace(cfg, batch_size=1), CPU, prefixes=prefixes)
    many = decode_all(model, sources, replace(cfg, batch_size=9), CPU, prefixes=prefixes)
    for a, b in zip(one, many):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


def test_beam_from_a_prefix_finds_the_best_continuation_of_it():
    # best overall is B EOS (.36); forced to start with A, the best is A C EOS (.5 * .35 = .175)
    cfg = DecodeConfig(strategy=Strategy.beam, beam_size=2, n_best=2, max_len_a=0.0, max_len_b=10)
    model = ToyModel(TREE)
    nbest = beam_search(model, one_source(model, cfg, prefixes=[[A]]))[0]
    assert [h.tokens for h in nbest] == [[A, C], [A, B]]
    assert [h.score for h in nbest] == pytest.approx([log(0.175), log(0.5 * 0.4 * 0.6)])
    assert all(h.prefix_score == pytest.approx(log(0.5)) for h in nbest)


def test_the_beam_tree_of_the_toy_model_is_known():
    cfg = DecodeConfig(strategy=Strategy.beam, beam_size=2, n_best=2, max_len_a=0.0, max_len_b=10)
    model = ToyModel(TREE)
    batch = one_source(model, cfg, trees=True)
    nbest = beam_search(model, batch)[0]
    (tree,) = batch.recorder.trees({h.node: rank for rank, h in enumerate(nbest)})
    nodes = {
        (tuple(_path(tree, i)), node.state, node.rank): node.score
        for i, node in enumerate(tree.nodes)
    }
    assert nodes == pytest.approx(
        {
            ((), "root", None): 0.0,
            ((A,), "kept", None): log(0.5),
            ((B,), "kept", None): log(0.4),
            ((B, EOS), "finished", 0): log(0.36),
            ((A, B), "kept", None): log(0.2),
            ((A, C), "kept", None): log(0.175),
            ((A, C, EOS), "finished", 1): log(0.175),
            ((A, B, EOS), "finished", None): log(0.12),  # finished, beyond the n-best list
        }
    )


def _path(tree, index: int) -> list[int]:
    path = []
    while tree.nodes[index].parent >= 0:
        path.append(tree.nodes[index].token)
        index = tree.nodes[index].parent
    return path[::-1]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("strategy", [Strategy.greedy, Strategy.beam, Strategy.sample])
def test_recording_the_tree_changes_no_output_and_holds_each_hypothesis(family, strategy):
    model = random_model(family)
    sources = random_sources(6, 7)
    n_best = 1 if strategy == Strategy.greedy else 3
    cfg = DecodeConfig(strategy=strategy, beam_size=4, n_best=n_best, batch_size=3, **LONG)
    prefixes = [[], [6], [], [7, 8], [], [], [9]]
    plain = search_all(model, SearchJob(sources, cfg, prefixes, attention=True), CPU)
    recorded = search_all(model, SearchJob(sources, cfg, prefixes, attention=True, trees=True), CPU)
    for a, b, prefix in zip(plain, recorded, prefixes):
        assert a.tree is None
        assert [h.tokens for h in a.nbest] == [h.tokens for h in b.nbest]
        assert [h.score for h in a.nbest] == [h.score for h in b.nbest]
        for x, y in zip(a.nbest, b.nbest):
            torch.testing.assert_close(x.attention, y.attention)
        nodes = b.tree.nodes
        assert nodes[0].state == "root" and sum(n.parent < 0 for n in nodes) == 1
        assert all(n.parent < i for i, n in enumerate(nodes))  # parents come first
        assert all(nodes[n.parent].state != "finished" for n in nodes[1:])
        ranked = {n.rank: i for i, n in enumerate(nodes) if n.rank is not None}
        assert sorted(ranked) == list(range(len(b.nbest)))
        for rank, hyp in enumerate(b.nbest):
            leaf = nodes[ranked[rank]]
            assert leaf.state == "finished"
            assert _path(b.tree, ranked[rank]) == hyp.tokens + [EOS] * hyp.ended
            assert leaf.score == pytest.approx(hyp.score, abs=1e-5)
        # while the prefix is forced, one hypothesis per step: a chain from the root
        assert [sum(n.step == t + 1 for n in nodes) for t in range(len(prefix))] == (
            [1] * len(prefix) if strategy != Strategy.sample else [n_best] * len(prefix)
        )


def test_greedy_tree_is_the_chain_of_its_hypothesis():
    model = random_model("gru-bahdanau")
    [source] = random_sources(2, 1)
    [done] = search_all(model, SearchJob([source], DecodeConfig(**LONG), trees=True), CPU)
    [hyp] = done.nbest
    produced = hyp.tokens + [EOS] * hyp.ended
    assert [n.token for n in done.tree.nodes] == [BOS] + produced
    assert [n.state for n in done.tree.nodes] == ["root"] + ["kept"] * (len(produced) - 1) + [
        "finished"
    ]
    batch = search_batch(model, [source], DecodeConfig(**LONG))
    assert greedy(model, batch)[0].tokens == hyp.tokens


# --- the Translator, nmt-translate and its prompt, with trained checkpoints ----------------------

SOURCES = ["Ich sehe einundzwanzig rote Äpfel.", "Der Mann trägt sieben schwarze Hüte.", ""]


@pytest.fixture(params=["gru", "transformer"])
def translator(request, train_small) -> Translator:
    return Translator.from_checkpoint(train_small(request.param), device="cpu")


@pytest.mark.parametrize("strategy", [Strategy.greedy, Strategy.beam])
def test_a_translation_starts_with_its_prefix_and_reports_its_score(translator, strategy):
    decode = DecodeConfig(strategy=strategy, beam_size=3)
    free = translator.translate_full(SOURCES, decode=decode)
    # its own first two words: the same translation and score
    own = [" ".join(t.text.split()[:2]) for t in free]
    again = translator.translate_full(SOURCES, decode=decode, prefixes=own)
    assert [t.text for t in again] == [t.text for t in free]
    assert [t.score for t in again] == pytest.approx([t.score for t in free], abs=1e-4)
    assert again[0].prefix_score <= 0 and again[0].prefix_pieces >= 2
    assert again[2].text == "" and again[2].prefix_score is None  # a blank source stays blank
    # a start the model would not choose: kept, and continued
    chosen = translator.translate_full(SOURCES[:2], decode=decode, prefixes=["I see eighty", ""])
    assert chosen[0].text.startswith("I see eighty")
    assert chosen[0].prefix_score < again[0].prefix_score
    assert chosen[1].text == free[1].text and chosen[1].prefix_score is None
    # the same prefix for every text, from the settings
    set_once = translator.translate(SOURCES[:1], decode=replace(decode, prefix="I see eighty"))
    assert set_once == [chosen[0].text]


def test_a_prefix_the_model_cannot_take_is_a_clear_error(translator):
    with pytest.raises(NMTError, match=r"line 2: the prefix '漢字' needs pieces .* lacks .*<0xE6>"):
        translator.translate(["Hallo", "Hallo"], prefixes=["", "漢字"])
    too_long = r"line 1: the prefix has \d+ pieces, and .* at most \d+ pieces"
    with pytest.raises(NMTError, match=too_long):
        translator.translate(["Hallo"], prefixes=["I see " * 20])
    with pytest.raises(NMTError, match="2 prefixes for 1 texts"):
        translator.translate(["Hallo"], prefixes=["a", "b"])
    # a blank text ignores its prefix (as a server's check, before translating)
    translator.prepare(Request(["Hallo", ""], translator.decode, ["I see", "漢字"]))


def test_the_tree_has_each_hypothesis_with_its_text(translator):
    decode = DecodeConfig(strategy=Strategy.beam, beam_size=4, n_best=2)
    [result] = translator.translate_full(SOURCES[:1], decode=decode, tree=True, prefixes=["I"])
    nodes = result.tree.nodes
    best = next(n for n in nodes if n.rank == 0)
    assert best.text == result.text and best.piece == "</s>" and best.state == "finished"
    assert nodes[0].piece == "<s>" and nodes[0].text == ""
    assert nodes[1].text == "I" and nodes[1].step == 1
    assert {n.state for n in nodes} <= {"root", "kept", "finished", "pruned"}
    text = format_tree(result.tree)
    assert len(text.splitlines()) == len(nodes) and "#1" in text and "#2" in text


def test_prefix_tsv_keeps_n_lines_and_starts_each_with_its_prefix(translator):
    lines = [f"{SOURCES[0]}\tI see eighty\n", f"{SOURCES[1]}\n", "\tA prefix for nothing\n", "\n"]
    out = list(translate_stream(translator, lines, fmt=LineFormat(prefix_tsv=True)))
    assert len(out) == 4 and out[0].startswith("I see eighty")
    assert out[1] == translator.translate(SOURCES[1:2])[0]
    assert out[2] == out[3] == ""


def test_the_prompt_forces_a_prefix_and_prints_the_tree(train_small, monkeypatch, capsys):
    ckpt = train_small("gru")
    translator = Translator.from_checkpoint(ckpt, device="cpu")
    typed = iter(["/tree", SOURCES[0], "/prefix I see eighty", "/prefix 漢", "/tree", "/prefix"])

    def fake_input(prompt):
        try:
            return next(typed)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", fake_input)
    repl(translator, TranslateRunConfig(str(ckpt)))
    out, err = capsys.readouterr()
    lines = out.splitlines()
    free = translator.translate(SOURCES[:1])[0]
    forced = translator.translate(SOURCES[:1], prefixes=["I see eighty"])[0]
    assert lines[0] == free  # "/tree" before any sentence only says so
    assert lines[1] == forced and lines[2].startswith("  (prefix: ")
    assert "lacks" in err  # the bad prefix: an error, the prompt goes on
    assert lines[3].startswith("<root>")  # the tree, its chain through the prefix first
    for depth, piece in enumerate(translator.vocabs.tgt.pieces("I see eighty"), 1):
        assert lines[3 + depth].startswith("  " * depth + piece + "  ")
    assert lines[-1] == free  # "/prefix" alone: no prefix any more


def test_a_prefix_outside_the_shortlist_is_still_forced(translator):
    """decode.shortlist scores a few pieces per sentence; a prefix's pieces join them."""
    decode = DecodeConfig(strategy=Strategy.beam, beam_size=3, shortlist=1, shortlist_frequent=0)
    [result] = translator.translate_full(SOURCES[:1], decode=decode, prefixes=["I see eighty"])
    assert result.text.startswith("I see eighty")
    assert math.isfinite(result.prefix_score) and result.prefix_score < 0  # scored, not -inf


# --- decode.prefix: one meaning for the Translator, nmt-evaluate and validation ----------------

PREFIX = "I see eighty"  # a start the models choose for none of SOURCES


@pytest.mark.parametrize("strategy", [Strategy.greedy, Strategy.beam])
def test_decode_prefix_is_the_same_prefix_for_every_text(translator, strategy):
    """`decode.prefix` (with the call or the Translator's default) forces what `prefixes` with
    that prefix for every text forces; per-text `prefixes` take its place ("" for none)."""
    plain = DecodeConfig(strategy=strategy, beam_size=3)
    forcing = replace(plain, prefix=PREFIX)
    n = len(SOURCES)
    free = translator.translate(SOURCES, decode=plain)
    want = translator.translate(SOURCES, decode=plain, prefixes=[PREFIX] * n)
    assert all(t.startswith(PREFIX) for t in want[:2]) and want[2] == ""
    assert not any(t.startswith(PREFIX) for t in free)
    assert translator.translate(SOURCES, decode=forcing) == want
    default = Translator(translator.model, translator.vocabs, CPU, translator.lexicon, forcing)
    assert default.translate(SOURCES) == want
    others = ["", "He", ""]
    expected = translator.translate(SOURCES, decode=plain, prefixes=others)
    assert expected[0] == free[0] and expected[1].startswith("He")
    assert translator.translate(SOURCES, decode=forcing, prefixes=others) == expected
    assert default.translate(SOURCES, prefixes=others) == expected


@pytest.mark.parametrize("family", ["gru", "transformer"])
def test_validation_bleu_with_a_prefix_is_nmt_evaluates(train_small, family, tmp_path):
    """Validation forces `decode.prefix` as nmt-evaluate does: the BLEU a run logs for its
    validation split is the one nmt-evaluate gives the checkpoint with the same settings."""
    from nmt.checkpoint import load_checkpoint
    from nmt.cli import main as cli
    from nmt.config import Split
    from nmt.data.splits import encode, read_split
    from nmt.metrics import bleu
    from nmt.training.validation import validate

    ckpt = load_checkpoint(train_small(family))
    corpus = read_split(ckpt.config.data, Split.valid)
    data = encode(corpus, ckpt.vocabs)
    model = Translator.from_checkpoint(ckpt, device="cpu").model

    def logged(decode: DecodeConfig) -> float:
        cfg = replace(ckpt.config, decode=decode)
        return validate(model, data, corpus.tgt, ckpt.vocabs, cfg, CPU, ckpt.lexicon)["bleu"]

    def evaluated(*overrides: str) -> tuple[float, DecodeConfig]:
        """nmt-evaluate's BLEU on the validation split, and the decode settings it used."""
        out = tmp_path / str(len(list(tmp_path.iterdir())))
        args = [f"ckpt={ckpt.path}", "split=valid", f"out_dir={out}", "device=cpu", *overrides]
        assert cli.evaluate(args) == 0
        scores = json.loads((out / "valid.scores.json").read_text())
        return scores["bleu"], cli.compose_config("evaluate", args).decode

    evaluate_bleu, forcing = evaluated("decode=greedy", f"decode.prefix='{PREFIX}'")
    assert forcing.prefix == PREFIX
    with_prefix = logged(forcing)
    assert with_prefix == pytest.approx(evaluate_bleu, abs=1e-9)
    evaluate_bleu, plain = evaluated("decode=greedy")
    assert logged(plain) == pytest.approx(evaluate_bleu, abs=1e-9)
    assert with_prefix != pytest.approx(evaluate_bleu, abs=1e-3)  # the prefix counts
    # what validation decodes: every hypothesis starts with the prefix
    hyps = Translator(model, ckpt.vocabs, CPU, ckpt.lexicon, forcing).translate(corpus.src)
    assert bleu(hyps, corpus.tgt) == pytest.approx(with_prefix, abs=1e-9)
    assert all(h.startswith(PREFIX) for h in hyps)
    with pytest.raises(NMTError, match=r"validation line 1: the prefix '漢字' needs pieces"):
        logged(DecodeConfig(prefix="漢字"))
