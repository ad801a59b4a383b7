"""Ensembles (nmt/models/ensemble.py): an ensemble of one is the model, of a model with itself is
the model; a hand-built pair whose best path is neither member's, checked node by node; mixed
families through every strategy, prefixes, n-best lists, trees and shortlists, against the
combination computed by hand from the members' own teacher forcing; output independent of the
batch; no host sync in a step; checkpoints with different tokenizers refused, naming the first
difference."""

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch
from test_search import CPU, FAMILIES, V, batch_of, one_source, random_model, random_sources

from nmt.checkpoint import Checkpoint, load_checkpoint
from nmt.config import SHORTLIST_MAX, DecodeConfig, Strategy
from nmt.data.batches import collate
from nmt.errors import NMTError
from nmt.lexicon import SPECIALS, Lexicon
from nmt.models.ensemble import Ensemble, check_members, load_ensemble
from nmt.models.seq2seq import EncoderOutput
from nmt.tokenizer import BOS, EOS, Vocab, Vocabs
from nmt.translation.scoring import score_ids
from nmt.translation.search import SearchJob, beam_search, decode_all, greedy, search_all
from nmt.translation.translator import Translator

COMBINES = ["prob", "logprob"]
STRATEGIES = {
    "greedy": DecodeConfig(max_len_a=1.0, max_len_b=5),
    "beam": DecodeConfig(strategy=Strategy.beam, beam_size=4, n_best=3, max_len_a=1.0,
                         max_len_b=5),
    "sample": DecodeConfig(strategy=Strategy.sample, n_best=3, max_len_a=1.0, max_len_b=5,
                           temperature=1.3),
}  # fmt: skip


def same_output(a, b, tol=1e-5, attention=True):
    assert [[h.tokens for h in nbest] for nbest in a] == [[h.tokens for h in nbest] for nbest in b]
    assert [[h.ended for h in nbest] for nbest in a] == [[h.ended for h in nbest] for nbest in b]
    for x, y in zip(a, b):
        assert [h.score for h in x] == pytest.approx([h.score for h in y], abs=tol)
        if attention:
            for h, g in zip(x, y):
                torch.testing.assert_close(h.attention, g.attention, atol=tol, rtol=1e-4)


# ---- an ensemble of one, of a model with itself ----------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_an_ensemble_of_one_is_the_model(family, strategy):
    model = random_model(family)
    sources = random_sources(1, 7)
    cfg = replace(STRATEGIES[strategy], batch_size=3)
    alone = decode_all(model, sources, cfg, CPU, attention=True)
    for combine in COMBINES:
        # attention=0: the member's own maps; the default shows its mean over layers and heads
        same_output(decode_all(Ensemble([model], combine=combine, attention=0), sources, cfg,
                               CPU, attention=True), alone)  # fmt: skip
        mean = decode_all(Ensemble([model], combine=combine), sources, cfg, CPU, attention=True)
        same_output(mean, alone, attention=False)
        for x, y in zip(mean, alone):
            for h, g in zip(x, y):
                torch.testing.assert_close(h.attention, g.attention.mean(dim=(1, 2), keepdim=True))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("combine", COMBINES)
def test_an_ensemble_of_a_model_with_itself_is_the_model(family, combine):
    model = random_model(family)
    sources = random_sources(2, 7)
    for strategy in ("greedy", "beam"):
        cfg = replace(STRATEGIES[strategy], batch_size=4)
        alone = decode_all(model, sources, cfg, CPU, attention=True)
        twice = Ensemble([model, model], [1.0, 3.0], combine=combine, attention=1)
        same_output(decode_all(twice, sources, cfg, CPU, attention=True), alone)


# ---- a hand-built pair: the ensemble's best path is neither member's ---------------------------

A, B, C, D = 4, 5, 6, 7
# member 1 prefers A, member 2 B; their mean prefers C, then D: p(C D EOS) = .4 * .8 = .32
FIRST = {(): {A: 0.5, C: 0.4, B: 0.1}, (C,): {D: 0.9, EOS: 0.1}}
SECOND = {(): {B: 0.5, C: 0.4, A: 0.1}, (C,): {D: 0.7, EOS: 0.3}}


@dataclass
class ToyState:
    history: torch.Tensor  # (R, t) tokens fed so far, BOS first

    def reorder(self, rows, sentences=None):
        return ToyState(self.history.index_select(0, rows))


