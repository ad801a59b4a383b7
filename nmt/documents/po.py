"""A gettext PO or POT file's segments: each entry's msgid (and msgid_plural), written back as its
msgstr, every other byte of the file as it was read.

    opened = read(data, "messages.po")
    opened.segments()   # [("Open %(name)s", TextFormat.text), ("%d file", ...), ("%d files", ...)]
    opened.write(["Ouvrir %(name)s", "%d fichier", "%d fichiers"])   # the file's bytes

An entry's msgid is one segment; a plural entry's msgid and msgid_plural are two: msgstr[0]
holds the msgid's translation and msgstr[1] ... msgstr[n-1] the msgid_plural's, n from the
header's Plural-Forms (nplurals; 2 where it has none, as in a template). Placeholders (`%s`,
`%(count)d`, `{name}`) are protected spans the text loop keeps (`nmt.documents.protect`); an
entry flagged python-format, c-format or any other *-format whose translation lost one of its
msgid's directives (`%1$s` is not protected) is marked fuzzy, with a warning naming it.

The header, obsolete entries (`#~`) and entries already translated (`KEEP_TRANSLATED`: a
translator's work is worth more than a new guess, and a half-done file is finished, not redone)
are left alone. A machine's translation is marked fuzzy (`MARK_FUZZY`): in gettext a fuzzy
entry is one that calls for a translator's review (msgmerge's guesses, Weblate's "needs
editing"), and msgfmt leaves it out of the .mo unless told `--use-fuzzy`, so an unreviewed
translation never ships by accident.

polib parses the file (one module of pure Python, 7 ms to import; translate-toolkit is 6.6 MB
with a compiled extension and 30 ms). It is not asked to write it: polib re-wraps long strings
its own way, drops empty comments and moves others (of the 23 test files of its own it parses,
2 came back byte-identical). Only the msgstr lines of the entries translated are written
(wrapped as msgcat wraps, at 79 columns), and their flags line: every other line (msgid,
msgctxt, comments, references, flags, the header) is the bytes read. The charset is the
header's; a template's placeholder CHARSET, or a charset that cannot hold the translations,
becomes UTF-8.
"""

from __future__ import annotations

import codecs
import logging
import re
from collections import Counter
from dataclasses import dataclass

import polib

from nmt.config import TextFormat
from nmt.errors import NMTError

log = logging.getLogger(__name__)

# an entry whose msgstr already holds text keeps it (see the module's notes)
KEEP_TRANSLATED = True
# a machine's translation is marked fuzzy: to be reviewed before msgfmt uses it
MARK_FUZZY = True
WIDTH = 79  # msgcat's and xgettext's default line width
_CHARSET = re.compile(r"charset=([\w.:-]+)")
_NPLURALS = re.compile(r"nplurals\s*=\s*(\d+)")
# a format directive: printf's (with a position, %1$s), Python's %(name)s, and {name}; %% is a
# percent sign, counted by no check
_DIRECTIVE = re.compile(
    r"%%|%(?:\(\w+\)|\d+\$)?[-#0 +']*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|ll|[hlLqjzt])?"
    r"[diouxXeEfFgGaAcsrpn]|\{[\w.\[\]]*(?:![rsa])?(?::[^{}]*)?\}"
)


def read(data: bytes, name: str) -> PoFile:
    """The PO file `name` holding `data` (`nmt.documents.formats`), decoded in its header's
    charset; a file polib cannot parse is an NMTError naming it and the line."""
    charset = _charset(data)
    try:
        codecs.lookup(charset)
        text = data.decode(charset)
    except LookupError:
        raise NMTError(f"{name}: its header names an unknown charset, {charset!r}") from None
    except UnicodeDecodeError as err:
        raise NMTError(f"{name}: not {charset} text, as its header says ({err})") from None
    try:
        # text of one line would be taken for a file's name
        catalog = polib.pofile(text if "\n" in text else text + "\n")
    except (OSError, ValueError) as err:
        raise NMTError(f"{name}: not a gettext PO file ({err})") from None
    return PoFile(name, text, charset, catalog)


def _charset(data: bytes) -> str:
    """The charset the header names (read as Latin-1: the header is ASCII); UTF-8 where it names
    none or a template's CHARSET."""
    found = _CHARSET.search(data[:4096].decode("latin-1"))
    return "utf-8" if found is None or found.group(1) == "CHARSET" else found.group(1)


@dataclass
class Entry:
    """An entry to translate and the lines of the file it covers, [start, end)."""

    entry: polib.POEntry
    start: int
    end: int


