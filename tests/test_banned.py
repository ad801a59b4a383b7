"""Banned phrases (negative constraints, `decode.banned`): never produced, in greedy, beam and
sampling, for every family and batch size; a known blocked path on a hand-built model; the piece
sequences a phrase is blocked as; the refusals of the exported runtimes."""

import copy
from collections import Counter
from dataclasses import dataclass, replace

import pytest
import torch
from simulated_device import simulated_device
from test_search import (
    FAMILIES,
    TREE,
    A,
    B,
    C,
    D,
    ToyModel,
    one_source,
    random_model,
    random_sources,
    search,
)

from nmt.config import DecodeConfig, Strategy
from nmt.errors import NMTError
from nmt.tokenizer import EOS
from nmt.translation.phrases import MAX_SPELLED_PIECES, banned_forms
from nmt.translation.request import Request
from nmt.translation.search import (
    Banned,
    SearchJob,
    beam_search,
    decode_all,
    greedy,
    sample,
    search_all,
)
from nmt.translation.translator import Translator

CPU = torch.device("cpu")
NEG = float("-inf")
STRATEGIES = {
    Strategy.greedy: DecodeConfig(max_len_a=1.0, max_len_b=4),
    Strategy.beam: DecodeConfig(strategy=Strategy.beam, beam_size=4, n_best=3, max_len_a=1.0,
                                max_len_b=4),
    Strategy.sample: DecodeConfig(strategy=Strategy.sample, n_best=3, max_len_a=1.0, max_len_b=4),
}  # fmt: skip


def contains(tokens: list[int], phrase: list[int]) -> bool:
    n = len(phrase)
    return any(tokens[i : i + n] == phrase for i in range(len(tokens) - n + 1))


def log(p: float) -> float:
    return float(torch.tensor(p).log())


# ---- the blocking itself ----


def test_block_sets_exactly_the_completing_pieces_to_minus_infinity():
    banned = Banned.build([[C], [A, B], [D, B], [A, A, D], [B, C, A]], CPU)
    history = torch.tensor([[B, A], [C, D], [A, A], [D, B], [B, C]])  # (R, t = 2)
    out = banned.block(torch.zeros(5, 8), history)
    blocked = [(row == NEG).nonzero().squeeze(1).tolist() for row in out]
    # C everywhere; after A: B; after D: B; after A A: D; after B C: A
    assert blocked == [[B, C], [B, C], [B, C, D], [C], [A, C]]
    assert int((out == 0).sum()) == 5 * 8 - 10  # the other values are left as they are


def test_block_reads_only_the_history_there_is():
    banned = Banned.build([[A, B, C]], CPU)
    assert banned.context == 2
    short = banned.block(torch.zeros(1, 8), torch.tensor([[B]]))  # t = 1 < 2: nothing to match
    assert not bool((short == NEG).any())
    assert banned.block(torch.zeros(1, 8), None).eq(0).all()


def test_banned_phrases_follow_a_shortlist_into_its_columns():
    ids = torch.tensor([0, 1, 2, 3, A, C, D])  # a shortlist without B
    banned = Banned.build([[C], [B], [A, C], [A, B, D]], CPU).to_columns(ids)
    assert banned.single.tolist() == [5]  # C is column 5; B is not there: nothing to block
    assert [(c.tolist(), last.tolist()) for c, last in banned.groups] == [([[4]], [5])]


# ---- a hand-built model with known paths (tests/test_search.py's TREE) ----


@dataclass
class RowsState:
    """ToyState that also lets rows leave (greedy and sampling drop finished rows)."""

    history: torch.Tensor  # (R, t)

    def reorder(self, index, keep=None):
        return RowsState(self.history.index_select(0, index))


class RowsToy(ToyModel):
    def init_state(self, encoded, steps=None, compiled=False):
        return RowsState(super().init_state(encoded).history)

    def decode_step(self, prev, state):
        logits, weights, state = super().decode_step(prev, state)
        return logits, weights, RowsState(state.history)