class ToyMember(torch.nn.Module):
    """p(next | prefix) = table[prefix] (unlisted tokens: 0; an unlisted prefix ends: EOS 1),
    returned as log p + `offset`: logits, not log-probabilities, as a real model's are."""

    def __init__(self, table, offset: float) -> None:
        super().__init__()
        self.table, self.offset = table, offset

    def encode(self, src, src_lens):
        return EncoderOutput(src.unsqueeze(-1).float(), src != 0, None)

    def init_state(self, encoded, steps=None, compiled=False):
        return ToyState(torch.zeros((encoded.memory.size(0), 0), dtype=torch.long))

    def decode_step(self, prev, state, output=None):
        history = torch.cat([state.history, prev.unsqueeze(1)], dim=1)
        logits = torch.full((prev.size(0), 8), float("-inf"))
        for row, seq in enumerate(history.tolist()):
            for token, p in self.table.get(tuple(seq[1:]), {EOS: 1.0}).items():
                logits[row, token] = math.log(p) + self.offset
        return logits, None, ToyState(history)


def mixture(prefix, combine, weights=(0.5, 0.5)):
    """The ensemble's next-token distribution after `prefix`, by hand (8 entries)."""
    rows = [table.get(prefix, {EOS: 1.0}) for table in (FIRST, SECOND)]
    if combine == "prob":
        return [sum(w * row.get(t, 0.0) for w, row in zip(weights, rows)) for t in range(8)]
    geometric = [math.prod(row.get(t, 0.0) ** w for w, row in zip(weights, rows)) for t in range(8)]
    return [p / sum(geometric) for p in geometric]


def toy_ensemble(combine):
    return Ensemble([ToyMember(FIRST, 2.0), ToyMember(SECOND, -1.0)], combine=combine)


ONE = torch.tensor([[A, EOS]]), torch.tensor([2])
TOY_CFG = DecodeConfig(strategy=Strategy.beam, beam_size=3, n_best=3, max_len_a=0.0, max_len_b=5)


def test_each_toy_member_alone_prefers_its_own_path():
    for member, best in ((ToyMember(FIRST, 0.0), A), (ToyMember(SECOND, 0.0), B)):
        assert greedy(member, one_source(member, TOY_CFG))[0].tokens == [best]
        assert beam_search(member, one_source(member, TOY_CFG))[0][0].tokens == [best]


@pytest.mark.parametrize("combine", COMBINES)
def test_the_toy_ensemble_gives_the_hand_computed_mixture_at_every_node(combine):
    ensemble = toy_ensemble(combine)
    for prefix in [(), (A,), (B,), (C,), (C, D)]:
        state = ensemble.init_state(ensemble.encode(*ONE))
        for prev in (BOS, *prefix):
            logits, _, state = ensemble.decode_step(torch.tensor([prev]), state)
        got = torch.log_softmax(logits.float(), dim=-1)[0]  # what the search makes of it
        expected = torch.tensor(mixture(prefix, combine)).log()
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)
    # mean of probabilities: the step's logits are the log-probabilities themselves
    state = ensemble.init_state(ensemble.encode(*ONE))
    logits, _, _ = ensemble.decode_step(torch.tensor([BOS]), state)
    if combine == "prob":
        assert float(logits.exp().sum()) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("combine", COMBINES)
def test_the_toy_ensembles_best_path_is_neither_members(combine):
    ensemble = toy_ensemble(combine)
    [hyp] = greedy(ensemble, one_source(ensemble, TOY_CFG))
    root, after_c = mixture((), combine), mixture((C,), combine)
    assert hyp.tokens == [C, D]
    assert hyp.score == pytest.approx(math.log(root[C] * after_c[D] * 1.0), abs=1e-6)
    nbest = beam_search(ensemble, one_source(ensemble, TOY_CFG))[0]
    assert nbest[0].tokens == [C, D]
    expected = {
        (C, D): root[C] * after_c[D],
        (A,): root[A],
        (B,): root[B],
        (C,): root[C] * after_c[EOS],
    }
    for h in nbest:
        assert h.score == pytest.approx(math.log(expected[tuple(h.tokens)]), abs=1e-6)
    if combine == "prob":  # .32 > .3 = .3: the pair's mean, not a member, decides
        assert [h.tokens for h in nbest] == [[C, D], [A], [B]]
    # weighted towards member 1 enough, its path wins again: the weights count
    heavy = Ensemble([ToyMember(FIRST, 2.0), ToyMember(SECOND, -1.0)], [0.9, 0.1], combine)
    assert greedy(heavy, one_source(heavy, TOY_CFG))[0].tokens == [A]


