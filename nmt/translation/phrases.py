"""Target phrases as piece sequences: the banned phrases' every spelling (`banned_forms`), a
constraint's pieces (`constraint_ids`), and what a sequence of pieces tells about the phrases in
it (`holds`, `spans`, `pieces_needed`, `problem`). Plain Python over ids: `nmt.translation.request`
checks a request with them before anything is translated, and the search
(`nmt.translation.search.rules`, `nmt.translation.search.constraints`) runs the same rules on
tensors.

Spelling a phrase costs time linear in its characters: each place tries only the pieces that
fit in the vocabulary's longest piece, and the ways are counted per length before any is
written out, so a long phrase costs what its characters cost, never what its spellings number.
"""

from __future__ import annotations

import logging
import unicodedata

from nmt.errors import NMTError
from nmt.tokenizer import UNK, Vocab, clean

log = logging.getLogger(__name__)

# the most piece sequences one banned phrase is blocked as (see `banned_forms`), and the most
# pieces they hold together: a phrase of many pieces is blocked in fewer spellings
MAX_BANNED_FORMS = 256
MAX_SPELLED_PIECES = 16_384
# marks that attach to the word before them: a constraint starting with one is matched without
# the word start "▁" (with the Unicode classes of closing brackets and final quotes)
ATTACHED = set(".,;:!?%'’”»…-")


