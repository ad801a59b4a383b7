"""A translation memory: a company's earlier translations, whose sentences are written as the
memory has them, never sent to the model (nmt-translate tm=FILE).

    memory = TranslationMemory.read(Path("company.tmx"), "de", "en")   # de-DE/en-GB units too
    memory.lookup("Ein  Hund läuft. ")   # "A dog runs." when the memory has "Ein Hund läuft."

The file is a TMX or a TSV of pairs (`nmt.data.tmx`: the same reader nmt-train's data.format=tmx
uses). A lookup is an exact match after whitespace is normalised (runs of whitespace, line breaks
and no-break spaces too, one space; outer whitespace dropped) and nothing else: a translator's
memory promises approved text, and a match that differs in case, punctuation or one word (a
fuzzy match) would need a reviewer, which a pipeline has not. Where a source appears twice the
first unit wins, as it stands in the file (a TMX is exported in the tool's order; the units
carry no rank nmt could trust instead), and the duplicates are counted in the log line.

The memory is a dict of normalised source to target: about 200 bytes an entry beside the text,
one hash a lookup.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from nmt.data.tmx import Tally, describe, memory_pairs
from nmt.errors import NMTError

log = logging.getLogger(__name__)


def normalise(text: str) -> str:
    """`text` with each run of whitespace one space, stripped: the key a lookup matches."""
    return " ".join(text.split())


class TranslationMemory:
    """Sources (normalised) -> their translations, as the memory wrote them."""

    def __init__(self, entries: dict[str, str], name: str = "", digest: str = "") -> None:
        self.entries = entries
        self.name = name  # the file, in messages
        self.digest = digest  # sha256 of the file: what a resumed file job compares

    def __len__(self) -> int:
        return len(self.entries)

    @classmethod
    def read(cls, path: Path | str, src_lang: str, tgt_lang: str) -> TranslationMemory:
        """The memory of a TMX or TSV file in `src_lang` -> `tgt_lang` (a model's names, or any
        code of them); an NMTError naming the file when it is missing, unreadable, or has no
        unit in both languages (naming the languages it has). Logs what it read."""
        path = Path(path)
        if not path.is_file():
            raise NMTError(f"tm={path}: no such file")
        tally = Tally()
        entries: dict[str, str] = {}
        duplicates = differing = 0
        for source, target in memory_pairs(path, src_lang, tgt_lang, tally):
            key = normalise(source)
            if not key:  # a unit of no text matches no line (a blank line stays blank)
                continue
            target, kept = target.strip(), entries.get(key)
            if kept is None:
                entries[key] = target
            else:  # the source again: the first unit's translation stays
                duplicates += 1
                differing += kept != target
        if not entries:
            raise NMTError(
                f"tm={path}: no unit with both {src_lang} and {tgt_lang} ({tally.units} units; "
                f"languages: {describe(tally)})"
            )
        with open(path, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        log.info(
            "tm=%s: %d entries from %d units (%d duplicate sources, %d with another translation: "
            "the first kept; %d units lacking %s or %s skipped)",
            path, len(entries), tally.units, duplicates, differing, tally.skipped, src_lang,
            tgt_lang,
        )  # fmt: skip
        return cls(entries, str(path), digest)

    def lookup(self, text: str) -> str | None:
        """The memory's translation of `text` (matched as the module's notes say), or None."""
        return self.entries.get(normalise(text))

    def found(self, texts: list[str]) -> dict[int, str]:
        """Index -> the memory's translation, for each of `texts` the memory holds."""
        hits = ((i, self.lookup(text)) for i, text in enumerate(texts))
        return {i: target for i, target in hits if target is not None}