# ---- mixed families: every strategy, prefixes, n-best, trees, shortlists ----------------------


def reference_log_probs(members, weights, combine, src, src_lens, tgt_in):
    """The combination (B, T, V) computed from the members' own teacher forcing, by hand."""
    total = sum(weights)
    per_member = torch.stack(
        [torch.log_softmax(m(src, src_lens, tgt_in)[0].float(), -1) for m in members]
    )  # (K, B, T, V)
    w = torch.tensor([x / total for x in weights]).view(-1, 1, 1, 1)
    if combine == "prob":
        return torch.logsumexp(per_member + w.log(), dim=0)
    return torch.log_softmax((per_member * w).sum(0), dim=-1)


def reference_score(members, weights, combine, source, tokens):
    """log p(tokens | source) under the combination, one piece at a time."""
    batch = collate([0], [source], [tokens])
    with torch.no_grad():
        log_probs = reference_log_probs(
            members, weights, combine, batch.src, batch.src_lens, batch.tgt_in
        )[0]
    return math.fsum(float(log_probs[t, token]) for t, token in enumerate(tokens))


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("combine", COMBINES)
def test_mixed_families_search_the_hand_computed_combination(strategy, combine):
    """GRU + Transformer: A+B and B+A give the same output; every hypothesis (n-best, forced
    prefixes, sampled) scores what the members' own teacher forcing combined by hand gives it;
    the prefixes are kept; the search tree holds each hypothesis with its score."""
    gru, transformer = random_model("gru-bahdanau"), random_model("transformer")
    sources = random_sources(4, 6)
    prefixes = [[], [8], [], [9, 10], [], [11]]
    cfg = replace(STRATEGIES[strategy], batch_size=4)
    ab = Ensemble([gru, transformer], [0.3, 0.7], combine)
    ba = Ensemble([transformer, gru], [0.7, 0.3], combine)
    job = SearchJob(sources, cfg, prefixes, attention=True, trees=True)
    out, swapped = search_all(ab, job, CPU), search_all(ba, job, CPU)
    same_output([d.nbest for d in out], [d.nbest for d in swapped])
    assert len(out[0].nbest) == (1 if strategy == "greedy" else 3)
    assert any(h.ended for d in out for h in d.nbest) or strategy == "greedy"  # greedy loops
    for source, prefix, done in zip(sources, prefixes, out):
        ranked = {n.rank: n for n in done.tree.nodes if n.rank is not None}
        for rank, hyp in enumerate(done.nbest):
            produced = hyp.tokens + [EOS] * hyp.ended
            assert produced[: len(prefix)] == prefix
            expected = reference_score([gru, transformer], [0.3, 0.7], combine, source, produced)
            assert hyp.score == pytest.approx(expected, abs=1e-4)
            forced = reference_score([gru, transformer], [0.3, 0.7], combine, source, prefix)
            assert hyp.prefix_score == pytest.approx(forced, abs=1e-4)
            assert ranked[rank].score == pytest.approx(hyp.score, abs=1e-5)
            assert hyp.attention.shape == (len(produced), 1, 1, len(source))


@pytest.mark.parametrize("combine", COMBINES)
@torch.no_grad()
def test_teacher_forcing_gives_the_combination(combine):
    """`forward` returns the combined log-probabilities: scoring through an ensemble is the
    search's own arithmetic."""
    gru, lstm = random_model("gru-bahdanau"), random_model("lstm-luong-multihead")
    sources = random_sources(5, 4)
    batch = collate(list(range(4)), sources, [s[:-1] for s in sources])
    ensemble = Ensemble([gru, lstm], [2.0, 1.0], combine)
    logits, maps = ensemble(batch.src, batch.src_lens, batch.tgt_in)
    expected = reference_log_probs(
        [gru, lstm], [2.0, 1.0], combine, batch.src, batch.src_lens, batch.tgt_in
    )
    torch.testing.assert_close(torch.log_softmax(logits, -1), expected, atol=1e-5, rtol=1e-5)
    # recurrent members give maps in teacher forcing: their weighted mean, or the chosen one's
    member_maps = [m(batch.src, batch.src_lens, batch.tgt_in)[1] for m in (gru, lstm)]
    mean = [m.mean(dim=(2, 3), keepdim=True) for m in member_maps]
    torch.testing.assert_close(maps, mean[0] * 2 / 3 + mean[1] / 3)
    chosen = Ensemble([gru, lstm], [2.0, 1.0], combine, attention=1)
    torch.testing.assert_close(chosen(batch.src, batch.src_lens, batch.tgt_in)[1], member_maps[1])
    with_transformer = Ensemble([gru, random_model("transformer")], combine=combine)
    assert with_transformer(batch.src, batch.src_lens, batch.tgt_in)[1] is None