def banned_forms(
    vocab: Vocab, phrases: list[str], limit: int, reach: int | None = None
) -> list[list[list[int]]]:
    """For each of `phrases`, the target piece sequences that banning it blocks (each a list of
    ids; [] for a phrase the vocabulary cannot write, or that no translation here can reach).

    A phrase (whitespace collapsed, as every text) is blocked wherever it starts a word: at the
    start of the translation or after a space, where sentencepiece writes it with its leading
    "▁" ("sleeps" -> "▁sleeps"; "a dog" -> "▁a▁dog"). Every way to write that string with
    pieces of the vocabulary is blocked, not only the one sentencepiece would choose (a model may
    produce "▁s" "leeps" as well as "▁sleeps"), up to MAX_BANNED_FORMS sequences per phrase and
    MAX_SPELLED_PIECES pieces in all (the ones with the fewest pieces, with a warning). So the
    phrase is blocked also where it starts a longer word whose pieces end where it ends ("sleeps"
    in "▁sleeps" "y").
    Not blocked: the phrase inside a word or after anything but a space (a quote mark, a
    hyphen), its other casings ("Sleeps"), and pieces that cross its last character ("▁sleep"
    "sy"). A phrase the vocabulary cannot write (a character it lacks) cannot appear, and is
    skipped with a warning. An NMTError names a blank phrase, and one whose fewest pieces are
    more than `limit` (decode.max_len_cap: no translation could hold it). Spellings of more than
    `reach` pieces (the longest translation of the texts at hand) are left out: they could never
    be completed, so blocking them would only cost time."""
    out = []
    for phrase in phrases:
        text = clean(phrase) if isinstance(phrase, str) else ""
        if not text:
            raise NMTError(f"the banned phrase {phrase!r} has no pieces: nothing to ban")
        written = "".join(vocab.sp.Encode(text, out_type=str))  # normalized, "▁" at word starts
        if not written.startswith("▁"):  # no dummy prefix in this tokenizer: the word form
            written = "▁" + written
        ways = _Spellings(vocab, written, MAX_BANNED_FORMS)
        if ways.fewest is None:
            log.warning(
                "the banned phrase %r cannot be written by the model: skipped", _shown(text)
            )
            out.append([])
            continue
        if ways.fewest > limit:
            raise NMTError(_too_long(phrase, ways.fewest, limit))
        most = min(MAX_BANNED_FORMS, max(1, MAX_SPELLED_PIECES // ways.fewest))
        if ways.count > most:
            log.warning(
                "the banned phrase %r has more than %d spellings in pieces: only the %d with the "
                "fewest pieces are blocked", _shown(text), most, most,
            )  # fmt: skip
        out.append(ways.first(limit if reach is None else reach, most))
    return out


def _shown(phrase: str) -> str:
    """A phrase as messages name it: its first characters when it is long."""
    return phrase if len(phrase) <= 60 else phrase[:57] + "..."


def _too_long(phrase: str, pieces: int, limit: int) -> str:
    return (
        f"the banned phrase {_shown(phrase)!r} needs at least {pieces} pieces, and no "
        f"translation may have more than decode.max_len_cap={limit}: it could never appear; "
        "leave it out"
    )


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
            spelled = _Spellings(vocab, "".join(written)[1:], 1).first()
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


class _Spellings:
    """The sequences of the vocabulary's pieces (specials excluded) that spell `written`, in
    order: the fewest pieces first, and of equal counts, the one whose first piece ends earliest
    first (then its second...). At most `most` of them are ever written out.

    Counting them is linear in the characters: each place tries only the pieces that fit in the
    vocabulary's longest piece, and counts[i] says, per number of pieces, how many ways spell
    written[i:], capped (only the counts of the most + 1 ways with the fewest pieces are kept,
    which is all that the first ways of any longer string can use). A way is then written out
    without a dead end, for the cost of its length."""

    def __init__(self, vocab: Vocab, written: str, most: int) -> None:
        size, self.most = len(written), most
        pieces, longest = vocab.piece_ids, vocab.longest_piece
        # ends[i]: (end, id) of every piece that starts at character i, ends ascending
        self.ends: list[list[tuple[int, int]]] = [[] for _ in range(size)]
        for i in range(size):
            for j in range(i + 1, min(size, i + longest) + 1):
                piece = pieces.get(written[i:j])
                if piece is not None:
                    self.ends[i].append((j, piece))
        cap = most + 1
        counts: list[dict[int, int]] = [{} for _ in range(size)] + [{0: 1}]
        for i in range(size - 1, -1, -1):
            merged: dict[int, int] = {}
            for j, _ in self.ends[i]:
                for n, ways in counts[j].items():
                    merged[n + 1] = merged.get(n + 1, 0) + ways
            kept, total = {}, 0
            for n in sorted(merged):
                kept[n] = min(merged[n], cap - total)
                total += kept[n]
                if total >= cap:
                    break
            counts[i] = kept
        self.counts = counts
        self.fewest = min(counts[0], default=None)  # None: no way at all
        self.count = sum(counts[0].values())  # the ways counted: at most most + 1

    def first(self, longest: int | None = None, most: int | None = None) -> list[list[int]]:
        """The first `most` ways (at most the constructor's), of at most `longest` pieces each
        (None: any number)."""
        most = self.most if most is None else min(most, self.most)
        out: list[list[int]] = []
        size = len(self.ends)
        for n in sorted(self.counts[0]):
            if longest is not None and n > longest:
                break
            # depth first, ends ascending: (place, pieces left, the way so far as a linked
            # list (piece, rest) read backwards, next edge to try)
            stack: list[tuple[int, int, tuple | None, int]] = [(0, n, None, 0)]
            while stack and len(out) < most:
                i, left, way, edge = stack.pop()
                if i == size:
                    ids = []
                    while way is not None:
                        ids.append(way[0])
                        way = way[1]
                    out.append(ids[::-1])
                    continue
                for k in range(edge, len(self.ends[i])):
                    j, piece = self.ends[i][k]
                    if self.counts[j].get(left - 1, 0):
                        stack.append((i, left, way, k + 1))  # come back for the later edges
                        stack.append((j, left - 1, (piece, way), 0))
                        break
            if len(out) >= most:
                break
        return out


# --- phrases in a sequence of pieces --------------------------------------------------------


def holds(tokens: list[int], phrase: list[int]) -> bool:
    """Whether `phrase` occurs in `tokens`, contiguous."""
    n = len(phrase)
    return any(tokens[i : i + n] == phrase for i in range(len(tokens) - n + 1))


def spans(tokens: list[int], phrases: list[list[int]]) -> list[tuple[int, int]]:
    """Where each phrase first occurs in `tokens`: (start, end) piece indices, (-1, -1) if not."""
    out = []
    for phrase in phrases:
        n = len(phrase)
        at = next((i for i in range(len(tokens) - n + 1) if tokens[i : i + n] == phrase), -1)
        out.append((at, at + n) if at >= 0 else (-1, -1))
    return out


def jumps(phrase: list[int]) -> list[list[int]]:
    """Knuth-Morris-Pratt transitions: jumps[s][j] is how many pieces of `phrase` end a sequence
    after one that had s of them (s < len) produces the piece phrase[j]. Any piece not in the
    phrase gives 0. O(len^2)."""
    n = len(phrase)
    border = [0] * (n + 1)  # border[s]: the longest proper start of phrase[:s] that ends it
    k = 0
    for s in range(1, n):
        while k and phrase[s] != phrase[k]:
            k = border[k]
        if phrase[s] == phrase[k]:
            k += 1
        border[s + 1] = k
    places: dict[int, list[int]] = {}  # each piece's places in the phrase
    for j, piece in enumerate(phrase):
        places.setdefault(piece, []).append(j)
    table: list[list[int]] = []
    for s in range(n):
        # a piece that continues the phrase moves on; any other goes where it goes from the
        # longest border (border[s] < s: its row is built), a whole row copied at once
        row = list(table[border[s]]) if s else [0] * n
        for j in places[phrase[s]]:
            row[j] = s + 1
        table.append(row)
    return table


def repeated(phrase: list[int], n: int, prefix: list[int]) -> list[int] | None:
    """The n-gram of a constraint `phrase` that decode.no_repeat_ngram=n keeps it from ever being
    written after the forced `prefix`, or None: the rule blocks the piece that ends an n-gram's
    second occurrence ("red red red" with n = 2), unless that piece is forced (the prefix holds
    the phrase, or ends with its start up to past that occurrence). n = 0: no rule."""
    if n <= 0 or holds(prefix, phrase):
        return None
    seen: set[tuple[int, ...]] = set()
    for i in range(len(phrase) - n + 1):
        gram = tuple(phrase[i : i + n])
        if gram in seen:
            end = i + n  # the piece the rule blocks is phrase[end - 1]
            forced = any(prefix[len(prefix) - j :] == phrase[:j] for j in range(end, len(phrase)))
            return None if forced else list(gram)
        seen.add(gram)
    return None


def pieces_needed(phrases: list[list[int]], prefix: list[int] | None = None) -> int:
    """Constraint pieces a hypothesis that starts with `prefix` still needs, as the search counts
    them (an upper bound: overlapping phrases may need fewer). A phrase given twice counts once,
    as the search keeps it once."""
    phrases = [list(p) for p in dict.fromkeys(map(tuple, phrases))]
    states = [0] * len(phrases)
    tables = [jumps(p) for p in phrases]
    for piece in prefix or []:
        for i, (phrase, table) in enumerate(zip(phrases, tables)):
            if states[i] < len(phrase):
                states[i] = table[states[i]][phrase.index(piece)] if piece in phrase else 0
    unmet = [(len(p), s) for p, s in zip(phrases, states) if s < len(p)]
    return sum(n for n, _ in unmet) - max((s for _, s in unmet), default=0)


def problem(phrases: list[list[int]], prefix: list[int], limit: int) -> str | None:
    """Why one sentence's constraints (ids) cannot be met, or None: an empty phrase, or more
    pieces than the length `limit` leaves after the forced `prefix` (the EOS needs a place)."""
    for i, phrase in enumerate(phrases):
        if not phrase:
            return f"constraint {i} has no pieces"
    needed = pieces_needed(phrases, prefix)
    if needed and needed + len(prefix) >= limit:
        after = f" after a forced prefix of {len(prefix)} pieces" if prefix else ""
        return (
            f"the constraints need {needed} pieces{after}, and a translation of this source may "
            f"have at most {limit} pieces (decode.max_len_a * source pieces + decode.max_len_b, "
            "capped at decode.max_len_cap), the end included: raise decode.max_len_b, or give "
            "fewer constraints"
        )
    return None
