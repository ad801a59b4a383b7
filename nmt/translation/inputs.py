"""The one path every translator's input takes: text cleaned, blank texts set aside, sources cut to
`decode.max_src_pieces` and tokenized, forced prefixes tokenized and checked, and then batched by
length.

`nmt.translation.Translator`, the exported runtime (`nmt.export.runtime.ExportedTranslator`) and the
CTranslate2 runner (`nmt.export.ct2.CT2Translator`) all read their input through `read_sources`
and batch it with `length_batches`, so a given text reaches every one of them as the same ids, and
a line that holds only a byte-order mark is blank for all three. Training corpora are cleaned by
the same `clean` (`nmt.tokenizer`).

This module needs sentencepiece (through `nmt.tokenizer`) and nothing heavier: the exported
runtime runs without torch.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from nmt.config import CodeStyle, DecodeConfig
from nmt.data.languages import spelled_code
from nmt.errors import NMTError
from nmt.language_codes import matches, resolve
from nmt.tokenizer import EOS, UNK, Vocab, clean

log = logging.getLogger(__name__)

# Raw characters kept per allowed piece before a capped source is tokenized: a piece spans at most
# 16 characters (sentencepiece's max_sentencepiece_length), so 64 leaves a wide margin, and a
# million-character line costs the tokenizer tens of thousands of characters, not a million.
CHARS_PER_PIECE = 64


@dataclass
class Sources:
    """The model inputs of a list of texts. Blank texts are not sent to a model: `ids[k]` is the
    source of text `index[k]`; the others translate to blank lines."""

    ids: list[list[int]]  # each ending in EOS, at most `cap` long
    index: list[int]  # for each entry of `ids`, the position of its text
    total: int  # how many texts were given
    cut: dict[int, str] = field(default_factory=dict)  # entry of `ids` cut to the cap -> why

    def place(self, results: Sequence, blank: Callable[[int], object]) -> list:
        """`results` (one per entry of `ids`) back in text order; `blank(i)` fills text i when it
        was blank."""
        out = [blank(i) for i in range(self.total)]
        for i, result in zip(self.index, results):
            out[i] = result
        return out


def read_sources(
    vocab: Vocab, texts: Sequence[str], cap: int, first_line: int = 1, warn: bool = True
) -> Sources:
    """Clean, set blank texts aside, tokenize, cut to `cap` pieces (EOS included; 0 = no cap).
    A cut text is `Sources.cut`, and logged as a warning naming its line (`first_line` numbers
    the first text), unless `warn` is false (the caller says it where it belongs)."""
    cleaned = [clean(t) for t in texts]
    index = [i for i, text in enumerate(cleaned) if text]
    ids, cut = source_ids(vocab, [cleaned[i] for i in index], cap)
    why = {}
    for k in cut:
        text = texts[index[k]]
        why[k] = (
            f"{len(text.split())} words ({len(text)} characters), more than "
            f"decode.max_src_pieces={cap} pieces: only the first {cap - 1} pieces are translated"
        )
        if warn:
            log.warning("line %d: %s", first_line + index[k], why[k])
    return Sources(ids, index, len(texts), why)


def source_ids(vocab: Vocab, texts: list[str], cap: int) -> tuple[list[list[int]], list[int]]:
    """The ids of non-blank cleaned `texts`, each ending in EOS and at most `cap` long (0 = no
    cap), and the indices of the texts that were cut.

    A text far longer than the cap is cut before tokenization, at a space when one is near the cut,
    so tokenizing stays cheap; sentencepiece never joins pieces across a space, so the first `cap`
    pieces are those of the whole text. Should the cut text give fewer than `cap` pieces after all
    (pieces longer than CHARS_PER_PIECE), the whole text is tokenized."""
    if not cap:
        return [ids + [EOS] for ids in vocab.encode(texts)], []
    bound = cap * CHARS_PER_PIECE
    shortened = [_cut_text(text, bound) for text in texts]
    ids = vocab.encode(shortened)
    cut = []
    for i, (text, short) in enumerate(zip(texts, shortened)):
        if len(short) < len(text) and len(ids[i]) < cap:
            ids[i] = vocab.encode([text])[0]
        if len(ids[i]) >= cap:  # EOS makes one more
            ids[i] = ids[i][: cap - 1]
            cut.append(i)
        ids[i].append(EOS)
    return ids, cut


def _cut_text(text: str, bound: int) -> str:
    """`text` up to `bound` characters, ending before a space in its second half if it has one."""
    if len(text) <= bound:
        return text
    space = text.rfind(" ", bound // 2, bound)
    return text[:space] if space > 0 else text[:bound]


def length_batches(
    lengths: Sequence[int], size: int, same: Callable[[int], Hashable] | None = None
) -> list[list[int]]:
    """Indices of `lengths` sorted by length (ties in input order), cut into batches of at most
    `size`: sources of similar length share a batch, so little is spent on padding. With `same`,
    a batch holds only sources whose lengths give the same `same(length)` (CTranslate2 takes one
    length limit per call)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    runs = [order]
    if same is not None:  # sorted by length, sources with equal `same` are mostly neighbours
        runs = [list(run) for _, run in itertools.groupby(order, key=lambda i: same(lengths[i]))]
    return [run[start : start + size] for run in runs for start in range(0, len(run), size)]