def toy(strategy, banned, **options):
    cfg = DecodeConfig(strategy=strategy, max_len_a=0.0, max_len_b=10, **options)
    search = {Strategy.greedy: greedy, Strategy.beam: beam_search, Strategy.sample: sample}
    model = RowsToy(TREE)
    return search[strategy](model, one_source(model, cfg, banned=banned))


def test_greedy_takes_the_next_best_piece_where_a_phrase_would_end():
    # unconstrained greedy: A (.5), B (.4), EOS (.6). With A B banned, after A the best is C
    (hyp,) = toy(Strategy.greedy, [[A, B]])
    assert (hyp.tokens, hyp.ended) == ([A, C], True)
    assert hyp.score == pytest.approx(log(0.5 * 0.35 * 1.0))  # scores are the model's, unchanged
    (hyp,) = toy(Strategy.greedy, [[A]])  # one piece: never taken, so B then EOS
    assert (hyp.tokens, hyp.score) == ([B], pytest.approx(log(0.4 * 0.9)))


def test_beam_search_with_a_banned_phrase_node_by_node():
    """Beam 2, A C banned. Unconstrained the n-best is [B], [A C]. Step 1 keeps A (.5) and B
    (.4); step 2: B EOS (.36) ends, A C is blocked, so A B (.2) and B C (.04) go on; step 3:
    A B EOS (.12) ends, and two have ended."""
    cfg = DecodeConfig(strategy=Strategy.beam, beam_size=2, n_best=2, max_len_a=0.0,
                       max_len_b=10)  # fmt: skip
    job = SearchJob([[A, EOS]], cfg, banned=[[A, C]], trees=True)
    (decoded,) = search_all(ToyModel(TREE), job, CPU)
    assert [h.tokens for h in decoded.nbest] == [[B], [A, B]]
    assert [h.score for h in decoded.nbest] == pytest.approx([log(0.36), log(0.12)])
    nodes = decoded.tree.nodes
    path = lambda i: [] if nodes[i].parent < 0 else path(nodes[i].parent) + [nodes[i].token]
    made = sorted((path(i), nodes[i].state) for i in range(1, len(nodes)))
    assert made == [
        ([A], "kept"), ([A, B], "kept"), ([A, B, EOS], "finished"), ([B], "kept"),
        ([B, EOS], "finished"), ([B, C], "pruned"),  # live when the sentence ended
    ]  # fmt: skip
    # the blocked extension A C is nowhere in the tree; without the ban it is returned
    (free,) = search_all(ToyModel(TREE), SearchJob([[A, EOS]], cfg, trees=True), CPU)
    assert [h.tokens for h in free.nbest] == [[B], [A, C]]
    nodes = free.tree.nodes
    assert [A, C, EOS] in [path(i) for i in range(1, len(nodes))]


def test_sampling_never_draws_a_banned_piece():
    (draws,) = toy(Strategy.sample, [[A]], n_best=40)
    assert len(draws) == 40 and all(A not in h.tokens for h in draws)
    assert {tuple(h.tokens) for h in draws} <= {(B,), (), (B, C)}
    (draws,) = toy(Strategy.sample, [[A, B], [A, C]], n_best=40)  # after A, only EOS is left
    assert {tuple(h.tokens) for h in draws} <= {(A,), (B,), (), (B, C)}
    assert any(h.tokens == [A] for h in draws)


def test_a_forced_prefix_overrides_a_banned_phrase():
    """As with the other constraints: the prefix is what the user asked for."""
    cfg, model = DecodeConfig(max_len_a=0.0, max_len_b=10), ToyModel(TREE)
    (hyp,) = greedy(model, one_source(model, cfg, prefixes=[[A, B]], banned=[[A, B]]))
    assert hyp.tokens == [A, B] and hyp.score == pytest.approx(log(0.5 * 0.4 * 0.6))


