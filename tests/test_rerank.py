"""N-best reranking (nmt/translation/rerank.py, nmt-translate rerank=[...], scripts/rerank_tune.py):
weight on the main model alone is its 1-best; weight on a rerank model alone picks that model's best
score per piece; N lines in, N out; bad weights are refused before any work; the weight search finds
the known best weights, and its BLEU is sacreBLEU's."""

import importlib.util
import math
import random
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from nmt.cli import main as cli
from nmt.config import DecodeConfig, Strategy
from nmt.data.splits import read_lines
from nmt.errors import NMTError
from nmt.metrics import bleu
from nmt.translation.request import Request
from nmt.translation.rerank import (
    Candidates,
    ChoiceBleu,
    Reranker,
    choose,
    simplex_grid,
    stack,
    tune_weights,
)
from nmt.translation.translator import Translator

ROOT = Path(__file__).resolve().parents[1]
# length penalty none: the main model's ranking favours short hypotheses, a score per piece does
# not, so the two choose differently on some lines
DECODE = DecodeConfig(strategy=Strategy.beam, beam_size=4, n_best=4)


@pytest.fixture(scope="module")
def models(train_small):
    """(GRU, Transformer) translators of the tiny trained models."""
    return tuple(
        Translator.from_checkpoint(train_small(f), device="cpu") for f in ("gru", "transformer")
    )


@pytest.fixture(scope="module")
def sources(demo_dir):
    return read_lines(demo_dir / "valid.de")[:30]


def per_piece(translator, sources, texts):
    """What a rerank model's feature must be: Translator.score's total over its pieces."""
    return [s.score / len(s.piece_scores) for s in translator.score(sources, texts, decode=DECODE)]


def test_weight_on_the_main_model_alone_gives_its_1best(models, sources):
    main, other = models
    reranker = Reranker(main, [other], [1, 0])
    found = reranker.candidates(Request(sources, DECODE))
    searched = main.translate_full(sources, False, decode=DECODE)
    assert [c.texts for c in found] == [[t for t, _ in r.nbest] for r in searched]
    assert reranker.translate(sources, decode=DECODE) == main.translate(sources, decode=DECODE)
    for c, r in zip(found, searched):  # the features: the search's score, the other's per piece
        assert [f[0] for f in c.features] == [score for _, score in r.nbest]
        expected = per_piece(other, [c.source] * len(c.texts), c.texts)
        assert [f[1] for f in c.features] == pytest.approx(expected, abs=1e-5)
    # the weights matter: on the other model alone some line changes
    assert Reranker(main, [other], [0, 1]).translate(sources, decode=DECODE) != main.translate(
        sources, decode=DECODE
    )


def test_weight_on_a_rerank_model_alone_picks_its_best_score_per_piece(models, sources):
    """The rerank model is the main model itself: reranking picks, among the n-best, the text
    whose per-piece log-probability (Translator.score) is highest, which is not always the
    1-best of a search ranked by total log-probability."""
    main, _ = models
    chosen = Reranker(main, [main], [0, 1]).translate(sources, decode=DECODE)
    changed = 0
    for source, text, r in zip(sources, chosen, main.translate_full(sources, False, decode=DECODE)):
        texts = [t for t, _ in r.nbest]
        values = per_piece(main, [source] * len(texts), texts)  # batched otherwise: 1e-5
        assert values[texts.index(text)] == pytest.approx(max(values), abs=1e-5)
        changed += text != r.text
    assert changed >= 1


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_nmt_translate_reranks_n_lines_in_n_out(models, train_small, sources, tmp_path):
    """Blank and whitespace lines keep their places; the output is the library's choice; the
    n-best rows are in the reranked order with the combined score."""
    main, other = models
    lines = [sources[0], "", sources[1], "   ", sources[2], ""]
    src = write(tmp_path / "in.de", lines)
    ckpts = [f"ckpt={train_small('gru')}", f"rerank=[{train_small('transformer')}]"]
    args = [*ckpts, "rerank_weights=[0.3,0.7]", "decode.n_best=4", f"input={src}", "device=cpu"]
    assert cli.translate([*args, f"output={tmp_path / 'out'}"]) == 0
    out = (tmp_path / "out").read_text(encoding="utf-8").split("\n")
    assert out[-1] == "" and len(out) - 1 == len(lines)
    decode = cli.compose_config("translate", ["ckpt=x"]).decode
    decode = replace(decode, n_best=4)
    reranker = Reranker(main, [other], [0.3, 0.7])
    assert out[:-1] == reranker.translate(lines, decode=decode)
    assert [out[i] for i in (1, 3, 5)] == ["", "", ""] and all(out[i] for i in (0, 2, 4))

    assert cli.translate([*args, "nbest_tsv=true", f"output={tmp_path / 'rows'}"]) == 0
    rows = [r.split("\t") for r in (tmp_path / "rows").read_text(encoding="utf-8").splitlines()]
    found = reranker.candidates(Request(lines, decode))
    for n, (candidates, best) in enumerate(zip(found, out), 1):
        mine = [r for r in rows if r[0] == str(n)]
        assert [r[1] for r in mine] == [str(k) for k in range(1, len(candidates.texts) + 1)]
        assert mine[0][3] == best
        scores = [float(r[2]) for r in mine]
        assert scores == sorted(scores, reverse=True)
        assert sorted(r[3] for r in mine) == sorted(candidates.texts)
    assert [r[3] for r in rows if r[0] == "2"] == [""]  # a blank line: one empty row


