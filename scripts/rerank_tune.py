"""Choose n-best reranking weights on a valid set (nmt/translation/rerank.py), and say what they
give.

    python scripts/rerank_tune.py --ckpt runs/a/checkpoints/best --rerank runs/b/checkpoints/best \\
        --src valid.de --ref valid.en [--n-best 5] [--step 0.05] \\
        [--test-src test.de --test-ref test.en] [--device cpu] [decode.beam_size=8 ...]

The main model (--ckpt; several: an ensemble) decodes the n-best list of every valid source once,
each rerank model (--rerank, one or more, each with its own tokenizer if it has one) scores every
hypothesis once, and the weights are searched on a grid over the simplex (multiples of --step,
>= 0, summing to 1: only their direction matters) for the best corpus BLEU (sacreBLEU's default,
13a) against the references; of equal BLEU, the weights closest to equal. Nothing is written to
disk. Key=value arguments are nmt-translate overrides (configs/translate.yaml: decode=beam with
beam 5 and gnmt alpha 1 unless overridden); the n-best list is --n-best long.

Prints one JSON object: the chosen weights and the nmt-translate command that uses them; on valid,
the BLEU of the main model's own 1-best, of the reranked output with the chosen and with equal
weights; with --test-src/--test-ref, the same once on test with the chosen weights; the sacreBLEU
signature. The main model's 1-best is the reranker with weights [1, 0, ...].
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from sacrebleu.metrics import BLEU

from nmt.cli.compose import compose_config
from nmt.data.splits import read_lines
from nmt.errors import NMTError
from nmt.translation.request import Request
from nmt.translation.rerank import Candidates, ChoiceBleu, Reranker, tune_weights

log = logging.getLogger("rerank_tune")


def _value(path: str) -> str:
    """A path as a Hydra override value: quoted unless it is plain."""
    if re.fullmatch(r"[\w./~+@:-]+", path):
        return path
    return "'" + path.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _paths(paths: Sequence[str]) -> str:
    return _value(paths[0]) if len(paths) == 1 else "[" + ",".join(map(_value, paths)) + "]"


def _read_pair(src: str, ref: str) -> tuple[list[str], list[str]]:
    sources, references = read_lines(Path(src)), read_lines(Path(ref))
    if len(sources) != len(references):
        raise NMTError(f"{src} has {len(sources)} lines but {ref} has {len(references)}")
    return sources, references


METRIC = BLEU()  # sacreBLEU's default BLEU, whose signature is reported


def _bleu(hypotheses: list[str], references: list[str]) -> float:
    return round(METRIC.corpus_score(hypotheses, [references]).score, 4)


def _chosen(found: list[Candidates], weights: Sequence[float]) -> list[str]:
    return [c.texts[c.best(weights)] for c in found]


def _candidates(reranker: Reranker, request: Request) -> tuple[list[Candidates], float]:
    start = time.perf_counter()
    found = reranker.candidates(request)
    return found, round(time.perf_counter() - start, 2)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", nargs="+", required=True, help="the main model (or ensemble)")
    parser.add_argument("--rerank", nargs="+", required=True, help="the rescoring checkpoints")
    parser.add_argument("--src", required=True, help="valid sources, one a line")
    parser.add_argument("--ref", required=True, help="their references")
    parser.add_argument("--n-best", type=int, default=5, help="hypotheses per line (decode.n_best)")
    parser.add_argument("--step", type=float, default=0.05, help="the weight grid's step")
    parser.add_argument("--test-src", help="test sources: BLEU once with the chosen weights")
    parser.add_argument("--test-ref", help="their references")
    parser.add_argument("--device", default="auto")
    parser.add_argument("overrides", nargs="*", help="nmt-translate overrides (decode.*=...)")
    args = parser.parse_args(argv)
    if (args.test_src is None) != (args.test_ref is None):
        raise NMTError("give both --test-src and --test-ref, or neither")
    for path in [*args.ckpt, *args.rerank]:  # a list option takes the overrides after it too
        if "=" in path and not Path(path).exists():
            raise NMTError(
                f"{path}: not a checkpoint; put key=value overrides before --ckpt and --rerank, "
                "or after another option"
            )

    overrides = [
        f"ckpt={_paths(args.ckpt)}", f"rerank={_paths(args.rerank)}",
        f"decode.n_best={args.n_best}", *args.overrides,
    ]  # fmt: skip
    if args.device != "auto":
        overrides.append(f"device={args.device}")
    cfg = compose_config("translate", overrides)  # every setting is checked before any work
    valid = _read_pair(args.src, args.ref)
    test = _read_pair(args.test_src, args.test_ref) if args.test_src else None
    reranker = Reranker.from_command(cfg)
    count = 1 + len(reranker.rerankers)
    alone = [1.0] + [0.0] * (count - 1)  # the main model's own 1-best

    # the command's decode settings and target language, as nmt-translate would search with them
    found, seconds = _candidates(reranker, Request(valid[0], cfg.decode, tgt_lang=cfg.tgt_lang))
    log.info("valid: %d n-best lists in %.1f s; searching the weights", len(found), seconds)
    tuned = tune_weights(found, ChoiceBleu(found, valid[1]), args.step)
    weights = tuned.weights
    shown = "rerank_weights=[" + ",".join(repr(w) for w in weights) + "]"
    command = ["nmt-translate", *overrides[:2], shown, *overrides[2:]]
    report: dict = {
        "weights": weights,
        "rerank_weights": shown,
        "command": " ".join(command),
        "features": [f"main ({', '.join(args.ckpt)}): normalised score, length penalty "
                     f"{cfg.decode.length_penalty.value}"]
        + [f"rerank[{i}] ({path}): log-probability per piece" for i, path in
           enumerate(args.rerank)],
        "decode": f"{cfg.decode.describe()}, n_best {cfg.decode.n_best}",
        "grid": {"step": args.step, "points": tuned.tried},
        "valid": {
            "src": args.src,
            "lines": len(found),
            "bleu_main": _bleu(_chosen(found, alone), valid[1]),
            "bleu_reranked": _bleu(_chosen(found, weights), valid[1]),
            "bleu_equal_weights": _bleu(_chosen(found, [1.0] * count), valid[1]),
            "seconds": seconds,
        },
    }  # fmt: skip
    if test is not None:
        found, seconds = _candidates(reranker, Request(test[0], cfg.decode, tgt_lang=cfg.tgt_lang))
        report["test"] = {
            "src": args.test_src,
            "lines": len(found),
            "bleu_main": _bleu(_chosen(found, alone), test[1]),
            "bleu_reranked": _bleu(_chosen(found, weights), test[1]),
            "seconds": seconds,
        }
    report["signature"] = str(METRIC.get_signature())
    report["device"] = str(reranker.translator.device)
    return report


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    try:
        print(json.dumps(main(), ensure_ascii=False))
    except NMTError as err:
        print(f"rerank_tune: error: {err}", file=sys.stderr)
        sys.exit(2)
