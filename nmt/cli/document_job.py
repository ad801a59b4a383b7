"""nmt-translate input=page.html output=page.en.html (and .md, .srt, .docx): a document's
segments translated as a file job (`nmt.cli.file_job`, `nmt.documents.files`)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from nmt.cli.file_job import FileJob, show_progress
from nmt.config import TextFormat
from nmt.distributed import Dist
from nmt.documents.files import DocumentFile, translate_segments
from nmt.errors import NMTError
from nmt.run_config import TranslateRunConfig
from nmt.translation.memory import TranslationMemory
from nmt.translation.request import Request
from nmt.translation.translator import Translator


def translate_document(
    translator: Translator, cfg: TranslateRunConfig, document: DocumentFile, settings: dict,
    where: Dist, memory: TranslationMemory | None = None,
) -> None:  # fmt: skip
    """input=page.html output=page.en.html (and .md, .srt, .docx; `nmt.documents.files`): the
    document's segments, one JSON string a line in OUTPUT.segments, are the input of a file job
    like any other (resumable, split among torchrun's processes) whose output, OUTPUT.translated,
    rank 0 writes into the document, then removes both. A segment `memory` (tm=FILE) holds is
    written from it (`nmt.documents.files.translate_segments`)."""
    if cfg.nbest_tsv or cfg.prefix_tsv or cfg.constraints_tsv or cfg.rerank or cfg.alignments:
        raise NMTError(
            f"input={cfg.input} is a document ({document.format.name}): nbest_tsv, prefix_tsv, "
            "constraints_tsv, rerank and alignments apply to a file of lines (format=text)"
        )
    output = Path(cfg.output)
    segments = output.with_name(output.name + ".segments")
    translated = output.with_name(output.name + ".translated")
    # every rank writes the same bytes, under a name of its own renamed into place
    rows = "".join(json.dumps(list(s), ensure_ascii=False) + "\n" for s in document.segments())
    staged = segments.with_name(f".{segments.name}.{socket.gethostname()}.{os.getpid()}")
    staged.write_text(rows, encoding="utf-8")
    os.replace(staged, segments)
    decode = translator.decode
    job = FileJob(
        segments, translated, settings, cfg.chunk_lines, where, show_progress(cfg.progress)
    )

    def translate(lines: list[str], first: int) -> list[str]:
        found = [tuple(json.loads(line)) for line in lines]
        found = [(text, TextFormat(fmt)) for text, fmt in found]
        request = Request([], decode, tgt_lang=cfg.tgt_lang, first_line=first, noun="segment")
        done = translate_segments(translator, found, request, cfg, memory)
        return [json.dumps(t, ensure_ascii=False) for t in done]

    job.run(translate)
    if where.main:
        with open(translated, encoding="utf-8") as rows_out:
            document.write([json.loads(line) for line in rows_out], output)
        translated.unlink()
        segments.unlink(missing_ok=True)
