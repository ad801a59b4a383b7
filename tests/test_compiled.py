"""decode.compile (nmt/models/compiled.py): the compiled step gives the tokens of the eager one
and its scores to float rounding, for every strategy, both families and an ensemble; the
preallocated self-attention cache gives the numbers of the growing one; a search compiles a
bounded number of graphs and reuses them; every place that cannot honour decode.compile refuses
it by name."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
import torch._dynamo.utils
from test_search import FAMILIES, V, random_model, random_sources

from nmt.config import DecodeConfig, Precision, Strategy
from nmt.errors import NMTError
from nmt.export.runtime import check_greedy
from nmt.models import build_model
from nmt.models.compiled import check_compile
from nmt.models.ensemble import Ensemble
from nmt.tokenizer import PAD
from nmt.translation.search import decode_all
from nmt.translation.translator import Translator
from nmt.translation.warm_up import warm_up

CPU = torch.device("cpu")
GREEDY = DecodeConfig(max_len_a=1.0, max_len_b=4)
BEAM = replace(GREEDY, strategy=Strategy.beam, beam_size=3, n_best=3)
SAMPLE = replace(GREEDY, strategy=Strategy.sample, n_best=2, top_k=5)
STRATEGIES = {"greedy": GREEDY, "beam": BEAM, "sample": SAMPLE}


def graphs() -> int:
    """Graphs torch.compile has made in this process."""
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def assert_same_search(eager, compiled) -> None:
    """The same n-best lists, hypothesis by hypothesis: tokens equal, scores to float rounding."""
    assert len(eager) == len(compiled)
    for a_list, b_list in zip(eager, compiled):
        assert [h.tokens for h in a_list] == [h.tokens for h in b_list]
        for a, b in zip(a_list, b_list):
            assert math.isclose(a.score, b.score, rel_tol=1e-5, abs_tol=1e-5)
            assert a.ended == b.ended


# int8 compiles more kernels (40-70 s a family on 2 cores): by default the two families of the
# int8 benchmarks; the LSTM with multi-head attention in int8 runs with -m slow
FAMILY_PRECISIONS = [(family, Precision.fp32) for family in FAMILIES] + [
    ("gru-bahdanau", Precision.int8),
    ("transformer", Precision.int8),
    pytest.param("lstm-luong-multihead", Precision.int8, marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("family", "precision"), FAMILY_PRECISIONS)
def test_compiled_search_equals_eager_for_every_strategy(family, precision):
    """In int8 too: the products' quantization (torch._int_mm and the rounding of each row)
    traces into the graph with no break, and fused it rounds as eager does."""
    model, sources = random_model(family), random_sources(5, 7)
    torch._dynamo.reset()  # forget the graphs other tests made for a model of this structure
    before, breaks = graphs(), sum(torch._dynamo.utils.counters["graph_break"].values())
    for cfg in STRATEGIES.values():
        cfg = replace(cfg, precision=precision)
        eager = decode_all(model, sources, cfg, CPU)
        assert_same_search(eager, decode_all(model, sources, replace(cfg, compile=True), CPU))
    # it did compile (a search run eagerly passes the above too); greedy, beam and sampling
    # share their graphs: one sentence or several, a beam's first step or not, the first step
    # (position 0; Luong's input feed absent), a few per family, never one per batch or step
    assert 0 < graphs() - before <= 8
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == breaks


def test_compiled_ensemble_equals_eager_and_a_second_search_compiles_nothing():
    members = [random_model("transformer"), random_model("gru-bahdanau")]
    ensemble = Ensemble(members, weights=[2.0, 1.0]).eval()
    sources = random_sources(8, 6)
    cfg = replace(BEAM, compile=True)
    eager = decode_all(ensemble, sources, BEAM, CPU)
    assert_same_search(eager, decode_all(ensemble, sources, cfg, CPU))
    made = graphs()
    # other sentences, another batch size: the same kinds of batch, no graph more
    others = random_sources(9, 10)
    assert_same_search(
        decode_all(ensemble, others, replace(BEAM, batch_size=4), CPU),
        decode_all(ensemble, others, replace(cfg, batch_size=4), CPU),
    )
    assert graphs() == made


def test_the_preallocated_cache_gives_the_numbers_of_the_growing_one():
    """Stepping with caches preallocated to the length limit and with caches that start empty
    and grow: bit-identical logits and attention, step after step (60 steps: the growing
    caches are replaced three times)."""
    model = random_model("transformer")
    src = torch.tensor([random_sources(3, 1)[0]])
    tokens = torch.randint(4, 20, (60,), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        encoded = model.encode(src, torch.tensor([src.size(1)]))
        growing = model.init_state(encoded)
        fixed = model.init_state(encoded, steps=60)
        assert growing.self_keys[0] is None and fixed.self_keys[0].size(2) > 60
        for token in tokens:
            prev = token.view(1)
            a_logits, a_maps, growing = model.decode_step(prev, growing)
            b_logits, b_maps, fixed = model.decode_step(prev, fixed)
            assert torch.equal(a_logits, b_logits) and torch.equal(a_maps, b_maps)
        assert fixed.self_keys[0].size(2) == 61  # it never grew


def test_compile_is_refused_where_it_cannot_run():
    with pytest.raises(NMTError, match="decode.compile=true"):
        check_greedy(replace(GREEDY, compile=True))  # the exported graphs' loop
    with pytest.raises(NMTError, match="runs on a CPU or a CUDA GPU"):
        check_compile(torch.device("meta"))


def test_compile_without_a_cpp_compiler_is_a_clear_error(monkeypatch):
    from torch._inductor import cpp_builder

    def no_compiler() -> str:
        raise RuntimeError("no C++ compiler found")  # what torch raises is its own class

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", no_compiler)
    with pytest.raises(NMTError, match="needs a C\\+\\+ compiler"):
        check_compile(CPU)
    check_compile(torch.device("cuda"))  # a GPU needs none (whether CUDA is there is not asked)


def test_warm_up_compiles_what_the_first_requests_need(train_small, demo_dir):
    """nmt-serve and the prompt warm up at load: the first requests (one text, several,
    greedy or beam) then compile nothing, and translate as the uncompiled model does."""
    ckpt = train_small("transformer")
    texts = (demo_dir / "test.de").read_text().splitlines()[:6]
    settings = replace(BEAM, max_len_a=1.5, n_best=1)
    eager = Translator.from_checkpoint(ckpt, settings, "cpu")
    compiled = Translator(eager.model, eager.vocabs, CPU, decode=replace(settings, compile=True))
    torch._dynamo.reset()
    warm_up(compiled)
    made = graphs()
    assert made > 0
    assert compiled.translate(texts[:1]) == eager.translate(texts[:1])
    assert compiled.translate(texts) == eager.translate(texts)
    greedy = replace(settings, strategy=Strategy.greedy)
    assert compiled.translate(texts[:1], decode=replace(greedy, compile=True)) == eager.translate(
        texts[:1], decode=greedy
    )
    # a text the tokenizer turns into no piece (control characters), and one of one piece
    odd = ["\x01\x02", "a"]
    assert [len(ids) for ids in eager.vocabs.src.encode(odd)] == [0, 1]
    for text in odd:
        assert compiled.translate([text]) == eager.translate([text])
        assert compiled.translate([text], decode=replace(greedy, compile=True)) == eager.translate(
            [text], decode=greedy
        )
    assert graphs() == made


@pytest.mark.parametrize("family", ["transformer", "gru-bahdanau"])
def test_other_weights_reuse_the_graphs(family):
    """Parameters are inputs of the graphs: another model of the same structure, and the same
    model after its weights change (a validation inside training), compile nothing more."""
    cfg, sources = replace(BEAM, compile=True), random_sources(5, 7)
    torch._dynamo.reset()
    first = random_model(family)
    decode_all(first, sources, cfg, CPU)
    made = graphs()
    torch.manual_seed(1)
    other = build_model(FAMILIES[family], V, V, shared_vocab=True).eval()
    assert_same_search(decode_all(other, sources, BEAM, CPU), decode_all(other, sources, cfg, CPU))
    with torch.no_grad():
        for p in first.parameters():
            p.add_(0.01)
    assert_same_search(decode_all(first, sources, BEAM, CPU), decode_all(first, sources, cfg, CPU))
    assert graphs() == made


@pytest.mark.parametrize("family", ["transformer", "gru-bahdanau"])
def test_a_compiled_int8_step_has_the_model_sizes_as_constants(family, monkeypatch):
    """Only the batch's sizes are symbols in a graph: the int8 weights' sizes are the model's
    (symbolic feature sizes made inductor write scalar loops, and compiled int8 beam search at
    batch 64 slower than eager), and a shortlist's int8 rows, whose count changes with the batch,
    stay symbolic (one graph for every shortlist). Graphs are captured before inductor."""
    from test_lexicon import random_lexicon

    from nmt.models import compiled

    sizes: list[tuple[str, list]] = []  # (which, sizes) of each int8 input of each graph

    def capture(gm, example_inputs):
        for node in gm.graph.find_nodes(op="placeholder"):
            value = node.meta.get("example_value")
            if isinstance(value, torch.Tensor) and value.dtype == torch.int8:
                sizes.append((node.name, list(value.shape)))
        return gm.forward

    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda f, **kw: compile_(f, backend=capture, **kw))
    compiled.compiled.cache_clear()
    torch._dynamo.reset()
    try:
        cfg = replace(BEAM, compile=True, precision=Precision.int8)
        model, sources = random_model(family), random_sources(5, 7)
        decode_all(model, sources, cfg, CPU)
        decode_all(model, sources, replace(cfg, shortlist=3), CPU, lexicon=random_lexicon(3))
    finally:
        compiled.compiled.cache_clear()  # later tests compile with inductor again
        torch._dynamo.reset()

    def symbolic(shape: list) -> bool:
        return any(isinstance(size, torch.SymInt) for size in shape)

    # the step's argument `output` holds the shortlist's rows; the model's are under `self`
    rows = [shape for name, shape in sizes if name.startswith("l_output_")]
    model_sized = [(name, shape) for name, shape in sizes if not name.startswith("l_output_")]
    assert model_sized and [(name, s) for name, s in model_sized if symbolic(s)] == []
    assert rows and all(symbolic(shape) for shape in rows)


@pytest.mark.parametrize("family", ["transformer", "gru-bahdanau"])
def test_compiled_int8_search_with_shortlists_of_other_sizes_equals_eager_in_the_same_graphs(
    family,
):
    """A shortlist's output rows are made per batch, in int8 too (`per_batch`): the compiled
    step gives eager's search over them, and a batch whose shortlist has another size reuses
    the graphs."""
    from test_lexicon import random_lexicon

    model, lexicon = random_model(family), random_lexicon(2)
    cfg = replace(BEAM, precision=Precision.int8, shortlist=2, shortlist_frequent=0)
    batches = [random_sources(5, 2, max_len=4), random_sources(6, 7)]
    columns = [lexicon.shortlist(_padded(sources), 2, 0).ids.numel() for sources in batches]
    assert columns[0] != columns[1]
    torch._dynamo.reset()
    made = None
    for sources in batches:
        eager = decode_all(model, sources, cfg, CPU, lexicon=lexicon)
        compiled = decode_all(model, sources, replace(cfg, compile=True), CPU, lexicon=lexicon)
        assert_same_search(eager, compiled)
        made = graphs() if made is None else made
    assert graphs() == made


def _padded(sources: list[list[int]]) -> torch.Tensor:
    """(B, S) ids, PAD-padded (PAD's row of a lexicon holds no translation)."""
    out = torch.full((len(sources), max(map(len, sources))), PAD, dtype=torch.long)
    for row, ids in enumerate(sources):
        out[row, : len(ids)] = torch.tensor(ids)
    return out
