"""Texts in a format, translated: what nmt-translate's lines, nmt-evaluate's sentences and
nmt-serve's texts go through (`nmt.documents.job` for the loop).

    translate_texts(translator, Request(["Ein Hund läuft. Er bellt."], decode), TextOptions())
    translate_texts(translator, Request(["Ein <b>Hund</b>."], decode),
                    TextOptions(format=TextFormat.html))

A text is read as its format says (`read_block`): plain text as it is, HTML and XML with their
inline tags lifted out as codes, Markdown with its inline syntax; then its protected spans
(`nmt.documents.protect`). Its outer whitespace is dropped, as the translator drops it. N texts
in, N results out, in order; a blank text gives a blank result.
"""

from __future__ import annotations

from nmt.config import TextFormat, TextOptions
from nmt.documents.blocks import BlockResult, protected
from nmt.documents.inline import Block, lift_markup, plain
from nmt.documents.job import TextJob, run_job
from nmt.documents.markdown import lift_markdown
from nmt.errors import NMTError
from nmt.translation.request import Request
from nmt.translation.translator import Translator

# the formats of one text (a line, an HTTP text); the others are files' (nmt.documents.files)
TEXT_FORMATS = (TextFormat.text, TextFormat.html, TextFormat.xml, TextFormat.markdown)


def read_block(text: str, fmt: TextFormat, options: TextOptions) -> Block:
    """One text in `fmt` as a block of text and codes, its protected spans lifted too."""
    match fmt:
        case TextFormat.text | TextFormat.auto:
            block = plain(text)
        case TextFormat.html:
            block = lift_markup(text)
        case TextFormat.xml:
            block = lift_markup(text, xml=True)
        case TextFormat.markdown:
            block = lift_markdown(text)
        case TextFormat.srt:  # a subtitle's text: its tags (<i>, <font>), no entities
            block = lift_markup(text, entities=False)
        case _:
            raise NMTError(
                f"format={fmt.value} is a format of files (input=FILE output=FILE); a text is "
                f"one of {', '.join(f.value for f in TEXT_FORMATS)}"
            )
    return protected(block, options)


def read_texts(texts: list[str], options: TextOptions) -> list[Block]:
    """Each text read as a block in `options.format` (`read_block`), its outer whitespace
    dropped."""
    return [read_block(text.strip(), options.format, options) for text in texts]


def text_job(translator: Translator, request: Request, options: TextOptions) -> TextJob:
    """The text loop of `request.texts`, each read in its format (`options.format`; auto:
    text), searched with the request's settings, target language and flags
    (`nmt.documents.job.TextJob`)."""
    blocks = read_texts(request.texts, options)
    return TextJob.for_translator(translator, blocks, request, options)


def translate_texts(
    translator: Translator, request: Request, options: TextOptions
) -> list[BlockResult]:
    """Each of `request.texts` translated in its format (`text_job`, driven by `run_job`)."""
    return run_job(translator, text_job(translator, request, options))
