"""Positive constraints (nmt/translation/search/constraints.py): dynamic beam allocation on a
hand-built model, node by node; every returned hypothesis holds every phrase, contiguous, for every
family, batch size, n-best list and an ensemble; no constraints is the search without them; the
progress of a phrase that overlaps itself; the refusals (greedy, sampling, a phrase too long for the
length limit, a banned phrase inside one, pieces the vocabulary lacks) naming the sentence; the
library API on a trained model, and the exported runtimes' refusals."""

import copy
import re
from dataclasses import replace

import pytest
import torch
from simulated_device import simulated_device
from test_banned import RowsToy
from test_ensemble import random_lexicon
from test_search import (
    CPU,
    FAMILIES,
    A,
    B,
    C,
    D,
    V,
    batch_of,
    one_source,
    random_model,
    random_sources,
    search,
)

from nmt.config import NEED_BEAM, DecodeConfig, Strategy
from nmt.errors import NMTError
from nmt.models.ensemble import Ensemble
from nmt.tokenizer import EOS
from nmt.translation.phrases import constraint_ids, holds, jumps, pieces_needed, problem
from nmt.translation.request import Request
from nmt.translation.search import (
    Constraints,
    SearchJob,
    beam_search,
    decode_all,
    search_all,
)
from nmt.translation.translator import Translator

BEAM = DecodeConfig(strategy=Strategy.beam, beam_size=4, n_best=3, max_len_a=1.0, max_len_b=6)


def failures(model, sources, cfg, **job) -> list[str | None]:
    """Each source's `Decoded.failure` from `search_all` (None where it has hypotheses)."""
    out = search_all(model, SearchJob(sources, cfg, **job), CPU)
    assert all((d.failure is None) == bool(d.nbest) for d in out)
    return [d.failure for d in out]


UNMET = "no translation could meet its constraints within the length limit"


def log(p: float) -> float:
    return float(torch.tensor(p).log())


def tokens(out) -> list[list[list[int]]]:
    return [[h.tokens for h in nbest] for nbest in out]


def same(a, b) -> None:
    """Same hypotheses, scores (as computed: no tolerance) and attention."""
    assert [[(h.tokens, h.ended, h.score, h.normalized) for h in n] for n in a] == [
        [(h.tokens, h.ended, h.score, h.normalized) for h in n] for n in b
    ]
    for x, y in zip(a, b):
        for h, g in zip(x, y):
            assert (h.attention is None) == (g.attention is None)
            if h.attention is not None:
                assert torch.equal(h.attention, g.attention)


# ---- the automaton: how far each phrase has got ----


def test_a_phrase_that_overlaps_itself_keeps_its_progress_on_a_mismatch():
    # A A B after A A then A: the last two A are still its start (2), not 0 or 1
    assert jumps([A, A, B]) == [[1, 1, 0], [2, 2, 0], [2, 2, 3]]
    # A B A C after A B A then B: "A B" is its start again (2)
    assert jumps([A, B, A, C])[3] == [1, 2, 1, 4]
    assert pieces_needed([[A, A, B]], [A, A, A]) == 1  # one B to go
    assert pieces_needed([[A, A, B]], [A, A, A, B]) == 0
    assert pieces_needed([[A, B, A, C]], [A, B, A, B]) == 2
    # phrases are followed independently: overlapping ones share pieces; the most advanced
    # unmet phrase counts its pieces so far
    assert pieces_needed([[A, B], [B, C]], [A, B, C]) == 0
    assert pieces_needed([[A, B], [C, D, A]], [C, D]) == 2 + 1
    assert pieces_needed([[A, B], [C, D, A]], []) == 5


