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

Two boundaries sentencex leaves, found as it would find them:

- a full stop before a number ("…landschaft. 2 blonde Mädchen"): sentencex never cuts before a
  digit. The number's first digit is read as a capital letter, and the cut is kept where
  sentencex then makes it, so that its abbreviations still hold ("ca. 3 Stunden", "Nr. 5"),
  except after a number ("am 3. 5 Leute": an ordinal).
- a sentence with no final punctuation before the next ("…in einer Stadt Der Mann hebt…"): a
  word that starts sentences of the model's training text and almost never occurs inside one
  ("Der", "Ein", "Zwei" in German; "The", "A" in English: `nmt.data.starts`, kept with the
  checkpoint) starts a sentence where it follows a word. A model without them (an import) is
  split by sentencex alone. A line in title case ("The Lord of The
  Rings") is not cut this way.

`Split.join` puts the translations where the sentences were, with the text's own whitespace
between them (two spaces, a tab, a line break), and around them. A text of one sentence is
that text: it is translated as it always was, byte for byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sentencex

TITLE_CASE = 2 / 3  # a text with more of its words capitalised than this is in title case
# a text longer than WINDOW characters goes to sentencex in windows of it, each cut kept where
# MARGIN characters of the window follow it (`_sentencex_cuts`)
WINDOW = 4096
MARGIN = 256

# whitespace after a full stop (and closing quotes or brackets) before a digit
_STOP_DIGIT = re.compile(r"""(?<=[.!?…])["'»”’)\]]*(\s+)(?=\d)""")
_WORD = re.compile(r"\S+")


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

    def cut(self, sentence: int, word: int) -> Split:
        """The split with sentence `sentence` cut in two before its whitespace word `word` (from
        0; 0 < word < its number of words), the whitespace there the gap between them."""
        words = list(_WORD.finditer(self.sentences[sentence]))
        text = self.sentences[sentence]
        left, right = words[word - 1].end(), words[word].start()
        sentences = list(self.sentences)
        sentences[sentence : sentence + 1] = [text[:left], text[right:]]
        gaps = list(self.gaps)
        gaps.insert(sentence + 1, text[left:right])
        return Split(sentences, gaps)


def split(text: str, language: str, starts: frozenset[str] = frozenset()) -> Split:
    """The sentences of `text` in `language` (an ISO 639 code; sentencex has rules for many and
    a fallback for the others); `starts`: words that start sentences (`nmt.data.starts`). A text
    with one sentence (or none: blank) is one part, itself whole, with no whitespace taken off."""
    if not text.strip():
        return Split([text], ["", ""])
    cuts = _sentencex_cuts(text, language or "en") | _start_cuts(text, starts)
    if not cuts:
        return Split([text], ["", ""])
    sentences, gaps, pending, last = [], [], "", 0
    for end in [*sorted(cuts), len(text)]:
        lead, body, trail = _edges(text[last:end])
        last = end
        if not body:  # whitespace alone: it belongs to the gap
            pending += lead
            continue
        gaps.append(pending + lead)
        sentences.append(body)
        pending = trail
    gaps.append(pending)
    if len(sentences) <= 1:
        return Split([text], ["", ""])
    return Split(sentences, gaps)


def _edges(piece: str) -> tuple[str, str, str]:
    """A piece's leading whitespace, what is between, and its trailing whitespace (all of it
    leading when it is nothing else). By strip, not a pattern: a lazy middle before trailing
    whitespace reads a run of spaces inside the piece again from each of its spaces."""
    body = piece.strip()
    lead = piece[: len(piece) - len(piece.lstrip())]
    return lead, body, piece[len(lead) + len(body) :]


def _sentencex_cuts(text: str, language: str) -> set[int]:
    """Where sentencex starts a sentence after the first, a number after a full stop read as a
    word with a capital (see the module's notes)."""
    chars = None  # the probe's characters, made once a digit is replaced (linear in the text)
    for match in _STOP_DIGIT.finditer(text):
        k = match.start()  # just after the full stop (its closing quotes come after)
        if k >= 2 and text[k - 1] in ".!?…" and text[k - 2].isdecimal():
            continue  # after an ordinal ("am 3. 5 Leute")
        chars = chars or list(text)
        chars[match.end(1)] = "X"  # the same length: offsets hold
    probe = text if chars is None else "".join(chars)
    if len(probe) <= WINDOW:
        return _segment_starts(probe, language)
    # sentencex's time grows with the square of some texts (100,000 backticks: 2 s, "<!--"
    # 25,000 times: 0.7 s), in one call that holds the GIL: a long text is read in windows,
    # each starting where the one before found a sentence to start, and a window's cuts kept
    # where MARGIN characters of the text follow them in it, so each is decided as in the
    # whole text (sentencex reads a few words around a boundary)
    cuts, start = set(), 0
    while True:
        end = min(len(probe), start + WINDOW)
        found = {start + at for at in _segment_starts(probe[start:end], language)}
        if end == len(probe):
            return cuts | found
        kept = {at for at in found if at <= end - MARGIN}
        cuts |= kept
        start = max(kept, default=end - MARGIN)


def _segment_starts(text: str, language: str) -> set[int]:
    """Where sentencex starts a sentence of `text` after the first."""
    cuts, at = set(), 0
    for piece in sentencex.segment(language, text):
        if at:
            cuts.add(at)
        at += len(piece)
    return cuts


def _start_cuts(text: str, starts: frozenset[str]) -> set[int]:
    """Before each of `starts` that follows a word ending in a letter or digit (no punctuation:
    that is sentencex's to judge), two words or more from either end of its run of words."""
    if not starts:
        return set()
    words = list(_WORD.finditer(text))
    capitals = sum(w.group()[0].isupper() for w in words)
    if len(words) < 4 or capitals > TITLE_CASE * len(words):
        return set()
    cuts, last = set(), 0
    for k in range(2, len(words) - 1):
        word, before = words[k].group(), words[k - 1].group()
        if word in starts and before[-1].isalnum() and k - last >= 2:
            cuts.add(words[k].start())
            last = k
    return cuts
