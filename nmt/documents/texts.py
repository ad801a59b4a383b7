"""Texts in a format, translated: what nmt-translate's lines, nmt-evaluate's sentences and
nmt-serve's texts go through (`nmt.documents.blocks` for the work).

    translate_texts(translator, ["Ein Hund läuft. Er bellt."], decode, TextOptions())
    translate_texts(translator, ["Ein <b>Hund</b>."], decode, TextOptions(format=TextFormat.html))

A text is read as its format says (`read_block`): plain text as it is, HTML and XML with their
inline tags lifted out as codes, Markdown with its inline syntax; then its protected spans
(`nmt.documents.protect`). Its outer whitespace is dropped, as the translator drops it. N texts
in, N results out, in order; a blank text gives a blank result.
"""

from __future__ import annotations

from nmt.config import DecodeConfig, TextFormat, TextOptions
from nmt.documents.blocks import BlockResult, protected, translate_blocks
from nmt.documents.inline import Block, lift_markup, plain
from nmt.documents.markdown import lift_markdown
from nmt.errors import NMTError

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
        case _:
            raise NMTError(
                f"format={fmt.value} is a format of files (input=FILE output=FILE); a text is "
                f"one of {', '.join(f.value for f in TEXT_FORMATS)}"
            )
    return protected(block, options)


def translate_texts(
    translator,
    texts: list[str],
    decode: DecodeConfig,
    options: TextOptions,
    tgt_lang: str | None = None,
    first: int = 1,
    noun: str = "line",
    statistics: float | None = None,
) -> list[BlockResult]:
    """Each text translated in its format (`options.format`; auto: text); `statistics` as
    `translate_blocks`'."""
    blocks = [read_block(text.strip(), options.format, options) for text in texts]
    return translate_blocks(translator, blocks, decode, options, tgt_lang, first, noun,
                            statistics)  # fmt: skip