def test_the_jumps_are_the_longest_start_of_the_phrase_that_ends_the_hypothesis():
    g = torch.Generator().manual_seed(1)
    for _ in range(50):
        phrase = (torch.randint(0, 3, (int(torch.randint(1, 8, (1,), generator=g)),),
                                generator=g) + A).tolist()  # fmt: skip
        for s, row in enumerate(jumps(phrase)):
            for j, piece in enumerate(phrase):
                seen = phrase[:s] + [piece]
                longest = max(k for k in range(s + 2) if k == 0 or seen[-k:] == phrase[:k])
                assert row[j] == longest, (phrase, s, piece)


def test_the_tensor_automaton_follows_the_python_one():
    """`Constraints`' vectorised progress equals `pieces_needed` on every prefix of random
    sequences over few pieces (so that phrases overlap and repeat)."""
    g = torch.Generator().manual_seed(0)
    phrases = [[A, A, B], [B, A, B, A, C], [C], [A, B, A, B]]
    cons = Constraints.build([phrases], CPU)
    for _ in range(20):
        seq = (torch.randint(0, 4, (12,), generator=g) + A).tolist()
        matched = cons.start()  # (1, 1, P)
        lengths, phrases_t = cons.lengths.unsqueeze(1), cons.phrases
        for i, piece in enumerate(seq):
            matched = cons._advance(
                phrases_t, lengths, cons.jumps.flatten(1), matched, torch.tensor([[piece]])
            )
            met = matched >= lengths
            bank = int(torch.where(met, lengths, 0).sum() + torch.where(met, 0, matched).max())
            assert int(cons.total[0]) - bank == pieces_needed(phrases, seq[: i + 1]), seq


# ---- a hand-built model: dynamic beam allocation, node by node ----

# A is the model's choice; D (the constraint) is unlikely, and after A even less likely than the
# A B and A C that crowd it out of a beam ranked by score alone. Unlisted prefixes end (EOS 1.0).
TOY = {
    (): {A: 0.7, D: 0.2, EOS: 0.1},
    (A,): {B: 0.35, C: 0.3, EOS: 0.25, D: 0.1},
    (D,): {EOS: 0.6, B: 0.4},
}


def path(nodes, i):
    return [] if nodes[i].parent < 0 else path(nodes, nodes[i].parent) + [nodes[i].token]


def test_dynamic_beam_allocation_node_by_node():
    """Beam 2, constraint D. Step 1: EOS is blocked (D not met); A (.7, bank 0) and D (.2, bank
    1) are the only candidates: both kept. Step 2: candidates D EOS .12, D B .08, A D .07 (bank
    1) and A B .245, A C .21 (bank 0; A EOS is blocked). Round-robin over the banks, highest
    first: D EOS, A B, D B, A C. D EOS is among the first 2: it finishes; A B and D B go on.
    Step 3: A B can only end, which is blocked: nothing; D B EOS (.08) finishes, and two have.
    By score alone step 2 keeps A B and A C, and no hypothesis ever holds D."""
    cfg = DecodeConfig(strategy=Strategy.beam, beam_size=2, n_best=2, max_len_a=0.0,
                       max_len_b=10)  # fmt: skip
    job = SearchJob([[A, EOS]], cfg, constraints=[[[D]]], trees=True)
    (decoded,) = search_all(RowsToy(TOY), job, CPU)
    assert [(h.tokens, h.ended) for h in decoded.nbest] == [([D], True), ([D, B], True)]
    assert [h.score for h in decoded.nbest] == pytest.approx([log(0.2 * 0.6), log(0.2 * 0.4)])
    tree = decoded.tree
    assert tree.constraint_pieces == 1
    made = sorted(
        (path(tree.nodes, i), n.state, n.met, round(n.score, 4)) for i, n in enumerate(tree.nodes)
    )
    assert made == sorted([
        ([], "root", 0, 0.0),
        ([A], "kept", 0, round(log(0.7), 4)),
        ([D], "kept", 1, round(log(0.2), 4)),
        ([D, EOS], "finished", 1, round(log(0.12), 4)),
        ([A, B], "pruned", 0, round(log(0.7 * 0.35), 4)),  # its only end was blocked
        ([D, B], "kept", 1, round(log(0.08), 4)),
        ([D, B, EOS], "finished", 1, round(log(0.08), 4)),
    ])  # fmt: skip
    assert [tree.nodes[h.node].rank for h in decoded.nbest] == [0, 1]