def prefix_ids(
    vocab: Vocab,
    prefixes: list[str],
    sources: Sources,
    decode: DecodeConfig,
    first_line: int = 1,
    noun: str = "line",
) -> list[list[int]]:
    """The target ids of the forced prefix of each non-blank text, in the order of `sources.ids`
    ([] for none; `prefixes` has one per text, blank ones included), cleaned and tokenized with
    the target `vocab`. A prefix with a piece the vocabulary lacks (pruned, or the bytes of a
    character it never saw), or with as many pieces as the length limit lets its translation
    have, is an NMTError naming the prefix's `noun` ("line" of a file, "text" of a request) and
    number."""
    if len(prefixes) != sources.total:
        raise NMTError(f"{len(prefixes)} prefixes for {sources.total} texts: give one per text")
    cleaned = [clean(prefixes[i]) for i in sources.index]
    ids = vocab.encode(cleaned) if any(cleaned) else [[] for _ in cleaned]
    for k, (text, pieces) in enumerate(zip(cleaned, ids)):
        line = f"{noun} {first_line + sources.index[k]}"
        if UNK in pieces:
            # the pieces as sentencepiece writes them (a character it never saw: its bytes)
            lacking = [p for p, i in zip(vocab.sp.Encode(text, out_type=str), pieces) if i == UNK]
            raise NMTError(
                f"{line}: the prefix {text!r} needs pieces the target vocabulary lacks "
                f"(the model never produces them): {' '.join(dict.fromkeys(lacking))}"
            )
        limit = decode.max_len(len(sources.ids[k]))
        if len(pieces) >= limit:
            raise NMTError(
                f"{line}: the prefix has {len(pieces)} pieces, and a translation of this "
                f"source may have at most {limit} pieces (decode.max_len_a * source pieces + "
                f"decode.max_len_b, capped at decode.max_len_cap), the end included"
            )
    return ids


