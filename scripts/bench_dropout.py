"""CPU dropout: F.dropout against nmt's cheap-mask dropout, forward + backward, printed as JSON.

    python scripts/bench_dropout.py [--p 0.2] [--repeats 5]

For each tensor size, the median over `--repeats` rounds of the microseconds one forward and
backward take, with torch's threads as configured (OMP_NUM_THREADS). The cheap mask draws 16
random bits per element where F.dropout draws one Bernoulli sample; `nmt.models.dropout` uses it
from `MIN_ELEMENTS` up, which this script's break-even point justifies. For scale, the row
"linear_1024_256_us" is the forward of the Transformer feed-forward's second product on the
largest size, the layer an activation dropout precedes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from nmt.models.dropout import MIN_ELEMENTS, _CheapMaskDropout

SIZES = [4096, 16384, 32768, 65536, 262144, 1 << 20, 1 << 23]


def timed(fn, calls: int, repeats: int) -> float:
    """Median microseconds per call over `repeats` rounds of `calls` calls, after a warm-up."""
    for _ in range(3):
        fn()
    rounds = []
    for _ in range(repeats):
        began = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - began) / calls * 1e6)
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--p", type=float, default=0.2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for n in SIZES:
        x = torch.randn(n, requires_grad=True)
        grad = torch.ones(n)
        calls = max(5, 1_000_000 // n)
        cheap = lambda x=x, g=grad: _CheapMaskDropout.apply(x, args.p).backward(g)  # noqa: E731
        torchs = lambda x=x, g=grad: F.dropout(x, args.p, True).backward(g)  # noqa: E731
        ours, theirs = timed(cheap, calls, args.repeats), timed(torchs, calls, args.repeats)
        rows.append(
            {
                "elements": n,
                "f_dropout_us": round(theirs, 1),
                "cheap_mask_us": round(ours, 1),
                "ratio": round(ours / theirs, 3),
            }
        )
    big = torch.randn(SIZES[-1] // 1024, 1024)
    weight = torch.randn(256, 1024)
    with torch.no_grad():
        linear = timed(lambda: big @ weight.t(), 5, args.repeats)
    print(
        json.dumps(
            {
                "benchmark": "dropout_forward_backward",
                "p": args.p,
                "threads": torch.get_num_threads(),
                "min_elements": MIN_ELEMENTS,
                "sizes": rows,
                "linear_1024_256_us": round(linear, 1),
                "torch": torch.__version__,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
