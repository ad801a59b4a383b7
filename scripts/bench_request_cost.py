"""What constraints and banned phrases add to a search, against what nmt-serve's cost model
counts for them, printed as JSON.

    python scripts/bench_request_cost.py runs/NAME/checkpoints/best \\
        --src ../shared/data/multi30k/test_2016_flickr.de \\
        --ref ../shared/data/multi30k/test_2016_flickr.en [--texts 8] [--repeats 3]

The request: the first `--texts` sources of 12 words or more, beam 5 (gnmt alpha 1, as the
server's default decode=beam), room for 16 constraints (decode.max_len_b=60) and the minimum
length at the length limit, so that every hypothesis runs every step and a variant's time over
the plain request's is what it adds to each step. The variants: constraints (per text, words
of its own reference: 1 phrase of 1 word, 4 of 2 words, 16 of 2 words (the server's most), 1 of
12 words) and banned phrases (words of the
reference file: 8 of 1 word, 64 of 1, 3, 8 and 30 words, and the largest list the server's
limits allow: 64 phrases filling `--max-chars`, each cut to `--max-len-cap` pieces).

For each: `prepare_s` (tokenizing and checking, what the server does off its event loop before
the request is queued), `run_s` (the search), `time_ratio` (run_s over the plain request's) and
`cost_ratio` (the request's cost, `nmt.serving.admission.check_request`, over the plain one's),
medians of `--repeats` runs. The cost model holds where cost_ratio >= time_ratio: a request is
never counted as cheaper than it is. One torch thread; nothing else should run.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

import torch

from nmt.config import DecodeConfig, LengthPenalty, Strategy
from nmt.data.splits import read_lines
from nmt.device import describe
from nmt.metrics import median_seconds
from nmt.serving.admission import MAX_BANNED, MAX_CONSTRAINTS, check_request
from nmt.translation.request import Request
from nmt.translation.translator import Translator

WORD = re.compile(r"[^\W\d_]{3,}")


def phrases(words: list[str], count: int, length: int, rng: random.Random) -> list[str]:
    return [" ".join(rng.choice(words) for _ in range(length)) for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--texts", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-chars", type=int, default=100_000, help="the server's max_chars")
    parser.add_argument("--max-len-cap", type=int, default=512, help="decode.max_len_cap")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = random.Random(1)
    pairs = zip(read_lines(Path(args.src)), read_lines(Path(args.ref)))
    chosen = [(s, r) for s, r in pairs if len(s.split()) >= 12][: args.texts]
    sources, refs = [s for s, _ in chosen], [r for _, r in chosen]
    words = sorted({w for line in read_lines(Path(args.ref)) for w in WORD.findall(line)})
    own = [sorted(set(WORD.findall(r))) or words for r in refs]
    decode = DecodeConfig(
        strategy=Strategy.beam, beam_size=5, length_penalty=LengthPenalty.gnmt, alpha=1.0,
        max_len_b=60, min_len_b=10**6, max_len_cap=args.max_len_cap,
    )  # fmt: skip
    translator = Translator.from_checkpoint(args.ckpt, decode, device="cpu")

    def own_phrases(count: int, length: int) -> list[list[str]]:
        return [phrases(w, count, length, rng) for w in own]

    # the largest banned list the limits allow: 64 phrases sharing the characters left
    room = (args.max_chars - sum(map(len, sources))) // MAX_BANNED
    longest = [" ".join(rng.choice(words) for _ in range(room))[:room].strip()]
    longest = [p for p in longest for _ in range(MAX_BANNED)]
    # ...each cut to the pieces a translation may have (a longer one is refused, not searched)
    vocab = translator.vocabs.tgt
    longest = [vocab.decode([vocab.encode([p])[0][: args.max_len_cap - 1]])[0] for p in longest]
    variants = {
        "plain": {},
        "constraints 1x1": {"constraints": own_phrases(1, 1)},
        "constraints 4x2": {"constraints": own_phrases(4, 2)},
        f"constraints {MAX_CONSTRAINTS}x2": {"constraints": own_phrases(MAX_CONSTRAINTS, 2)},
        "constraints 1x12": {"constraints": own_phrases(1, 12)},
        "banned 8x1": {"banned": phrases(words, 8, 1, rng)},
        "banned 64x1": {"banned": phrases(words, 64, 1, rng)},
        "banned 64x3": {"banned": phrases(words, 64, 3, rng)},
        "banned 64x8": {"banned": phrases(words, 64, 8, rng)},
        "banned 64x30": {"banned": phrases(words, 64, 30, rng)},
        "banned 64 at the limits": {"banned": longest},
    }
    report: dict = {
        "checkpoint": args.ckpt, "device": describe(translator.device), "texts": len(sources),
        "decode": decode.describe(), "variants": {},
    }  # fmt: skip
    plain_run = plain_cost = None
    for name, options in variants.items():
        request = Request(sources, decode, noun="text", **options)
        prepared, costs = check_request(translator, request, 10**12, 0)
        prepare_s = median_seconds(lambda r=request: check_request(translator, r, 10**12, 0), 1)
        run_s = median_seconds(lambda p=prepared: translator.run(p), args.repeats)
        plain_run, plain_cost = plain_run or run_s, plain_cost or sum(costs)
        banned = prepared.banned
        report["variants"][name] = {
            "constraint_pieces": sum(len(c) for t in prepared.texts for c in t.constraints),
            "banned_spellings": len(banned),
            "banned_pieces": sum(map(len, banned)),
            "banned_chars": sum(map(len, options.get("banned", []))),
            "prepare_s": round(prepare_s, 4),
            "run_s": round(run_s, 4),
            "time_ratio": round(run_s / plain_run, 3),
            "cost_ratio": round(sum(costs) / plain_cost, 3),
        }
        print(name, report["variants"][name], flush=True)
    report["cost_model_holds"] = all(
        v["cost_ratio"] >= v["time_ratio"] for v in report["variants"].values()
    )
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
