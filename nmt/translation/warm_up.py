"""A translator warmed up: one short search at load, so that the first request is answered as
fast as the next ones.

    seconds = warm_up(translator)    # nmt-serve and the prompt of nmt-translate, at load
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from nmt.config import Strategy
from nmt.tokenizer import EOS
from nmt.translation.request import Prepared, PreparedText, Request, Segment
from nmt.translation.translator import Translator

log = logging.getLogger(__name__)

WARM_UP_TEXT = "Ein Hund läuft."  # any short text: what a first search builds does not depend on it


def warm_up(translator: Translator) -> float:
    """Translate one short text with the default settings (and its attention maps), so that
    the first request does not pay for what a first search builds: a recurrent model's piece
    tables, an int8 copy, torch's kernels and memory pools (on a small GRU a first beam-5
    sentence took 60 ms, the same sentence next 15 ms; 94 and 16 ms in int8). With
    decode.compile, greedy and beam search of one text and of two: a compiled step has
    graphs for one sentence and for several, and beam search's first step is one of its own
    (nmt.models.compiled), each compiled at its first use, so that no request, whatever
    strategy it asks for, waits for a compilation; and sources of no piece and of one (a text
    of characters the tokenizer drops, a word): torch.compile specializes a graph on sizes 0
    and 1, so those are graphs of their own. nmt-serve and the prompt of nmt-translate call
    it at load. Returns its seconds."""
    start = time.perf_counter()
    languages = translator.tags.languages  # a model with several needs one named
    tgt_lang = languages[0] if languages else None
    translator.translate_full([WARM_UP_TEXT], tgt_lang=tgt_lang)
    if translator.decode.compile:
        tag = translator.tags.ids(tgt_lang)
        piece = next(iter(translator.vocabs.src.encode([WARM_UP_TEXT])[0]), EOS)
        short = [PreparedText(Segment(WARM_UP_TEXT), tag + ids + [EOS], [], []) for ids in
                     ([], [piece])]  # fmt: skip
        for strategy in (Strategy.greedy, Strategy.beam):
            settings = replace(translator.decode, strategy=strategy, n_best=1)
            for texts in ([WARM_UP_TEXT], [WARM_UP_TEXT, WARM_UP_TEXT + " Er bellt."]):
                translator.translate_full(texts, decode=settings, tgt_lang=tgt_lang)
            for text in short:
                translator.run(Prepared([text], Request([], settings).settings, []))
    seconds = time.perf_counter() - start
    log.info("warmed up in %.0f ms", seconds * 1000)
    return seconds
