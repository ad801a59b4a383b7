"""Sentences a model skipped, found in its attention and translated on their own.

The splitter misses a boundary with neither punctuation nor a start word ("…mit seinem Schläger
zu treffen Kinder klettern auf eine Wand…"), and a model trained on sentences, given two as one,
translates one of them and drops the other. Its attention shows where: no target piece attends
most to any word of a run of the source (read one way, target to source: read both ways, as
alignments are, every source piece is linked to something). Where a translation leaves
LEAST_SKIPPED source words or more in a row so, and at the run or a word beside it there is a
word that ends training sentences often enough followed by one that starts them
(`nmt.data.starts.SentenceEdges`: EDGE_SHARE of their occurrences each, "treffen" then
"Kinder"), the sentence is cut there and each part translated alone; the parts are checked in
turn, ROUNDS times in all.

Chosen on Multi30k's valid set (`scripts/bench_markup.py --split val`, docs/documents.md), two
GRUs of 1,500 updates, with and without guided alignment: none of the 1,014 sentences one a line
would be cut, nor any sentence of their paragraphs three a line, though the attention skips
three words or more in about 6% of them: the edges keep those whole (cut wherever the skipped
run holds a capital letter, a prototype cut 48 of test2016's sentences, for 1 BLEU less). One
word around the run rather than two lost one paragraph more of those whose first two full stops
were taken off; three, or the whole sentence, or shares of 0.05, lost no fewer. Only sentences
of a text the splitter cut in two or more are checked: a line the splitter leaves whole is
translated as it always was, byte for byte.
"""

from __future__ import annotations

from dataclasses import replace

from nmt.data.starts import SentenceEdges
from nmt.documents.alignment import Reading, word_alignment
from nmt.translation.translator import Translation

LEAST_SKIPPED = 3  # source words in a row that no target piece attends to most
EDGE_SHARE = 0.1  # of its occurrences, the word before the cut ends sentences, the next starts
AROUND = 2  # words before and after the skipped run where the cut may be too
ROUNDS = 2  # checks of a sentence and of the parts cut from it
LEAST_PART = 2  # words in each part


def skipped_run(translation: Translation, skip_source: int, reading: Reading) -> tuple[int, int]:
    """(first word, number of words) of the longest run of source words that no target piece
    attends to most, in `reading`'s attention read one way; (0, 0) without attention maps.
    `skip_source` as `word_alignment`'s."""
    pairs = word_alignment(translation, skip_source, replace(reading, both=False))
    if not pairs:
        return 0, 0
    linked = {s for s, _ in pairs}
    best, run = (0, 0), 0
    for word in range(len(translation.source.split())):
        run = 0 if word in linked else run + 1
        if run > best[1]:
            best = (word - run + 1, run)
    return best


def edge_cuts(sentence: str, edges: SentenceEdges) -> list[int]:
    """The words `sentence` could be cut before: each word that starts EDGE_SHARE or more of
    the training sentences it occurs in, after one with no punctuation that ends EDGE_SHARE or
    more of its own, LEAST_PART words or more from either end. Few sentences have any (2 of
    test2016's 1,000): the others are not read further, nor searched with attention maps."""
    words = sentence.split()
    return [
        k
        for k in range(LEAST_PART, len(words) - LEAST_PART + 1)
        if words[k - 1][-1].isalnum()  # after punctuation: the splitter's to judge
        and edges.end_share(words[k - 1]) >= EDGE_SHARE
        and edges.start_share(words[k]) >= EDGE_SHARE
    ]


def recovery_cut(
    translation: Translation, skip_source: int, reading: Reading, edges: SentenceEdges
) -> int | None:
    """The source word to cut the translated sentence before, if its translation skipped part of
    it where a sentence could have ended (see the module's notes); None to keep it whole, and
    for a translation without attention maps."""
    if not edges or translation.maps is None or translation.failure is not None:
        return None
    cuts = edge_cuts(translation.source, edges)
    if not cuts:
        return None
    first, length = skipped_run(translation, skip_source, reading)
    near = [k for k in cuts if first - AROUND <= k <= first + length + AROUND]
    if length < LEAST_SKIPPED or not near:
        return None
    words = translation.source.split()
    return max(near, key=lambda k: edges.end_share(words[k - 1]) * edges.start_share(words[k]))