@pytest.mark.parametrize(
    "override, message",
    [
        ("rerank_weights=[1,1]", "rerank_weights has 2 weights but 3 are expected: the main "
         "model's (ckpt) first, then one per rerank checkpoint (2)"),
        ("rerank_weights=[1,2,3,4]", "rerank_weights has 4 weights but 3 are expected"),
        ("rerank_weights=[1,-1,0]", "every weight must be a finite number >= 0"),
        ("decode.n_best=1", "decode.n_best=1: set decode.n_best to 2 or more"),
    ],
)  # fmt: skip
def test_bad_rerank_settings_are_refused_before_any_checkpoint_is_read(
    override, message, tmp_path, capsys
):
    nowhere = tmp_path / "none"  # no such checkpoint: an error about it would mean work began
    args = [f"ckpt={nowhere}", f"rerank=[{nowhere},{nowhere}]", "decode.n_best=3", override]
    assert cli.translate(args) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and "not found" not in err and err.count("\n") == 1
    assert cli.translate([f"ckpt={nowhere}", "rerank_weights=[1,1]"]) == cli.EXIT_USAGE
    assert "rerank_weights needs rerank=[ckpt,...]" in capsys.readouterr().err


def test_the_interactive_prompt_refuses_rerank_before_loading(tmp_path, monkeypatch):
    from nmt.cli.translate import translate_main

    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    cfg = cli.compose_config(
        "translate", [f"ckpt={tmp_path}", f"rerank=[{tmp_path}]", "decode.n_best=2"]
    )
    with pytest.raises(NMTError, match="not at the interactive prompt"):
        translate_main(cfg)


def test_the_library_refuses_bad_weights_and_a_list_of_one(models, sources, monkeypatch):
    main, other = models
    with pytest.raises(NMTError, match=r"rerank_weights has 1 weights but 2 are expected"):
        Reranker(main, [other], [1])
    reranker = Reranker(main, [other])
    assert reranker.weights == [1.0, 1.0]  # equal by default

    def refuse(*args, **kwargs):
        raise AssertionError("translated before the n-best check")

    monkeypatch.setattr(main, "translate_full", refuse)
    with pytest.raises(NMTError, match="decode.n_best=1"):
        reranker.translate(sources, decode=DecodeConfig(strategy=Strategy.beam))


# ---- the weight search ------------------------------------------------------------------------


