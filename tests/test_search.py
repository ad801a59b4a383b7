"""Search strategies: beam 1 = greedy, known beams on a hand-built model, length penalty, n-best,
batch-size independence, constraints and reproducible sampling, for both model families; the
search under bf16 (decode.precision)."""

import math
from dataclasses import dataclass, replace

import pytest
import torch

from nmt.config import (
    DecodeConfig,
    LengthPenalty,
    Precision,
    RNNConfig,
    Strategy,
    TransformerConfig,
)
from nmt.data.batches import collate
from nmt.errors import NMTError
from nmt.models import build_model
from nmt.models.seq2seq import EncoderOutput
from nmt.tokenizer import BOS, EOS
from nmt.translation.search import (
    Banned,
    SearchBatch,
    SearchJob,
    beam_search,
    decode_all,
    greedy,
    sample,
    search_all,
)
from nmt.translation.search.rules import ForcedPrefix, MinLength, NoRepeatNgram, Step, StepRules
from nmt.translation.translator import Translator

V = 23
CPU = torch.device("cpu")

FAMILIES = {
    "gru-bahdanau": RNNConfig(emb_size=12, hidden_size=12, dropout=0.2),
    "lstm-luong-multihead": RNNConfig(
        emb_size=12, hidden_size=12, dropout=0.2, cell="lstm", decoder="luong",
        attention="multihead", heads=3, decoder_layers=2,
    ),
    "transformer": TransformerConfig(
        d_model=16, heads=4, ff_size=32, encoder_layers=2, decoder_layers=2, dropout=0.2
    ),
}  # fmt: skip


def random_model(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(FAMILIES[name], V, V, shared_vocab=True).eval()


def random_sources(seed: int, count: int, max_len: int = 12) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, max_len, (count,), generator=g).tolist()
    return [torch.randint(4, V, (n,), generator=g).tolist() + [EOS] for n in lengths]


def batch_of(sources: list[list[int]]):
    return collate(list(range(len(sources))), sources, None)


def search_batch(model, sources: list[list[int]], cfg: DecodeConfig, **job) -> SearchBatch:
    """One batch of `sources` (ids ending in EOS), in order, to call a strategy on directly;
    `job`: `SearchJob`'s other fields (prefixes, banned, constraints, attention, trees)."""
    full = SearchJob(sources, cfg, **job)
    rules = StepRules.build(full, CPU)
    return SearchBatch.build(model, full, list(range(len(sources))), CPU, None, rules)


# ---- a hand-built model: next-token probabilities given by a table of prefixes ----

A, B, C, D = 4, 5, 6, 7


@dataclass
class ToyState:
    history: torch.Tensor  # (R, t) tokens fed so far, BOS first

    def reorder(self, index):
        return ToyState(self.history.index_select(0, index))


class ToyModel:
    """p(next | prefix) = table[prefix] (unlisted tokens: probability 0); a prefix not in the table
    ends: EOS with probability 1. The source is ignored."""

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]], vocab: int = 8) -> None:
        self.table, self.vocab = table, vocab

    def encode(self, src, src_lens):
        return EncoderOutput(src.unsqueeze(-1).float(), src != 0, None)

    def init_state(self, encoded, steps=None, compiled=False):
        return ToyState(torch.zeros((encoded.memory.size(0), 0), dtype=torch.long))

    def decode_step(self, prev, state):
        history = torch.cat([state.history, prev.unsqueeze(1)], dim=1)
        logits = torch.full((prev.size(0), self.vocab), float("-inf"))
        for row, seq in enumerate(history.tolist()):
            for token, p in self.table.get(tuple(seq[1:]), {EOS: 1.0}).items():
                logits[row, token] = torch.tensor(p).log()
        return logits, None, ToyState(history)


# greedy takes A (.5) then B (.4) then EOS (.6): p = .12; the best sequence is B EOS (p = .36)
TREE = {
    (): {A: 0.5, B: 0.4, EOS: 0.1},
    (A,): {B: 0.4, C: 0.35, EOS: 0.25},
    (A, B): {EOS: 0.6, A: 0.4},
    (A, C): {EOS: 1.0},
    (B,): {EOS: 0.9, C: 0.1},
}


