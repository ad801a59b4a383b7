"""What a translation model is measured by: BLEU, chrF and TER by sacreBLEU, of detokenized
hypotheses against the references as read (whitespace runs collapsed, which none of BLEU's 13a
tokenizer, chrF or TER can see), each reported with its sacreBLEU signature so that it can be
compared with others; and the perplexity that training logs.

`percentiles` is how the benchmark scripts under scripts/ report latencies.

`compare` tells whether systems differ by more than chance: sacreBLEU's paired bootstrap
resampling (`sacrebleu.significance.PairedTest`, Koehn 2004), each system against a baseline on
the same sentences, with a 95% confidence interval for each system's score.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.significance import PairedTest

from nmt.errors import NMTError


def median_seconds(work: Callable[[], object], repeats: int) -> float:
    """The median wall-clock seconds of `repeats` calls of `work` (the benchmarks' timer)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def paired_median_seconds(
    first: Callable[[], object], second: Callable[[], object], repeats: int
) -> tuple[float, float]:
    """The median wall-clock seconds of `repeats` calls of each, the two taking turns, so that a
    machine slowing down or speeding up on the way weighs on both alike (a ratio of the two is
    then a measure of the work, not of when it ran)."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for work, out in ((first, times[0]), (second, times[1])):
            start = time.perf_counter()
            work()
            out.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def percentiles(
    values: list[float], qs: tuple[int, ...] = (50, 90, 99), scale: float = 1.0, digits: int = 1
) -> dict[str, float | None]:
    """{"p50": ..., "p90": ..., "p99": ...} of `values` times `scale` (1000: seconds to ms),
    rounded, by linear interpolation between ranks (numpy's default); None for no values."""
    ordered = sorted(values)
    out: dict[str, float | None] = {}
    for q in qs:
        if not ordered:
            out[f"p{q}"] = None
            continue
        rank = (len(ordered) - 1) * q / 100
        low = int(rank)
        high = min(low + 1, len(ordered) - 1)
        value = ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
        out[f"p{q}"] = round(value * scale, digits)
    return out


@dataclass
class Scores:
    bleu: float
    chrf: float
    ter: float
    lines: list[str]  # sacreBLEU's own rendering of each score, each followed by its signature

    def to_dict(self) -> dict:
        return {"bleu": self.bleu, "chrf": self.chrf, "ter": self.ter, "report": self.lines}


def score(hypotheses: list[str], references: list[str]) -> Scores:
    """Corpus BLEU, chrF2 and TER with sacreBLEU's defaults."""
    if len(hypotheses) != len(references):
        raise NMTError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    lines, values = [], []
    for metric in (BLEU(), CHRF(), TER()):
        result = metric.corpus_score(hypotheses, [references])
        lines += [str(result), f"  signature: {metric.get_signature()}"]
        values.append(result.score)
    return Scores(*values, lines)


BOOTSTRAP_SAMPLES = 1000
BOOTSTRAP_SEED = 12345  # sacreBLEU's own default, so its command line gives the same numbers


@dataclass
class SystemScore:
    """One system's score under one metric, from paired bootstrap resampling."""

    system: str
    score: float  # on the whole test set
    mean: float  # the mean over the resamples ...
    ci: float  # ... +- this: half the width of the 95% interval of the resampled scores
    p_value: float | None  # against the baseline (None: the baseline itself)


@dataclass
class Comparison:
    """Systems compared with a baseline (the first system), per metric ("BLEU", "chrF2",
    "TER"): their scores, intervals and p-values, and each metric's sacreBLEU signature (which
    records the test: bs:SAMPLES|seed:SEED)."""

    results: dict[str, list[SystemScore]]
    signatures: dict[str, str]
    samples: int = BOOTSTRAP_SAMPLES

    @property
    def p_floor(self) -> float:
        """The smallest p-value the test can give, 1 / (samples + 1): no resample's difference
        reached the observed one. It bounds the p-value; it does not measure it."""
        return 1.0 / (self.samples + 1)

    def shown_p(self, p_value: float) -> str:
        """ "p = 0.0420", or at the floor "p ≤ 0.001" (with 1,000 samples)."""
        if p_value <= self.p_floor:
            return f"p ≤ {1 / self.samples:g}"
        return f"p = {p_value:.4f}"

    @property
    def lines(self) -> list[str]:
        """A table per metric, each followed by its signature."""
        width = max(len(r.system) for rows in self.results.values() for r in rows)
        out = []
        for metric, rows in self.results.items():
            out.append(f"{metric}:")
            for r in rows:
                p = "baseline" if r.p_value is None else self.shown_p(r.p_value)
                mark = " *" if r.p_value is not None and r.p_value < 0.05 else ""
                out.append(
                    f"  {r.system:<{width}}  {r.score:6.2f}  "
                    f"(mean {r.mean:6.2f} +- {r.ci:.2f})  {p}{mark}"
                )
            out.append(f"  signature: {self.signatures[metric]}")
        out.append("* p < 0.05: a difference that chance alone rarely gives")
        return out

    def to_dict(self) -> dict:
        return {
            "test": "paired bootstrap resampling (sacreBLEU)",
            "samples": self.samples,
            # a p_value equal to this is a bound, p <= p_floor: see `p_floor`
            "p_floor": self.p_floor,
            "results": {m: [asdict(r) for r in rows] for m, rows in self.results.items()},
            "signatures": self.signatures,
        }


@contextlib.contextmanager
def _sacrebleu_seed(seed: int) -> Iterator[None]:
    """PairedTest takes its seed from the environment (SACREBLEU_SEED) alone: set it for the
    test, whatever the caller's environment says, and put it back."""
    saved = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if saved is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = saved


def compare(
    systems: list[tuple[str, list[str]]],
    references: list[str],
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Comparison:
    """BLEU, chrF2 and TER of each (name, hypotheses) system with its 95% confidence interval,
    and the paired-bootstrap p-value of each system after the first (the baseline) against it.
    Every system resamples the same sentences (seeded), so the output is the same every run.

    A system whose hypotheses differ from the baseline's only where a metric cannot see (its
    tokenizer undoes the difference: "runs ." and "runs.", whitespace) gets p = 1 under that
    metric, as does one with exactly the baseline's hypotheses: sacreBLEU counts the resamples
    whose (centred) difference exceeds the observed one, and with no difference at all none
    does, which gives its smallest p-value, 1/(samples+1), the opposite of the truth. A p-value at
    that floor is a bound: `Comparison.lines` shows it as "p ≤ 0.001"."""
    if len(systems) < 2:
        raise NMTError("compare needs a baseline and at least one other system")
    for name, hypotheses in systems:
        if len(hypotheses) != len(references):
            raise NMTError(f"{name}: {len(hypotheses)} hypotheses but {len(references)} references")
    if samples < 1 or seed < 1:  # PairedTest treats seed 0 as "no seed"
        raise NMTError(f"samples={samples} and seed={seed} must be >= 1")
    metrics = {"BLEU": BLEU(), "chrF2": CHRF(), "TER": TER()}
    with _sacrebleu_seed(seed):
        test = PairedTest(systems, metrics, [references], test_type="bs", n_samples=samples)
        signatures, table = test()
    results = {}
    for metric, rows in table.items():
        if metric == "System":
            continue
        # what the metric sees of each sentence: its statistics, as the test itself reads them
        # (sacreBLEU's PairedTest calls the same method)
        seen = [metrics[metric]._extract_corpus_statistics(h, [references]) for _, h in systems]
        results[metric] = [
            SystemScore(
                name, float(r.score), float(r.mean), float(r.ci),
                None if k == 0 else 1.0 if seen[k] == seen[0] else float(r.p_value),
            )
            for k, ((name, _), r) in enumerate(zip(systems, rows))
        ]  # fmt: skip
    return Comparison(results, {m: str(s) for m, s in signatures.items()}, samples)


def perplexity(nll_per_token: float) -> float:
    """exp of the mean negative log-likelihood, capped (at e^50) so a diverged run logs a number."""
    return math.exp(min(nll_per_token, 50.0))


def bleu(hypotheses: list[str], references: list[str]) -> float:
    """Corpus BLEU alone (validation)."""
    return BLEU().corpus_score(hypotheses, [references]).score
