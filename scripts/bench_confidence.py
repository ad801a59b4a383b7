"""Confidence measured: calibration fitted on a validation split, judged on test splits, flags on
constructed degenerate outputs, and what it costs, printed as JSON.

    python scripts/bench_confidence.py runs/NAME/checkpoints/best \\
        --valid-src val.de --valid-ref val.en \\
        --test-src test_2016_flickr.de --test-ref test_2016_flickr.en [--test-src ...]

- `fit`: the temperature chosen on valid and the pieces' token ECE at 1 and at it.
- `tests`: per test split, `nmt.translation.confidence.quality_report`: Spearman's rho of the
  sentence confidence and of TP (mean log-probability per piece) against sentence chrF, the
  sentence confidence's ECE for "good" (chrF >= 50), the chrF gap of the 10% least confident,
  the token ECE before and after the temperature.
- `flags`: on the first test split, the share flagged of constructed repetitions (a bigram of
  the translation said four more times), copies (the source as its translation), truncations
  (the first third of the words), of the references (clean by construction: false flags) and
  of the model's own translations (some of which are degenerate).
- `cost`: on the first test split, medians of `--repeats`, one torch thread, the checkpoint's
  decode settings: seconds to translate it; to measure its confidence after, by teacher forcing
  (`measure`, what a caller with only the texts does); and to translate it with the confidence
  read off the search's own steps (`Request.statistics`, then `judge_all`: what nmt-translate,
  the documents and the server do). Each ratio is over plain translation.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from nmt.data.splits import read_lines
from nmt.device import describe
from nmt.metrics import median_seconds
from nmt.translation.confidence import fit, judge_all, measure, quality_report, token_eces
from nmt.translation.request import Request
from nmt.translation.translator import Translator, raise_failure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("--valid-src", type=Path, required=True)
    parser.add_argument("--valid-ref", type=Path, required=True)
    parser.add_argument("--test-src", type=Path, action="append", required=True)
    parser.add_argument("--test-ref", type=Path, action="append", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    translator = Translator.from_checkpoint(args.ckpt, device="cpu")
    decode = translator.decode
    report: dict = {
        "checkpoint": args.ckpt,
        "machine": describe(torch.device("cpu")),
        "decode": {"strategy": decode.strategy.value, "beam_size": decode.beam_size},
    }
    fitted = fit(translator, read_lines(args.valid_src), read_lines(args.valid_ref))
    calibration = fitted.calibration
    report["fit"] = fitted.report | {"length_bounds": [calibration.flags.low,
                                                       calibration.flags.high]}  # fmt: skip
    report["tests"] = {}
    first = None
    for src_path, ref_path in zip(args.test_src, args.test_ref):
        src, ref = read_lines(src_path), read_lines(ref_path)
        out = translator.translate(src)
        found = measure(translator, src, out, calibration)
        eces = token_eces(translator, src, out, ref, calibration)
        report["tests"][src_path.name] = quality_report(found, out, ref, eces)
        first = first or (src, out, ref)
    src, out, ref = first
    repeated, truncated = [], []
    for text in out:
        words = text.split()
        gram = " ".join(words[1:3]) if len(words) >= 3 else text
        repeated.append(" ".join([*words[:3], *[gram] * 4, *words[3:]]))
        truncated.append(" ".join(words[: max(1, len(words) // 3)]))
    checks = {"repetitions": repeated, "copies": src, "truncations": truncated, "references": ref,
              "translations": out}  # fmt: skip
    flags = {}
    for name, texts in checks.items():
        found = measure(translator, src, texts, calibration)
        flags[name] = round(sum(bool(c.flags) for c in found) / len(found), 4)
    report["flags"] = flags
    t_translate = median_seconds(lambda: translator.translate(src), args.repeats)
    t_teacher = median_seconds(lambda: measure(translator, src, out, calibration), args.repeats)

    def read_off_the_search() -> list:
        request = Request(src, decode, statistics=calibration.temperature)
        done = raise_failure(translator.run(translator.prepare(request)), request)
        return judge_all(translator, done, calibration)

    t_search = median_seconds(read_off_the_search, args.repeats)
    report["cost"] = {
        "translate_s": round(t_translate, 3),
        "teacher_forced_confidence_s": round(t_teacher, 3),
        "teacher_forced_over_translate": round((t_translate + t_teacher) / t_translate, 3),
        "translate_with_confidence_s": round(t_search, 3),
        "with_confidence_over_translate": round(t_search / t_translate, 3),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