def tensors_batch(model, src: torch.Tensor, src_lens: torch.Tensor, cfg: DecodeConfig, **job):
    """`search_batch` of a padded batch src (B, S) with its lengths (B,)."""
    sources = [row[: int(n)].tolist() for row, n in zip(src, src_lens)]
    return search_batch(model, sources, cfg, **job)


def search(model, sources: list[list[int]], cfg: DecodeConfig, device=CPU, lexicon=None, **job):
    """Each source's n-best list from `search_all`; `job`: `SearchJob`'s other fields."""
    return [d.nbest for d in search_all(model, SearchJob(sources, cfg, **job), device, lexicon)]


def one_source(model, cfg: DecodeConfig, **job) -> SearchBatch:
    """The batch of the toy's one source, A EOS (`search_batch`)."""
    return search_batch(model, [[A, EOS]], cfg, **job)


def toy_decode(table, strategy=Strategy.beam, **options):
    cfg = DecodeConfig(strategy=strategy, max_len_a=0.0, max_len_b=10, **options)
    search = {Strategy.beam: beam_search, Strategy.sample: sample}[strategy]
    return search(ToyModel(table), one_source(ToyModel(table), cfg))[0]


def test_beam_finds_the_known_best_where_greedy_does_not():
    cfg = DecodeConfig(max_len_a=0.0, max_len_b=10)
    greedy_hyp = greedy(ToyModel(TREE), one_source(ToyModel(TREE), cfg))[0]
    assert greedy_hyp.tokens == [A, B] and greedy_hyp.score == pytest.approx(
        torch.tensor(0.12).log()
    )
    nbest = toy_decode(TREE, beam_size=2, n_best=2)
    # step 1 finishes B EOS; step 2 finishes A C EOS and A B EOS, and the sentence is done
    assert [h.tokens for h in nbest] == [[B], [A, C]]
    expected = [0.4 * 0.9, 0.5 * 0.35 * 1.0]
    assert [h.score for h in nbest] == pytest.approx(torch.tensor(expected).log().tolist())
    assert all(h.ended for h in nbest)


def test_beam_of_one_on_the_toy_is_greedy():
    (hyp,) = toy_decode(TREE, beam_size=1)
    assert hyp.tokens == [A, B] and hyp.score == pytest.approx(torch.tensor(0.12).log())


def test_length_penalty_changes_the_choice():
    # the empty translation (p = .6) beats A B C (p = .4) on log-probability, not per token
    table = {(): {A: 0.4, EOS: 0.6}, (A,): {B: 1.0}, (A, B): {C: 1.0}}
    plain = toy_decode(table, beam_size=2, n_best=2)
    assert [h.tokens for h in plain] == [[], [A, B, C]]
    average = toy_decode(table, beam_size=2, n_best=2, length_penalty=LengthPenalty.average)
    assert [h.tokens for h in average] == [[A, B, C], []]
    assert average[0].normalized == pytest.approx(float(torch.tensor(0.4).log()) / 4)
    gnmt = toy_decode(table, beam_size=2, length_penalty=LengthPenalty.gnmt, alpha=3.0)
    assert gnmt[0].tokens == [A, B, C]  # ((5 + 4) / 6) ** 3 = 3.4 outweighs log(.6 / .4) ...
    gnmt = toy_decode(table, beam_size=2, length_penalty=LengthPenalty.gnmt, alpha=0.5)
    assert gnmt[0].tokens == []  # ... while 1.22 does not


def test_length_limit_keeps_the_best_unfinished_hypotheses():
    # never ends: at the limit of 4 pieces the beam's best are returned, marked unended
    go_on = {A: 0.9, B: 0.1}
    loop = {prefix: go_on for n in range(5) for prefix in _all_prefixes(n, (A, B))}
    cfg = DecodeConfig(strategy=Strategy.beam, beam_size=3, n_best=3, max_len_a=0.0, max_len_b=4)
    nbest = beam_search(ToyModel(loop), one_source(ToyModel(loop), cfg))[0]
    assert len(nbest) == 3 and not any(h.ended for h in nbest)
    assert all(len(h.tokens) == 4 for h in nbest)
    assert nbest[0].tokens == [A] * 4
    assert nbest[0].score == pytest.approx(4 * float(torch.tensor(0.9).log()))


