"""DeepL's glossaries: terms and their translations, kept for a key, found in a request's texts
(`nmt.serving.deepl` answers /v2/glossaries with them, and a glossary on a request becomes each
text's terminology constraints: docs/terminology.md).

    glossaries.add(account, Glossary(id, "fruit", "de", "en", {"Äpfel": "pears"}, created))
    glossaries.get(account, id).terms_in("Ich sehe Äpfel.")     # ["pears"]

Glossaries live in the server's memory (a restart forgets them), at most MAX_GLOSSARIES an
account (`nmt.serving.keys.Keys.account`) and MAX_ENTRIES entries each.
"""

from __future__ import annotations

import dataclasses
import re
import threading

from nmt.serving.admission import MAX_CONSTRAINTS
from nmt.serving.http import BadRequest

MAX_GLOSSARIES = 100  # glossaries one account may hold
MAX_ENTRIES = 5000  # entries in one glossary
WORD = re.compile(r"\w+")


@dataclasses.dataclass(frozen=True)
class Glossary:
    """A key's glossary: terms and their translations, for one language pair."""

    glossary_id: str
    name: str
    source_lang: str
    target_lang: str
    entries: dict[str, str]
    created: str

    def info(self) -> dict:
        return {
            "glossary_id": self.glossary_id, "name": self.name, "ready": True,
            "source_lang": self.source_lang, "target_lang": self.target_lang,
            "creation_time": self.created, "entry_count": len(self.entries),
        }  # fmt: skip

    def terms_in(self, text: str) -> list[str]:
        """The translations of the terms `text` holds (as whole words, in any case), at most
        MAX_CONSTRAINTS of them, the longest terms first."""
        found = []
        # a term can only be found where each of its words is: the text's words are read once,
        # and only the terms whose words all occur are searched for (5,000 terms over 100,000
        # characters: 6.3 s searching every term, a text's own few terms after the filter)
        words = set(WORD.findall(text.lower()))
        for term in sorted(self.entries, key=len, reverse=True):
            if not set(WORD.findall(term.lower())) <= words:
                continue
            pattern = r"(?<!\w)" + re.escape(term) + r"(?!\w)"
            if re.search(pattern, text, flags=re.IGNORECASE):
                found.append(self.entries[term])
                if len(found) == MAX_CONSTRAINTS:
                    break
        return found


class Glossaries:
    """The glossaries of each account (`Keys.account`), in the server's memory (a restart
    forgets them)."""

    def __init__(self) -> None:
        self._held: dict[str, dict[str, Glossary]] = {}
        self._lock = threading.Lock()

    def add(self, account: str, glossary: Glossary) -> None:
        with self._lock:
            held = self._held.setdefault(account, {})
            if len(held) >= MAX_GLOSSARIES:
                raise BadRequest(400, f"this key holds {MAX_GLOSSARIES} glossaries: delete one")
            held[glossary.glossary_id] = glossary

    def get(self, account: str, glossary_id: str) -> Glossary:
        found = self._held.get(account, {}).get(glossary_id)
        if found is None:
            raise BadRequest(404, f"no glossary {glossary_id[:40]!r}")
        return found

    def all(self, account: str) -> list[Glossary]:
        return list(self._held.get(account, {}).values())

    def remove(self, account: str, glossary_id: str) -> None:
        with self._lock:
            if self._held.get(account, {}).pop(glossary_id, None) is None:
                raise BadRequest(404, f"no glossary {glossary_id[:40]!r}")


def read_entries(text: str, kind: str) -> dict[str, str]:
    """A glossary's entries from TSV (term TAB translation a line) or CSV (term,translation)."""
    if kind not in ("tsv", "csv"):
        raise BadRequest(400, f"Value for 'entries_format' not supported: {kind[:20]}")
    entries: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t" if kind == "tsv" else ",")
        if len(parts) < 2 or not parts[0].strip() or not parts[1].strip():
            raise BadRequest(400, f"Invalid glossary entries: line {number} is not a pair")
        entries[parts[0].strip()] = parts[1].strip()
    if not entries or len(entries) > MAX_ENTRIES:
        raise BadRequest(400, f"a glossary holds 1 to {MAX_ENTRIES} entries, not {len(entries)}")
    return entries
