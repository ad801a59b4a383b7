"""nmt-translate's confidence columns (`confidence=true`): each line's P(good), flags and word
probabilities after its translation (`nmt.translation.confidence`), flagged lines translated
again (`retry_flagged=true`), and the list of lines to check (`review=FILE`)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from nmt.config import Strategy, TextOptions
from nmt.documents.blocks import BlockResult
from nmt.documents.texts import translate_texts
from nmt.translation.confidence import Calibration, Confidence, combine, judge_all
from nmt.translation.request import Request
from nmt.translation.translator import Translator

log = logging.getLogger(__name__)


def line_confidences(
    translator: Translator,
    results: list[BlockResult],
    calibration: Calibration,
    tgt_lang: str | None,
    src_lang: str | None = None,
) -> list[Confidence]:
    """Each line's confidence, from its sentences': read off their searches where they carry
    the statistics (`statistics=calibration.temperature` in `translate_texts`), else by one
    teacher-forced pass over all of them (`tgt_lang` and `src_lang` as they were asked)."""
    sentences = [t for r in results for t in r.sentences if r.failure is None]
    measured = iter(judge_all(translator, sentences, calibration, tgt_lang, src_lang))
    return [
        combine([next(measured) for _ in r.sentences] if r.failure is None else []) for r in results
    ]


def retry_flagged(
    translator: Translator,
    request: Request,
    options: TextOptions,
    calibration: Calibration,
    done: tuple[list[BlockResult], list[Confidence]],
) -> None:
    """The flagged lines of `request` translated again with RETRY's settings; the likelier good
    one is kept (in place in `done`'s results and confidences)."""
    results, found = done
    flagged = [i for i, c in enumerate(found) if c.flags]
    if not flagged:
        return
    decode = request.decode
    again = replace(decode, **RETRY, beam_size=max(decode.beam_size, 8))
    texts = [request.texts[i] for i in flagged]
    redone = translate_texts(translator, replace(request, texts=texts, decode=again), options)
    judged = line_confidences(translator, redone, calibration, request.tgt_lang, request.src_lang)
    for i, result, confidence in zip(flagged, redone, judged):
        if result.failure is None and confidence.sentence > found[i].sentence:
            results[i], found[i] = result, confidence
            log.info("line %d: translated again (%s), kept", request.first_line + i,
                     ", ".join(found[i].flags) or "no flag left")  # fmt: skip


# a flagged line's second search: one that repeats or runs on is held back from it
RETRY = {"strategy": Strategy.beam, "no_repeat_ngram": 3, "repetition_penalty": 1.2}


REVIEW_BELOW = 0.5  # review=FILE lists the lines less likely good than this, and flagged ones


def write_review(path: Path, sources: list[str], rows: list[str], alignments: bool) -> int:
    """review=FILE: `line<TAB>P(good)<TAB>flags<TAB>source<TAB>translation` of each line to
    check (P(good) under REVIEW_BELOW, or flagged), least confident first; how many. A line from
    the translation memory (flag "memory") is not one to check."""
    column = 2 if alignments else 1  # P(good)'s column in an output row
    found = []
    for n, (source, row) in enumerate(zip(sources, rows), 1):
        cells = row.split("\t")
        p, flags = float(cells[column]), cells[column + 1]
        if flags != MEMORY and (p < REVIEW_BELOW or flags != "-"):
            found.append((p, n, flags, source, cells[0]))
    found.sort()
    text = "".join(f"{n}\t{p:.3f}\t{f}\t{s}\t{t}\n" for p, n, f, s, t in found)
    Path(path).write_text(text, encoding="utf-8")
    return len(found)


MEMORY = "memory"  # the flag of a line written from the translation memory (tm=FILE)


def from_memory(text: str) -> str:
    """The confidence columns of a translation taken from the memory (tm=FILE): P(good) 1 and
    each word 1 (it is the memory's approved text, not a guess of the model's), and the flag
    "memory", so that a reader of the columns tells it from a translation the model was sure
    of. `write_review` does not list it."""
    words = len(text.split())
    return confidence_columns(Confidence(1.0, [1.0] * words, [], [MEMORY], 100.0, []))


def confidence_columns(c: Confidence) -> str:
    """P(good), the flags (comma-separated, "-" for none), each word's probability."""
    words = " ".join(f"{w:.2f}" for w in c.words)
    return f"{c.sentence:.3f}\t{','.join(c.flags) or '-'}\t{words}"