def test_patience_sets_how_many_hypotheses_end_a_sentence():
    # the first hypothesis to end is B EOS (step 2), the better one per token A C EOS (step 3)
    table = {(): {A: 0.5, B: 0.35, EOS: 0.15}, (A,): {C: 0.6, EOS: 0.4}, (B,): {EOS: 1.0}}
    options = dict(beam_size=2, length_penalty=LengthPenalty.average)
    assert toy_decode(table, **options)[0].tokens == [A, C]  # waits for 2 = K endings
    quick = toy_decode(table, patience=0.5, **options)  # done after ceil(0.5 * 2) = 1 ending
    assert [h.tokens for h in quick] == [[B]]
    # never fewer endings than n_best
    assert len(toy_decode(table, patience=0.1, n_best=2, **options)) == 2
    with pytest.raises(NMTError, match="patience"):
        DecodeConfig(patience=0.0)


def test_a_beam_as_wide_as_the_vocabulary_is_a_clear_error():
    with pytest.raises(NMTError, match="beam_size=8 needs a target vocabulary above 8"):
        toy_decode(TREE, beam_size=8)


def _all_prefixes(n: int, tokens: tuple[int, ...]) -> list[tuple[int, ...]]:
    if n == 0:
        return [()]
    return [p + (t,) for p in _all_prefixes(n - 1, tokens) for t in tokens]


def test_min_length_blocks_an_early_end():
    (hyp,) = toy_decode(TREE, beam_size=2, min_len_b=2)
    assert len(hyp.tokens) >= 2 and hyp.tokens == [A, C]


def test_no_repeat_ngram_blocks_a_repeat():
    # after A comes B, after B comes A (p .9): without the constraint A B A B A B ...
    table = {}
    for n in range(12):
        for prefix in {tuple([A, B] * 6)[:n]}:
            table[prefix] = {B if n % 2 else A: 0.9, C: 0.05, EOS: 0.05}
    model, free_cfg = ToyModel(table), DecodeConfig(max_len_a=0.0, max_len_b=6)
    free = greedy(model, one_source(model, free_cfg))[0]
    assert free.tokens == [A, B, A, B, A, B]
    cfg = DecodeConfig(max_len_a=0.0, max_len_b=6, no_repeat_ngram=2)
    blocked = greedy(model, one_source(model, cfg))[0]
    assert blocked.tokens[:3] == [A, B, A]  # (B, A) is new; a second (A, B) is not allowed
    bigrams = list(zip(blocked.tokens, blocked.tokens[1:]))
    assert len(bigrams) == len(set(bigrams))


def test_the_rules_block_exactly_the_completing_tokens():
    history = torch.tensor([[A, B, C, A, B], [A, A, A, A, A]])
    step = Step(5, torch.tensor([0, 1]), history)
    rules = [MinLength(torch.tensor([0, 9])), NoRepeatNgram(3)]
    out = StepRules(rules)(torch.zeros(2, 8), step)
    banned = [(out[r] == float("-inf")).nonzero().squeeze(1).tolist() for r in range(2)]
    assert banned == [[C], [EOS, A]]  # row 0: A B C exists; row 1: A A A exists, and too short
    cfg = DecodeConfig(min_len_b=9, no_repeat_ngram=3)
    built = StepRules.build(SearchJob([], cfg, banned=[[A, B]]), CPU)
    built = built.for_batch(cfg, torch.tensor([0, 9]), torch.tensor([[A], [-1]]))
    assert [type(rule) for rule in built.rules] == [MinLength, NoRepeatNgram, Banned, ForcedPrefix]
    assert built.context > 1000  # the n-gram rule reads the whole history
    plain = StepRules.build(SearchJob([], DecodeConfig()), CPU)
    assert plain.for_batch(DecodeConfig(), torch.tensor([0, 0]), None).rules == []


def test_nbest_lists_are_sorted_and_distinct():
    model = random_model("transformer")
    sources = random_sources(3, 6)
    cfg = DecodeConfig(strategy=Strategy.beam, beam_size=6, n_best=6, max_len_a=1.0, max_len_b=3)
    for nbest in decode_all(model, sources, cfg, CPU):
        assert len(nbest) == 6
        keys = [h.normalized for h in nbest]
        assert keys == sorted(keys, reverse=True)
        assert len({tuple(h.tokens) + (h.ended,) for h in nbest}) == 6


