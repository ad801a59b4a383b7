"""Target phrases as piece sequences: the banned phrases' every spelling (`banned_ids`) and a
constraint's pieces (`constraint_ids`), for the search (`nmt.search.constraints`,
`nmt.search.positive`) and the `Translator`, which checks a request with them before translating.
"""

from __future__ import annotations

import logging
import unicodedata

from nmt.errors import NMTError
from nmt.inputs import clean
from nmt.tokenizer import EOS, UNK, Vocab

log = logging.getLogger(__name__)

# the most piece sequences one banned phrase is blocked as (see `banned_ids`)
MAX_BANNED_FORMS = 256
# marks that attach to the word before them: a constraint starting with one is matched without
# the word start "▁" (with the Unicode classes of closing brackets and final quotes)
ATTACHED = set(".,;:!?%'’”»…-")


def banned_ids(vocab: Vocab, phrases: list[str]) -> list[list[int]]:
    """The target piece sequences that banning `phrases` blocks, each a list of ids.

    A phrase (whitespace collapsed, as every text) is blocked wherever it starts a word: at the
    start of the translation or after a space, where sentencepiece writes it with its leading
    "▁" ("sleeps" -> "▁sleeps"; "a dog" -> "▁a▁dog"). Every way to write that string with
    pieces of the vocabulary is blocked, not only the one sentencepiece would choose (a model may
    produce "▁s" "leeps" as well as "▁sleeps"), up to MAX_BANNED_FORMS sequences per phrase (the
    ones with the fewest pieces, with a warning). So the phrase is blocked also where it starts
    a longer word whose pieces end where it ends ("sleeps" in "▁sleeps" "y").
    Not blocked: the phrase inside a word or after anything but a space (a quote mark, a
    hyphen), its other casings ("Sleeps"), and pieces that cross its last character ("▁sleep"
    "sy"). A phrase the vocabulary cannot write (a character it lacks) cannot appear, and is
    skipped with a warning; a blank phrase is an NMTError naming it."""
    out: list[list[int]] = []
    for phrase in phrases:
        text = clean(phrase)
        pieces = vocab.sp.Encode(text, out_type=str) if text else []
        if not pieces:
            raise NMTError(f"the banned phrase {phrase!r} has no pieces: nothing to ban")
        written = "".join(pieces)  # normalized, with "▁" where a word starts
        if not written.startswith("▁"):  # no dummy prefix in this tokenizer: the word form
            written = "▁" + written
        forms = _segmentations(vocab, written)
        if not forms:
            log.warning("the banned phrase %r cannot be written by the model: skipped", phrase)
        out.extend(forms)
    return out


def constraint_ids(vocab: Vocab, phrase: str, where: str = "") -> list[int]:
    """The target pieces a constraint `phrase` must appear as (whitespace collapsed, as every
    text): sentencepiece's segmentation of it, with the word start "▁" where the tokenizer adds
    one ("a dog" -> "▁a" "▁dog"). A phrase that starts with a mark that attaches to the word
    before it (ATTACHED, closing brackets, final quotes: ", said", "'s", "-based") is taken
    without that word start: its first piece "▁" is dropped, or, where sentencepiece joined "▁"
    to the mark, the text is spelled again without it in the fewest pieces. An NMTError (`where`
    names the text) for a blank phrase and for one that needs pieces the vocabulary lacks
    (pruned, or the bytes of a character it never saw)."""
    text = clean(phrase) if isinstance(phrase, str) else ""
    if not text:
        raise NMTError(f"{where}the constraint {phrase!r} is blank: give a phrase")
    ids = vocab.encode([text])[0]
    written = vocab.sp.Encode(text, out_type=str)
    first = text[0]
    attached = first in ATTACHED or unicodedata.category(first) in ("Pe", "Pf")
    if attached and written and written[0].startswith("▁"):
        if written[0] == "▁":
            ids, written = ids[1:], written[1:]
        else:
            spelled = _segmentations(vocab, "".join(written)[1:])
            if spelled:
                ids = spelled[0]
                written = vocab.id_to_piece(ids)
    if not ids:
        raise NMTError(f"{where}the constraint {phrase!r} has no pieces")
    if UNK in ids:
        lacking = [p for p, i in zip(written, ids) if i == UNK]
        raise NMTError(
            f"{where}the constraint {phrase!r} needs pieces the target vocabulary lacks (the "
            f"model never produces them): {' '.join(dict.fromkeys(lacking))}"
        )
    return ids


def _segmentations(vocab: Vocab, written: str) -> list[list[int]]:
    """Every sequence of the vocabulary's pieces (specials excluded) that spells `written`, the
    fewest pieces first, at most MAX_BANNED_FORMS of them."""
    size = len(written)
    # ends[i]: the (end, id) of every piece that starts at character i
    ends: list[list[tuple[int, int]]] = [[] for _ in range(size)]
    for i in range(size):
        for j in range(i + 1, size + 1):
            piece = vocab.piece_to_id(written[i:j])
            if piece > EOS:  # not PAD, UNK (a piece the vocabulary lacks), BOS or EOS
                ends[i].append((j, piece))
    # complete[i]: the ways to spell written[i:], built from the end, capped as they grow
    complete: list[list[list[int]]] = [[] for _ in range(size)] + [[[]]]
    truncated = False
    for i in range(size - 1, -1, -1):
        ways = [[piece, *rest] for j, piece in ends[i] for rest in complete[j]]
        ways.sort(key=len)
        truncated |= len(ways) > MAX_BANNED_FORMS
        complete[i] = ways[:MAX_BANNED_FORMS]
    if truncated:
        log.warning(
            "the banned phrase %r has more than %d spellings in pieces: only the %d with the "
            "fewest pieces are blocked", written.replace("▁", " ").strip(), MAX_BANNED_FORMS,
            MAX_BANNED_FORMS,
        )  # fmt: skip
    return complete[0]
