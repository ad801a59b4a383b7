"""Significance (nmt/metrics.py `compare`, nmt-evaluate compare=...): sacreBLEU's paired bootstrap
resampling gives p = 1 and the baseline's interval to a copy of the baseline, p < 0.05 to a
clearly better system, and the same numbers every run; hypothesis files with the wrong line count
fail before any decoding."""

import json
import random

import pytest

from nmt.checkpoint import load_checkpoint
from nmt.cli import main as cli
from nmt.config import Split
from nmt.data.splits import read_split
from nmt.demo import generate_pairs
from nmt.errors import NMTError
from nmt.metrics import compare, paired_median_seconds, percentiles
from nmt.translation.translator import Translator

REFERENCES = [en for _, en in generate_pairs(120, seed=5)]


def damaged(lines: list[str], seed: int = 0) -> list[str]:
    """Each line with one word dropped and two neighbours swapped: a clearly worse system."""
    rng = random.Random(seed)
    out = []
    for line in lines:
        words = line.split()
        del words[rng.randrange(len(words))]
        i = rng.randrange(len(words) - 1)
        words[i], words[i + 1] = words[i + 1], words[i]
        out.append(" ".join(words))
    return out


BASELINE = damaged(REFERENCES)
HALF_FIXED = [r if i % 2 else b for i, (b, r) in enumerate(zip(BASELINE, REFERENCES))]
METRICS = ("BLEU", "chrF2", "TER")


def test_a_copy_of_the_baseline_is_not_significant():
    result = compare([("base", BASELINE), ("copy", list(BASELINE))], REFERENCES).results
    for metric in METRICS:
        base, copy = result[metric]
        assert base.p_value is None and copy.p_value == 1.0
        assert (copy.score, copy.mean, copy.ci) == (base.score, base.mean, base.ci)
        assert base.ci > 0


def test_a_difference_the_metric_cannot_see_is_not_significant():
    """Doubled spaces: no metric sees them. A full stop set apart from its word: BLEU's 13a
    tokenizer and chrF (which ignores spaces) read it as before, TER (which splits at spaces)
    does not. Where the metric sees the baseline again, p = 1 (sacreBLEU alone says p at its
    floor, 1/1001, for these systems are not equal as strings)."""
    doubled = [b.replace(" ", "  ") for b in BASELINE]
    detached = [b.replace(".", " .") for b in BASELINE]
    assert doubled != BASELINE and detached != BASELINE
    comparison = compare([("base", BASELINE), ("doubled", doubled), ("detached", detached)],
                         REFERENCES)  # fmt: skip
    for metric in METRICS:
        base, spaced, apart = comparison.results[metric]
        assert spaced.p_value == 1.0 and spaced.score == base.score, metric
        if metric != "TER":
            assert apart.p_value == 1.0 and apart.score == base.score, metric
    assert comparison.results["TER"][2].score != comparison.results["TER"][0].score
    assert all("p = 1.0000" in line for line in comparison.lines if "doubled" in line)


def test_a_p_value_at_the_floor_of_the_resampling_is_shown_as_a_bound():
    comparison = compare([("base", BASELINE), ("refs", REFERENCES)], REFERENCES)
    assert comparison.results["BLEU"][1].p_value == pytest.approx(1 / 1001)
    row = next(line for line in comparison.lines if line.strip().startswith("refs"))
    assert row.endswith("p ≤ 0.001 *") and "p = 0.0010" not in row
    assert comparison.to_dict()["p_floor"] == pytest.approx(1 / 1001)
    few = compare([("base", BASELINE), ("refs", REFERENCES)], REFERENCES, samples=100)
    assert any("p ≤ 0.01 *" in line for line in few.lines)


@pytest.mark.parametrize("better", ["references", "half"])
def test_a_clearly_better_system_is_significant(better):
    system = REFERENCES if better == "references" else HALF_FIXED
    result = compare([("base", BASELINE), (better, system)], REFERENCES).results
    for metric in METRICS:
        base, other = result[metric]
        assert other.p_value < 0.05, (metric, other)
        gain = other.score - base.score
        assert gain < 0 if metric == "TER" else gain > 0  # TER counts errors: lower is better
    if better == "references":
        assert result["BLEU"][1].score == pytest.approx(100) and result["BLEU"][1].ci == 0