def random_lexicon(per_source: int, seed: int = 3) -> Lexicon:
    g = torch.Generator().manual_seed(seed)
    table = torch.full((V, SHORTLIST_MAX), -1, dtype=torch.long)
    for s in range(SPECIALS, V):
        table[s, :per_source] = torch.randperm(V - SPECIALS, generator=g)[:per_source] + SPECIALS
    return Lexicon(table, torch.randperm(V, generator=g))


@pytest.mark.parametrize("combine", COMBINES)
def test_a_shortlist_of_every_piece_is_exact_search(combine):
    ensemble = Ensemble([random_model("gru-bahdanau"), random_model("transformer")], None, combine)
    sources = random_sources(2, 7)
    cfg = replace(STRATEGIES["beam"], batch_size=3)
    exact = decode_all(ensemble, sources, cfg, CPU, attention=True)
    every = replace(cfg, shortlist=1, shortlist_frequent=V)
    same_output(decode_all(ensemble, sources, every, CPU, True, random_lexicon(1)), exact)


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
@pytest.mark.parametrize("combine", COMBINES)
def test_output_does_not_depend_on_the_batch_with_or_without_a_shortlist(strategy, combine):
    """A restricted shortlist is each batch's union of lists: a sentence's output must not
    depend on it (under prob, each member is normalised over the whole vocabulary); and the
    search reports what scoring the same pieces through the ensemble gives
    (nmt.translation.scoring)."""
    ensemble = Ensemble([random_model("gru-bahdanau"), random_model("transformer")], None, combine)
    sources, lexicon = random_sources(6, 9), random_lexicon(3)
    for shortlist in (0, 3):
        cfg = replace(STRATEGIES[strategy], shortlist=shortlist, shortlist_frequent=2)
        out = {n: decode_all(ensemble, sources, replace(cfg, batch_size=n), CPU, True, lexicon)
               for n in (1, 3, 9)}  # fmt: skip
        for n in (3, 9):
            same_output(out[n], out[1], tol=1e-4)
        pairs = [(s, h) for s, nbest in zip(sources, out[3]) for h in nbest]
        scored = score_ids(ensemble, [s for s, _ in pairs], [h.tokens for _, h in pairs],
                           replace(cfg, batch_size=3), CPU, lexicon)  # fmt: skip
        for (_, hyp), values in zip(pairs, scored):
            total = math.fsum(values if hyp.ended else values[:-1])
            assert total == pytest.approx(hyp.score, abs=1e-4)


def test_a_step_reads_nothing_back_to_the_host(monkeypatch):
    """No .item(), .tolist() or bool(tensor) in a step: with K members on a GPU that would be K
    waits per step (the search's own reads are its business)."""
    ensemble = Ensemble([random_model("gru-bahdanau"), random_model("transformer")])
    batch = batch_of(random_sources(7, 3))
    state = ensemble.init_state(ensemble.encode(batch.src, batch.src_lens))
    output = ensemble.output_rows(torch.arange(10))

    def refuse(*args, **kwargs):
        raise AssertionError("a host sync in the ensemble's step")

    with torch.no_grad():
        for name in ("item", "tolist", "__bool__", "__int__", "__float__"):
            monkeypatch.setattr(torch.Tensor, name, refuse)
        prev = torch.full((3,), BOS)
        for _ in range(3):
            logits, _, state = ensemble.decode_step(prev, state)
            _, _, state = ensemble.decode_step(prev, state, output)
            state = state.reorder(torch.tensor([2, 0, 1]))
    assert logits.shape == (3, V)


