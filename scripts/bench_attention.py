"""What returning attention maps costs a search, against what nmt-serve's cost model counts for
them, printed as JSON.

    python scripts/bench_attention.py runs/NAME/checkpoints/best \\
        --src ../shared/data/multi30k/test_2016_flickr.de [--sentences 40] [--beam 16] \\
        [--repeats 3]

`long_text`: the first `--sentences` sources joined into one text, searched with beam
`--beam` with and without its attention maps (`Translator.translate_full(..., attention=)`):
`maps_s`, `plain_s` and their ratio. The end is blocked until the translation is as long as the
source (decode.min_len_a=1), so that every hypothesis runs hundreds of steps, as a model that
translates the whole paragraph does (one trained on sentences stops after a few).

`requests`: what the server does for one request of 8 texts (the first sources of 12 words or
more) at beam 5, with `attention: true` or not: the search and the answer's JSON, as nmt-serve's
worker runs them (`nmt.serving.server.decode_batch`), for texts of 1, 4 and 16 sentences. Each row
gives the seconds, the request's cost without maps (`plain_cost`, `text_cost`: beam x length
limit per text) and the map weights the cost model counts (`map_weights`: beam x length limit x
layers x heads x source pieces per text); `map_weights_per_step` is how many of those weights
cost, in measured time, what one unit of plain cost does: the constant
`nmt.serving.admission.MAP_WEIGHTS_PER_STEP` stands for (the cost model holds where that constant
is at most the measured one: maps are never counted as cheaper than they are). Medians of
`--repeats` runs, one torch thread; nothing else should run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from nmt.config import DecodeConfig, LengthPenalty, Strategy
from nmt.data.splits import read_lines
from nmt.device import describe
from nmt.serving.admission import MAP_WEIGHTS_PER_STEP, map_size, text_cost
from nmt.serving.native import NativeAnswer
from nmt.serving.server import Asked, Item, decode_batch
from nmt.translation.request import Request
from nmt.translation.translator import Translator


def median_seconds(work, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = work()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("--src", required=True, help="one sentence per line")
    parser.add_argument("--sentences", type=int, default=40, help="sentences of the long text")
    parser.add_argument("--beam", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    sources = read_lines(Path(args.src))
    translator = Translator.from_checkpoint(args.ckpt, device="cpu")
    layers_heads = map_size(translator)
    report: dict = {
        "checkpoint": args.ckpt,
        "machine": describe(torch.device("cpu")),
        "threads": 1,
        "map_layers_x_heads": layers_heads,
        "MAP_WEIGHTS_PER_STEP": MAP_WEIGHTS_PER_STEP,
    }

    text = " ".join(sources[: args.sentences])
    beam = DecodeConfig(
        strategy=Strategy.beam, beam_size=args.beam, n_best=args.beam, max_len_a=1.5,
        max_len_b=10, max_len_cap=1024, min_len_a=1.0, length_penalty=LengthPenalty.average,
    )  # fmt: skip
    translator.translate_full([text], attention=False, decode=beam)  # warm-up
    plain, _ = median_seconds(
        lambda: translator.translate_full([text], attention=False, decode=beam), args.repeats
    )
    maps, done = median_seconds(
        lambda: translator.translate_full([text], attention=True, decode=beam), args.repeats
    )
    report["long_text"] = {
        "sentences": args.sentences,
        "src_pieces": len(done[0].src_pieces),
        "tgt_pieces": len(done[0].tgt_pieces),
        "beam": args.beam,
        "plain_s": round(plain, 3),
        "maps_s": round(maps, 3),
        "ratio": round(maps / plain, 3),
    }

    long = [s for s in sources if len(s.split()) >= 12]
    decode = DecodeConfig(strategy=Strategy.beam, beam_size=5, n_best=5, alpha=1.0,
                          length_penalty=LengthPenalty.gnmt)  # fmt: skip
    rows = []
    for joined in (1, 4, 16):
        texts = [" ".join(long[i * joined : (i + 1) * joined]) for i in range(8)]
        measured = {}
        for attention in (False, True):
            request = Request(texts, decode, attention=attention, noun="text")
            prepared = translator.prepare(request)
            write = NativeAnswer(Asked(request)).translation  # the JSON, as the server writes it
            items = [Item(t, prepared, write) for t in prepared.texts]
            decode_batch(translator, items)  # warm-up
            measured[attention] = median_seconds(
                lambda items=items: decode_batch(translator, items), args.repeats
            )[0]
        pieces = [len(text.src) for text in translator.prepare(Request(texts, decode)).texts]
        plain_cost = sum(text_cost(decode, n, False) for n in pieces)
        weights = sum(text_cost(decode, n, False) * n for n in pieces) * layers_heads
        extra = measured[True] / measured[False] - 1  # the maps' time, in plain requests
        rows.append(
            {
                "sentences_per_text": joined,
                "plain_s": round(measured[False], 3),
                "maps_s": round(measured[True], 3),
                "plain_cost": plain_cost,
                "map_weights": weights,
                "map_weights_per_step": round(weights / (extra * plain_cost))
                if extra > 0
                else None,
            }
        )
    report["requests"] = rows
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