def test_a_phrase_that_overlaps_itself_is_met_where_it_ends():
    """The only path is A A A B: the constraint A A B is met at its B (a search that restarted
    the phrase on the third A would never see it met, and find nothing)."""
    table = {(): {A: 1.0}, (A,): {A: 1.0}, (A, A): {A: 1.0}, (A, A, A): {B: 1.0}}
    cfg = DecodeConfig(strategy=Strategy.beam, beam_size=2, max_len_a=0.0, max_len_b=6)
    model = RowsToy(table)
    (nbest,) = beam_search(model, one_source(model, cfg, constraints=[[[A, A, B]]]))
    assert [(h.tokens, h.ended, h.score) for h in nbest] == [([A, A, A, B], True, 0.0)]


def test_a_forced_prefix_counts_toward_the_constraints():
    """Prefix D meets constraint D: the search then takes the model's best end, D EOS (.6),
    where a prefix that did not count would need a second D, which this model never gives."""
    cfg = DecodeConfig(strategy=Strategy.beam, beam_size=2, max_len_a=0.0, max_len_b=10)
    (nbest,) = search(RowsToy(TOY), [[A, EOS]], cfg, prefixes=[[D]], constraints=[[[D]]])
    assert [(h.tokens, h.prefix_score) for h in nbest] == [([D], pytest.approx(log(0.2)))]
    assert nbest[0].score == pytest.approx(log(0.2 * 0.6))
    # a prefix and constraints that do not fit the limit together: the request's check says why
    # (`problem`), and the search, given them anyway, finds no hypothesis and names the source
    assert problem([[D]], [D], 3) is None
    assert re.match(r"the constraints need 2 pieces after a forced prefix of 1 pieces.* at most 3 "
                    r"pieces", problem([[B, C]], [A], 3))  # fmt: skip
    # the search, given them anyway, finds no hypothesis for that source alone
    failed = failures(RowsToy(TOY), [[A, EOS]] * 2, replace(cfg, max_len_b=3), prefixes=[[D], [A]],
                      constraints=[[[D]], [[B, C]]])  # fmt: skip
    assert failed[0] is None and failed[1].startswith(UNMET)


def test_no_translation_can_meet_them_is_that_source_s_failure_alone():
    """After D only EOS or B, and after A B only EOS: D then C never happens. That source gets no
    hypothesis and says why; its batch-mate is searched as it is alone."""
    alone = search(RowsToy(TOY), [[A, EOS]], BEAM, constraints=[[[D]]])
    assert failures(RowsToy(TOY), [[A, EOS]], BEAM, constraints=[[[D, C]]])[0].startswith(UNMET)
    both = search_all(
        RowsToy(TOY), SearchJob([[A, EOS]] * 2, BEAM, constraints=[[[D, C]], [[D]]]), CPU
    )
    assert both[0].nbest == [] and both[0].failure.startswith(UNMET)
    same([both[1].nbest], alone)


# ---- random tiny models: every family, batch size, n-best list; an ensemble ----