def oracle_case(margins: list[tuple[float, ...]], seed: int = 0):
    """One list of three hypotheses per margin row; the oracle's place differs per list. Each
    feature scores every hypothesis 0 except: the oracle gets margin[f] more on feature f (a
    negative margin: the first other hypothesis gets that much more instead). Returns the
    candidates and a metric counting the lists where the oracle is chosen."""
    rng = random.Random(seed)
    candidates, oracles = [], []
    for margin in margins:
        oracle = rng.randrange(3)
        rival = (oracle + 1) % 3
        rows = [[0.0] * len(margin) for _ in range(3)]
        for f, m in enumerate(margin):
            rows[oracle if m > 0 else rival][f] += abs(m)
        candidates.append(Candidates("s", ["a", "b", "c"], rows))
        oracles.append(oracle)
    truth = torch.tensor(oracles)
    return candidates, lambda choices: float((choices == truth).sum())


def test_the_search_finds_the_one_feature_that_is_right():
    """Feature 2 prefers the oracle everywhere by 0.01; features 0 and 1 prefer a rival by 100
    on some lists: any weight of 0.05 on either loses a list, so the best is [0, 0, 1]."""
    margins = [(-100.0, 1.0, 0.01), (1.0, -100.0, 0.01), (-100.0, -100.0, 0.01), (1, 1, 0.01)]
    candidates, metric = oracle_case(margins * 2)
    tuned = tune_weights(candidates, metric, step=0.05)
    assert tuned.weights == [0.0, 0.0, 1.0] and tuned.value == 8 and tuned.tried == 231


def test_the_search_finds_a_mixture_and_breaks_ties_towards_equal_weights():
    """With weights (a, 1 - a) list A needs 0.78 a > 0.22 (1 - a), a > 0.22, and list B
    0.33 (1 - a) > 0.67 a, a < 0.33: of the grid's 0.25 and 0.30, 0.30 is closer to equal."""
    candidates = [
        Candidates("A", ["x", "oracle"], [[0.0, 0.22], [0.78, 0.0]]),
        Candidates("B", ["x", "oracle"], [[0.67, 0.0], [0.0, 0.33]]),
    ]
    metric = lambda choices: float(choices.sum())  # the oracle is hypothesis 1 in both
    tuned = tune_weights(candidates, metric, step=0.05)
    assert tuned.weights == pytest.approx([0.3, 0.7]) and tuned.value == 2
    flat = tune_weights(candidates, lambda choices: 1.0, step=0.1)  # every weight alike
    assert flat.weights == [0.5, 0.5]


def test_the_grid_covers_the_simplex():
    grid = simplex_grid(3, 0.05)
    assert grid.shape == (math.comb(22, 2), 3) and (grid >= 0).all()
    assert torch.allclose(grid.sum(-1), torch.ones(len(grid), dtype=torch.float64))
    assert len({tuple(row) for row in (grid * 20).round().long().tolist()}) == len(grid)
    assert simplex_grid(1, 0.5).tolist() == [[1.0]]
    with pytest.raises(NMTError, match="1/step must be a whole number"):
        simplex_grid(2, 0.3)
    with pytest.raises(NMTError, match="take a coarser step"):
        simplex_grid(8, 0.01)


def test_the_searchs_choices_are_the_translators():
    """`choose` over the whole padded set chooses what `Candidates.best` chooses, ties (equal
    rows) and -inf features included."""
    rng = random.Random(1)
    candidates = []
    for _ in range(50):
        rows = [[rng.choice([-1.0, -0.5, 0.0, rng.uniform(-2, 0)]) for _ in range(3)]
                for _ in range(rng.randint(1, 5))]  # fmt: skip
        candidates.append(Candidates("s", [str(k) for k in range(len(rows))], rows))
    features, real = stack(candidates)
    for w in simplex_grid(3, 0.25):
        assert choose(features, real, w).tolist() == [c.best(w.tolist()) for c in candidates]


def test_choice_bleu_is_sacrebleus_corpus_bleu(demo_dir):
    refs = read_lines(demo_dir / "valid.en")[:40]
    candidates = [
        Candidates(
            "s", [ref, refs[(i + 1) % len(refs)], " ".join(ref.split()[::2]), ""], [[0.0]] * 4
        )
        for i, ref in enumerate(refs)
    ]
    metric = ChoiceBleu(candidates, refs)
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        choices = torch.randint(0, 4, (len(refs),), generator=g)
        chosen = [c.texts[k] for c, k in zip(candidates, choices.tolist())]
        assert metric(choices) == pytest.approx(bleu(chosen, refs), abs=1e-9)
    with pytest.raises(NMTError, match="40 n-best lists but 39 references"):
        ChoiceBleu(candidates, refs[:-1])