def test_bad_options_are_clear_errors():
    model = random_model("gru-bahdanau")
    with pytest.raises(NMTError, match="ckpt_weights has 1 weights for 2 checkpoints"):
        Ensemble([model, model], [1.0])
    with pytest.raises(NMTError, match="every weight must be a positive number"):
        Ensemble([model, model], [1.0, 0.0])
    with pytest.raises(NMTError, match="combine='mean': expected one of prob, logprob"):
        Ensemble([model], combine="mean")
    with pytest.raises(NMTError, match=r"attention=2: expected mean or a member's index, 0\.\.1"):
        Ensemble([model, model], attention=2)
    with pytest.raises(NMTError, match="at least one"):
        Ensemble([])


# ---- checkpoints: the members must share their tokenizers -------------------------------------


class FakeVocab:
    """What check_members reads of a vocabulary: its size, pieces and digest."""

    def __init__(self, pieces: list[str], digest: str = "d0") -> None:
        self._pieces, self._digest = pieces, digest

    def __len__(self) -> int:
        return len(self._pieces)

    def id_to_piece(self, ids):
        return [self._pieces[i] for i in ids]

    def digest(self) -> str:
        return self._digest


def fake_checkpoint(name: str, tgt: FakeVocab, src: FakeVocab | None = None) -> Checkpoint:
    return Checkpoint(Path(name), {}, None, Vocabs(src or FakeVocab(["x", "y"]), tgt), None)


def test_check_members_names_the_first_difference():
    pieces = ["<pad>", "<unk>", "<s>", "</s>", "▁a", "▁b"]
    base = fake_checkpoint("runs/a", FakeVocab(pieces))
    check_members([base, fake_checkpoint("runs/b", FakeVocab(list(pieces)))])
    cases = [
        (FakeVocab(pieces + ["▁c"]), None,
         r"ckpt\[1\] \(runs/c\) has a target vocabulary of 7 pieces, ckpt\[0\] \(runs/a\) of 6"),
        (FakeVocab(pieces[:5] + ["▁c"]), None,
         r"ckpt\[1\] \(runs/c\) has target piece '▁c' at id 5, ckpt\[0\] \(runs/a\) '▁b'"),
        (FakeVocab(pieces, "d1"), None,
         r"has the same target pieces but another sentencepiece model \(digest d1, "
         r"ckpt\[0\] \(runs/a\) d0\)"),
        (FakeVocab(pieces), FakeVocab(["x", "z"]),
         r"ckpt\[1\] \(runs/c\) has source piece 'z' at id 1, ckpt\[0\] \(runs/a\) 'y'"),
    ]  # fmt: skip
    for tgt, src, message in cases:
        with pytest.raises(NMTError, match=message + ".*must share their tokenizer"):
            check_members([base, fake_checkpoint("runs/c", tgt, src)])
    with pytest.raises(NMTError, match="at least one checkpoint"):
        check_members([])


def pruned_copy(vocab: Vocab, kept: list[int], directory: Path) -> Vocab:
    """The same sentencepiece model pruned to the sentencepiece ids `kept` (ours -> theirs)."""
    path = directory / "pieces.tgt.tsv"
    path.write_text("".join(f"{i}\t{p}\n" for i, p in zip(kept, vocab.sp.IdToPiece(kept))))
    return Vocab(vocab.path, path)