@pytest.mark.parametrize("family", FAMILIES)
def test_beam_of_one_equals_greedy(family):
    model = random_model(family)
    sources = random_sources(1, 9)
    base = DecodeConfig(max_len_a=1.0, max_len_b=4, batch_size=4)
    greedy_out = decode_all(model, sources, base, CPU, attention=True)
    beam_out = decode_all(
        model, sources, replace(base, strategy=Strategy.beam, beam_size=1), CPU, attention=True
    )
    for [g], [b] in zip(greedy_out, beam_out):
        assert (g.tokens, g.ended) == (b.tokens, b.ended)
        assert g.score == pytest.approx(b.score, abs=1e-5)
        torch.testing.assert_close(g.attention, b.attention)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("strategy", [Strategy.greedy, Strategy.beam])
def test_output_does_not_depend_on_batch_size(family, strategy):
    model = random_model(family)
    sources = random_sources(5, 13)
    cfg = DecodeConfig(strategy=strategy, beam_size=4, n_best=2 if strategy == Strategy.beam else 1,
                       max_len_a=1.0, max_len_b=3)  # fmt: skip
    results = {}
    for size in (1, 5, 13):
        results[size] = decode_all(model, sources, replace(cfg, batch_size=size), CPU, True)
    for size in (5, 13):
        for nbest, reference in zip(results[size], results[1]):
            assert [h.tokens for h in nbest] == [h.tokens for h in reference]
            for a, b in zip(nbest, reference):
                assert a.score == pytest.approx(b.score, abs=1e-4)
                torch.testing.assert_close(a.attention, b.attention, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_beam_scores_and_attention_match_stepping_through_the_hypothesis(family):
    """What beam search reports for a hypothesis is what the model says about that sequence."""
    model = random_model(family)
    sources = random_sources(8, 5)
    cfg = DecodeConfig(strategy=Strategy.beam, beam_size=4, n_best=3, max_len_a=1.0, max_len_b=3)
    for source, nbest in zip(sources, decode_all(model, sources, cfg, CPU, attention=True)):
        for hyp in nbest:
            produced = hyp.tokens + [EOS] * hyp.ended
            batch = batch_of([source])
            with torch.no_grad():
                state = model.init_state(model.encode(batch.src, batch.src_lens))
                score, maps = 0.0, []
                for prev, token in zip([BOS] + produced, produced):
                    logits, weights, state = model.decode_step(torch.tensor([prev]), state)
                    score += float(logits.log_softmax(-1)[0, token])
                    maps.append(weights[0])
            assert hyp.score == pytest.approx(score, abs=1e-4)
            torch.testing.assert_close(hyp.attention, torch.stack(maps), atol=1e-5, rtol=1e-4)
            layers = 2 if family == "transformer" else 1
            heads = {"gru-bahdanau": 1, "lstm-luong-multihead": 3, "transformer": 4}[family]
            assert hyp.attention.shape == (len(produced), layers, heads, len(source))


def test_beam_search_improves_model_score_over_greedy():
    model = random_model("gru-bahdanau")
    sources = random_sources(11, 20)
    base = DecodeConfig(max_len_a=1.0, max_len_b=3)
    greedy_out = decode_all(model, sources, base, CPU)
    beam_out = decode_all(model, sources, replace(base, strategy=Strategy.beam, beam_size=5), CPU)
    pairs = [(g[0].score, b[0].score) for g, b in zip(greedy_out, beam_out)]
    assert all(b >= g - 1e-5 for g, b in pairs)  # no length penalty: beam never does worse
    assert any(b > g + 1e-3 for g, b in pairs)


def test_sampling_with_a_seed_is_reproducible():
    model = random_model("transformer")
    sources = random_sources(2, 6)
    cfg = DecodeConfig(strategy=Strategy.sample, n_best=3, max_len_a=1.0, max_len_b=3)
    first = decode_all(model, sources, cfg, CPU)
    again = decode_all(model, sources, cfg, CPU)
    other = decode_all(model, sources, replace(cfg, seed=99), CPU)
    tokens = lambda out: [[h.tokens for h in nbest] for nbest in out]
    assert tokens(first) == tokens(again)
    assert tokens(first) != tokens(other)
    for nbest in first:
        keys = [h.normalized for h in nbest]
        assert keys == sorted(keys, reverse=True)


@pytest.mark.parametrize("option", [dict(top_k=1), dict(top_p=1e-6), dict(temperature=1e-4)])
def test_sampling_collapses_to_greedy_at_the_limits(option):
    model = random_model("gru-bahdanau")
    sources = random_sources(4, 8)
    base = DecodeConfig(max_len_a=1.0, max_len_b=3)
    greedy_out = decode_all(model, sources, base, CPU)
    sampled = decode_all(model, sources, replace(base, strategy=Strategy.sample, **option), CPU)
    assert [g[0].tokens for g in greedy_out] == [s[0].tokens for s in sampled]


def test_top_k_only_draws_from_the_k_most_probable():
    table = {(): {A: 0.4, B: 0.3, C: 0.2, D: 0.1}}
    first = set()
    for seed in range(40):
        (hyp,) = toy_decode(table, Strategy.sample, top_k=2, seed=seed)
        first.add(hyp.tokens[0])
    assert first == {A, B}


BF16_ULPS = 4  # per step, of the largest logit: see the bf16 test below


@pytest.mark.parametrize("family", FAMILIES)
def test_under_bf16_beam_reports_what_the_bf16_model_says(family):
    """Under bf16 autocast (decode.precision=bf16) the search is exact for the model it runs:
    each hypothesis's score is the sum of the log-probabilities the bf16 model gives it step by
    step. (Beam 1 = greedy does not carry over: bf16 logits tie often, and argmax and topk may
    break a tie differently.)"""
    model = random_model(family)
    sources = random_sources(8, 6)
    beam = DecodeConfig(strategy=Strategy.beam, beam_size=4, n_best=3, max_len_a=1.0, max_len_b=3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        beam_out = decode_all(model, sources, replace(beam, batch_size=3), CPU)
    for source, nbest in zip(sources, beam_out):
        for hyp in nbest:
            produced = hyp.tokens + [EOS] * hyp.ended
            batch = batch_of([source])
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
                state = model.init_state(model.encode(batch.src, batch.src_lens))
                score, rounding = 0.0, 0.0
                for prev, token in zip([BOS] + produced, produced):
                    logits, _, state = model.decode_step(torch.tensor([prev]), state)
                    assert logits.dtype == torch.bfloat16  # the output layer ran in bf16
                    score += float(logits.float().log_softmax(-1)[0, token])
                    rounding += BF16_ULPS * 2.0**-8 * float(logits.abs().max())
            # a batch of rows and a single row round the bf16 products differently (the kernels
            # sum in another order, and which kernel runs depends on the CPU: AVX2, AVX-512,
            # AVX512-BF16, AMX). bf16 keeps 8 bits of mantissa, so two roundings of a logit x may
            # differ by 2^-8 |x|, and the difference is carried through the layers and the
            # recurrent state: a few such ulps of the largest logit per step. A wrong back-pointer
            # would be off by whole log-probabilities
            assert abs(hyp.score - score) <= rounding, (hyp.score, score, rounding)


@pytest.mark.parametrize("family", ["gru", "transformer"])
def test_decode_precision_bf16_translates_a_trained_model_as_fp32_does(
    family, train_small, demo_dir
):
    ckpt = train_small(family)
    sources = (demo_dir / "test.de").read_text(encoding="utf-8").splitlines()[:40]
    beam = DecodeConfig(strategy=Strategy.beam)
    fp32 = Translator.from_checkpoint(ckpt, beam, "cpu")
    bf16 = Translator.from_checkpoint(ckpt, replace(beam, precision=Precision.bf16), "cpu")
    searched_in: list[torch.dtype | None] = []
    bf16.model.encoder.register_forward_hook(
        lambda m, args, out: searched_in.append(torch.get_autocast_dtype("cpu")
                                                if torch.is_autocast_enabled("cpu") else None)
    )  # fmt: skip
    ours, reference = bf16.translate(sources), fp32.translate(sources)
    assert searched_in == [torch.bfloat16]  # one batch, searched under bf16 autocast
    assert len(ours) == len(sources)
    # rounding may swap two nearly tied hypotheses; most sentences come out the same
    # bf16 rounding may swap nearly tied hypotheses, which these tiny models have plenty of:
    # 33 (GRU) and 30 (Transformer) of the 40 come out the same here; on the 20-minute Multi30k
    # model valid BLEU moves 38.09 -> 37.92 (docs/benchmarks.md)
    assert sum(a == b for a, b in zip(ours, reference)) >= 0.6 * len(sources)


def test_decode_precision_fp16_on_the_cpu_is_a_clear_error(train_small):
    with pytest.raises(NMTError, match="decode.precision=fp16 needs a CUDA device"):
        Translator.from_checkpoint(
            train_small("gru"), DecodeConfig(precision=Precision.fp16), "cpu"
        )


def test_the_repetition_penalty_scores_a_piece_the_hypothesis_has_lower():
    """After A, the model prefers A again (.5) to C (.3); a penalty of 2 scores the second A as
    2 log .5 < log .3, so greedy takes C. The score is the penalised one; 1 adds no rule."""
    table = {(): {A: 0.6, B: 0.4}, (A,): {A: 0.5, C: 0.3, EOS: 0.2}}
    model, cfg = ToyModel(table), DecodeConfig(max_len_a=0.0, max_len_b=5)
    assert greedy(model, one_source(model, cfg))[0].tokens == [A, A]
    penalised = replace(cfg, repetition_penalty=2.0)
    [hyp] = greedy(model, one_source(model, penalised))
    assert (hyp.tokens, hyp.score) == ([A, C], pytest.approx(math.log(0.6) + math.log(0.3)))
    # beam 2: B EOS (.4) ends first either way; the second is A A (.3) without the penalty, and
    # A C (.18) with it, where A A scores .6 * .5 ** 2 = .15
    beam = replace(cfg, strategy=Strategy.beam, beam_size=2, n_best=2)
    assert [h.tokens for h in beam_search(model, one_source(model, beam))[0]] == [[B], [A, A]]
    nbest = beam_search(model, one_source(model, replace(beam, repetition_penalty=2.0)))[0]
    assert [h.tokens for h in nbest] == [[B], [A, C]]
    assert "repetition_penalty 2" in penalised.describe()
    assert StepRules.build(SearchJob([], cfg), CPU).rules == []
    with pytest.raises(NMTError, match="decode.repetition_penalty must be > 0"):
        DecodeConfig(repetition_penalty=0.0)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_repetition_penalty_is_the_score_of_stepping_through_with_it(family):
    """Beam search's score of each hypothesis is the sum of the model's log-probabilities with
    every piece seen before multiplied by the penalty; no hypothesis is worse for it."""
    model, sources = random_model(family), random_sources(6, 5)
    cfg = DecodeConfig(strategy=Strategy.beam, beam_size=3, n_best=2, max_len_a=1.0,
                       max_len_b=3, repetition_penalty=1.5)  # fmt: skip
    for source, nbest in zip(sources, decode_all(model, sources, cfg, CPU)):
        for hyp in nbest:
            produced, seen, score = hyp.tokens + [EOS] * hyp.ended, set(), 0.0
            batch = batch_of([source])
            with torch.no_grad():
                state = model.init_state(model.encode(batch.src, batch.src_lens))
                for prev, token in zip([BOS] + produced, produced):
                    logits, _, state = model.decode_step(torch.tensor([prev]), state)
                    value = float(logits.log_softmax(-1)[0, token])
                    score += value * (1.5 if token in seen else 1.0)
                    seen.add(token)
            assert hyp.score == pytest.approx(score, abs=1e-4)


def test_the_repetition_penalty_is_a_request_option_the_exported_runtimes_refuse():
    from nmt.export.ct2 import decode_options
    from nmt.export.runtime import check_supported
    from nmt.serving.admission import request_decode
    from nmt.serving.http import BadRequest
    from nmt.translation.request import Request

    assert request_decode(DecodeConfig(), {"repetition_penalty": 1.3}, 16).repetition_penalty == 1.3
    with pytest.raises(BadRequest, match="repetition_penalty=0 is out of range"):
        request_decode(DecodeConfig(), {"repetition_penalty": 0}, 16)
    request = Request(["Ein Haus."], DecodeConfig(repetition_penalty=1.3))
    for runtime, rules in (
        ("exported graphs' greedy loop", ()),
        ("CTranslate2 export", ("no_repeat_ngram",)),
    ):
        with pytest.raises(NMTError, match="does not support decode.repetition_penalty=1.3"):
            check_supported(request, runtime, rules)
    with pytest.raises(NMTError, match="decode.repetition_penalty=1.3 is not supported by the CT"):
        decode_options(DecodeConfig(repetition_penalty=1.3), [5])
