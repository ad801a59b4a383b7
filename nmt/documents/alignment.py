"""Word alignments from a translation's cross-attention: which source word each target word
translates, over whitespace words, as Moses writes them ("0-0 1-2 2-1": source-target).

Each target piece is linked to the source piece it attends to most (Garg et al. 2019 read
alignments off the attention the same way, without training for them), and a source word and a
target word are aligned when any of their pieces are. Pieces belong to words by sentencepiece's
word mark (a piece that starts with "▁" starts a word); the target tag a multilingual model puts
before the source and the end of sentence belong to none.

Which attention: `layer` (0 .. L-1, negative from the top, None the mean of the layers), the
mean of its heads, and with `shift` the attention of the step that reads the target piece rather
than the step that wrote it (a Transformer's decoder attends to the source of the next piece as
it reads the current one). The defaults were chosen by measurement: the share of tagged words
whose translation lands inside their tags (`scripts/bench_markup.py`,
docs/documents.md). A recurrent decoder has one layer and one head; `shift` is then read the
same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nmt.translation.translator import Translation

# measured (docs/documents.md): the first layer read both ways puts the tagged word's translation
# inside its tags most often, in a Transformer (0.94 of lines, the top layer one way 0.80) and in
# a GRU's one layer (0.79 against 0.44 one way); reading the next step (shift) is worse in both
DEFAULT_LAYER = 0
DEFAULT_SHIFT = False
DEFAULT_BOTH = True
# a head trained to align (train.guided_alignment) is read both ways too: the Multi30k GRU put the
# tagged word inside its tags in 0.980 of lines so, 0.970 one way (docs/documents.md)
TAUGHT_BOTH = True
WORD_START = "\u2581"  # sentencepiece's word mark


def piece_words(pieces: list[str], skip_first: int = 0, words: int | None = None) -> list[int]:
    """The word of each piece (-1 for the first `skip_first` pieces, a target tag, and for the
    end of sentence "</s>"). With `words` (how many whitespace words the text has), indices are
    kept below it: a normalisation that split a word in two does not point past the text."""
    out, word = [], -1
    for k, piece in enumerate(pieces):
        if k < skip_first or piece == "</s>":
            out.append(-1)
            continue
        if word < 0 or piece.startswith(WORD_START):
            word += 1
        out.append(word if words is None else min(word, words - 1))
    return out


@dataclass(frozen=True)
class Reading:
    """Which attention an alignment is read off: `layer` (None: the mean of the layers), `head`
    (None: the mean of the layer's heads), `both` directions' links or the target's alone, and
    `shift` (see the module's notes)."""

    layer: int | None = DEFAULT_LAYER
    head: int | None = None
    both: bool = DEFAULT_BOTH
    shift: bool = DEFAULT_SHIFT


UNTAUGHT = Reading()  # the reading measured best for attention not trained to align


def reading_of(taught: tuple[int, int] | None) -> Reading:
    """How a model's alignments are read: off its head trained to align, (layer, head)
    (`TextFacts.taught`, train.guided_alignment), else as measured best untaught."""
    if taught is None:
        return UNTAUGHT
    return Reading(layer=taught[0], head=taught[1], both=TAUGHT_BOTH)


def word_alignment(
    translation: Translation, skip_source: int = 0, reading: Reading = UNTAUGHT
) -> list[tuple[int, int]]:
    """(source word, target word) pairs of a translation, sorted; [] without attention maps.
    `skip_source`: pieces before the source's own (its target tag). With `reading.both`, each
    source piece is also linked to the target piece that attends to it most (the union of both
    directions' links)."""
    layer, head, shift, both = reading.layer, reading.head, reading.shift, reading.both
    maps = translation.maps
    if maps is None or not translation.tgt_pieces:
        return []
    layers, heads = maps.size(1), maps.size(2)
    index = None if layer is None else max(-layers, min(layer, layers - 1))
    head = None if head is None else max(-heads, min(head, heads - 1))
    # (T, S) as numpy: a sentence's few small operations cost a tenth of torch's there
    weights = translation.attention(index, head).float().numpy()
    src_words = len(translation.source.split())
    tgt_words = len(translation.text.split())
    if not src_words or not tgt_words:
        return []
    src = piece_words(translation.src_pieces, skip_source, src_words)
    tgt = piece_words(translation.tgt_pieces, 0, tgt_words)
    steps = weights.shape[0]
    rows = [t + 1 if shift and t + 1 < steps else t for t in range(len(tgt))]
    read = weights[rows]  # (T, S): each target piece's row
    keep_src = [k for k, s in enumerate(src) if s >= 0]
    keep_tgt = [k for k, w in enumerate(tgt) if w >= 0]
    if not keep_src or not keep_tgt:
        return []
    sub = read[np.ix_(keep_tgt, keep_src)]  # (T', S')
    pairs = {(src[keep_src[s]], tgt[keep_tgt[t]]) for t, s in enumerate(sub.argmax(1).tolist())}
    if both:
        pairs |= {
            (src[keep_src[s]], tgt[keep_tgt[t]]) for s, t in enumerate(sub.argmax(0).tolist())
        }
    return sorted(pairs)


def moses(pairs: list[tuple[int, int]]) -> str:
    """Pairs as Moses writes them: "i-j" source-target, space-separated."""
    return " ".join(f"{i}-{j}" for i, j in pairs)
