"""Translation memories as sentence pairs: a TMX file (what CAT tools export, a company's earlier
translations), a translated XLIFF file or a TSV of pairs, read as a stream of (source, target) in
two of its languages.
nmt-train reads a TMX split through this (data.format=tmx), and nmt-translate's tm=FILE
(`nmt.translation.memory`) builds its lookup from the same pairs, so a memory trains and
translates alike.

    for src, tgt in tmx_pairs(Path("company.tmx"), "de", "en"):   # a unit's de-DE and en-GB
        ...

A TMX 1.4 file is a body of translation units (`<tu>`), each with one variant (`<tuv
xml:lang="de-DE">`, `lang=` in TMX 1.1) per language holding the text (`<seg>`). It is read with
lxml's iterparse, one unit at a time, each cleared once read: a 1 GB memory is never held as a
tree. A variant's language is matched to the two asked for through nmt's table of language codes
(`nmt.language_codes.matches`: `de-DE` is a model's `de`, `deu_Latn` an NLLB model's `de`); a
unit without both is skipped and counted (`Tally`).

Inline elements of a segment: `<bpt>`, `<ept>`, `<it>`, `<ph>` (and TMX 1.1's `<ut>`) hold the
markup of the document the text came from (`<bpt i="1">&lt;b></bpt>`), not words, and are
dropped with their content; `<hi>` holds words (a highlighted span), and keeps them. So a
segment is the text a reader sees, which is what a model's source is and what a lookup matches;
a target written from a memory has lost its inline markup (placing it would need the tool's
own pairing of `bpt`/`ept` with the document's tags).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from lxml import etree

from nmt.errors import NMTError
from nmt.language_codes import matches

DROPPED = frozenset({"bpt", "ept", "it", "ph", "ut"})  # inline markup: native codes, not words
# XLIFF 1.2's and 2.x's inline codes that hold no words (g, pc, mrk hold words: kept)
XLIFF_DROPPED = frozenset({"x", "bx", "ex", "ph", "bpt", "ept", "it", "sc", "ec", "sm", "em"})
SHOWN = 8  # languages a message lists


@dataclass
class Tally:
    """What reading a memory met: units read, pairs given, units skipped for want of one of the
    two languages, and the languages seen (for a message when no unit has both)."""

    units: int = 0
    pairs: int = 0
    skipped: int = 0
    languages: dict[str, None] = field(default_factory=dict)  # in order of first sight


def memory_pairs(
    path: Path, src_lang: str, tgt_lang: str, tally: Tally | None = None
) -> Iterator[tuple[str, str]]:
    """The (source, target) pairs of a memory file: TMX (`.tmx`, or any file whose first bytes
    are XML) or else TSV (`tsv_pairs`)."""
    if path.suffix.lower() in (".xlf", ".xliff"):
        return xliff_pairs(path, src_lang, tgt_lang, tally)
    if _is_xml(path):
        return tmx_pairs(path, src_lang, tgt_lang, tally)
    return tsv_pairs(path, tally)


def tmx_pairs(
    path: Path, src_lang: str, tgt_lang: str, tally: Tally | None = None
) -> Iterator[tuple[str, str]]:
    """The (source, target) segments of each unit of a TMX file that has both languages (its
    first variant of each), in file order, as the module's notes say; `tally` counts as it
    goes. A file that is not well-formed XML is an NMTError naming it and the line."""
    tally = tally if tally is not None else Tally()
    wanted = (src_lang, tgt_lang)
    sides: dict[str, int | None] = {}  # a variant's language -> 0 source, 1 target, None neither
    # no entities resolved, nothing fetched: a memory is data from elsewhere
    parser = etree.iterparse(
        str(path), events=("end",), tag="{*}tu", resolve_entities=False, no_network=True
    )
    try:
        for _, unit in parser:
            tally.units += 1
            found: list[str | None] = [None, None]
            for variant in unit.iterchildren("{*}tuv"):
                lang = variant.get("{http://www.w3.org/XML/1998/namespace}lang") or variant.get(
                    "lang", ""
                )
                if lang not in sides:
                    tally.languages.setdefault(lang)
                    sides[lang] = _side(lang, wanted)
                side = sides[lang]
                seg = variant.find("{*}seg")
                if side is not None and found[side] is None and seg is not None:
                    found[side] = segment_text(seg)
            # a unit is read: free it and the units before it (iterparse keeps the tree's spine)
            unit.clear()
            while unit.getprevious() is not None:
                del unit.getparent()[0]
            if found[0] is None or found[1] is None:
                tally.skipped += 1
                continue
            tally.pairs += 1
            yield found[0], found[1]
    except etree.XMLSyntaxError as err:
        raise NMTError(f"{path}: not a TMX file (line {err.lineno}: {err.msg})") from None
    except OSError as err:
        raise NMTError(f"cannot read {path}: {err}") from None


def segment_text(seg: etree._Element, dropped: frozenset[str] = DROPPED) -> str:
    """A `<seg>`'s text: inline markup elements dropped with their content, `<hi>` kept, every
    element's tail kept (the module's notes)."""
    parts = [seg.text or ""]
    for child in seg:
        name = etree.QName(child).localname if isinstance(child.tag, str) else ""
        if name and name not in dropped:  # <hi>, and any element of words a tool added
            parts.append(segment_text(child, dropped))
        parts.append(child.tail or "")
    return "".join(parts)


def xliff_pairs(
    path: Path, src_lang: str, tgt_lang: str, tally: Tally | None = None
) -> Iterator[tuple[str, str]]:
    """The (source, target) pairs of an XLIFF file's translated units: each 1.2 trans-unit and
    2.x segment with a source and a target that is not empty, oriented by the file's languages
    (1.2: each <file>'s source-language and target-language; 2.x: the root's srcLang and
    trgLang, matched through the language table, either way round). Inline codes that hold no
    words (x, bx, ex, ph, bpt, ept, it, sc, ec, sm, em) are dropped with their content; g, pc
    and mrk keep theirs. Read unit by unit (iterparse), as a TMX."""
    tally = tally if tally is not None else Tally()
    wanted = (src_lang, tgt_lang)
    order: tuple[int | None, int | None] = (None, None)  # the file's languages' sides
    parser = etree.iterparse(
        str(path), events=("start", "end"), resolve_entities=False, no_network=True
    )
    try:
        for event, element in parser:
            name = etree.QName(element).localname if isinstance(element.tag, str) else ""
            if event == "start":
                if name in ("file", "xliff"):
                    source = element.get("source-language") or element.get("srcLang")
                    target = element.get("target-language") or element.get("trgLang")
                    if source and target:
                        for lang in (source, target):
                            tally.languages.setdefault(lang)
                        order = (_side(source, wanted), _side(target, wanted))
                continue
            if name == "unit":  # a 2.x unit read (its segments were): freed
                element.clear()
                continue
            if name not in ("trans-unit", "segment"):
                continue
            tally.units += 1
            pair = _xliff_pair(element, order)
            if name == "trans-unit":  # freed once read, as a TMX's units
                element.clear()
            if pair is None:
                tally.skipped += 1
                continue
            tally.pairs += 1
            yield pair
    except etree.XMLSyntaxError as err:
        raise NMTError(f"{path}: not an XLIFF file (line {err.lineno}: {err.msg})") from None
    except OSError as err:
        raise NMTError(f"cannot read {path}: {err}") from None


def _xliff_pair(
    unit: etree._Element, order: tuple[int | None, int | None]
) -> tuple[str, str] | None:
    """A unit's (source, target) in the languages asked for; None without a target or when the
    file's languages are not the two asked for."""
    if sorted(side for side in order if side is not None) != [0, 1]:
        return None
    texts = {}
    for child in unit:
        name = etree.QName(child).localname if isinstance(child.tag, str) else ""
        if name in ("source", "target") and name not in texts:
            texts[name] = " ".join(segment_text(child, XLIFF_DROPPED).split())
    if not texts.get("source") or not texts.get("target"):
        return None
    by_side = {order[0]: texts["source"], order[1]: texts["target"]}
    return by_side[0], by_side[1]


