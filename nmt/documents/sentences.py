"""A text's sentences, and the text put back together around their translations.

A model trained on sentences, given a paragraph, translates one long sentence: it drops
sentences, or stops after the first (held-out Multi30k sentences joined three a line: 9.0 BLEU
where one a line gives 28.7). `split` cuts a text into its sentences with sentencex, a
multilingual rule-based splitter (Wikimedia's): chosen over pysbd and sentence-splitter by
`scripts/bench_splitter.py` (docs/documents.md): as many paragraphs split right as the best of
them, 5 us a paragraph where pysbd takes 500 to 1,000 us (a tenth of a translation's time or
more), and CJK full stops, which sentence-splitter does not take.

    parts = split("Ein Hund läuft.  Er bellt!", "de")
    parts.sentences                     # ["Ein Hund läuft.", "Er bellt!"]
    parts.join(["A dog runs.", "It barks!"])   # "A dog runs.  It barks!"

`Split.join` puts the translations where the sentences were, with the text's own whitespace
between them (two spaces, a tab, a line break), and around them. A text of one sentence is
that text: it is translated as it always was, byte for byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sentencex

_EDGE = re.compile(r"^(\s*)(.*?)(\s*)$", re.DOTALL)


@dataclass(frozen=True)
class Split:
    """A text as its sentences and the whitespace around them: text == gaps[0] + sentences[0] +
    gaps[1] + ... + sentences[-1] + gaps[-1] (len(gaps) = len(sentences) + 1)."""

    sentences: list[str]
    gaps: list[str]

    def join(self, translations: list[str]) -> str:
        """The translations in the sentences' places, the text's whitespace between them."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations of {len(self.sentences)} sentences")
        out = [self.gaps[0]]
        for text, gap in zip(translations, self.gaps[1:]):
            out += [text, gap]
        return "".join(out)


def split(text: str, language: str) -> Split:
    """The sentences of `text` in `language` (an ISO 639 code; sentencex has rules for many and
    a fallback for the others). A text with one sentence (or none: blank) is one part, itself
    whole, with no whitespace taken off."""
    pieces = [p for p in sentencex.segment(language or "en", text)] if text.strip() else []
    if len(pieces) <= 1:
        return Split([text], ["", ""])
    sentences, gaps, pending = [], [], ""
    for piece in pieces:
        lead, body, trail = _EDGE.match(piece).groups()
        if not body:  # whitespace alone: it belongs to the gap
            pending += piece
            continue
        gaps.append(pending + lead)
        sentences.append(body)
        pending = trail
    gaps.append(pending)
    if len(sentences) <= 1:
        return Split([text], ["", ""])
    return Split(sentences, gaps)