def test_seeded_whatever_the_environment(monkeypatch):
    """The same numbers every run, even where SACREBLEU_SEED asks sacreBLEU for no seed; the
    seed is in each signature, and another seed resamples other sentences."""
    systems = [("base", BASELINE), ("half", HALF_FIXED)]
    first = compare(systems, REFERENCES)
    monkeypatch.setenv("SACREBLEU_SEED", "None")
    again = compare(systems, REFERENCES)
    assert again.to_dict() == first.to_dict() and again.lines == first.lines
    assert all("bs:1000" in s and "seed:12345" in s for s in first.signatures.values())
    other = compare(systems, REFERENCES, seed=7)
    assert other.results["BLEU"][0].ci != first.results["BLEU"][0].ci
    assert "seed:7" in other.signatures["BLEU"]


def test_bad_comparisons_are_errors():
    with pytest.raises(NMTError, match="b: 119 hypotheses but 120 references"):
        compare([("a", BASELINE), ("b", BASELINE[1:])], REFERENCES)
    with pytest.raises(NMTError, match="at least one other system"):
        compare([("a", BASELINE)], REFERENCES)


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_nmt_evaluate_compares_hypothesis_files(train_small, tmp_path, capsys):
    """The checkpoint's own hypotheses (written by an earlier run) against it: p = 1; the
    references: p < 0.05. The scores of the run itself do not change."""
    ckpt = train_small("gru")
    args = [f"ckpt={ckpt}", "split=test", "decode=greedy", "device=cpu"]
    assert cli.evaluate([*args, f"out_dir={tmp_path / 'a'}"]) == 0
    own = tmp_path / "a" / "test.hyp"
    alone = json.loads((tmp_path / "a" / "test.scores.json").read_text())
    references = read_split(load_checkpoint(ckpt).config.data, Split.test).tgt
    refs = write(tmp_path / "test.en", references)
    capsys.readouterr()

    out = tmp_path / "b"
    assert cli.evaluate([*args, f"out_dir={out}", f"compare=[{own},{refs}]"]) == 0
    printed = capsys.readouterr().out
    assert "paired bootstrap resampling" in printed
    assert "signature: nrefs:1|bs:1000|seed:12345" in printed
    record = json.loads((out / "test.scores.json").read_text())
    assert record["bleu"] == alone["bleu"]
    results = record["significance"]["results"]
    for metric in METRICS:
        base, same, perfect = results[metric]
        assert base["p_value"] is None and same["p_value"] == 1.0
        assert (same["system"], perfect["system"]) == (str(own), str(refs))
        assert perfect["p_value"] < 0.05
    assert results["BLEU"][2]["score"] == pytest.approx(100)


def test_nmt_evaluate_refuses_a_wrong_line_count_before_decoding(
    train_small, tmp_path, capsys, monkeypatch
):
    ckpt = train_small("gru")

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded before the hypothesis files were checked")

    monkeypatch.setattr(Translator, "translate_full", no_decoding)
    short = write(tmp_path / "short.hyp", ["one line"])
    out = tmp_path / "out"
    args = [f"ckpt={ckpt}", "split=test", "device=cpu", f"out_dir={out}"]
    assert cli.evaluate([*args, f"compare={short}"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"compare: {short} has 1 lines but test has 100 sentences" in err
    assert not out.exists()  # nothing decoded, nothing written
    assert cli.evaluate([*args, f"compare=[{tmp_path / 'none.hyp'}]"]) == cli.EXIT_USAGE
    assert "no such hypothesis file" in capsys.readouterr().err


def test_percentiles_interpolate_between_ranks_as_numpy_does():
    """The benchmark scripts' one definition of a latency percentile: numpy's default (linear
    between ranks), in the given unit, None when nothing was timed."""
    import numpy as np

    values = [0.013, 0.002, 0.5, 0.011, 0.04, 0.007, 0.09]
    got = percentiles(values, (50, 90, 99), scale=1000, digits=6)
    want = {f"p{q}": round(float(np.percentile(values, q)) * 1000, 6) for q in (50, 90, 99)}
    assert got == want
    assert percentiles([3.0]) == {"p50": 3.0, "p90": 3.0, "p99": 3.0}
    assert percentiles([]) == {"p50": None, "p90": None, "p99": None}


def test_paired_timings_take_turns():
    calls = []
    first, second = paired_median_seconds(lambda: calls.append("a"), lambda: calls.append("b"), 3)
    assert calls == ["a", "b"] * 3 and first >= 0 and second >= 0