def random_constraints(sources, free, seed: int) -> list[list[list[int]]]:
    """Per source: none, one or two phrases: a random piece, a random pair, and a pair the
    unconstrained best hypothesis holds (so that it is met along the model's own path)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, nbest in enumerate(free):
        best = nbest[0].tokens
        phrases = [torch.randint(4, V, (1,), generator=g).tolist()]
        phrases.append(torch.randint(4, V, (2,), generator=g).tolist())
        if len(best) >= 2:
            phrases.append(best[len(best) // 2 : len(best) // 2 + 2])
        out.append([] if i % 5 == 4 else phrases[i % 3 : i % 3 + 2])
    return out


def check_constrained(model, sources, cfg, attention=False, lexicon=None):
    """Decode with constraints at batch sizes 1, 4 and all; every hypothesis holds its
    phrases; the output does not depend on the batch; a source without constraints gets what
    it gets without them. Returns the constraints."""
    free = decode_all(model, sources, replace(cfg, batch_size=len(sources)), CPU, attention,
                      lexicon)  # fmt: skip
    wanted = random_constraints(sources, free, seed=len(sources))
    assert any(wanted) and not all(wanted)
    limits = [cfg.max_len(len(s)) for s in sources]
    results = {}
    for size in (1, 4, len(sources)):
        out = search(model, sources, replace(cfg, batch_size=size), CPU, lexicon,
                     attention=attention, constraints=wanted)  # fmt: skip
        for nbest, phrases, limit in zip(out, wanted, limits):
            assert 1 <= len(nbest) <= cfg.n_best
            assert len({tuple(h.tokens) for h in nbest}) == len(nbest)
            for h in nbest:
                assert all(holds(h.tokens, p) for p in phrases), (h.tokens, phrases)
                assert h.ended or len(h.tokens) == limit
                assert EOS not in h.tokens and h.score > float("-inf")
            keys = [h.normalized for h in nbest]
            assert keys == sorted(keys, reverse=True)
        results[size] = out
    for size in (4, len(sources)):
        assert tokens(results[size]) == tokens(results[1])
        for x, y in zip(results[size], results[1]):
            assert [h.score for h in x] == pytest.approx([h.score for h in y], abs=1e-4)
    for nbest, free_nbest, phrases in zip(results[len(sources)], free, wanted):
        if not phrases:
            same([nbest], [free_nbest])
    # the phrases changed the output where the model's own best did not hold them
    lacked = [not all(holds(f[0].tokens, p) for p in ps) for f, ps in zip(free, wanted)]
    assert any(lacked)
    for out, f, lack in zip(results[1], free, lacked):
        if lack:
            assert out[0].tokens != f[0].tokens
    return wanted


@pytest.mark.parametrize("family", FAMILIES)
def test_every_hypothesis_holds_its_constraints(family):
    check_constrained(random_model(family), random_sources(7, 11), BEAM)


def test_every_hypothesis_of_an_ensemble_holds_its_constraints():
    ensemble = Ensemble([random_model("gru-bahdanau"), random_model("transformer")])
    check_constrained(ensemble, random_sources(8, 9), replace(BEAM, beam_size=3, n_best=2))


def test_constraints_with_a_shortlist_that_lacks_their_pieces():
    """The shortlist of a sentence gains its phrases' pieces, or they could not be produced."""
    model, sources = random_model("transformer"), random_sources(9, 8)
    cfg = replace(BEAM, shortlist=1, shortlist_frequent=0)
    lexicon = random_lexicon(1)
    wanted = check_constrained(model, sources, cfg, lexicon=lexicon)
    batch = batch_of(sources)
    plain = lexicon.shortlist(batch.src, 1, 0)  # each sentence's own list, without its phrases
    own = [set(plain.ids[row].tolist()) for row in plain.allowed]
    assert any(x not in own[i] for i, ps in enumerate(wanted) for p in ps for x in p)


def test_patience_and_n_best_count_only_hypotheses_that_meet_them():
    model, sources = random_model("gru-bahdanau"), random_sources(10, 6)
    for cfg in (replace(BEAM, n_best=4), replace(BEAM, n_best=1, patience=0.5),
                replace(BEAM, n_best=2, patience=2.0)):  # fmt: skip
        check_constrained(model, sources, cfg)