class TargetTags:
    """The languages a model translates into, and the ids put before a source to ask for each:
    a model trained with target tags (`DataConfig.target_tags`) has one tag piece per language; a
    model without has one language and puts nothing. Every translator (the `Translator`, the
    exported runtimes) reads a text's target language through this, so `tgt_lang` means the same
    ids to all of them.

    A model with language codes (`DataConfig.language_codes`: NLLB-200, M2M-100) reads the
    source language's code before each source (`ids`) and starts each translation with the
    target language's, forced and scored 0 as Hugging Face's forced_bos_token_id does
    (`forced`). With `CodeStyle.target_on_source` (MADLAD-400) the target language's code goes
    before the source, tokenized as the model's sentencepiece tokenizes "<2de> " + text (the
    code's own pieces: "▁", "<2de>"), and nothing is forced; a `src_lang` is checked and read
    by no one.

    A language is asked for by the model's own name for it or by any other code of it
    (`nmt.language_codes`): `de` means an NLLB import's `deu_Latn`, `EN-US` the `en` of a model
    trained on data named so."""

    def __init__(
        self,
        tags: dict[str, str | None] | None,
        vocab: Vocab,
        codes: dict[str, str] | None = None,
        source: str | None = None,
        style: CodeStyle = CodeStyle.source_and_target,
    ) -> None:
        """`tags`: target language -> its tag piece ({lang: None} for a model without target
        tags; None: the languages are unknown). With `codes` (language -> code piece), `tags`
        names the default target language and `source` is the language of the sources; `style`
        says where the codes go. A tag or code the vocabulary lacks fails here, not at the first
        translation."""
        self.tags = dict(tags or {})
        self.codes = dict(codes or {})
        self.style = CodeStyle(style)
        self._spelled: dict[int, list[int]] = {}  # target_on_source: a code's id -> its pieces
        self._ids: dict[str, int] = {}
        self._default: str | None = None
        self._source: list[int] = []
        if self.codes:
            self._default = next(iter(self.tags), None)
            self._ids = {lang: self._piece(vocab, piece) for lang, piece in self.codes.items()}
            self.tags = dict.fromkeys(self.codes)
            # one name per code, the first (the model's own): a fine-tuned run's `de` beside
            # its `deu_Latn` names the same code, and is no rival when `DE` is asked for
            first: dict[int, str] = {}
            for lang, i in self._ids.items():
                first.setdefault(i, lang)
            self._names = tuple(first.values())
            if source is not None:
                self._source = [self._code(source, "src_lang")]
            if self.style == CodeStyle.target_on_source:
                codes = self.codes
                self._spelled = {
                    i: spelled_code(vocab, codes[lang], i) for i, lang in first.items()
                }
            return
        self._names = tuple(self.tags)
        for lang, tag in self.tags.items():
            if tag is not None:
                self._ids[lang] = self._piece(vocab, tag)

    @staticmethod
    def _piece(vocab: Vocab, piece: str) -> int:
        i = vocab.piece_to_id(piece)
        if i == UNK or vocab.id_to_piece([i]) != [piece]:
            raise NMTError(f"the model's tokenizer has no piece {piece!r} for a language")
        return i

    def _code(self, lang: str | None, key: str) -> int:
        """The id of the code of `lang` (the model's name for it, or another code of it)."""
        if not isinstance(lang, str):
            shown = ", ".join(self._names[:8]) + (", ..." if len(self._names) > 8 else "")
            raise NMTError(f"{key}={lang!r}: this model's languages are codes such as {shown}")
        if lang not in self._ids:  # `de` for deu_Latn; an NMTError names the codes for none
            lang = resolve(lang, self._names, key)
        return self._ids[lang]

    def _target(self, lang: str | None) -> str:
        """The model's name for target language `lang` (its own, or another code of it), for a
        model without codes."""
        if not isinstance(lang, str) or not matches(lang, self._names):
            known = ", ".join(self.languages) or "a language its checkpoint does not name"
            raise NMTError(f"tgt_lang={lang!r}: this model translates into {known}")
        return resolve(lang, self._names)  # an NMTError when the table cannot choose

    @property
    def languages(self) -> list[str]:
        """The target languages (the tgt_lang values a translation takes)."""
        return list(self.tags)

    @property
    def source_codes(self) -> list[str]:
        """The src_lang values a call may give (a model with codes: its languages; else none)."""
        return list(self._ids) if self.codes else []

    def ids(self, tgt_lang: str | None, src_lang: str | None = None) -> list[int]:
        """The ids put before each source to translate into `tgt_lang`: its tag, or nothing for a
        model without target tags, or the source language's code for a model with codes
        (`src_lang`'s, else the translator's). An NMTError names the languages when `tgt_lang`
        or `src_lang` means none of them, when `tgt_lang` is None for a model with several, and
        when a model without codes is given `src_lang` (it reads no language before a source)."""
        if self.codes and self.style == CodeStyle.target_on_source:
            if src_lang is not None:
                self._code(src_lang, "src_lang")  # a language the model does not know fails
            return list(self._spelled[self._target_code(tgt_lang)])
        if self.codes:
            self.forced(tgt_lang)  # an unknown target fails here, before any work
            return list(self._source) if src_lang is None else [self._code(src_lang, "src_lang")]
        if src_lang is not None:
            raise NMTError(
                f"src_lang={src_lang!r}: this model reads no language code before its sources "
                "(src_lang is for models with codes: NLLB-200, M2M-100, mBART-50)"
            )
        if tgt_lang is None:
            if not self._ids:
                return []
            if len(self._ids) == 1:
                return list(self._ids.values())
            raise NMTError(
                f"this model translates into {', '.join(self.languages)}: say which with "
                f"tgt_lang (one of {', '.join(self.languages)})"
            )
        if not isinstance(tgt_lang, str) or tgt_lang not in self.tags:
            tgt_lang = self._target(tgt_lang)
        tag = self._ids.get(tgt_lang)
        return [] if tag is None else [tag]

    def forced(self, tgt_lang: str | None) -> list[int]:
        """The target ids each translation into `tgt_lang` starts with, forced and scored 0: the
        target language's code for a model with codes, nothing for the others."""
        if not self.codes:
            return []
        code = self._target_code(tgt_lang)
        return [] if self.style == CodeStyle.target_on_source else [code]

    def _target_code(self, tgt_lang: str | None) -> int:
        if tgt_lang is None and self._default is None:
            raise NMTError("this model translates into many languages: say which with tgt_lang")
        return self._code(tgt_lang or self._default, "tgt_lang")
