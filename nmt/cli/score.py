"""nmt-score: what a model thinks of given translations (`Translator.score`), N lines in, N lines
out in the same order.

Input: `src=FILE hyp=FILE` (line i of hyp translates line i of src), or `source<TAB>translation`
lines from `tsv=FILE` or standard input. Output, on standard output, one line per pair:

    tsv:    score<TAB>normalized                     (pieces=true: <TAB>pieces<TAB>their scores)
    jsonl:  {"score": ..., "normalized": ...}        (pieces=true: "pieces", "piece_scores")

`score` is the total log-probability of the translation, its EOS included; `normalized` is that
with decode's length penalty (what beam search ranks by); pieces and their scores are space
separated, EOS last. A score of -inf (a piece outside decode.shortlist) is "-inf" in TSV and null
in JSON. Files are checked (present, same line count, TSV tabs) before the model is loaded.
For a model trained with target tags, `tgt_lang=LANG` says which language the translations are
in (as nmt-translate's `tgt_lang`): its tag is put before each source.
"""

from __future__ import annotations

import io
import json
import math
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TextIO

from nmt.errors import NMTError
from nmt.run_config import ScoreFormat, ScoreRunConfig
from nmt.translation.scoring import Scored
from nmt.translation.translator import Translator

CHUNK_LINES = 10_000  # pairs scored at a time: sorted by length within, memory bounded


def _open(path: str, key: str) -> TextIO:
    """A UTF-8 text file that splits lines on '\\n' only and never fails on bad bytes."""
    if not Path(path).is_file():
        raise NMTError(f"{key}={path}: no such file")
    return open(path, encoding="utf-8-sig", errors="replace", newline="\n")  # noqa: SIM115


def _count(path: str, key: str) -> int:
    with _open(path, key) as f:
        return sum(1 for _ in f)


def _split(line: str, number: int, where: str) -> tuple[str, str]:
    source, tab, translation = line.rstrip("\n").partition("\t")
    if not tab:
        raise NMTError(f"{where} line {number} has no tab: expected source<TAB>translation")
    return source, translation


def _check_tsv(path: str) -> None:
    with _open(path, "tsv") as f:
        for number, line in enumerate(f, 1):
            _split(line, number, path)


def _pairs(cfg: ScoreRunConfig, stack: ExitStack) -> Iterator[tuple[str, str]]:
    """The (source, translation) pairs of the input, in order."""
    if cfg.src is not None:
        sources = stack.enter_context(_open(cfg.src, "src"))
        translations = stack.enter_context(_open(cfg.hyp, "hyp"))
        return ((s.rstrip("\n"), t.rstrip("\n")) for s, t in zip(sources, translations))
    if cfg.tsv is not None:
        lines, where = stack.enter_context(_open(cfg.tsv, "tsv")), cfg.tsv
    elif hasattr(sys.stdin, "buffer"):
        lines, where = io.TextIOWrapper(sys.stdin.buffer, "utf-8-sig", "replace", "\n"), "stdin"
        stack.callback(lines.detach)  # leave sys.stdin open
    else:  # a stand-in without bytes (tests)
        lines, where = sys.stdin, "stdin"
    return (_split(line, number, where) for number, line in enumerate(lines, 1))


def _chunks(pairs: Iterator[tuple[str, str]]) -> Iterator[list[tuple[str, str]]]:
    chunk = []
    for pair in pairs:
        chunk.append(pair)
        if len(chunk) == CHUNK_LINES:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _number(x: float) -> float | None:
    return round(x, 6) if math.isfinite(x) else None  # JSON has no -inf


def format_score(scored: Scored, form: ScoreFormat, pieces: bool) -> str:
    """One output line (see the module's notes)."""
    if form == ScoreFormat.jsonl:
        record: dict = {"score": _number(scored.score), "normalized": _number(scored.normalized)}
        if pieces:
            record["pieces"] = scored.pieces
            record["piece_scores"] = [_number(x) for x in scored.piece_scores]
        return json.dumps(record, ensure_ascii=False)
    fields = [f"{scored.score:.6f}", f"{scored.normalized:.6f}"]
    if pieces:
        fields += [" ".join(scored.pieces), " ".join(f"{x:.6f}" for x in scored.piece_scores)]
    return "\t".join(fields)


def score_main(cfg: ScoreRunConfig) -> None:
    if cfg.src is not None:  # before the model loads: a mismatch is found in a second
        counts = _count(cfg.src, "src"), _count(cfg.hyp, "hyp")
        if counts[0] != counts[1]:
            raise NMTError(
                f"src={cfg.src} has {counts[0]} lines but hyp={cfg.hyp} has {counts[1]}: "
                "give one translation per source line"
            )
    elif cfg.tsv is not None:
        _check_tsv(cfg.tsv)
    translator = Translator.from_command(cfg, cfg.decode, cfg.device)
    translator.tags.ids(cfg.tgt_lang)  # an unknown tgt_lang fails before any input is read
    first = 1
    with ExitStack() as stack:
        for chunk in _chunks(_pairs(cfg, stack)):
            sources, translations = [s for s, _ in chunk], [t for _, t in chunk]
            results = translator.score(
                sources, translations, first_line=first, tgt_lang=cfg.tgt_lang
            )
            sys.stdout.write(
                "".join(format_score(r, cfg.format, cfg.pieces) + "\n" for r in results)
            )
            sys.stdout.flush()
            first += len(chunk)