@pytest.mark.parametrize("strategy", [Strategy.beam, Strategy.greedy])
def test_no_constraints_is_the_search_without_them(strategy):
    model, sources = random_model("transformer"), random_sources(3, 7)
    cfg = replace(BEAM if strategy == Strategy.beam else DecodeConfig(), batch_size=3)
    plain = search_all(model, SearchJob(sources, cfg, attention=True, trees=True), CPU)
    for none in (None, [], [[] for _ in sources]):
        job = SearchJob(sources, cfg, constraints=none, attention=True, trees=True)
        got = search_all(model, job, CPU)
        same([d.nbest for d in got], [d.nbest for d in plain])
        for a, b in zip(got, plain):
            assert a.tree == b.tree and a.tree.constraint_pieces is None
            assert all(node.met is None for node in a.tree.nodes)


def test_constraints_on_a_device_match_the_cpu_and_a_step_reads_nothing_back(monkeypatch):
    """The phrases and the progress live on the search's device (tests/simulated_device.py
    catches a CPU tensor meeting a device one), and allocating the beam reads nothing back to
    the host: the beam's own reads are all a step makes."""
    model, sources = random_model("transformer"), random_sources(12, 6)
    cfg = replace(BEAM, batch_size=4)
    wanted = random_constraints(sources, decode_all(model, sources, cfg, CPU), seed=12)
    expected = search(model, sources, cfg, constraints=wanted)
    allocate, reads = Constraints.allocate, []
    with simulated_device() as sim:

        def counted(self, *args):
            before = sim.syncs
            out = allocate(self, *args)
            reads.append(sim.syncs - before)
            return out

        monkeypatch.setattr(Constraints, "allocate", counted)
        got = search(copy.deepcopy(model).to(sim.device), sources, cfg, sim.device,
                     constraints=wanted)  # fmt: skip
    assert tokens(got) == tokens(expected)
    assert len(reads) > 10 and set(reads) == {0}


# ---- refusals ----


def test_greedy_and_sampling_refuse_constraints():
    model, sources = random_model("gru-bahdanau"), random_sources(3, 2)
    for cfg in (DecodeConfig(), DecodeConfig(strategy=Strategy.sample)):
        with pytest.raises(NMTError, match="constraints need decode=beam"):
            search(model, sources, cfg, constraints=[[[5]], []])
    assert "decode=beam" in NEED_BEAM


def test_constraints_longer_than_the_length_limit_find_no_hypothesis_naming_the_source():
    """The request's check refuses them before any search (`problem`, tested on a trained model
    below); the search itself, given them anyway, ends the sentence with none."""
    sources = [[A, EOS], [A, B, C, EOS]]  # limits 1.0 * length + 2: 4 and 6 pieces
    cfg = replace(BEAM, max_len_b=2)
    fits = [[[A, B]], [[A], [B, C, D]]]  # 2 < 4, 4 < 6: room for the EOS
    search(random_model("gru-bahdanau"), sources, cfg, constraints=fits)
    assert problem(fits[1], [], 6) is None
    # 6 pieces leave the EOS no place: the check refuses them, where the search would still
    # return a hypothesis cut at the limit; 7 pieces the search cannot fit at all
    assert "the constraints need 6 pieces" in problem([[A, A, A], [B, C, D]], [], 6)
    failed = failures(random_model("gru-bahdanau"), sources, cfg,
                      constraints=[[[A, B]], [[A, A, A], [B, C, D, D]]])  # fmt: skip
    assert failed[0] is None and failed[1].startswith(UNMET)


def test_a_banned_phrase_inside_a_constraint_leaves_no_hypothesis():
    failed = failures(random_model("transformer"), [[A, EOS]], BEAM, banned=[[B, C]],
                      constraints=[[[A, B, C]]])  # fmt: skip
    assert failed[0].startswith(UNMET)


# ---- a trained model: text in, text out ----


def beam_translator(train_small, family: str) -> Translator:
    beam = DecodeConfig(strategy=Strategy.beam, beam_size=4, n_best=2, batch_size=8)
    return Translator.from_checkpoint(train_small(family), beam, "cpu")


