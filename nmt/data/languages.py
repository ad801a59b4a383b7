"""The language codes of training data for a model that names its languages by code pieces (an
imported NLLB-200 or M2M-100, `DataConfig.language_codes`): which code each of the run's
languages is, and the ids a training pair carries for them.

A run fine-tuning such a model reads its own data config (data=multi30k: src_lang=de,
tgt_lang=en), which knows nothing of the model's codes: the run inherits the codes of the
checkpoint it starts from (train.init_from, or the run it resumes), and its own
data.language_codes add to them or override them (data.language_codes.de=deu_Latn). A language
of the data that neither names takes the code of the model's name for it (`de` -> deu_Latn,
`nmt.language_codes`), logged. Each pair is then what the model reads and writes at translation
time (`nmt.translation.inputs.TargetTags`): the source language's code before the source,
`[src] X </s>`, and the target language's code as the first target piece, `[tgt] Y </s>`, after
the decoder start, as Hugging Face trains these models (labels start with the code that
forced_bos_token_id forces when decoding). A model whose codes are `CodeStyle.target_on_source`
(an imported MADLAD-400) reads the target language's code before the source, spelled as its
tokenizer cuts "<2en> X" (`spelled_code`), and nothing before the target; a run inherits the
style with the codes, which mean nothing laid out another way.
"""

from __future__ import annotations

import logging

from nmt.config import CodeStyle, DataConfig
from nmt.errors import NMTError
from nmt.language_codes import matches
from nmt.tokenizer import UNK, Vocab

log = logging.getLogger(__name__)


def inherit_codes(data: DataConfig, stored: DataConfig, where: str) -> None:
    """Give `data` (the run's data config) the language codes of `stored` (those of the
    checkpoint at `where`), its own entries overriding, and the place the model reads them
    (`code_style`: the model was trained so, whatever the run's data config says); then check
    that every language the run reads or writes has a code. Changes `data` in place: the run's
    checkpoints store the codes, so the commands that read them translate between the run's
    languages by their names."""
    if not stored.language_codes:
        return
    if data.code_style != stored.code_style:
        log.info(
            "data.code_style=%s from %s (where its model reads its codes)",
            stored.code_style.value,
            where,
        )
        data.code_style = stored.code_style
    own = dict(data.language_codes)
    data.language_codes = {**stored.language_codes, **own}
    languages = [data.src_lang, data.tgt_lang]
    languages += [lang for c in data.corpora for lang in data.languages(c)]
    for lang in dict.fromkeys(languages):
        if lang not in data.language_codes:
            data.language_codes[lang] = _inherited(lang, stored.language_codes, where)
    log.info(
        "language codes from %s: %s",
        where,
        ", ".join(f"{lang}={data.language_codes[lang]}" for lang in dict.fromkeys(languages)),
    )


def _inherited(lang: str, codes: dict[str, str], where: str) -> str:
    """The code of the model's name for `lang` (a language of the run's data that `codes`, the
    model's, do not name): `de` -> deu_Latn's. An NMTError saying how to map it when the table
    finds no name for it, or several."""
    first: dict[str, str] = {}  # one name per code: a run's `de` beside `deu_Latn` is no rival
    for name, code in codes.items():
        first.setdefault(code, name)
    found = matches(lang, first.values())
    if not found:
        raise NMTError(
            f"language {lang!r} of the data has no code in the model of {where}: map it with "
            f"+data.language_codes.{lang}=CODE{_suggestion(lang, codes)}"
        )
    if len(found) > 1:
        raise NMTError(
            f"language {lang!r} of the data may be any of {', '.join(found)} in the model of "
            f"{where}: say which with +data.language_codes.{lang}=CODE"
        )
    log.info("language %r of the data is %s of the model of %s", lang, found[0], where)
    return codes[found[0]]


def _suggestion(lang: str, codes: dict[str, str]) -> str:
    """' (such as deu_Latn)' for 'de': the codes that start as the language's name does."""
    like = [code for code in codes.values() if code.lower().strip("_").startswith(lang.lower())]
    if not like:
        like = list(codes.values())[:4]
    return f" (codes such as {', '.join(like[:4])})"


def code_prefixes(
    data: DataConfig, src_lang: str, tgt_lang: str, vocab: Vocab
) -> tuple[list[int], list[int]]:
    """(ids before each source, ids before each target) of pairs from `src_lang` into
    `tgt_lang`: their codes for a model with language codes, ([], []) for the others."""
    if not data.language_codes:
        return [], []
    if data.code_style == CodeStyle.target_on_source:  # as TargetTags puts it at translation
        _code(data, src_lang, vocab)
        return spelled_code(vocab, data.language_codes[tgt_lang], _code(data, tgt_lang, vocab)), []
    return [_code(data, src_lang, vocab)], [_code(data, tgt_lang, vocab)]


def _code(data: DataConfig, lang: str, vocab: Vocab) -> int:
    piece = data.language_codes.get(lang)
    if piece is None:
        raise NMTError(f"language {lang!r} has no code: set +data.language_codes.{lang}=CODE")
    i = vocab.piece_to_id(piece)
    if i == UNK or vocab.id_to_piece([i]) != [piece]:
        raise NMTError(
            f"data.language_codes.{lang}={piece!r}: the model's tokenizer has no such piece"
        )
    return i


def spelled_code(vocab: Vocab, piece: str, code: int) -> list[int]:
    """The ids sentencepiece cuts the code `piece` (of id `code`) into where it starts a text
    ("▁", "<2de>": T5's tokenizers read "<2de> X" so, and MADLAD-400 was trained so), or the
    code's id alone where they would not give the code as one piece."""
    ids = vocab.encode([piece])[0]
    return ids if ids and ids[-1] == code and UNK not in ids else [code]
