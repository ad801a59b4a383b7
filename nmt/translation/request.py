"""One translation request, the same object from the edge (a library call, the command line, the
HTTP JSON) to the search, and its form in ids.

    request = Request(["Ein Hund läuft."], decode, prefixes=["A dog"], banned=["runs"])
    prepared = translator.prepare(request)    # tokenized and checked, once
    translations = translator.run(prepared)   # the search

A `Request` holds a call's options as the call gave them, and its constructor is the one place
where they meet the decode settings' defaults (`decode`: a command's or a translator's settings,
with the call's changes):

- the call's `prefixes` (one per text) take the place of decode.prefix;
- its `banned` phrases add to decode.banned;
- its `constraints` (one list of phrases per text) take the place of decode.constraints;

and where the checks that need no model run, once: the options' shapes, and constraints only
with beam search. Then `segments` hold what is asked of each text (`Segment`: the text, its
prefix, its constraints), `banned_phrases` the phrases no translation may contain, and
`settings` the decode settings without that content (prefix, banned and constraints emptied):
what the texts of different requests must share to be searched together. A new per-text option
is a field of `Segment`; a new per-step rule a setting (`nmt.translation.search.rules`).

`prepare` turns a request into ids with a model's vocabularies and checks what depends on them
before anything is searched, each problem an NMTError naming its text ("line N" of a file, "text
N" of an HTTP request): the sources (cut to decode.max_src_pieces, the target tag put before
each: `nmt.translation.inputs`), the prefixes, every spelling of the banned phrases
(`nmt.translation.phrases`, expanded once for the whole request), each text's constraints (no banned
phrase inside one, and room for them within the text's length limit after its prefix). A `Prepared`
request is what the search runs (`Translator.run`); nmt-serve queues its texts and searches texts of
several requests together when their `key`s are equal.

This module needs sentencepiece and nothing heavier: the exported runtimes prepare their requests
here too, without torch.
"""

from __future__ import annotations

import hashlib
import logging
from array import array
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from nmt.config import NEED_BEAM, DecodeConfig, Strategy
from nmt.errors import NMTError
from nmt.tokenizer import Vocabs
from nmt.translation.inputs import prefix_ids, read_sources
from nmt.translation.phrases import banned_forms, constraint_ids, problem, repeated

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Segment:
    """One text of a request, and what is asked of its translation alone."""

    text: str
    prefix: str = ""  # target text its translation starts with ("" for none)
    constraints: tuple[str, ...] = ()  # phrases its translation contains, each contiguous


@dataclass
class Request:
    """A call's texts and options (see the module's notes for how they meet `decode`)."""

    texts: list[str]
    decode: DecodeConfig  # the settings this call decodes with: defaults and the call's changes
    prefixes: list[str] | None = None  # one per text ("" for none); None: decode.prefix for each
    banned: list[str] | None = None  # phrases no translation contains, beside decode.banned
    constraints: list[list[str]] | None = None  # one list per text; None: decode.constraints
    tgt_lang: str | None = None  # the target language (a model with target tags)
    attention: bool = False  # return each translation's attention maps
    tree: bool = False  # return each text's search tree
    first_line: int = 1  # the number of the first text, in messages
    noun: str = "line"  # what messages call a text: "line" of a file, "text" of a request
    # return each translation's piece statistics at this temperature (`SearchJob.statistics`:
    # what confidence reads); None: not recorded
    statistics: float | None = None
    # the source language, a model with language codes reads its code before each source
    # (`TargetTags.ids`); None: the translator's
    src_lang: str | None = None
    segments: list[Segment] = field(init=False)
    banned_phrases: list[str] = field(init=False)  # decode.banned, then the call's
    settings: DecodeConfig = field(init=False)  # `decode` without prefix, banned, constraints

    def __post_init__(self) -> None:
        decode, count = self.decode, len(self.texts)
        if isinstance(self.texts, str):  # a string would be a list of its characters
            raise NMTError(f"texts must be a list of texts, got the string {self.texts!r}")
        prefixes = [decode.prefix] * count if self.prefixes is None else self.prefixes
        if isinstance(prefixes, str) or len(prefixes) != count:
            raise NMTError(f"{len(prefixes)} prefixes for {count} texts: give one per text")
        banned = self.banned or []
        if isinstance(banned, str):  # a string would ban each of its characters
            raise NMTError(f"banned must be a list of phrases, got the string {banned!r}")
        constraints = self.constraints
        if constraints is None:
            constraints = [decode.constraints] * count
        elif isinstance(constraints, str) or len(constraints) != count:
            raise NMTError(
                f"constraints must be one list of phrases per text: {count} texts, got "
                f"{constraints!r}"[:300]
            )
        for i, phrases in enumerate(constraints):
            if isinstance(phrases, str):  # a string would be a list of its characters
                raise NMTError(
                    f"{self.noun} {self.first_line + i}: constraints must be a list of phrases, "
                    f"got {phrases!r}"
                )
        if any(constraints) and decode.strategy != Strategy.beam:
            raise NMTError(NEED_BEAM)
        self.segments = [
            Segment(text, prefix or "", tuple(phrases or ()))
            for text, prefix, phrases in zip(self.texts, prefixes, constraints)
        ]
        self.banned_phrases = [*decode.banned, *banned]
        content = decode.prefix or decode.banned or decode.constraints
        self.settings = replace(decode, prefix="", banned=[], constraints=[]) if content else decode