@pytest.fixture(scope="module")
def translator(train_small):
    return beam_translator(train_small, "gru")


def starts_word(text: str, phrase: str) -> bool:
    return text.startswith(phrase) or f" {phrase}" in text


@pytest.mark.parametrize("family", ["gru", "transformer"])
def test_a_trained_model_writes_its_constraints(family, train_small, demo_dir):
    translator = beam_translator(train_small, family)
    sources = (demo_dir / "test.de").read_text(encoding="utf-8").splitlines()[:12]
    free = translator.translate(sources)
    wanted = [["birds"], ["seven hundred", "old"], [], ["my father"]] * 3
    lacked = [not all(starts_word(f, p) for p in ps) for f, ps in zip(free, wanted)]
    assert sum(lacked) >= 6  # the model's own translations mostly lack them
    out = translator.translate_full(sources, False, constraints=wanted, tree=True)
    vocab = translator.vocabs.tgt
    for t, f, phrases in zip(out, free, wanted):
        for phrase, (start, end) in zip(phrases, t.constraint_spans):
            assert starts_word(t.text, phrase), (t.text, phrase)
            assert t.tgt_pieces[start:end] == vocab.id_to_piece(constraint_ids(vocab, phrase))
        assert len(t.nbest) >= 1
        assert all(starts_word(text, p) for text, _ in t.nbest for p in phrases)
        if not phrases:
            assert t.text == f and t.constraint_spans == []
        tree = t.tree
        assert tree.constraint_pieces == sum(end - start for start, end in t.constraint_spans)
        finished = [n for n in tree.nodes if n.state == "finished"]
        assert finished and all(n.met == tree.constraint_pieces for n in finished)
    # decode.constraints: one list for every text; a call's lists take its place
    every = replace(translator.decode, constraints=["birds"])
    assert all(starts_word(t, "birds") for t in translator.translate(sources, decode=every))
    mixed = translator.translate(sources[:4], decode=every, constraints=wanted[:4])
    assert mixed == [t.text for t in out[:4]]
    assert "constraints 'birds'" in every.describe()