# ---- random tiny models: every family, strategy and batch size ----


def phrases_in(outputs) -> list[list[int]]:
    """A piece, a bigram and a trigram the unconstrained best hypotheses hold (the most
    frequent ones, so that several sentences lose them)."""
    seqs = [nbest[0].tokens for nbest in outputs]
    found = []
    for n in (1, 2, 3):
        grams = Counter(tuple(s[i : i + n]) for s in seqs for i in range(len(s) - n + 1))
        found.append(list(grams.most_common(1)[0][0]))
    return found


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_banned_phrases_never_appear_in_any_hypothesis(family, strategy):
    model, sources = random_model(family), random_sources(12, 10)
    cfg = STRATEGIES[strategy]
    free = decode_all(model, sources, cfg, CPU)
    one, two, three = phrases_in(free)
    for banned in ([three], [two], [one, two, three]):  # alone, each reads its own context
        check_banned(model, sources, cfg, free, banned, strategy)


def check_banned(model, sources, cfg, free, banned, strategy):
    had = [any(contains(h.tokens, p) for h in nbest for p in banned) for nbest in free]
    assert any(had)  # the unconstrained output had them
    limits = [cfg.max_len(len(s)) for s in sources]
    results = {}
    for size in (1, 4, 10):
        out = search(model, sources, replace(cfg, batch_size=size), banned=banned)
        results[size] = out
        for nbest, free_nbest, limit in zip(out, free, limits):
            assert len(nbest) == len(free_nbest)
            for h in nbest:
                assert not any(contains(h.tokens, p) for p in banned), (h.tokens, banned)
                assert h.ended or len(h.tokens) == limit  # still a valid hypothesis
                assert h.score > NEG and EOS not in h.tokens
    # the batch a sentence is in does not change what it gets (sampling: one random stream for
    # the batch, so its draws depend on the batching, with or without banned phrases)
    for size in (4, 10) if strategy != Strategy.sample else ():
        assert [[h.tokens for h in n] for n in results[size]] == [
            [h.tokens for h in n] for n in results[1]
        ]
    changed = [[h.tokens for h in a] != [h.tokens for h in b] for a, b in zip(results[10], free)]
    assert all(changed[i] for i in range(len(free)) if had[i] and strategy != Strategy.sample)
    if strategy == Strategy.greedy:  # a path without the phrases never met a block: unchanged
        for a, b, hit in zip(results[10], free, had):
            if not hit:  # the same tokens; the score to fp32 rounding, which can differ in its
                # last bits with the batch's shape (`free` decoded all 10 sources in one batch)
                assert a[0].tokens == b[0].tokens
                assert a[0].score == pytest.approx(b[0].score, rel=1e-6)


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_no_banned_phrases_is_the_search_without_them(strategy):
    model, sources = random_model("transformer"), random_sources(3, 7)
    cfg = replace(STRATEGIES[strategy], batch_size=3)
    free = decode_all(model, sources, cfg, CPU, attention=True)
    out = search(model, sources, cfg, attention=True, banned=[])
    for a, b in zip(out, free):
        assert [(h.tokens, h.score, h.normalized) for h in a] == [
            (h.tokens, h.score, h.normalized) for h in b
        ]
        for x, y in zip(a, b):
            assert torch.equal(x.attention, y.attention)


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_banned_phrases_on_a_device_match_the_cpu(strategy):
    """The phrases live on the search's device (tests/simulated_device.py catches a CPU tensor
    meeting a device one)."""
    model, sources = random_model("gru-bahdanau"), random_sources(12, 6)
    cfg = replace(STRATEGIES[strategy], batch_size=4)
    banned = phrases_in(decode_all(model, sources, cfg, CPU))
    expected = search(model, sources, cfg, banned=banned)
    with simulated_device() as sim:
        on_device = copy.deepcopy(model).to(sim.device)
        got = search(on_device, sources, cfg, sim.device, banned=banned)
    assert [[h.tokens for h in n] for n in got] == [[h.tokens for h in n] for n in expected]