@dataclass(frozen=True)
class PreparedText:
    """One segment in ids."""

    segment: Segment
    src: list[int]  # ids ending in EOS, the target tag first; [] for a blank text
    prefix: list[int]  # target ids forced at the start of its translation
    constraints: list[list[int]]  # target ids of each constraint, in the segment's order
    # what its translation's reader should know (a source cut short, a crowded beam), in words
    warnings: tuple[str, ...] = ()
    free: int = 0  # the first pieces of `prefix` that the model's language code forces (score 0)


@dataclass
class Prepared:
    """A request in ids, checked: what the search runs (`Translator.run`)."""

    texts: list[PreparedText]
    settings: DecodeConfig
    banned: list[list[int]]  # every spelling of every banned phrase
    attention: bool = False
    tree: bool = False
    first_line: int = 1
    noun: str = "line"
    statistics: float | None = None  # `Request.statistics`

    @cached_property
    def key(self) -> Hashable:
        """What texts must share to be searched together: the settings and the banned ids (the
        target tag rides in each source, so texts into other languages mix freely). The ids
        enter as a digest, computed once: a server compares keys often, and the banned list of
        a large request holds a million ids."""
        settings = tuple(
            (k, tuple(v) if isinstance(v, list) else v) for k, v in vars(self.settings).items()
        )
        digest = hashlib.sha256()
        for form in self.banned:  # a spelling at a time: no one call holds the GIL for long
            digest.update(array("q", [len(form), *form]).tobytes())
        return settings, digest.hexdigest()