class PieceVocab:
    """A vocabulary stub: these pieces (ids from 4), sentencepiece's "▁" for spaces and a word
    start, longest pieces first."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = ["<pad>", "<unk>", "<s>", "</s>", *pieces]
        self.sp = self

    def Encode(self, text: str, out_type=str) -> list[str]:  # noqa: N802 (sentencepiece's name)
        rest, out = "▁" + text.replace(" ", "▁"), []
        while rest:
            n = max(n for n in range(1, len(rest) + 1) if rest[:n] in self.pieces or n == 1)
            out.append(rest[:n])
            rest = rest[n:]
        return out

    def piece_to_id(self, piece: str) -> int:
        return self.pieces.index(piece) if piece in self.pieces else 1

    def encode(self, texts: list[str]) -> list[list[int]]:
        return [[self.piece_to_id(p) for p in self.Encode(t)] for t in texts]

    def id_to_piece(self, ids: list[int]) -> list[str]:
        return [self.pieces[i] for i in ids]

    @property
    def piece_ids(self) -> dict[str, int]:
        return {piece: i for i, piece in enumerate(self.pieces) if i > EOS}

    @property
    def longest_piece(self) -> int:
        return max(map(len, self.pieces))


def test_the_pieces_a_constraint_is_matched_as(translator):
    vocab = translator.vocabs.tgt
    pieces = lambda phrase: vocab.id_to_piece(constraint_ids(vocab, phrase))  # noqa: E731
    assert pieces("birds") == vocab.pieces(" birds") == ["▁b", "ir", "ds"]  # a word start
    assert pieces("  seven   hundred ") == ["▁seven", "▁hundred"]
    # a mark that attaches to the word before it: without the word start
    assert pieces(".") == ["."] and pieces("-five") == ["-", "f", "i", "v", "e"]
    assert pieces("s.") == ["▁s", "."]
    # where sentencepiece joins the word start to the mark, the text is spelled again
    stub = PieceVocab(["▁", "▁,", ",", "▁and", "a", "n", "d"])
    assert stub.Encode(", and") == ["▁,", "▁and"]
    assert stub.id_to_piece(constraint_ids(stub, ", and")) == [",", "▁and"]
    assert stub.id_to_piece(constraint_ids(stub, "and,")) == ["▁and", ","]


def test_unmeetable_constraints_are_clear_errors_naming_the_text(translator):
    texts = ["Ein Hund.", "Ein Haus.", "Eine Frau."]

    def check(texts, constraints, banned=None, decode=None, prefixes=None):
        """A server's check, before translating: each text's constraint ids."""
        request = Request(
            texts, decode or translator.decode, prefixes, banned, constraints, noun="text"
        )
        return [text.constraints for text in translator.prepare(request).texts]

    ids = check(texts, [["birds"], [], ["my father", "old"]])
    vocab = translator.vocabs.tgt
    assert ids == [
        [constraint_ids(vocab, "birds")],
        [],
        [constraint_ids(vocab, "my father"), constraint_ids(vocab, "old")],
    ]
    with pytest.raises(NMTError, match=r"text 3: the constraint ' ' is blank"):
        check(texts, [["birds"], [], [" "]])
    with pytest.raises(NMTError, match=r"line 2: the constraint '日本' needs pieces the target"):
        translator.translate(texts, constraints=[[], ["日本"], []])
    with pytest.raises(NMTError, match=r"text 1: the constraint 'old birds' contains the banned "
                       r"phrase 'birds'"):  # fmt: skip
        check(texts, [["old birds"], [], []], banned=["birds"])
    with pytest.raises(NMTError, match=r"text 2: .* contains the banned phrase 'old'"):
        check(texts, [[], ["old birds"], []], decode=replace(translator.decode, banned=["old"]))
    # a mark that attaches to the word before it is spelled again without the word start: as
    # long as the text allows, and a longer one is refused as any other
    with pytest.raises(NMTError, match=r"text 1: the constraints need \d+ pieces, .*at most"):
        check(["Ein Hund."], [["-" + "seven" * 2000]])
    with pytest.raises(NMTError, match=r"line 5: the constraints need \d+ pieces, .*at most"):
        translator.translate(["", "a", "", "b", "Ein Hund."],
                             constraints=[[], [], [], [], ["seven " * 40]])  # fmt: skip
    # a forced prefix of "▁hundred" pieces, and the constraint's 2 pieces: the EOS needs a place
    limit = translator.decode.max_len(len(translator.vocabs.src.encode(["Ein Hund."])[0]) + 1)
    check(["Ein Hund."], [["seven hundred"]], prefixes=["hundred " * (limit - 3)])
    with pytest.raises(NMTError, match=rf"text 1: the constraints need 2 pieces after a forced "
                       rf"prefix of {limit - 2} pieces, .* at most {limit} pieces"):  # fmt: skip
        check(["Ein Hund."], [["seven hundred"]], prefixes=["hundred " * (limit - 2)])
    # a prefix that meets a constraint, or starts it, leaves it fewer pieces to need
    check(["Ein Hund."], [["seven"]], prefixes=["seven " * (limit - 1)])
    check(["Ein Hund."], [["seven hundred"]], prefixes=["seven " * (limit - 2)])
    # no_repeat_ngram=1 never lets a piece come twice: a constraint that repeats one is refused
    # before the search, naming the piece; two that each need it fail in the search, that text
    # alone: the library raises for it, a server or a file job answers the others (run)
    once = replace(translator.decode, no_repeat_ngram=1)
    with pytest.raises(NMTError, match=r"line 3: the constraint 'seven seven' has 'seven' \(1 "
                       r"pieces\) twice, and decode.no_repeat_ngram=1 blocks"):  # fmt: skip
        translator.translate(["", "a", "b"], decode=once, constraints=[[], [], ["seven seven"]])
    both = ["seven hundred", "seven thousand"]
    with pytest.raises(NMTError, match="line 3: no translation could meet its constraints"):
        translator.translate(["", "a", "b"], decode=once, constraints=[[], [], both])
    request = Request(["", "zwei", "b"], once, constraints=[[], ["two"], both])
    results = translator.run(translator.prepare(request))
    assert [r.failure is None for r in results] == [True, True, False]
    assert results[2].text == "" and results[2].failure.startswith("no translation could meet")
    alone = translator.translate(["zwei"], decode=once, constraints=[["two"]])
    assert results[1].text == alone[0]
    with pytest.raises(NMTError, match="constraints must be one list of phrases per text"):
        check(texts, [["birds"]])
    with pytest.raises(NMTError, match="text 1: constraints must be a list of phrases"):
        check(texts, ["birds", [], []])
    with pytest.raises(NMTError, match="constraints need decode=beam"):
        translator.translate(texts, decode=DecodeConfig(), constraints=[["birds"], [], []])
    with pytest.raises(NMTError, match=r"decode.constraints=\['birds'\]: constraints need decode"):
        DecodeConfig(constraints=["birds"])  # greedy: refused where the config is made


def test_more_banks_than_beam_places_is_a_warning_naming_the_text(translator, caplog):
    """Beam 4, and constraints of 5 pieces: 6 banks of progress for 4 places. The search goes on
    (every translation still holds its constraints) and a warning names the text and its banks;
    a text whose banks fit the beam is not named."""
    texts = ["Ein Hund.", "Ein Haus."]
    constraints = [["seven hundred old birds"], ["birds"]]
    pieces = len(constraint_ids(translator.vocabs.tgt, "seven hundred old birds"))
    assert (
        pieces + 1
        > translator.decode.beam_size
        >= len(constraint_ids(translator.vocabs.tgt, "birds")) + 1
    )
    with caplog.at_level("WARNING", logger="nmt.translation.request"):
        out = translator.translate(texts, constraints=constraints)
    assert starts_word(out[0], "seven hundred old birds") and starts_word(out[1], "birds")
    warned = [r.getMessage() for r in caplog.records if "banks of constraint" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith(f"line 1: {pieces + 1} banks of constraint")
    # the text's translation carries it, for a server's answer; the other's has none
    full = translator.translate_full(texts, constraints=constraints)
    assert full[0].warnings == [warned[0].removeprefix("line 1: ")] and full[1].warnings == []
    caplog.clear()
    wide = replace(translator.decode, beam_size=pieces + 1, n_best=1)
    translator.translate(texts, decode=wide, constraints=constraints)
    assert not [r for r in caplog.records if "banks of constraint" in r.getMessage()]


# ---- the exported runtimes refuse them ----


def test_the_exported_runtimes_refuse_constraints():
    from nmt.export.ct2 import decode_options
    from nmt.export.runtime import check_greedy, check_supported

    cfg = DecodeConfig(strategy=Strategy.beam, constraints=["house"])
    with pytest.raises(NMTError, match=r"decode.constraints=\['house'\], decode=beam is not sup"):
        check_greedy(cfg)
    with pytest.raises(NMTError, match="CTranslate2 has no positive constraints"):
        decode_options(cfg, [5])
    assert decode_options(replace(cfg, constraints=[]), [5])["beam_size"] == cfg.beam_size
    request = Request(["Ein Haus."], replace(cfg, constraints=[]), constraints=[["house"]])
    with pytest.raises(NMTError, match="the CTranslate2 export does not support constraints"):
        check_supported(request, "CTranslate2 export")