class PoFile:
    """A PO file read (`Opened`): its entries to translate, written back as msgstr lines."""

    def __init__(self, name: str, text: str, charset: str, catalog: polib.POFile):
        self.name, self.charset = name, charset
        self.lines = text.splitlines(keepends=True)  # split as polib splits, for its line numbers
        plurals = _NPLURALS.search(catalog.metadata.get("Plural-Forms", ""))
        self.nplurals = int(plurals.group(1)) if plurals else 2
        # polib counts lines from 1 (0: the first entry of a file without a header)
        starts = sorted({max(e.linenum - 1, 0) for e in catalog} | {len(self.lines)})
        after = dict(zip(starts, starts[1:]))  # an entry's lines end where the next one's start
        self.entries = [
            Entry(e, max(e.linenum - 1, 0), after[max(e.linenum - 1, 0)])
            for e in catalog
            if e.msgid and not e.obsolete and not (KEEP_TRANSLATED and _translated(e))
        ]

    def segments(self) -> list[tuple[str, TextFormat]]:
        out = []
        for found in self.entries:
            out.append((found.entry.msgid, TextFormat.text))
            if found.entry.msgid_plural:
                out.append((found.entry.msgid_plural, TextFormat.text))
        return out

    def write(self, translations: list[str]) -> bytes:
        """The file with each entry's msgstr holding its translation (see the module's notes)."""
        texts = [text for text, _ in self.segments()]
        if len(translations) != len(texts):
            raise ValueError(f"{len(translations)} translations of {len(texts)} segments")
        pairs = iter(zip(texts, translations))
        filled = []
        for found in self.entries:
            forms = [next(pairs) for _ in range(2 if found.entry.msgid_plural else 1)]
            filled.append((found, [_ends_kept(s, t) for s, t in forms]))
        lines = list(self.lines)
        for found, done in reversed(filled):  # from the end: a line inserted moves no other
            self._fill(lines, found, done)
        return self._encoded("".join(lines))

    def _fill(self, lines: list[str], found: Entry, done: list[str]) -> None:
        """`lines` with the entry's msgstr lines holding `done` (its forms' translations) and,
        where it is to be reviewed, its flags fuzzy."""
        entry = found.entry
        span = range(found.start, found.end)
        keys = [i for i in span if lines[i].lstrip().startswith("msgstr")]
        if not keys:  # polib reads an entry without msgstr as untranslated: nowhere to write
            return
        first, end = keys[0], keys[-1] + 1
        while end < found.end and lines[end].lstrip().startswith('"'):
            end += 1
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        newline = "\r\n" if lines[first].endswith("\r\n") else "\n"
        if entry.msgid_plural:
            values = [done[0], *[done[1]] * (self.nplurals - 1)]
            keyed = [(f"msgstr[{n}]", v) for n, v in enumerate(values)]
        else:
            keyed = [("msgstr", done[0])]
        new = [indent + line + newline for k, v in keyed for line in _quoted(k, v)]
        new[-1] = new[-1][: -len(newline)] + _ending(lines[end - 1])  # the file's last line
        lines[first:end] = new
        lost = self._lost(entry, done)  # warned of, whether or not the entry is marked
        if (MARK_FUZZY or lost) and "fuzzy" not in entry.flags:
            _mark_fuzzy(lines, found.start, first, indent, newline)

    def _lost(self, entry: polib.POEntry, done: list[str]) -> bool:
        """Whether a translation of a formatted entry lost a directive of its source (warned)."""
        if not any(f.endswith("-format") and not f.startswith("no-") for f in entry.flags):
            return False
        lost = Counter()
        for source, translation in zip([entry.msgid, entry.msgid_plural], done):
            lost += _directives(source) - _directives(translation)
        if lost:
            log.warning(
                "%s: the translation of %r lost %s: marked fuzzy",
                self.name, entry.msgid[:60], " ".join(sorted(lost)),
            )  # fmt: skip
        return bool(lost)

    def _encoded(self, text: str) -> bytes:
        """`text` in the file's charset; a template's CHARSET, or a charset that cannot hold
        it, becomes UTF-8 (in the header's Content-Type too)."""
        found = _CHARSET.search(text)
        if found is not None and found.group(1) != "CHARSET":
            try:
                return text.encode(self.charset)
            except UnicodeEncodeError:
                pass
        if found is not None:
            text = text[: found.start(1)] + "UTF-8" + text[found.end(1) :]
        return text.encode("utf-8")


def _translated(entry: polib.POEntry) -> bool:
    return bool(entry.msgstr) or any(entry.msgstr_plural.values())


def _ends_kept(source: str, translation: str) -> str:
    """The translation with the source's leading and trailing whitespace: msgfmt checks that a
    msgstr ends with a line break where its msgid does (the text loop drops outer whitespace)."""
    body = source.strip()
    if not body:
        return translation
    lead = source[: len(source) - len(source.lstrip())]
    return lead + translation.strip() + source[len(lead) + len(body) :]


def _directives(text: str) -> Counter:
    return Counter(d for d in _DIRECTIVE.findall(text) if d != "%%")


def _quoted(keyword: str, value: str) -> list[str]:
    """`keyword "value"` as msgcat writes it: one line where it fits in WIDTH columns and holds
    no line break before its end; else `keyword ""` and a line a piece, each piece broken after
    a line break and after spaces to fit."""
    pieces = [polib.escape(p) for p in re.findall(r"[^\n]*\n|[^\n]+", value)]
    if len(pieces) <= 1 and len(keyword) + len(pieces[0] if pieces else "") + 3 <= WIDTH:
        return [f'{keyword} "{pieces[0] if pieces else ""}"']
    lines = [f'{keyword} ""']
    for piece in pieces:
        line = ""
        for word in re.findall(r"\S*\s*", piece)[:-1]:  # each word with the spaces after it
            if line and len(line) + len(word) + 2 > WIDTH:
                lines.append(f'"{line}"')
                line = ""
            line += word
        lines.append(f'"{line}"')
    return lines


def _ending(line: str) -> str:
    return line[len(line.rstrip("\r\n")) :]


def _mark_fuzzy(lines: list[str], start: int, msgstr: int, indent: str, newline: str) -> None:
    """The entry's flags line (between `start` and its msgstr line) with fuzzy first, as gettext
    writes it; a new flags line before its msgctxt or msgid (or `#|` previous) where it has none."""
    for i in range(start, msgstr):
        stripped = lines[i].lstrip()
        if stripped.startswith("#,"):
            rest = stripped[2:]
            lines[i] = (
                lines[i][: len(lines[i]) - len(stripped)]
                + "#, fuzzy,"
                + (rest if rest.startswith(" ") else " " + rest)
            )
            return
    for i in range(start, msgstr):
        if lines[i].lstrip().startswith(("#|", "msgctxt", "msgid")):
            lines.insert(i, f"{indent}#, fuzzy{newline}")
            return