def prepare(
    request: Request, vocabs: Vocabs, tag: list[int], warn: bool = True, code: Sequence[int] = ()
) -> Prepared:
    """The request in ids (see the module's notes), with `tag`
    (`nmt.translation.inputs.TargetTags.ids`) put before each source and `code`
    (`TargetTags.forced`: a target language's code) before each forced prefix. What a text's
    reader should know (its source cut to max_src_pieces, more banks of constraint progress than
    the beam has places) is in its `warnings`; `warn` also logs each, naming the text (off for a
    check that comes before the translation, which warns, and for a server, which answers
    them)."""
    settings, segments = request.settings, request.segments
    first, noun = request.first_line, request.noun
    cap = settings.max_src_pieces and max(settings.max_src_pieces - len(tag), 1)  # tag included
    sources = read_sources(vocabs.src, [s.text for s in segments], cap, first, warn=False)
    if tag:
        sources.ids = [tag + ids for ids in sources.ids]
    prefixes = [s.prefix for s in segments]
    forced = prefix_ids(vocabs.tgt, prefixes, sources, settings, first, noun)
    forced = [[*code, *ids] for ids in forced]
    # refused by one limit for every text (a phrase no translation could hold, whatever its
    # source); spelled only as far as these texts' translations reach
    reach = max((settings.max_len(len(ids)) for ids in sources.ids), default=0)
    forms = banned_forms(vocabs.tgt, request.banned_phrases, settings.max_len_cap, reach)
    inside = _BannedInside(request.banned_phrases, forms)
    texts = [PreparedText(segment, [], [], []) for segment in segments]
    for k, i in enumerate(sources.index):
        where = f"{noun} {first + i}: "
        phrases = segments[i].constraints
        required = [constraint_ids(vocabs.tgt, phrase, where) for phrase in phrases]
        for phrase, pieces in zip(phrases, required):
            word = inside.find(pieces)
            if word is not None:
                raise NMTError(
                    f"{where}the constraint {phrase!r} contains the banned phrase {word!r}: no "
                    "translation could hold it"
                )
            n = settings.no_repeat_ngram
            gram = repeated(pieces, n, forced[k])
            if gram is not None:
                twice = vocabs.tgt.decode([gram])[0]
                raise NMTError(
                    f"{where}the constraint {phrase!r} has {twice!r} ({n} pieces) twice, and "
                    f"decode.no_repeat_ngram={n} blocks a second occurrence: no translation "
                    "could hold it (lower decode.no_repeat_ngram, or give another constraint)"
                )
        why = required and problem(required, forced[k], settings.max_len(len(sources.ids[k])))
        if why:
            raise NMTError(where + why)
        notes = [sources.cut[k]] if k in sources.cut else []
        notes += _crowded(required, settings.beam_size)
        texts[i] = PreparedText(
            segments[i], sources.ids[k], forced[k], required, tuple(notes), len(code)
        )
        for note in notes if warn else []:
            log.warning("%s%s", where, note)
    banned = [form for spellings in forms for form in spellings]
    return Prepared(
        texts, settings, banned, request.attention, request.tree, first, noun, request.statistics
    )


def _crowded(constraints: list[list[int]], beam_size: int) -> list[str]:
    """A warning when a text's constraints have more banks of constraint progress than the beam
    has places. Beam search ranks a text's hypotheses in banks by the constraint pieces they
    hold, 0 to all of them (`nmt.translation.search.constraints`), and keeps the best of each
    bank, highest first: with fewer places than banks, the lowest banks get none at a step where
    all are full. Every translation still holds every constraint; a search that could have gone
    through a low bank may find a worse one. Warned rather than refused or widened: the beam is
    the user's setting, and its cost is what the server bounds."""
    pieces = sum(len(p) for p in dict.fromkeys(map(tuple, constraints)))
    if not constraints or pieces + 1 <= beam_size:
        return []
    return [
        f"{pieces + 1} banks of constraint progress, more than decode.beam_size={beam_size} "
        "places in the beam, so a bank may go without one: the translation still holds its "
        f"constraints, but a beam of {pieces + 1} would search them all"
    ]


class _BannedInside:
    """Which banned phrase a sequence of pieces holds: each spelling by its number of pieces, so
    a constraint of n pieces costs one set lookup per place and spelling length."""

    def __init__(self, phrases: list[str], forms: list[list[list[int]]]) -> None:
        self.phrases = phrases
        self.by_length: dict[int, dict[tuple[int, ...], int]] = {}  # n -> spelling -> phrase
        for k, spellings in enumerate(forms):
            for form in spellings:
                self.by_length.setdefault(len(form), {}).setdefault(tuple(form), k)

    def find(self, pieces: list[int]) -> str | None:
        """The first banned phrase (in their order) with a spelling that `pieces` holds,
        contiguous; None if none."""
        found = [
            spelled[window]
            for n, spelled in self.by_length.items()
            for window in (tuple(pieces[i : i + n]) for i in range(len(pieces) - n + 1))
            if window in spelled
        ]
        return self.phrases[min(found)] if found else None