def tsv_pairs(path: Path, tally: Tally | None = None) -> Iterator[tuple[str, str]]:
    """The pairs of a TSV memory, `source<TAB>target` a line (UTF-8, a byte-order mark allowed;
    blank lines passed over); a line without exactly one tab is an NMTError naming it: a
    memory with a misplaced column would otherwise answer with the wrong text."""
    tally = tally if tally is not None else Tally()
    with open(path, encoding="utf-8-sig", newline="\n") as f:
        try:
            for number, line in enumerate(f, 1):
                line = line.rstrip("\r\n")
                if not line.strip():
                    continue
                fields = line.split("\t")
                if len(fields) != 2:
                    raise NMTError(f"{path}: line {number} is not source<TAB>target")
                tally.units += 1
                tally.pairs += 1
                yield fields[0], fields[1]
        except UnicodeDecodeError as err:
            raise NMTError(f"{path}: not UTF-8 text ({err.reason})") from None


def _side(lang: str, wanted: tuple[str, str]) -> int | None:
    """Which of the two languages asked for (0, 1) a variant's language means; None: neither,
    or both equally (a memory of en-US into en-GB needs its codes spelled as the data's)."""
    found = matches(lang, wanted)
    if len(found) != 1:
        return None
    return wanted.index(found[0])


def _is_xml(path: Path) -> bool:
    """Whether a file is XML by its first bytes (a byte-order mark and spaces aside; UTF-16
    files, which Trados writes, start with one), else read as TSV."""
    if path.suffix.lower() == ".tmx":
        return True
    with open(path, "rb") as f:
        head = f.read(64)
    for bom, encoding in ((b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be")):
        if head.startswith(bom):
            return head[2:].decode(encoding, "ignore").lstrip().startswith("<")
    return head.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"<")


def describe(tally: Tally) -> str:
    """The languages a memory's units had, for a message ("de-DE, en-GB, fr-FR")."""
    seen = [lang or "(none)" for lang in tally.languages]
    return ", ".join(seen[:SHOWN]) + (", ..." if len(seen) > SHOWN else "") or "none"
