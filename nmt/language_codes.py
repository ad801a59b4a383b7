"""One table of language codes: which of a model's own names for its languages a code from
anywhere means, so that a user's `de` reaches every model's name for German.

    tag("deu_Latn"), tag("DE"), tag("de_DE")     # "de", "de", "de-DE"
    resolve("de", ["deu_Latn", "eng_Latn"])       # "deu_Latn"
    resolve("zh", ["zho_Hans", "zho_Hant"])       # "zho_Hans": Chinese is written Hans by default
    name("zho_Hant")                              # "Chinese (Traditional)"

Models name their languages each their own way: a model trained by nmt by the names its data
gave (`de`, or whatever data.src_lang / tgt_lang say), an imported NLLB-200 by FLORES-200 codes
(`deu_Latn`, `zho_Hant`), M2M-100 by ISO 639-1 (`de`), mBART-50 by locales (`de_DE`, `en_XX`);
clients send BCP 47 (`pt-BR`, `zh-Hans`) or DeepL's upper case (`EN-US`, `ZH-HANS`). Every such
code is read here as a BCP 47 tag by langcodes (CLDR's and IANA's data, no table written by hand):
ISO 639-3 folded to 639-1 (`deu` -> `de`), a macrolanguage's dominant member to the macrolanguage
(`cmn` -> `zh`, `arb` -> `ar`), a script dropped where IANA's registry says the language is
written in it alone (`deu_Latn` -> `de`; `zho_Hans` keeps `Hans`), a region that names no region
dropped (`en_XX` -> `en`).

`resolve` picks, among a model's names, the one a code means: its own name first, as spelled
(case and `_`/`-` aside); else the names of the same language (`tag`'s language subtag), best
first by

1. script: one the code names must be the name's (`zh-Hant` never means `zho_Hans`); a code that
   names none prefers the language's likely script (CLDR's likely subtags: `zh` -> Hans, `zh-TW`
   -> Hant);
2. region: the same one, else none (`EN-US` means `en`), else the language's likely region;
3. the language before folding (`twi` means twi_Latn, not aka_Latn, though both are Akan);
4. the same tag.

A name langcodes cannot read (`klingon`, `__de__`) matches only a code spelled as it is, case and
`_`/`-` aside; nothing here raises on a model's odd name. Resolutions are cached: they run per
request.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from langcodes import Language, LanguageTagError
from langcodes.registry_parser import parse_registry

from nmt.errors import NMTError

# regions that name no region: mBART-50's "en_XX" (its languages without one), CLDR's unknown ZZ
NO_REGION = frozenset({"XX", "ZZ"})
# BCP 47 asks implementations to handle tags up to 35 characters (RFC 5646, 4.4.1); a longer code
# is no tag, and is not handed to langcodes, whose parse cache keeps every tag it was given
LONGEST_TAG = 35
SHOWN = 8  # names a message lists


def tag(code: str) -> str:
    """The canonical BCP 47 tag of a language code of any kind (`DE` -> `de`, `EN-US` -> `en-US`,
    `deu_Latn` -> `de`, `zho_Hant` -> `zh-Hant`, `en_XX` -> `en`); a code langcodes cannot
    read, lower-cased."""
    found = _parse(code)
    return code.strip().lower() if found is None else found.to_tag()


def matches(asked: str, offered: Iterable[str]) -> list[str]:
    """The names in `offered` (a model's names for its languages) that `asked` means, equally
    well: one when it is clear, none when the model lacks the language, several when the table
    cannot choose between them (see the module's notes for the order)."""
    names = tuple(offered)
    return [asked] if asked in names else list(_matches(asked, names))


def resolve(asked: str, offered: Iterable[str], key: str = "tgt_lang") -> str:
    """The name in `offered` (a model's names for its languages) that `asked` means; an NMTError
    naming `key` and what was asked when none does (with some of the names, those of the same
    language first) or when several do (naming them)."""
    names = tuple(offered)
    found = matches(asked, names)
    if len(found) == 1:
        return found[0]
    if found:
        raise NMTError(f"{key}={asked!r} may mean {', '.join(found)}: say which")
    language = _language(asked)
    like = sorted(names, key=lambda n: language is None or _language(n) != language)
    shown = ", ".join(like[:SHOWN]) + (", ..." if len(like) > SHOWN else "")
    raise NMTError(f"{key}={asked!r}: this model's languages are codes such as {shown}")


@functools.lru_cache(maxsize=1024)
def name(code: str) -> str:
    """An English name of a language code for lists of languages ("German", "Chinese
    (Simplified)", "English (United States)"); the code itself when langcodes cannot read it.

    The names are the IANA subtag registry's descriptions, which langcodes ships (the first of
    each, without a note in parentheses: "Modern Greek", not "Modern Greek (1453-)"): langcodes'
    own display_name needs the language_data package (13 MB installed, and marisa-trie, a C++
    extension), names in every language where lists of languages need English ones."""
    found = _parse(code)
    described = _descriptions()
    language = described.get(("language", found.language)) if found else None
    if language is None:
        return code
    script = described.get(("script", found.script)) if found.script else None
    region = described.get(("region", found.territory)) if found.territory else None
    details = [d for d in (script, region) if d]
    return f"{language} ({', '.join(details)})" if details else language


@functools.lru_cache(maxsize=4096)
def _parse(code: str) -> Language | None:
    """`code` as langcodes reads it, normalized as `tag` says; None for no tag of a language."""
    text = code.strip()
    if not text or len(text) > LONGEST_TAG:
        return None
    try:
        found = Language.get(text, normalize=True)
    except LanguageTagError:
        return None
    if not found.language:  # "und", "root": no language
        return None
    found = found.prefer_macrolanguage().simplify_script()
    if found.territory in NO_REGION:
        found = found.update_dict({"territory": None})
    return found


def _spelling(code: str) -> str:
    """`code` as it is spelled, case and `_`/`-` aside."""
    return code.strip().lower().replace("_", "-")


def _language(code: str) -> str | None:
    found = _parse(code)
    return found.language if found else None


@functools.lru_cache(maxsize=1024)
def _matches(asked: str, names: tuple[str, ...]) -> tuple[str, ...]:
    spelled = [n for n in names if _spelling(n) == _spelling(asked)]
    if len(spelled) == 1:
        return tuple(spelled)
    want = _parse(asked)
    if want is None:  # only its spelling can match a code no table reads
        return tuple(spelled)
    ranks = {n: r for n in names if (r := _rank(asked, want, n)) is not None}
    best = max(ranks.values(), default=None)
    return tuple(n for n, r in ranks.items() if r == best)


def _rank(asked: str, want: Language, name: str) -> tuple[bool, int, bool, bool] | None:
    """How well `name` (a model's) fits `want` (`asked` read), higher better; None: another
    language, or a script other than the one asked for."""
    have = _parse(name)
    if have is None or have.language != want.language:
        return None
    same_script = want.maximize().script == have.maximize().script
    if want.script and not same_script:
        return None
    if have.territory == want.territory:
        region = 3
    elif have.territory is None:
        region = 2
    else:  # the language's likely region stands for the language alone (`en` -> en-US)
        region = int(have.territory == Language.make(language=want.language).maximize().territory)
    return same_script, region, _unfolded(name) == _unfolded(asked), have.to_tag() == want.to_tag()


@functools.lru_cache(maxsize=4096)
def _unfolded(code: str) -> str | None:
    """The language of `code` before a macrolanguage stands for it (`twi` -> tw, not ak)."""
    try:
        return Language.get(code.strip(), normalize=True).language
    except LanguageTagError:
        return None


@functools.cache
def _descriptions() -> dict[tuple[str, str], str]:
    """(type, subtag) -> its English name, from the IANA registry langcodes ships (read once, in
    about 50 ms): a language's first description without a parenthesized note, a script's
    variant by its variant's name ("Han (Simplified variant)" -> "Simplified")."""
    described = {}
    for item in parse_registry():
        kind, subtag = item.get("Type"), item.get("Subtag")
        if kind not in ("language", "script", "region") or not subtag:
            continue
        text = item["Description"][0]
        variant = re.fullmatch(r".* \((\w+) variant\)", text)
        text = variant.group(1) if variant else re.sub(r" \(.*\)$", "", text)
        described.setdefault((kind, subtag), text)
    return described