# ---- a trained model: text in, text out ----


def words(text: str) -> list[str]:
    return text.replace(".", " ").replace(",", " ").split()


@pytest.mark.parametrize("family", ["gru", "transformer"])
def test_a_trained_model_never_writes_a_banned_word(family, train_small, demo_dir):
    ckpt = train_small(family)
    sources = (demo_dir / "test.de").read_text(encoding="utf-8").splitlines()[:16]
    translator = Translator.from_checkpoint(ckpt, DecodeConfig(batch_size=8), "cpu")
    free = translator.translate(sources)
    counts = Counter(w for text in free for w in set(words(text)) if len(w) > 2)
    (word, had), (second, _) = counts.most_common(2)
    assert had >= 3
    (forms,) = banned_forms(translator.vocabs.tgt, [word], 512)
    assert translator.vocabs.tgt.encode([word])[0] in forms  # sentencepiece's own pieces
    assert all(translator.vocabs.tgt.decode([f])[0] == word for f in forms)
    shortlist = replace(STRATEGIES[Strategy.beam], shortlist=3, shortlist_frequent=10)
    for strategy, cfg in [*STRATEGIES.items(), ("shortlist", shortlist)]:
        cfg = replace(cfg, max_len_a=1.5, max_len_b=10)
        for size in (1, 8):
            out = translator.translate_full(
                sources, False, decode=replace(cfg, batch_size=size), banned=[word]
            )
            for t in out:
                assert t.text.strip()
                for text, _ in t.nbest:
                    assert word not in words(text), (strategy, size, text)
    # decode.banned does the same, and a call's list adds to it
    config_ban = replace(STRATEGIES[Strategy.greedy], max_len_a=1.5, max_len_b=10, banned=[word])
    both = translator.translate(sources, decode=config_ban, banned=[second])
    assert not any(word in words(t) or second in words(t) for t in both)
    assert "banned 'word'".replace("word", word) in config_ban.describe()


def test_unbannable_phrases_are_clear_errors(train_small):
    translator = Translator.from_checkpoint(train_small("gru"), device="cpu")
    with pytest.raises(NMTError, match=r"the banned phrase ' \\t ' has no pieces"):
        translator.translate(["Ein Haus."], banned=[" \t "])
    with pytest.raises(NMTError, match="banned must be a list of phrases"):
        translator.translate(["Ein Haus."], banned="Haus")
    with pytest.raises(NMTError, match=r"the banned phrase ' ' has no pieces"):
        translator.prepare(Request(["Ein Haus."], translator.decode, banned=[" "]))  # a check
    prepared = translator.prepare(Request(["Ein Haus."], translator.decode, banned=["houses"]))
    assert prepared.banned == banned_forms(translator.vocabs.tgt, ["houses"], 512)[0]
    with pytest.raises(NMTError, match=r"decode.banned\[1\] must be a non-blank phrase"):
        DecodeConfig(banned=["house", ""])


def test_a_phrase_is_blocked_in_every_spelling_with_its_word_start(train_small):
    vocab = Translator.from_checkpoint(train_small("gru"), device="cpu").vocabs.tgt
    (forms,) = banned_forms(vocab, ["houses"], 512)
    spelled = {tuple(vocab.id_to_piece(f)) for f in forms}
    assert len(spelled) == len(forms) >= 2
    assert all("".join(s) == "▁houses" for s in spelled)
    assert all(len(a) <= len(b) for a, b in zip(forms, forms[1:]))  # fewest pieces first


class CountingPieces(dict):
    """A vocabulary's piece table that counts the look-ups made in it."""

    calls = 0

    def get(self, key, default=None):
        self.calls += 1
        return super().get(key, default)


