"""Translation: text in, text out, through a model's vocabularies and its search.

    translator.py     `Translator`: a model with its vocabularies (prepare, run, translate, score)
    request.py        `Request`: one call's texts and options; `prepare` turns it into ids once
    inputs.py         the input path every translator shares: sources capped and tokenized,
                      prefixes checked, length batches, target-language tags
    phrases.py        banned phrases' spellings and constraints' pieces, in ids
    scoring.py        given translations scored by teacher forcing
    rerank.py         n-best lists rescored by other models
    attention_map.py  a translation's attention maps: one layer or head, text and heatmaps
    confidence.py     calibrated confidence per piece, word and sentence, fitted on valid
    calibrators.py    the maps a confidence is fitted with, and the measures that judge them
    agreement.py      a translation's lexical agreement with its source (a confidence feature)
    flags.py          repetitions, copies and lengths off the references' ratios
    search/           ids -> ids: greedy, beam and sampling over the models' step interface

`request` and `inputs` need sentencepiece and nothing heavier (the exported runtimes use them
without torch), so this package's own import is light: `Translator` is loaded when first asked
for (`from nmt.translation import Translator`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nmt.translation.translator import Translation, Translator

__all__ = ["Translation", "Translator"]


def __getattr__(name: str):
    if name in __all__:
        from nmt.translation import translator

        return getattr(translator, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