def test_a_member_with_another_target_vocabulary_is_refused_before_any_model_is_built(
    train_small, tmp_path, monkeypatch
):
    """Real vocabularies: the shared small GRU's, pruned to one piece fewer, or with two pieces
    swapped; and the same checkpoint twice translates as the model alone does."""
    small = train_small("gru")
    ckpt = load_checkpoint(small)
    kept = ckpt.vocabs.tgt.kept
    assert kept is not None  # nmt-train prunes the target side
    shorter = pruned_copy(ckpt.vocabs.tgt, kept[:-1], tmp_path)
    other = replace(ckpt, path=tmp_path, vocabs=Vocabs(ckpt.vocabs.src, shorter))
    built = []
    monkeypatch.setattr("nmt.models.ensemble.restore_model", lambda *a: built.append(a))
    message = (
        rf"ckpt\[1\] \({re.escape(str(tmp_path))}\) has a target vocabulary of "
        rf"{len(kept) - 1:,} pieces, ckpt\[0\] \({re.escape(str(ckpt.path))}\) of {len(kept):,}"
    )
    with pytest.raises(NMTError, match=message):
        load_ensemble([ckpt, other], CPU)
    swapped = kept[:4] + [kept[5], kept[4]] + kept[6:]
    other = replace(other, vocabs=Vocabs(ckpt.vocabs.src, pruned_copy(ckpt.vocabs.tgt, swapped,
                                                                       tmp_path)))  # fmt: skip
    pieces = ckpt.vocabs.tgt.id_to_piece([4, 5])
    with pytest.raises(NMTError, match=re.escape(f"has target piece {pieces[1]!r} at id 4, ")):
        load_ensemble([ckpt, other], CPU)
    assert built == []
    monkeypatch.undo()

    ensemble, loaded = load_ensemble([small, small], CPU, [1.0, 2.0])
    assert isinstance(ensemble, Ensemble) and len(loaded) == 2
    texts = ["Ich sehe einundzwanzig rote Äpfel.", "Der Mann trägt sieben schwarze Hüte."]
    decode = DecodeConfig(strategy=Strategy.beam, beam_size=3)
    alone = Translator.from_checkpoint(small, decode, device="cpu").translate_full(texts)
    together = Translator(ensemble, loaded[0].vocabs, CPU, loaded[0].lexicon, decode)
    for x, y in zip(together.translate_full(texts), alone):
        assert x.text == y.text and x.score == pytest.approx(y.score, abs=1e-4)


@pytest.mark.slow
def test_checkpoints_trained_with_another_tokenizer_are_refused(train_small):
    """A training of its own (150 updates) with a smaller sentencepiece model: slow."""
    small, other = train_small("gru"), train_small("gru", "data.tokenizer.vocab_size=350")
    a, b = load_checkpoint(small), load_checkpoint(other)
    sizes = len(a.vocabs.tgt), len(b.vocabs.tgt)
    assert sizes[0] != sizes[1]
    message = (
        rf"ckpt\[1\] \({re.escape(str(b.path))}\) has a target vocabulary of {sizes[1]:,} "
        rf"pieces, ckpt\[0\] \({re.escape(str(a.path))}\) of {sizes[0]:,}"
    )
    with pytest.raises(NMTError, match=message):
        load_ensemble([small, other], CPU)


def test_the_commands_take_a_list_of_checkpoints_as_one_ensemble(train_small, demo_dir, tmp_path):
    """ckpt=[a,a] in nmt-evaluate, nmt-translate and nmt-score is the model a alone (a mixture of
    a distribution with itself); the evaluation record names every member; an ensemble's
    evaluation needs its own out_dir, and a weight count that does not match is refused before
    any checkpoint is read."""
    import json
    import subprocess
    import sys

    from nmt.cli import main as cli

    ckpt = str(train_small("gru"))
    pair = f"ckpt=[{ckpt},{ckpt}]"
    src = demo_dir / "test.de"
    common = [f"src_file={src}", f"ref_file={demo_dir / 'test.en'}", "decode.beam_size=3"]
    assert cli.evaluate([f"ckpt={ckpt}", *common, f"out_dir={tmp_path / 'one'}"]) == 0
    assert cli.evaluate([pair, "ckpt_weights=[1,3]", *common, f"out_dir={tmp_path / 'two'}"]) == 0
    one, two = (tmp_path / "one" / "test.de.hyp"), (tmp_path / "two" / "test.de.hyp")
    assert two.read_text() == one.read_text()
    record = json.loads((tmp_path / "two" / "test.de.scores.json").read_text())
    assert record["ensemble"]["checkpoints"] == [ckpt, ckpt]
    assert record["ensemble"]["weights"] == [1.0, 3.0]

    lines = src.read_text(encoding="utf-8").splitlines()[:20]
    translate = [sys.executable, "-c", "from nmt.cli.main import main_translate; main_translate()"]
    runs = [
        subprocess.run(
            [*translate, arg], input="\n".join(lines) + "\n", capture_output=True, text=True
        )
        for arg in (f"ckpt={ckpt}", pair)
    ]
    assert all(r.returncode == 0 for r in runs), runs[1].stderr
    assert runs[1].stdout == runs[0].stdout and len(runs[0].stdout.splitlines()) == 20

    assert cli.evaluate([pair, *common]) == 2  # no out_dir
    assert cli.evaluate([pair, "ckpt_weights=[1]", *common, f"out_dir={tmp_path}"]) == 2
    assert cli.evaluate(["ckpt=[]", *common, f"out_dir={tmp_path}"]) == 2
