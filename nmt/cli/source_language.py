"""nmt-translate src_lang=auto: each line's language identified (`nmt.translation.language_id`).

A model that reads a code for its sources' language (an NLLB-200, M2M-100 or mBART-50 import:
`DataConfig.language_codes`) reads each line as the language found, its own code for it put
before the line (`nmt.language_codes` finds it: 'de' is NLLB-200's 'deu_Latn'). A line in no
language it reads is read as the model's default source language, with a warning naming the
line. A model that reads no code (one trained by nmt on one source language) is told nothing:
src_lang=auto only checks, and a line of 5+ words surely in another language is named in a
warning (its translation will be poor).

Lines go to the search in runs of one language, in order: a file in one language is still one
search a chunk; a file that changes language every line is one search a line (slower, the same
translations).
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Callable

from nmt.language_codes import matches, name, tag
from nmt.translation import language_id
from nmt.translation.translator import Translator

log = logging.getLogger(__name__)

AUTO = "auto"  # src_lang=auto
# a line is said to be in another language than the model reads from this many words and this
# confidence on: scripts/bench_language_id.py found every 5+ word Multi30k test sentence guessed
# at 0.8 or more right (91% of them are), and 3 in 4,000 wrong at 0.5
CHECK_WORDS = 5
CHECK_CONFIDENCE = 0.8

# lines, the number of the first, their language (a model's code; None: the translator's) ->
# their output lines
Translate = Callable[[list[str], int, "str | None"], list[str]]


def by_language(
    translator: Translator,
    lines: list[str],
    first: int,
    translate: Translate,
    sources: list[str] | None = None,
) -> list[str]:
    """The output lines of `lines` (numbered from `first`): each run of lines of one language
    translated by `translate` with its code, or for a model that reads no code, all of them
    at once after the check (see the module's notes). `sources`: the text of each line that is
    identified (its source column, of a line of TSV columns); None: the lines."""
    sources = lines if sources is None else sources
    offered = translator.tags.source_codes
    if not offered:
        check_language(translator.facts.language, sources, first)
        return translate(lines, first, None)
    served = served_languages(tuple(offered))
    codes: list[str | None] = []
    for number, text in enumerate(sources, first):
        # a blank line's translation is blank whatever its code: it joins the run it is in
        blank = not text.strip()
        codes.append((codes[-1] if codes else None) if blank else line_code(text, served, number))
    out: list[str] = []
    start = 0
    for code, run in itertools.groupby(codes):
        stop = start + len(list(run))
        out += translate(lines[start:stop], first + start, code)
        start = stop
    return out


def line_code(line: str, served: dict[str, str], number: int) -> str | None:
    """The model's code for the language of `line`, a line not blank (`served`: the identifier's
    labels -> the model's codes); None, with a warning, when it reads no language found."""
    guess = language_id.detect(line, among=served)
    code = served.get(guess.language) if guess is not None else None
    if guess is not None and code is None:
        log.warning("line %d looks %s (%.2f), which this model does not read: read as its "
                    "default language", number, guess.language, guess.confidence)  # fmt: skip
    return code


def check_language(language: str | None, lines: list[str], first: int) -> None:
    """Warn of each line of 5+ words surely in another language than `language` (the one the
    model reads, its data.src_lang; None: unknown, nothing checked)."""
    if language is None or name(language) == language:
        return  # a name the table cannot read ('xx', 'german'): nothing to compare with
    for number, line in enumerate(lines, first):
        if len(line.split()) < CHECK_WORDS:
            continue  # a short line's guess is too often wrong to warn of
        guess = language_id.detect(line)
        sure = guess is not None and guess.confidence >= CHECK_CONFIDENCE
        if sure and not matches(guess.language, [language]):
            log.warning("line %d looks %s (%.2f), and this model reads %s", number,
                        guess.language, guess.confidence, language)  # fmt: skip


@functools.lru_cache(maxsize=8)
def served_languages(offered: tuple[str, ...]) -> dict[str, str]:
    """The identifier's labels ('de') a model with the codes `offered` reads, each with its code
    for it: NLLB-200's 'deu_Latn', mBART-50's 'de_DE', M2M-100's 'de' (`nmt.language_codes`). A
    language the table finds several codes for, and cannot choose between, is left out."""
    served: dict[str, str] = {}
    for code in offered:
        label = tag(code).split("-")[0]  # the language alone: the identifier names no script
        if label not in served and len(found := matches(label, offered)) == 1:
            served[label] = found[0]
    return served