def test_spelling_a_long_phrase_costs_its_characters_not_its_spellings(train_small):
    """Each place is read only as far as the vocabulary's longest piece, and a phrase of many
    pieces is written out in fewer spellings (MAX_SPELLED_PIECES in all): 4,000 characters,
    with more spellings than could ever be listed, cost a few thousand look-ups."""
    vocab = Translator.from_checkpoint(train_small("gru"), device="cpu").vocabs.tgt
    lookups = CountingPieces(vocab.piece_ids)
    vocab.__dict__["piece_ids"] = lookups  # the cached table, counted
    phrase = " ".join(["houses", "trees", "the"] * 300)
    (forms,) = banned_forms(vocab, [phrase], 10**6)
    assert lookups.calls <= (len(phrase) + 1) * vocab.longest_piece
    assert 1 <= len(forms) <= max(1, MAX_SPELLED_PIECES // len(forms[0]))
    assert all(vocab.decode([f])[0] == phrase for f in forms)
    assert all(len(a) <= len(b) for a, b in zip(forms, forms[1:]))


def test_spellings_past_the_length_limit_are_refused_or_left_out(train_small):
    """A phrase whose fewest pieces are more than decode.max_len_cap could never appear: an
    error; spellings longer than the texts' translations can be are left out (they could never
    be completed), so a request of short texts carries none of a long phrase's."""
    translator = Translator.from_checkpoint(train_small("gru"), device="cpu")
    vocab = translator.vocabs.tgt
    (every,) = banned_forms(vocab, ["houses are here"], 512)
    fewest = len(every[0])
    (short,) = banned_forms(vocab, ["houses are here"], 512, reach=fewest)
    assert short == [f for f in every if len(f) <= fewest] and short
    assert banned_forms(vocab, ["houses are here"], 512, reach=fewest - 1) == [[]]
    with pytest.raises(NMTError, match=rf"needs at least {fewest} pieces, and no translation"):
        banned_forms(vocab, ["houses are here"], fewest - 1)
    long = "houses " * 40  # about 80 pieces: beyond a two-word text's limit of 13
    prepared = translator.prepare(Request(["Ein Haus."], translator.decode, banned=[long]))
    assert prepared.banned == []
    with pytest.raises(NMTError, match="decode.max_len_cap=20: it could never appear"):
        decode = replace(translator.decode, max_len_cap=20)
        translator.prepare(Request(["Ein Haus."], decode, banned=[long]))


# ---- the exported runtimes refuse them ----


def test_the_exported_runtimes_refuse_banned_phrases():
    from nmt.export.ct2 import decode_options
    from nmt.export.runtime import check_greedy, check_supported

    cfg = DecodeConfig(banned=["house"])
    with pytest.raises(NMTError, match=r"decode.banned=\['house'\] is not supported here"):
        check_greedy(cfg)
    with pytest.raises(NMTError, match=r"decode.banned=\['house'\] is not supported by the CTr"):
        decode_options(cfg, [5])
    assert check_greedy(DecodeConfig()) == DecodeConfig()
    # a request's own banned phrases, as the runtimes' translate() reads them
    request = Request(["Ein Haus."], DecodeConfig(), banned=["house"])
    with pytest.raises(NMTError, match=r"the CTranslate2 export does not support banned phrases"):
        check_supported(request, "CTranslate2 export")
    check_supported(Request(["Ein Haus."], DecodeConfig()), "CTranslate2 export")


def test_nmt_translate_composes_decode_banned():
    from nmt.cli import main as cli

    cfg = cli.compose_config("translate", ["ckpt=x", "decode.banned=[sleeps,a dog]"])
    assert cfg.decode.banned == ["sleeps", "a dog"]
    assert "banned 'sleeps', 'a dog'" in cfg.decode.describe()
    with pytest.raises(NMTError, match=r"decode.banned\[0\] must be a non-blank phrase"):
        cli.compose_config("translate", ["ckpt=x", 'decode.banned=[""]'])
