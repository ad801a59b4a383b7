"""The server's translation memory (`tm=`): read once for each language pair a request asks for.

    memories = Memories("company.tmx")
    memory = memories.pair("de", "en")      # None: the file holds no unit in these languages

A memory file may hold many languages (a TMX exported from a translation tool holds every
language the company translates into); `nmt.translation.memory.TranslationMemory` reads one
pair. A server of several models reads the pairs its requests ask for, each once, when first
asked (in a thread: a large TMX takes seconds), and keeps them. A pair the file does not hold is
remembered as such: its requests are searched as without a memory.
"""

from __future__ import annotations

import logging
import threading

from nmt.errors import NMTError
from nmt.translation.memory import TranslationMemory

log = logging.getLogger(__name__)


class Memories:
    """The memory file `path`, read per pair (see the module's notes)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._pairs: dict[tuple[str, str], TranslationMemory | None] = {}
        self._lock = threading.Lock()

    def pair(self, src: str, tgt: str) -> TranslationMemory | None:
        """The memory of `src` -> `tgt` (language tags), read at the first call."""
        with self._lock:  # one read per pair, whichever thread asks first
            if (src, tgt) not in self._pairs:
                try:
                    self._pairs[src, tgt] = TranslationMemory.read(self.path, src, tgt)
                except NMTError as err:  # no unit in these languages: searched as usual
                    log.info("tm=%s: no memory for %s->%s (%s)", self.path, src, tgt, err)
                    self._pairs[src, tgt] = None
            return self._pairs[src, tgt]