def test_rerank_tune_reports_what_its_command_gives(train_small, demo_dir, tmp_path):
    """scripts/rerank_tune.py: its valid BLEU is the best of its grid's (computed here weight by
    weight with sacreBLEU), its weights that best's closest to equal weights; the main model's
    BLEU is its own 1-best's; the printed command, run, gives the reported reranked BLEU, on
    valid and on test."""
    spec = importlib.util.spec_from_file_location("rerank_tune", ROOT / "scripts/rerank_tune.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    gru, transformer = train_small("gru"), train_small("transformer")
    files = {}
    for split, count in (("valid", 40), ("test", 20)):
        for lang in ("de", "en"):
            lines = read_lines(demo_dir / f"{split}.{lang}")[:count]
            files[split, lang] = write(tmp_path / f"{split}.{lang}", lines)
    report = script.main([
        "--ckpt", str(gru), "--rerank", str(transformer), "--src", str(files["valid", "de"]),
        "--ref", str(files["valid", "en"]), "--n-best", "4", "--step", "0.1",
        "--test-src", str(files["test", "de"]), "--test-ref", str(files["test", "en"]),
        "--device", "cpu", "decode.beam_size=4", "decode.length_penalty=none",
    ])  # fmt: skip
    assert report["grid"]["points"] == 11
    assert report["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")

    # length penalty none: the per-piece scores of the other model then change some choices
    beam = DecodeConfig(strategy=Strategy.beam, beam_size=4, n_best=4)
    main = Translator.from_checkpoint(gru, device="cpu")
    other = Translator.from_checkpoint(transformer, device="cpu")
    sources, refs = read_lines(files["valid", "de"]), read_lines(files["valid", "en"])
    found = Reranker(main, [other]).candidates(Request(sources, beam))
    grid = {k / 10: bleu([c.texts[c.best([k / 10, 1 - k / 10])] for c in found], refs)
            for k in range(11)}  # fmt: skip
    top = max(grid.values())
    closest = min((w for w, value in grid.items() if value == top), key=lambda w: abs(w - 0.5))
    assert report["weights"] == pytest.approx([closest, 1 - closest])
    valid = report["valid"]
    assert valid["bleu_reranked"] == round(top, 4)
    assert valid["bleu_main"] == round(grid[1.0], 4) and valid["bleu_equal_weights"] == round(
        grid[0.5], 4
    )

    weights = report["weights"]
    for split in ("valid", "test"):
        sources, refs = read_lines(files[split, "de"]), read_lines(files[split, "en"])
        assert report[split]["lines"] == len(sources)
        assert report[split]["bleu_main"] == round(
            bleu(main.translate(sources, decode=beam), refs), 4
        )
        command = report["command"].split()
        assert command[0] == "nmt-translate" and f"rerank_weights=[{weights[0]!r}," in command[3]
        out = tmp_path / f"{split}.hyp"
        argv = [*command[1:], f"input={files[split, 'de']}", f"output={out}", "device=cpu"]
        assert cli.translate(argv) == 0
        assert report[split]["bleu_reranked"] == round(bleu(read_lines(out), refs), 4)


@pytest.mark.slow
def test_a_rerank_model_with_another_tokenizer_scores_the_text(train_small, sources):
    """A training of its own (150 updates) with a smaller sentencepiece model: slow. The rerank
    model reads the main model's text through its own tokenizer."""
    main = Translator.from_checkpoint(train_small("gru"), device="cpu")
    other = Translator.from_checkpoint(
        train_small("gru", "data.tokenizer.vocab_size=350"), device="cpu"
    )
    assert len(other.vocabs.tgt) != len(main.vocabs.tgt)
    found = Reranker(main, [other], [0, 1]).candidates(Request(sources[:10], DECODE))
    for c in found:
        expected = per_piece(other, [c.source] * len(c.texts), c.texts)
        assert [f[1] for f in c.features] == pytest.approx(expected, abs=1e-5)
